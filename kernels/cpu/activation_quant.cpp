// Per-block int8 quantization of activations (weight_kernels.h, "int8 activations"): one
// function for every instruction set, so all kernels multiply the same q and d: the scalar
// reference loop, or where the CPU has AVX2 the same operations in 8-lane vectors (bit for bit the
// reference's results; tests/kernels/test_int8_activations.cpp compares them). It runs once per
// Linear call on the calling thread: O(tokens·cols) against the kernels' O(rows·cols·tokens).
#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "weight_kernels.h"

namespace endor::cpu::detail {
namespace {

size_t d_stride_of(uint64_t cols) { return quantized_q_stride(cols) / kActBlock; }
size_t round64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

size_t quantized_bytes(size_t n_tokens, uint64_t cols) {
  return round64(n_tokens * quantized_q_stride(cols)) + 2 * round64(4 * n_tokens * d_stride_of(cols));
}

QuantizedX quantized_layout(size_t n_tokens, uint64_t cols, void* storage) {
  QuantizedX qx;
  qx.q_stride = quantized_q_stride(cols);
  qx.d_stride = d_stride_of(cols);
  auto* bytes = static_cast<uint8_t*>(storage);
  qx.q = reinterpret_cast<int8_t*>(bytes);
  qx.d = reinterpret_cast<float*>(bytes + round64(n_tokens * qx.q_stride));
  qx.sums = reinterpret_cast<int32_t*>(bytes + round64(n_tokens * qx.q_stride) + round64(4 * n_tokens * qx.d_stride));
  return qx;
}

// The scalar loop: the definition, and what the AVX2 loop below is held to bit for bit.
QuantizedX quantize_activations_reference(const float* x, size_t x_stride, size_t n_tokens, uint64_t cols,
                                          void* storage) {
  const QuantizedX qx = quantized_layout(n_tokens, cols, storage);
  auto* q = const_cast<int8_t*>(qx.q);
  auto* d = const_cast<float*>(qx.d);
  auto* sums = const_cast<int32_t*>(qx.sums);
  for (size_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * x_stride;
    int8_t* qt = q + t * qx.q_stride;
    for (size_t b = 0; b < qx.d_stride; ++b) {
      const uint64_t c0 = b * kActBlock, c1 = std::min<uint64_t>(cols, c0 + kActBlock);
      float amax = 0.0f;
      for (uint64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(xt[c]));
      // d = amax/127 rounded; 1/d rounded; x·(1/d) rounded: |x·(1/d)| ≤ 127·(1 + 3u) < 127.5, so no
      // code leaves [−127, 127] (clamped anyway: a NaN or inf in x must not become an arbitrary code).
      const float scale = amax / 127.0f;
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      // Round half to even by adding and subtracting 1.5·2^23 (exact for |y| < 2^22, which holds:
      // |y| < 127.5, or inf/NaN, which the clamp below handles as nearbyint's result would be):
      // unlike a nearbyint call, the loop vectorizes. Same codes as nearbyint in the default
      // rounding mode.
      constexpr float kRound = 12582912.0f;
      int32_t sum = 0;
      for (uint64_t c = c0; c < c0 + kActBlock; ++c) {
        const float y = c < c1 ? xt[c] * inv : 0.0f;
        const float r = (y + kRound) - kRound;
        const int32_t v = r >= 127.0f ? 127 : r <= -127.0f ? -127 : r == r ? int32_t(r) : 0;
        qt[c] = int8_t(v);
        sum += v;
      }
      d[t * qx.d_stride + b] = c0 < cols ? scale : 0.0f;
      sums[t * qx.d_stride + b] = sum;
    }
  }
  return qx;
}

#if defined(__x86_64__)
namespace {

// The reference's operations per column, 8 columns a vector (AVX2): the same elementwise IEEE
// operations, the same max (vmaxps(a, m) keeps m where a is NaN, as std::max(m, a) does; every
// |x| is >= +0, so the order of the max does not matter), the same clamp and NaN -> 0, and an
// exact integer sum: bit for bit the reference's codes, scales and sums.
__attribute__((target("avx2"))) void quantize_token_avx2(const float* xt, uint64_t cols, size_t n_blocks, int8_t* qt,
                                                        float* dt, int32_t* st) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 round = _mm256_set1_ps(12582912.0f), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t b = 0; b < n_blocks; ++b) {
    const uint64_t c0 = b * kActBlock;
    alignas(32) float pad[kActBlock];  // a ragged or empty block: the columns past cols are 0 (y = 0 in the reference)
    const float* src = xt + c0;
    if (c0 + kActBlock > cols) {
      for (uint64_t c = 0; c < kActBlock; ++c) pad[c] = c0 + c < cols ? xt[c0 + c] : 0.0f;
      src = pad;
    }
    __m256 x[4];
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      x[k] = _mm256_loadu_ps(src + 8 * k);
      m = _mm256_max_ps(_mm256_and_ps(x[k], abs_mask), m);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float amax = _mm_cvtss_f32(m4);
    const float scale = amax / 127.0f;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv);
    __m256i v[4];
    for (int k = 0; k < 4; ++k) {
      __m256 r = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x[k], vinv), round), round);
      r = _mm256_max_ps(lo, _mm256_min_ps(hi, r));         // NaN stays NaN through both
      r = _mm256_andnot_ps(_mm256_cmp_ps(r, r, _CMP_UNORD_Q), r);  // NaN -> 0
      v[k] = _mm256_cvttps_epi32(r);
    }
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qt + c0), _mm256_permutevar8x32_epi32(packed, order));
    const __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(v[0], v[1]), _mm256_add_epi32(v[2], v[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    dt[b] = c0 < cols ? scale : 0.0f;
    st[b] = _mm_cvtsi128_si32(s4);
  }
}

bool have_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
}

}  // namespace
#endif

QuantizedX quantize_activations(const float* x, size_t x_stride, size_t n_tokens, uint64_t cols, void* storage) {
#if defined(__x86_64__)
  if (have_avx2()) {
    const QuantizedX qx = quantized_layout(n_tokens, cols, storage);
    for (size_t t = 0; t < n_tokens; ++t) {
      const QuantizedX xt = qx.token(t);
      quantize_token_avx2(x + t * x_stride, cols, qx.d_stride, const_cast<int8_t*>(xt.q), const_cast<float*>(xt.d),
                          const_cast<int32_t*>(xt.sums));
    }
    return qx;
  }
#endif
  return quantize_activations_reference(x, x_stride, n_tokens, cols, storage);
}

void dequantize_activations(const QuantizedX& qx, size_t n_tokens, uint64_t cols, float* out, size_t out_stride) {
  for (size_t t = 0; t < n_tokens; ++t) {
    const QuantizedX xt = qx.token(t);
    for (uint64_t c = 0; c < cols; ++c) out[t * out_stride + c] = xt.d[c / kActBlock] * float(xt.q[c]);
  }
}

}  // namespace endor::cpu::detail
