// Internal to endor_kernels: the portable 8-lane float vector (GCC vector extensions) and its
// helpers, shared by the kernels that must give the same bits on every instruction set
// (attention's decode, silu_mul). Every helper is elementwise IEEE operations or lane moves, so a
// body that uses them, compiled once per ISA (AVX-512, AVX2, baseline; the library is built with
// -ffp-contract=off, so no product is fused into a sum), computes the same values on each.
// Always inline: no 32-byte vector crosses a call boundary of the baseline ABI, and each
// per-ISA copy of a body gets its own instructions.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

// (Only always-inline helpers take or return these vectors; see above.)
#pragma GCC diagnostic ignored "-Wpsabi"

namespace endor::cpu::detail {

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
#define ENDOR_AI __attribute__((always_inline)) inline

ENDOR_AI v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
ENDOR_AI void store8(float* p, const v8f& v) { std::memcpy(p, &v, sizeof v); }
ENDOR_AI v8f splat(float x) { return v8f{x, x, x, x, x, x, x, x}; }

// e^x per lane (Cephes' expf: x = n·ln2 + r, |r| <= ln2/2, a degree-7 polynomial in r, times 2^n),
// within 1 ulp of the exact value (measured over [-87, 10]); x < -87 gives 0 (std::exp: down to
// 1.6e-38), x > 88 inf (std::exp: finite up to 88.72); NaN stays NaN. Elementwise IEEE operations only.
ENDOR_AI v8f exp8(const v8f& x) {
  const v8f lo = splat(-87.0f), hi = splat(88.0f);
  v8f xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const v8f big = xc * splat(1.44269504088896341f) + splat(12582912.0f);  // 1.5·2^23 + round(x/ln2)
  const v8f n = big - splat(12582912.0f);
  v8f r = xc - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  v8f y = splat(1.9875691500e-4f);
  y = y * r + splat(1.3981999507e-3f);
  y = y * r + splat(8.3334519073e-3f);
  y = y * r + splat(4.1665795894e-2f);
  y = y * r + splat(1.6666665459e-1f);
  y = y * r + splat(5.0000001201e-1f);
  y = (y * (r * r) + r) + splat(1.0f);
  const v8i pow2 = ((v8i)big - v8i{0x4B400000 - 127, 0x4B400000 - 127, 0x4B400000 - 127, 0x4B400000 - 127,
                                   0x4B400000 - 127, 0x4B400000 - 127, 0x4B400000 - 127, 0x4B400000 - 127})
                   << 23;
  v8f out = y * (v8f)pow2;
  out = x < lo ? splat(0.0f) : out;
  return x > hi ? splat(std::numeric_limits<float>::infinity()) : out;
}

}  // namespace endor::cpu::detail
