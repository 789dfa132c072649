// Internal to endor_kernels: the per-instruction-set weight kernels every CPU linear path,
// embedding lookup and whole-tensor decode is built from, and the scalar helpers they share.
// Row ranges are the unit of parallel work: callers split rows across OpenMP threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "endor/format.h"
#include "endor/kernels.h"

namespace endor::cpu::detail {

// Fused kernels keep one accumulator per token in registers: at most this many tokens per call.
inline constexpr size_t kMaxFusedTokens = 8;

struct WeightKernels {
  const char* name;
  // out[(r - r0)·cols + c] = W[r, c] as f32 for r in [r0, r1): bit-identical to decode_rows_f32.
  void (*decode_rows)(const TensorView& w, uint64_t r0, uint64_t r1, float* out);
  // f16/bf16 only: out[(r - r0)·cols + c] = the stored 16-bit value of W[r, c], +0 when absent.
  void (*decode_rows_u16)(const TensorView& w, uint64_t r0, uint64_t r1, uint16_t* out);
  // Fused decode-multiply: y[t·y_stride + r] = Σ_c W[r, c]·x[t·x_stride + c] for r in [r0, r1),
  // t < n_tokens (1 ≤ n_tokens ≤ kMaxFusedTokens). Reads every weight byte of the rows once.
  void (*dot_rows)(const TensorView& w, uint64_t r0, uint64_t r1, const float* x, size_t x_stride,
                   size_t n_tokens, float* y, size_t y_stride);
  // Dense f32 block product: y[t·y_stride + n] = Σ_k a[n·a_stride + k]·x[t·x_stride + k] for
  // n < n_rows, t < n_tokens (any n_tokens); `a` is a decoded row panel.
  void (*dense_dot)(const float* a, size_t a_stride, size_t n_rows, size_t k, const float* x,
                    size_t x_stride, size_t n_tokens, float* y, size_t y_stride);
};

const WeightKernels& portable_kernels();
// Only valid when cpu_has_avx2(): compiled with -mavx2 -mfma -mf16c in its own translation unit.
const WeightKernels& avx2_kernels();
// Only valid when cpu_has_avx512(): compiled with -mavx512{f,bw,vl,dq,vbmi2} in its own
// translation unit. Fused dot_rows of its own; the other entries are the AVX2 kernels.
const WeightKernels& avx512_kernels();
// Auto/Portable/Avx2/Avx512 -> kernels; throws endor::Error for an ISA this CPU or build lacks.
const WeightKernels& select_kernels(Isa isa);

// ---- scalar helpers (exactly the reference decoder's arithmetic, SPEC.md §6.1/§6.3) ----------

inline float bits_to_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline uint32_t f32_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// Exact f16 -> f32 without data-dependent branches (zeros and normals are mixed at random in a
// pruned dense tensor): the exponent/mantissa bits placed in an f32 and scaled by 2^112 give the
// value for normals and subnormals alike (a subnormal f32 times a power of two is exact).
inline float half_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t em = uint32_t(h & 0x7FFF) << 13;
  float f = bits_to_f32(em) * 0x1p112f;
  if (em >= (0x7C00u << 13)) f = bits_to_f32(em | 0x7F800000u);  // inf, NaN (payload kept)
  return bits_to_f32(f32_to_bits(f) | sign);
}
inline float bfloat_to_f32(uint16_t b) { return bits_to_f32(uint32_t(b) << 16); }
inline uint16_t load_u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
inline uint32_t load_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
inline uint64_t load_u64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }

// Index of the first stored value of bitmap row r (the index entry of its block 0).
inline uint64_t bitmap_row_start(const TensorView& w, uint64_t r) {
  return load_u32(w.data + w.layout.index_offset + 4 * (r * w.layout.blocks_per_row));
}
// Mask of the bits of a row's last bitmap word that lie inside the row (all ones when cols%64 == 0).
inline uint64_t last_word_mask(uint64_t cols) {
  const uint64_t used = cols % 64;
  return used == 0 ? ~uint64_t(0) : (uint64_t(1) << used) - 1;
}

}  // namespace endor::cpu::detail
