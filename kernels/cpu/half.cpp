// IEEE half <-> f32 for the f16 KV cache: AVX-512F or F16C where the CPU has them (vcvtph2ps /
// vcvtps2ph, round to nearest even), else the format library's scalar conversions (same results).
#include "half.h"

#include <immintrin.h>

#include "endor/format.h"

namespace endor::cpu::detail {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void widen_avx512(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}
__attribute__((target("avx512f"))) void narrow_avx512(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}
__attribute__((target("avx,f16c"))) void widen_f16c(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}
__attribute__((target("avx,f16c"))) void narrow_f16c(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}
#endif

enum class HalfIsa { Scalar, F16c, Avx512 };
HalfIsa half_isa() {
  static const HalfIsa isa = [] {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return HalfIsa::Avx512;
    if (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx")) return HalfIsa::F16c;
#endif
    return HalfIsa::Scalar;
  }();
  return isa;
}

}  // namespace

void widen_half(const uint16_t* src, float* dst, size_t n) {
#if defined(__x86_64__)
  switch (half_isa()) {
    case HalfIsa::Avx512: return widen_avx512(src, dst, n);
    case HalfIsa::F16c: return widen_f16c(src, dst, n);
    case HalfIsa::Scalar: break;
  }
#endif
  for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void narrow_to_half(const float* src, uint16_t* dst, size_t n) {
#if defined(__x86_64__)
  switch (half_isa()) {
    case HalfIsa::Avx512: return narrow_avx512(src, dst, n);
    case HalfIsa::F16c: return narrow_f16c(src, dst, n);
    case HalfIsa::Scalar: break;
  }
#endif
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace endor::cpu::detail
