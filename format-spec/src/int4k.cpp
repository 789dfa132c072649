// int4k (SPEC.md §6.7, §7.4): int4 group parameters stored as six-bit codes under f16 super-block
// scales. The parameter expansion every decoder shares, the super-block quantizer, and the
// reference encoder's round-to-nearest grid (a float minimum: no zero code).
#include <algorithm>
#include <cmath>
#include <limits>

#include "detail.h"

namespace endor {

namespace {

// Code k (0..15) of one super-block's 12 code bytes: bits [6k, 6k + 6) of the little-endian bit
// string, i.e. four codes in every three bytes.
inline uint32_t code_at(const uint8_t* codes, uint32_t k) {
  const uint32_t bit = 6 * k, byte = bit / 8, shift = bit % 8;
  uint32_t v = codes[byte];
  if (shift > 2) v |= uint32_t(codes[byte + 1]) << 8;  // the code crosses into the next byte
  return (v >> shift) & 63;
}

inline void put_code(uint8_t* codes, uint32_t k, uint32_t value) {
  const uint32_t bit = 6 * k, byte = bit / 8, shift = bit % 8;
  codes[byte] |= uint8_t(value << shift);
  if (shift > 2) codes[byte + 1] |= uint8_t(value >> (8 - shift));
}

// f16 of a non-negative finite f32, rounded to nearest; throws past the f16 range.
uint16_t nonneg_f16(float x, const char* what) {
  const uint16_t h = f32_to_f16(x);
  if ((h & 0x7C00) == 0x7C00) throw Error(std::string("int4k: ") + what + " " + std::to_string(x) + " is past the f16 range");
  return h;
}

}  // namespace

void int4_params_f32(const TensorView& t, uint64_t p0, uint64_t n, float* scales, float* mins) {
  if (t.layout.int4_params == Int4Params::F16) {
    const uint16_t* s = t.group_scales() + p0;
    const uint16_t* m = t.group_mins() + p0;
    for (uint64_t i = 0; i < n; ++i) {
      scales[i] = f16_to_f32(s[i]);
      mins[i] = f16_to_f32(m[i]);
    }
    return;
  }
  const uint8_t* super = t.data + t.layout.scales_offset;
  const uint8_t* codes = t.param_codes();
  for (uint64_t i = 0; i < n;) {
    const uint64_t p = p0 + i, b = p / kInt4kSuperGroups;
    const float d = f16_to_f32(detail::load_u16(super + 4 * b));
    const float dmin = f16_to_f32(detail::load_u16(super + 4 * b + 2));
    const uint8_t* c = codes + kInt4kCodeBytes * b;
    for (uint32_t j = uint32_t(p % kInt4kSuperGroups); j < kInt4kSuperGroups && i < n; ++j, ++i) {
      scales[i] = d * float(code_at(c, j));                      // exact: 11 × 6 significant bits
      mins[i] = -(dmin * float(code_at(c, kInt4kSuperGroups + j)));
    }
  }
}

Int4kSuper int4k_super(const float* scales, const float* mins, uint32_t n) {
  if (n == 0 || n > kInt4kSuperGroups) throw Error("int4k_super: needs 1 to 8 parameters, got " + std::to_string(n));
  float smax = 0.0f, mmax = 0.0f;
  for (uint32_t i = 0; i < n; ++i) {
    if (!(scales[i] >= 0.0f) || !std::isfinite(scales[i]))
      throw Error("int4k_super: scale " + std::to_string(scales[i]) + " is not a finite number >= 0");
    if (!(mins[i] <= 0.0f) || !std::isfinite(mins[i]))
      throw Error("int4k_super: min " + std::to_string(mins[i]) + " is not a finite number <= 0");
    smax = std::max(smax, scales[i]);
    mmax = std::max(mmax, -mins[i]);
  }
  Int4kSuper out;
  out.d_f16 = nonneg_f16(smax / float(kInt4kCodeMax), "scale of scales");
  out.dmin_f16 = nonneg_f16(mmax / float(kInt4kCodeMax), "scale of mins");
  const float d = f16_to_f32(out.d_f16), dmin = f16_to_f32(out.dmin_f16);
  auto code = [](float x, float step, bool at_least_one) -> uint8_t {
    if (step == 0.0f || x == 0.0f) return 0;
    const long q = std::lround(x / step);
    return uint8_t(std::clamp<long>(q, at_least_one ? 1 : 0, long(kInt4kCodeMax)));
  };
  for (uint32_t i = 0; i < n; ++i) {
    out.sc[i] = code(scales[i], d, true);  // a group with a range keeps a non-zero step
    out.mc[i] = code(-mins[i], dmin, false);
  }
  return out;
}

namespace detail {

// Packs (d, dmin) and the codes of every super-block into a blob laid out by `L` (Coded6).
void store_int4k_params(const TensorLayout& L, const uint16_t* super_scales, const uint8_t* param_codes,
                        uint8_t* base) {
  const uint64_t n_params = L.rows * L.groups_per_row;
  for (uint64_t b = 0; b < L.n_super; ++b) {
    store_u16(base + L.scales_offset + 4 * b, super_scales[2 * b]);
    store_u16(base + L.scales_offset + 4 * b + 2, super_scales[2 * b + 1]);
    uint8_t* codes = base + L.mins_offset + kInt4kCodeBytes * b;
    for (uint32_t j = 0; j < kInt4kSuperGroups; ++j) {
      const uint64_t p = b * kInt4kSuperGroups + j;
      if (p >= n_params) break;  // the last super-block's unused codes stay 0
      put_code(codes, j, param_codes[2 * p]);
      put_code(codes, kInt4kSuperGroups + j, param_codes[2 * p + 1]);
    }
  }
}

}  // namespace detail

// The reference int4k grid (SPEC.md §7.4), round to nearest: per group of present values the
// range [min(mn, 0), mx] in 15 steps; per super-block the parameters coded by int4k_super; codes
// chosen against the decoded parameters.
EncodedTensor encode_int4k(const float* x, const std::vector<uint64_t>& shape, Encoding encoding, uint32_t group_size) {
  const bool bitmap = encoding == Encoding::Bitmap;
  // Shape checks and the parameter count come from the layout (nnz is not needed for them).
  const TensorLayout L0 = compute_layout(shape, Encoding::Dense, ValueType::I4, group_size,
                                         [&] {
                                           uint64_t n = 1;
                                           for (uint64_t d : shape) n = detail::checked_mul(n, d, "tensor element count");
                                           return n;
                                         }(),
                                         Int4Params::Coded6);
  const uint64_t rows = L0.rows, cols = L0.cols, gpr = L0.groups_per_row, n_params = rows * gpr;
  std::vector<float> want_s(n_params, 0.0f), want_m(n_params, 0.0f);
  std::vector<uint8_t> present(bitmap ? rows * cols : 0);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t g = 0; g < gpr; ++g) {
      float mn = std::numeric_limits<float>::infinity(), mx = -mn;
      for (uint64_t c = g * group_size; c < std::min<uint64_t>(cols, (g + 1) * group_size); ++c) {
        const float w = x[r * cols + c];
        if (bitmap && w == 0.0f) continue;
        if (!std::isfinite(w) || std::fabs(w) > 65504.0f)
          throw Error("int4k quantization needs finite values within the f16 range; element (" + std::to_string(r) +
                      ", " + std::to_string(c) + ") is " + std::to_string(w));
        if (bitmap) present[r * cols + c] = 1;
        mn = std::min(mn, w);
        mx = std::max(mx, w);
      }
      if (mn > mx) continue;  // no present value: S = M = 0
      const float lo = std::min(mn, 0.0f);
      want_s[r * gpr + g] = (mx - lo) / 15.0f;
      want_m[r * gpr + g] = lo;
    }
  std::vector<uint16_t> super(2 * L0.n_super);
  std::vector<uint8_t> param_codes(2 * n_params);
  for (uint64_t b = 0; b < L0.n_super; ++b) {
    const uint64_t p0 = b * kInt4kSuperGroups;
    const uint32_t n = uint32_t(std::min<uint64_t>(kInt4kSuperGroups, n_params - p0));
    const Int4kSuper sb = int4k_super(&want_s[p0], &want_m[p0], n);
    super[2 * b] = sb.d_f16;
    super[2 * b + 1] = sb.dmin_f16;
    for (uint32_t j = 0; j < n; ++j) {
      param_codes[2 * (p0 + j)] = sb.sc[j];
      param_codes[2 * (p0 + j) + 1] = sb.mc[j];
    }
  }
  // Codes against the parameters as decoded.
  std::vector<uint8_t> codes(rows * cols, 0);
  for (uint64_t b = 0; b < L0.n_super; ++b) {
    const float d = f16_to_f32(super[2 * b]), dmin = f16_to_f32(super[2 * b + 1]);
    for (uint32_t j = 0; j < kInt4kSuperGroups; ++j) {
      const uint64_t p = b * kInt4kSuperGroups + j;
      if (p >= n_params) break;
      const float s = d * float(param_codes[2 * p]), m = -(dmin * float(param_codes[2 * p + 1]));
      const uint64_t r = p / gpr, g = p % gpr;
      for (uint64_t c = g * group_size; c < std::min<uint64_t>(cols, (g + 1) * group_size); ++c) {
        if (s == 0.0f) continue;  // every code decodes to m
        const long q = std::lround((x[r * cols + c] - m) / s);
        codes[r * cols + c] = uint8_t(std::clamp<long>(q, 0, 15));
      }
    }
  }
  QuantizedValues q;
  q.value_type = ValueType::I4;
  q.group_size = group_size;
  q.int4_params = Int4Params::Coded6;
  q.present = bitmap ? present.data() : nullptr;
  q.int4_codes = codes.data();
  q.super_scales = super.data();
  q.param_codes = param_codes.data();
  return encode_quantized(shape, encoding, q);
}

}  // namespace endor
