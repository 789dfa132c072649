// AVX2+FMA+F16C weight kernels (this translation unit alone is compiled with -mavx2 -mfma
// -mf16c -mpopcnt; isa.cpp calls it only on CPUs that have them). No AVX-512.
//
// Bitmap rows are processed 8 columns (one bitmap byte m) at a time: the next popcount(m)
// stored values are moved to their columns (lane j takes value rank_j = popcount(m & (2^j − 1)))
// by one shuffle whose control comes from a 256-entry table, and absent lanes become 0. Shuffle
// port pressure decides the speed, so each value type uses the cheapest form:
//   f32, f16   vpermps of the (converted) values, then a mask;
//   bf16       vpshufb of the raw bytes into the high halves of the lanes (= the f32 value);
//   int8       vpshufb of the bytes into the top byte of each lane (= q·2^24, the 2^-24 is
//              folded into the row scale, exactly), absent lanes come out 0;
//   int4       codes unpacked to bytes per 4096-column block, then vpshufb into the low byte.
// Weights are decoded exactly as the reference decoder does (int4: q·s is exact, so fma(q, s, m)
// rounds once like q·s + m), then multiplied in eight column lanes (c mod 8) per token.
//
// The kernels are in the parts this file includes (weight_kernels_avx2.h: tables and helpers;
// weight_kernels_avx2_f32.h: f32/f16 activations; weight_kernels_avx2_q8.h: int8 activations);
// here are the f16-activation entry and the table.
#include "weight_kernels_avx2_q8.h"

namespace endor::cpu::detail {
namespace {

void dot_rows_hx(const TensorView& w, uint64_t r0, uint64_t r1, const uint16_t* x16, size_t xs, size_t nt, float* y,
                 size_t ys) {
  dot_rows_hx_widened(avx2_kernels(), w, r0, r1, x16, xs, nt, y, ys);
}

}  // namespace

const WeightKernels& avx2_kernels() {
  static const WeightKernels kernels{"avx2+f16c+fma", decode_rows, decode_rows_u16, dot_rows, dense_dot, dot_rows_q8,
                                     dot_rows_hx};
  return kernels;
}

}  // namespace endor::cpu::detail
