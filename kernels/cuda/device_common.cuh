// Internal to endor_kernels_cuda: device helpers the weight kernels share — the decoded value of a
// stored value (exactly the reference decoder's arithmetic, SPEC §6.6), warp scans and sums.
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

// The f32 scale and min of int4 parameter p = row·groups_per_row + group: f16 widened, or int4k's
// six-bit codes times the super-block's d and dmin (SPEC.md §6.7; both products exact in f32, as
// format-spec's int4_params_f32).
__device__ __forceinline__ uint32_t int4k_code(const unsigned char* codes, uint32_t k) {
  const uint32_t bit = 6 * k, byte = bit >> 3, shift = bit & 7;
  uint32_t v = __ldg(codes + byte);
  if (shift > 2) v |= uint32_t(__ldg(codes + byte + 1)) << 8;  // the code crosses into the next byte
  return (v >> shift) & 63u;
}
// kCoded: the parameter format known at compile time (a kernel instantiated per format keeps the
// branch out of its loop); int4_group_params reads w.int4_coded at run time.
template <bool kCoded>
__device__ __forceinline__ void int4_group_params_as(const DeviceWeight& w, uint64_t p, float& s, float& m) {
  if constexpr (kCoded) {
    const uint64_t b = p >> 3;
    const uint32_t j = uint32_t(p & 7);
    const float d = f16_bits_to_f32(__ldg(w.group_scales + 2 * b));
    const float dmin = f16_bits_to_f32(__ldg(w.group_scales + 2 * b + 1));
    const unsigned char* codes = reinterpret_cast<const unsigned char*>(w.group_mins) + 12 * b;
    s = __fmul_rn(d, float(int4k_code(codes, j)));
    m = -__fmul_rn(dmin, float(int4k_code(codes, 8 + j)));
  } else {
    s = f16_bits_to_f32(__ldg(w.group_scales + p));
    m = f16_bits_to_f32(__ldg(w.group_mins + p));
  }
}
__device__ __forceinline__ void int4_group_params(const DeviceWeight& w, uint64_t p, float& s, float& m) {
  if (w.int4_coded)
    int4_group_params_as<true>(w, p, s, m);
  else
    int4_group_params_as<false>(w, p, s, m);
}

// n / d for every 32-bit n by a multiplier set up once (outside a loop): with m = floor((2^32 − 1)/d),
// n·m/2^32 lies in (n/d − 1, n/d], so umulhi(n, m) is n/d or one less and one compare corrects it.
// 4 instructions a quotient in place of a division's ~15 (nvcc does not hoist a loop-invariant
// divisor's reciprocal out of the 16-byte kernels' loops).
struct DivBy {
  uint32_t d = 1, m = 0xFFFFFFFFu;
  __device__ __forceinline__ void set(uint32_t divisor) {  // divisor ≥ 1
    d = divisor;
    m = 0xFFFFFFFFu / divisor;
  }
  __device__ __forceinline__ uint32_t operator()(uint32_t n) const {
    uint32_t q = __umulhi(n, m);
    if (n - q * d >= d) ++q;
    return q;
  }
};

// Value kinds whose decode parameters belong to (row, group of group_size columns): int4, int8g.
__host__ __device__ constexpr bool grouped(Values v) { return v == Values::I4 || v == Values::I8G; }

// The f32 value of int8g scale p = row·groups_per_row + group (an f16, widened exactly).
__device__ __forceinline__ float int8g_scale(const DeviceWeight& w, uint64_t p) {
  return f16_bits_to_f32(__ldg(w.group_scales + p));
}

// The per-row decode parameters: the int8 row scale, the row's first int4/int8g group parameter.
struct RowParams {
  float i8_scale;
  uint64_t p0;  // int4, int8g: row·groups_per_row
};

template <Values VT>
__device__ __forceinline__ RowParams row_params(const DeviceWeight& w, uint32_t r) {
  RowParams p{1.0f, 0};
  if constexpr (VT == Values::I8) p.i8_scale = __ldg(w.row_scales + r);
  if constexpr (grouped(VT)) p.p0 = uint64_t(r) * w.groups_per_row;
  return p;
}

// Decoded value of stored value number v (global, row-major over stored values) of a row with
// parameters p; g is the int4/int8g group of its column within the row (ignored for other types).
// Same arithmetic as decode_rows_f32: f16/bf16 widen exactly; int8 q·s rounds once; int8g q·S is
// exact (8-bit × 11-bit significands, SPEC.md §6.8); int4 q·s is exact (4-bit × 11-bit
// significands), so fma(q, s, m) is the reference's single rounding of q·s + m.
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
  } else if constexpr (VT == Values::I8G) {
    return __fmul_rn(float(__ldg(reinterpret_cast<const signed char*>(w.values) + v)), int8g_scale(w, p.p0 + g));
  } else {
    const unsigned char byte = __ldg(w.values + (v >> 1));
    const uint32_t q = (v & 1) ? (byte >> 4) : (byte & 0x0Fu);  // even value number: low nibble
    float s, m;
    int4_group_params(w, p.p0 + g, s, m);
    return __fmaf_rn(float(q), s, m);
  }
}

// ---- streamed weight loads (fused_linear16.cu) ----
// Weights are read once per launch: their loads skip L1 (.L1::no_allocate) and are the first out of
// L2 (an L2::evict_first access policy), so x, the scales and the next layer's data stay cached.
// Under the CPU emulation (tests/cuemu, no __CUDA_ARCH__) they are plain loads.
__device__ __forceinline__ uint64_t evict_first_policy() {
#if defined(__CUDA_ARCH__)
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
#else
  return 0;
#endif
}
// 16 bytes at p (16-byte aligned, device memory).
__device__ __forceinline__ uint4 load_weight16(const void* p, uint64_t policy) {
#if defined(__CUDA_ARCH__)
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(policy));
  return v;
#else
  (void)policy;
  return *static_cast<const uint4*>(p);
#endif
}
// 4 bytes at p (4-byte aligned): a bitmap half-word.
__device__ __forceinline__ uint32_t load_weight4(const void* p, uint64_t policy) {
#if defined(__CUDA_ARCH__)
  uint32_t v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(policy));
  return v;
#else
  (void)policy;
  return *static_cast<const uint32_t*>(p);
#endif
}

// Exact integer-to-float conversions without I2F (which issues at 1/4 to 1/8 of the FP32 rate):
// 2^23 + n, n < 256, is the float whose low mantissa byte is n. One byte permute (PRMT) builds it
// from a byte of a word, one FADD removes the 2^23.
// Byte `k` (0..3) of x in the low byte of 0x4B0000__ (the bytes of 0x4B000000 fill the rest).
__device__ __forceinline__ uint32_t byte_into_magic(uint32_t x, int k) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, 0x4B000000u, 0x7440u | uint32_t(k));
#else
  return 0x4B000000u | ((x >> (8 * k)) & 0xFFu);
#endif
}
// Codes 0..7 of a word of eight int4 codes (code i in bits 4i..4i+3), as floats.
__device__ __forceinline__ void nibbles_to_f32(uint32_t word, float out[8]) {
  const uint32_t even = word & 0x0F0F0F0Fu, odd = (word >> 4) & 0x0F0F0F0Fu;  // codes 0,2,4,6 / 1,3,5,7
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    out[2 * k] = __fsub_rn(__uint_as_float(byte_into_magic(even, k)), 8388608.0f);
    out[2 * k + 1] = __fsub_rn(__uint_as_float(byte_into_magic(odd, k)), 8388608.0f);
  }
}
// The 4-bit code in bits [shift, shift+4) of `word`, as a float.
__device__ __forceinline__ float nibble_to_f32(uint32_t word, int shift) {
  return __fsub_rn(__uint_as_float(0x4B000000u | ((word >> shift) & 0xFu)), 8388608.0f);
}
// Codes 0..3 of a word of four int8 codes (two's complement, code i in byte i), as floats.
__device__ __forceinline__ void int8s_to_f32(uint32_t word, float out[4]) {
  const uint32_t biased = word ^ 0x80808080u;  // q + 128 in each byte
#pragma unroll
  for (int k = 0; k < 4; ++k) out[k] = __fsub_rn(__uint_as_float(byte_into_magic(biased, k)), 8388736.0f);
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
