// A GGUF tensor's Q4_0 / Q4_1 / Q4_K blocks as Endor int4 / int4k codes and parameters (gguf.h,
// gguf_exact_int4): no value is rounded again, so a converted Q4_K_M file keeps llama-quantize's
// choices where Endor's encodings can hold them. Block layouts as gguf_dequant.cpp lists them.
#include <cstring>

#include "endor/gguf.h"

namespace endor {
namespace {

uint16_t u16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// Element j (0..31) of a 32-element block's 16 nibble bytes (as gguf_dequant.cpp's nibble32).
uint8_t nibble32(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4; }

// Q4_K's eight 6-bit scales and minimums from its 12 packed bytes (gguf_dequant.cpp's k_scale_min).
void k_scale_min(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 0x3F;
    mn[j] = s[4 + j] & 0x3F;
    sc[4 + j] = uint8_t((s[8 + j] & 0x0F) | ((s[j] >> 2) & 0x30));
    mn[4 + j] = uint8_t((s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30));
  }
}

}  // namespace

std::optional<EncodedTensor> gguf_exact_int4(GgmlType type, const uint8_t* data, uint64_t rows, uint64_t cols,
                                             uint32_t permute_heads, Int4Params params, uint32_t group_size) {
  const bool q4_01 = type == GgmlType::Q4_0 || type == GgmlType::Q4_1;
  if (group_size != 32) return std::nullopt;
  if (!(q4_01 && params == Int4Params::F16) && !(type == GgmlType::Q4_K && params == Int4Params::Coded6))
    return std::nullopt;
  const uint64_t block = ggml_block_elements(type), block_bytes = ggml_block_bytes(type);
  if (cols == 0 || cols % block != 0) return std::nullopt;
  const uint64_t row_bytes = cols / block * block_bytes, groups = cols / 32;

  std::vector<uint8_t> codes(rows * cols);
  QuantizedValues q;
  q.value_type = ValueType::I4;
  q.group_size = 32;
  q.int4_params = params;
  q.int4_codes = codes.data();
  std::vector<uint16_t> scales, mins, supers;
  std::vector<uint8_t> param_codes;
  if (q4_01) {
    scales.resize(rows * groups);
    mins.resize(rows * groups);
  } else {
    supers.resize(rows * groups / kInt4kSuperGroups * 2);  // groups is a multiple of 8: no partial super-block
    param_codes.resize(rows * groups * 2);
  }
  for (uint64_t r = 0; r < rows; ++r) {
    const uint64_t src = permute_heads ? gguf_unpermuted_row(r, rows, permute_heads) : r;
    const uint8_t* row = data + src * row_bytes;
    uint8_t* out = codes.data() + r * cols;
    for (uint64_t b = 0; b < cols / block; ++b) {
      const uint8_t* blk = row + b * block_bytes;
      const uint64_t p = r * groups + b * block / 32;  // first (row, group) parameter of the block
      if (type == GgmlType::Q4_K) {
        supers[2 * (p / kInt4kSuperGroups)] = u16_at(blk);          // d
        supers[2 * (p / kInt4kSuperGroups) + 1] = u16_at(blk + 2);  // dmin
        uint8_t sc[8], mn[8];
        k_scale_min(blk + 4, sc, mn);
        for (int i = 0; i < 8; ++i) {
          param_codes[2 * (p + i)] = sc[i];
          param_codes[2 * (p + i) + 1] = mn[i];
          // element i·32 + k is nibble (i % 2) of qs[(i / 2)·32 + k]
          for (int k = 0; k < 32; ++k) out[b * 256 + i * 32 + k] = (blk[16 + (i / 2) * 32 + k] >> (4 * (i % 2))) & 0x0F;
        }
        continue;
      }
      const uint16_t d = u16_at(blk);
      scales[p] = d;
      if (type == GgmlType::Q4_1) {
        mins[p] = u16_at(blk + 2);
      } else {
        // x = d·(q − 8) = q·d + (−8·d): both products exact in f32, so the sum rounds to the same
        // value; −8·d must itself be an f16 (it is unless |d| > 8188).
        const float m = -8.0f * f16_to_f32(d);
        const uint16_t mh = f32_to_f16(m);
        if (f16_to_f32(mh) != m) return std::nullopt;
        mins[p] = mh;
      }
      const uint8_t* qs = blk + (type == GgmlType::Q4_1 ? 4 : 2);
      for (int j = 0; j < 32; ++j) out[b * 32 + j] = nibble32(qs, j);
    }
  }
  if (q4_01) {
    q.group_scales = scales.data();
    q.group_mins = mins.data();
  } else {
    q.super_scales = supers.data();
    q.param_codes = param_codes.data();
  }
  return encode_quantized({rows, cols}, Encoding::Dense, q);
}

}  // namespace endor
