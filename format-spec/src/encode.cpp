// Reference encoder (SPEC.md §6, §7): f32 tensor -> one tensor blob, including the int8/int4
// quantization rules. Simple loops on purpose; the packer's throughput is bounded elsewhere.
#include <algorithm>
#include <cmath>
#include <limits>

#include "detail.h"

namespace endor {

namespace {

uint64_t element_count(const std::vector<uint64_t>& shape) {
  uint64_t n = shape.empty() ? 0 : 1;  // empty shape: compute_layout reports it
  for (uint64_t d : shape) n = detail::checked_mul(n, d, "tensor element count");
  return n;
}

[[noreturn]] void not_finite(const char* scheme, uint64_t r, uint64_t c, float x) {
  throw Error(std::string(scheme) + " quantization needs finite values; element (" + std::to_string(r) + ", " +
              std::to_string(c) + ") is " + std::to_string(x));
}

// Round half away from zero, then clamp (std::lround semantics, SPEC.md §7).
int32_t round_clamp(float x, int32_t lo, int32_t hi) {
  const long q = std::lround(x);
  return int32_t(std::min<long>(std::max<long>(q, lo), hi));
}

}  // namespace

Int4Grid int4_grid(float mn, float mx) {
  if (!(mn <= mx) || !std::isfinite(mn) || !std::isfinite(mx))
    throw Error("int4_grid: needs finite mn <= mx, got [" + std::to_string(mn) + ", " + std::to_string(mx) + "]");
  if ((f32_to_f16(mn) & 0x7FFF) == 0x7C00 || (f32_to_f16(mx) & 0x7FFF) == 0x7C00)
    throw Error("int4 quantization needs |x| <= 65504 (f16 range); values in [" + std::to_string(mn) + ", " +
                std::to_string(mx) + "]");
  // The range widened to hold 0, so that one code (z) is exactly zero.
  const float lo = std::min(mn, 0.0f), hi = std::max(mx, 0.0f);
  if (hi == lo) return {f32_to_f16(1.0f), 0};  // every value is 0: z = 0 with the guard's scale 1
  // The step rounded up to 7 significant bits, so z·S (4 + 7 bits) is exact in f16's 11; below
  // f16's normal range, up to a multiple of 2^-24 (then at most 7 bits anyway).
  const float step = (hi - lo) / 15.0f;
  int e = 0;
  const float f = std::frexp(step, &e);  // f in [0.5, 1)
  float S = std::ldexp(std::ceil(f * 128.0f) / 128.0f, e);
  if (f16_to_f32(f32_to_f16(S)) != S) S = std::ldexp(std::ceil(std::ldexp(step, 24)), -24);
  const float z = std::min(15.0f, std::max(0.0f, std::round(-lo / S)));
  const float M = z == 0.0f ? 0.0f : -z * S;  // exact in binary32; +0 for z = 0
  const uint16_t s_h = f32_to_f16(S), m_h = f32_to_f16(M);
  if (f16_to_f32(s_h) == S && f16_to_f32(m_h) == M) return {s_h, m_h};
  // Fallback (M past the f16 range, with values near ±65504): the grid over [mn, mx] exactly.
  uint16_t scale_h = f32_to_f16((mx - mn) / 15.0f);
  if ((scale_h & 0x7FFF) == 0) scale_h = 0x3C00;  // guard: all values (nearly) equal -> scale 1.0
  return {scale_h, f32_to_f16(mn)};
}

// Per-row int8 scale (SPEC.md §7.1): s = max(max|w|, 1e-5) / 127 over the row's present values.
static float int8_row_scale(const float* row, uint64_t cols, bool bitmap, uint64_t r) {
  float amax = 0.0f;
  for (uint64_t c = 0; c < cols; ++c) {
    const float w = row[c];
    if (bitmap && w == 0.0f) continue;
    if (!std::isfinite(w)) not_finite("int8", r, c, w);
    amax = std::max(amax, std::fabs(w));
  }
  return std::max(amax, 1e-5f) / 127.0f;
}

uint16_t int8g_scale(float amax) {
  const uint16_t h = f32_to_f16(amax / 127.0f);
  if ((h & 0x7C00) == 0x7C00)
    throw Error("int8g: |w| = " + std::to_string(amax) + " is past what an f16 group scale can reach (127 · 65504)");
  return h;
}

EncodedTensor encode_tensor(const float* x, const std::vector<uint64_t>& shape, const EncodeOptions& opt) {
  if (opt.value_type == ValueType::I4 && opt.int4_params == Int4Params::Coded6)
    return encode_int4k(x, shape, opt.encoding, opt.group_size);
  if (opt.int4_params != Int4Params::F16)
    throw Error(std::string("coded int4 parameters requested for ") + to_string(opt.value_type));
  const bool bitmap = opt.encoding == Encoding::Bitmap;
  const uint32_t group_size = opt.value_type == ValueType::I4 || opt.value_type == ValueType::I8G ? opt.group_size : 0;
  const uint64_t numel = element_count(shape);
  uint64_t nnz = numel;
  if (bitmap) {
    nnz = 0;
    for (uint64_t i = 0; i < numel; ++i) nnz += x[i] != 0.0f;  // ±0 is absent, everything else present
  }
  EncodedTensor out;
  out.layout = compute_layout(shape, opt.encoding, opt.value_type, group_size, nnz);
  const TensorLayout& L = out.layout;
  out.bytes.assign(L.total_bytes, 0);
  uint8_t* base = out.bytes.data();
  uint8_t* values = base + L.values_offset;

  uint64_t v = 0;  // index of the next stored value (row-major over present elements)
  for (uint64_t r = 0; r < L.rows; ++r) {
    const float* row = x + r * L.cols;
    if (bitmap) {
      uint64_t count = v;
      for (uint64_t c = 0; c < L.cols; ++c) {
        if (c % kIndexBlockCols == 0)
          detail::store_u32(base + L.index_offset + 4 * (r * L.blocks_per_row + c / kIndexBlockCols), uint32_t(count));
        if (row[c] != 0.0f) {
          uint8_t* word = base + L.bitmap_offset + 8 * (r * L.words_per_row + c / 64);
          detail::store_u64(word, detail::load_u64(word) | (uint64_t(1) << (c % 64)));
          ++count;
        }
      }
    }
    auto present = [&](uint64_t c) { return !bitmap || row[c] != 0.0f; };

    switch (opt.value_type) {
      case ValueType::F16:
      case ValueType::BF16:
        for (uint64_t c = 0; c < L.cols; ++c)
          if (present(c)) {
            const uint16_t h = opt.value_type == ValueType::F16 ? f32_to_f16(row[c]) : f32_to_bf16(row[c]);
            detail::store_u16(values + 2 * v++, h);
          }
        break;
      case ValueType::F32:
        for (uint64_t c = 0; c < L.cols; ++c)
          if (present(c)) std::memcpy(values + 4 * v++, &row[c], 4);
        break;
      case ValueType::I8: {
        const float s = int8_row_scale(row, L.cols, bitmap, r);
        std::memcpy(base + L.scales_offset + 4 * r, &s, 4);
        for (uint64_t c = 0; c < L.cols; ++c)
          if (present(c)) values[v++] = uint8_t(int8_t(round_clamp(row[c] / s, -127, 127)));
        break;
      }
      case ValueType::I8G:
        // Per (row, group of group_size consecutive columns), over the group's present values only.
        for (uint64_t g = 0; g < L.groups_per_row; ++g) {
          const uint64_t c0 = g * group_size, c1 = std::min<uint64_t>(L.cols, c0 + group_size);
          float amax = 0.0f;
          for (uint64_t c = c0; c < c1; ++c)
            if (present(c)) {
              if (!std::isfinite(row[c])) not_finite("int8g", r, c, row[c]);
              amax = std::max(amax, std::fabs(row[c]));
            }
          uint16_t scale_h;
          try {
            scale_h = int8g_scale(amax);
          } catch (const Error& e) {
            throw Error(std::string(e.what()) + " (row " + std::to_string(r) + ")");
          }
          detail::store_u16(base + L.scales_offset + 2 * (r * L.groups_per_row + g), scale_h);
          const float s = f16_to_f32(scale_h);  // codes against the stored scale
          for (uint64_t c = c0; c < c1; ++c)
            if (present(c)) values[v++] = s == 0.0f ? 0 : uint8_t(int8_t(round_clamp(row[c] / s, -127, 127)));
        }
        break;
      case ValueType::I4: {
        // Per (row, group of group_size consecutive columns), over the group's present values only.
        for (uint64_t g = 0; g < L.groups_per_row; ++g) {
          const uint64_t c0 = g * group_size, c1 = std::min<uint64_t>(L.cols, c0 + group_size);
          float mn = std::numeric_limits<float>::infinity(), mx = -mn;
          for (uint64_t c = c0; c < c1; ++c)
            if (present(c)) {
              if (!std::isfinite(row[c])) not_finite("int4", r, c, row[c]);
              mn = std::min(mn, row[c]);
              mx = std::max(mx, row[c]);
            }
          uint16_t scale_h = 0, min_h = 0;  // a group with no present value stores 0, 0
          if (mn <= mx) {
            // Parameters are f16 first; codes are chosen against the rounded values so decode
            // reproduces exactly what the encoder intended.
            Int4Grid grid;
            try {
              grid = int4_grid(mn, mx);
            } catch (const Error& e) {
              throw Error(std::string(e.what()) + " (row " + std::to_string(r) + ")");
            }
            scale_h = grid.scale_f16;
            min_h = grid.min_f16;
            const float s = f16_to_f32(scale_h), m = f16_to_f32(min_h);
            for (uint64_t c = c0; c < c1; ++c)
              if (present(c)) {
                const uint8_t q = uint8_t(round_clamp((row[c] - m) / s, 0, 15));
                values[v / 2] |= (v % 2 == 0) ? q : uint8_t(q << 4);  // even value: low nibble
                ++v;
              }
          }
          const uint64_t p = r * L.groups_per_row + g;
          detail::store_u16(base + L.scales_offset + 2 * p, scale_h);
          detail::store_u16(base + L.mins_offset + 2 * p, min_h);
        }
        break;
      }
    }
  }
  return out;
}

}  // namespace endor
