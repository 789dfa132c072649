// encode_quantized (SPEC.md §7.3): int8/int4 codes and parameters chosen by the caller (e.g.
// SparseGPT's joint quantization) -> one tensor blob, stored exactly as given. The layout is
// the same as encode_tensor's (§6); only the choice of codes and parameters differs.
#include <cmath>

#include "detail.h"

namespace endor {

namespace {

constexpr const char* kFn = "encode_quantized";

uint64_t element_count(const std::vector<uint64_t>& shape) {
  uint64_t n = shape.empty() ? 0 : 1;  // empty shape: compute_layout reports it
  for (uint64_t d : shape) n = detail::checked_mul(n, d, "tensor element count");
  return n;
}

std::string at(uint64_t r, uint64_t c) { return "(" + std::to_string(r) + ", " + std::to_string(c) + ")"; }

// An f16 parameter must be a finite number (not inf/NaN: exponent bits all ones).
bool f16_finite(uint16_t h) { return (h & 0x7C00) != 0x7C00; }

}  // namespace

EncodedTensor encode_quantized(const std::vector<uint64_t>& shape, Encoding encoding, const QuantizedValues& q) {
  const bool int8 = q.value_type == ValueType::I8, int4 = q.value_type == ValueType::I4;
  const bool int8g = q.value_type == ValueType::I8G;
  if (!int8 && !int4 && !int8g)
    detail::fail(kFn, std::string("value type must be int8, int8g or int4, got ") + to_string(q.value_type));
  if (int8 && (!q.int8_codes || !q.row_scales)) detail::fail(kFn, "int8 needs codes and row scales");
  if (int8g && (!q.int8_codes || !q.group_scales)) detail::fail(kFn, "int8g needs codes and group scales");
  if (int8g && q.group_size == 0) detail::fail(kFn, "int8g group_size must be at least 1");
  const bool coded = int4 && q.int4_params == Int4Params::Coded6;
  if (int4 && !coded && (!q.int4_codes || !q.group_scales || !q.group_mins))
    detail::fail(kFn, "int4 needs codes, group scales and group mins");
  if (coded && (!q.int4_codes || !q.super_scales || !q.param_codes))
    detail::fail(kFn, "int4k needs codes, super-block scales and parameter codes");
  if (!int4 && q.int4_params != Int4Params::F16) detail::fail(kFn, "coded parameters are for int4 only");
  if (int4 && q.group_size == 0) detail::fail(kFn, "int4 group_size must be at least 1");
  const bool bitmap = encoding == Encoding::Bitmap;
  const uint64_t numel = element_count(shape);
  uint64_t nnz = numel;
  if (bitmap && q.present) {
    nnz = 0;
    for (uint64_t i = 0; i < numel; ++i) nnz += q.present[i] != 0;
  }
  EncodedTensor out;
  out.layout = compute_layout(shape, encoding, q.value_type, int4 || int8g ? q.group_size : 0, nnz,
                              int8g ? Int4Params::F16 : q.int4_params);
  const TensorLayout& L = out.layout;
  auto present = [&](uint64_t i) { return !q.present || q.present[i] != 0; };
  if (!bitmap && int4 && q.present)
    for (uint64_t i = 0; i < numel; ++i)
      if (!present(i))
        detail::fail(kFn, "dense int4 cannot store the absent element " + at(i / L.cols, i % L.cols) +
                              " (no exact zero on the int4 grid); use the bitmap encoding");

  out.bytes.assign(L.total_bytes, 0);
  uint8_t* base = out.bytes.data();
  if (coded) {
    for (uint64_t b = 0; b < 2 * L.n_super; ++b)
      if (!f16_finite(q.super_scales[b]))
        detail::fail(kFn, "int4k super-block " + std::to_string(b / 2) + " has a scale that is not a finite f16");
    for (uint64_t p = 0; p < 2 * L.rows * L.groups_per_row; ++p)
      if (q.param_codes[p] > kInt4kCodeMax)
        detail::fail(kFn, "int4k parameter code " + std::to_string(q.param_codes[p]) + " of parameter " +
                              std::to_string(p / 2) + " (codes are in [0, 63])");
    detail::store_int4k_params(L, q.super_scales, q.param_codes, base);
  }
  uint8_t* values = base + L.values_offset;
  uint64_t v = 0;  // index of the next stored value (row-major over present elements)
  for (uint64_t r = 0; r < L.rows; ++r) {
    const uint64_t row0 = r * L.cols;
    if (bitmap) {
      uint64_t count = v;
      for (uint64_t c = 0; c < L.cols; ++c) {
        if (c % kIndexBlockCols == 0)
          detail::store_u32(base + L.index_offset + 4 * (r * L.blocks_per_row + c / kIndexBlockCols), uint32_t(count));
        if (present(row0 + c)) {
          uint8_t* word = base + L.bitmap_offset + 8 * (r * L.words_per_row + c / 64);
          detail::store_u64(word, detail::load_u64(word) | (uint64_t(1) << (c % 64)));
          ++count;
        }
      }
    }
    if (int8 || int8g) {
      if (int8) {
        const float s = q.row_scales[r];
        if (!std::isfinite(s)) detail::fail(kFn, "int8 scale of row " + std::to_string(r) + " is not finite");
        std::memcpy(base + L.scales_offset + 4 * r, &s, 4);
      }
      for (uint64_t g = 0; g < L.groups_per_row && int8g; ++g) {
        const uint64_t p = r * L.groups_per_row + g;
        if (!f16_finite(q.group_scales[p]))
          detail::fail(kFn, "int8g scale of row " + std::to_string(r) + ", group " + std::to_string(g) +
                                " is not a finite f16");
        detail::store_u16(base + L.scales_offset + 2 * p, q.group_scales[p]);
      }
      for (uint64_t c = 0; c < L.cols; ++c) {
        const bool here = present(row0 + c);
        if (bitmap && !here) continue;
        const int8_t code = here ? q.int8_codes[row0 + c] : int8_t(0);
        if (code < -127) detail::fail(kFn, std::string(to_string(q.value_type)) + " code -128 at " + at(r, c) + " (codes are in [-127, 127])");
        values[v++] = uint8_t(code);
      }
    } else {
      for (uint64_t g = 0; g < L.groups_per_row && !coded; ++g) {
        const uint64_t p = r * L.groups_per_row + g;
        if (!f16_finite(q.group_scales[p]) || !f16_finite(q.group_mins[p]))
          detail::fail(kFn, "int4 scale or min of row " + std::to_string(r) + ", group " + std::to_string(g) +
                                " is not a finite f16");
        detail::store_u16(base + L.scales_offset + 2 * p, q.group_scales[p]);
        detail::store_u16(base + L.mins_offset + 2 * p, q.group_mins[p]);
      }
      for (uint64_t c = 0; c < L.cols; ++c) {
        if (!present(row0 + c)) continue;  // dense: refused above
        const uint8_t code = q.int4_codes[row0 + c];
        if (code > 15) detail::fail(kFn, "int4 code " + std::to_string(code) + " at " + at(r, c) + " (codes are in [0, 15])");
        values[v / 2] |= (v % 2 == 0) ? code : uint8_t(code << 4);  // even value: low nibble
        ++v;
      }
    }
  }
  return out;
}

}  // namespace endor
