// Internal to endor_kernels_cuda: device helpers the weight kernels share — the decoded value of a
// stored value (exactly the reference decoder's arithmetic, SPEC §6.3), warp scans and sums.
// The library is compiled with --fmad=false: a product and a sum round separately unless a
// kernel asks for __fmaf_rn, as the CPU backend (-ffp-contract=off) and the reference do.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "launch.h"

namespace endor::cuda::detail {

inline constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

// Bits of a row's last bitmap word that lie inside the row (all ones when cols % 64 == 0).
__device__ __forceinline__ uint64_t last_word_mask(uint32_t cols) {
  const uint32_t used = cols % 64;
  return used == 0 ? ~uint64_t(0) : (uint64_t(1) << used) - 1;
}

// The per-row decode parameters: the int8 row scale, the int4 group parameter rows.
struct RowParams {
  float i8_scale;
  const uint16_t* scales;  // int4: f16 [groups_per_row] of this row
  const uint16_t* mins;
};

template <Values VT>
__device__ __forceinline__ RowParams row_params(const DeviceWeight& w, uint32_t r) {
  RowParams p{1.0f, nullptr, nullptr};
  if constexpr (VT == Values::I8) p.i8_scale = __ldg(w.row_scales + r);
  if constexpr (VT == Values::I4) {
    p.scales = w.group_scales + uint64_t(r) * w.groups_per_row;
    p.mins = w.group_mins + uint64_t(r) * w.groups_per_row;
  }
  return p;
}

// Decoded value of stored value number v (global, row-major over stored values) of a row with
// parameters p; g is the int4 group of its column within the row (ignored for other types).
// Same arithmetic as decode_rows_f32: f16/bf16 widen exactly; int8 q·s rounds once; int4 q·s is
// exact (4-bit × 11-bit significands), so fma(q, s, m) is the reference's single rounding of q·s + m.
template <Values VT>
__device__ __forceinline__ float stored_value(const DeviceWeight& w, const RowParams& p, uint64_t v, uint32_t g) {
  if constexpr (VT == Values::F16) {
    return f16_bits_to_f32(__ldg(reinterpret_cast<const unsigned short*>(w.values) + v));
  } else if constexpr (VT == Values::BF16) {
    return bf16_bits_to_f32(__ldg(reinterpret_cast<const unsigned short*>(w.values) + v));
  } else if constexpr (VT == Values::F32) {
    return __ldg(reinterpret_cast<const float*>(w.values) + v);
  } else if constexpr (VT == Values::I8) {
    return __fmul_rn(float(__ldg(reinterpret_cast<const signed char*>(w.values) + v)), p.i8_scale);
  } else {
    const unsigned char byte = __ldg(w.values + (v >> 1));
    const uint32_t q = (v & 1) ? (byte >> 4) : (byte & 0x0Fu);  // even value number: low nibble
    const float s = f16_bits_to_f32(__ldg(p.scales + g));
    const float m = f16_bits_to_f32(__ldg(p.mins + g));
    return __fmaf_rn(float(q), s, m);
  }
}

// Inclusive prefix sum over the 32 lanes of a warp (all lanes must call).
__device__ __forceinline__ uint32_t warp_inclusive_scan(uint32_t value, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const uint32_t other = __shfl_up_sync(kFullMask, value, d);
    if (lane >= d) value += other;
  }
  return value;
}

// Sum over the 32 lanes, every lane gets it (butterfly: 5 rounded additions per result).
__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) value = __fadd_rn(value, __shfl_xor_sync(kFullMask, value, d));
  return value;
}

}  // namespace endor::cuda::detail
