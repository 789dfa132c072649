// A GGUF tensor's Q4_0 / Q4_1 / Q4_K blocks as Endor int4 / int4k codes and parameters (gguf.h,
// gguf_exact_int4): no value is rounded again, so a converted Q4_K_M file keeps llama-quantize's
// choices where Endor's encodings can hold them. Block layouts as gguf_dequant.cpp lists them.
#include <cmath>
#include <cstring>

#include "endor/gguf.h"
#include "gguf_blocks.h"

namespace endor {
namespace {

using gguf_blocks::k_nibble;
using gguf_blocks::k_scale_min;
using gguf_blocks::nibble32;

uint16_t u16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
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
          for (int k = 0; k < 32; ++k) out[b * 256 + i * 32 + k] = k_nibble(blk + 16, i, k);
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

std::optional<EncodedTensor> gguf_exact_int8g(GgmlType type, const uint8_t* data, uint64_t rows, uint64_t cols,
                                              uint32_t permute_heads, uint32_t group_size) {
  if (type != GgmlType::Q8_0 || group_size != 32 || cols == 0 || cols % 32 != 0) return std::nullopt;
  const uint64_t block_bytes = ggml_block_bytes(type), row_bytes = cols / 32 * block_bytes, groups = cols / 32;
  std::vector<int8_t> codes(rows * cols);
  std::vector<uint16_t> scales(rows * groups);
  for (uint64_t r = 0; r < rows; ++r) {
    const uint64_t src = permute_heads ? gguf_unpermuted_row(r, rows, permute_heads) : r;
    const uint8_t* row = data + src * row_bytes;
    for (uint64_t b = 0; b < groups; ++b) {
      const uint8_t* blk = row + b * block_bytes;  // Q8_0: f16 d, 32 int8 codes
      const uint16_t d = u16_at(blk);
      if ((d & 0x7C00) == 0x7C00) return std::nullopt;
      scales[r * groups + b] = d;
      for (int j = 0; j < 32; ++j) {
        const int8_t q = int8_t(blk[2 + j]);
        if (q == -128) return std::nullopt;  // llama.cpp never writes it; Endor's int8 codes stop at −127
        codes[r * cols + b * 32 + uint64_t(j)] = q;
      }
    }
  }
  QuantizedValues q;
  q.value_type = ValueType::I8G;
  q.group_size = 32;
  q.int8_codes = codes.data();
  q.group_scales = scales.data();
  return encode_quantized({rows, cols}, Encoding::Dense, q);
}

}  // namespace endor

namespace endor {
namespace {

void put_u16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// The six-bit code k (0..15) of an int4k super-block's 12 code bytes (SPEC.md §6.7: bits [6k, 6k+6)).
uint8_t code6(const uint8_t* codes, int k) {
  const int bit = 6 * k;
  const uint32_t word = uint32_t(codes[bit / 8]) | (bit / 8 + 1 < 12 ? uint32_t(codes[bit / 8 + 1]) << 8 : 0u);
  return uint8_t((word >> (bit % 8)) & 0x3F);
}

// Q4_K's 12 scale bytes from eight 6-bit scales and minimums (the inverse of k_scale_min).
void pack_scale_min(const uint8_t sc[8], const uint8_t mn[8], uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t(sc[j] | ((sc[4 + j] >> 4) << 6));
    s[4 + j] = uint8_t(mn[j] | ((mn[4 + j] >> 4) << 6));
    s[8 + j] = uint8_t((sc[4 + j] & 0x0F) | ((mn[4 + j] & 0x0F) << 4));
  }
}

// The code whose value q·S + M is `x` (x = 0 for an absent element: the code decoding to exactly 0).
// Any code when none does; the dequantization check then refuses the tensor.
uint8_t code_of(float x, float S, float M) {
  if (!(S > 0.0f)) return 0;
  const float q = std::nearbyint((x - M) / S);
  return uint8_t(q < 0.0f ? 0 : q > 15.0f ? 15 : q);
}

// int8g as Q8_0 blocks: d = the group's S, q = x / S (0 for an absent element: exactly 0).
std::optional<GgufBlocks> q8_0_blocks(const TensorView& v, const float* decoded,
                                      const std::function<uint64_t(uint64_t)>& gguf_row) {
  const TensorLayout& L = v.layout;
  const uint32_t g = L.group_size;
  if (g == 0 || g % 32 != 0 || L.cols % g != 0) return std::nullopt;
  GgufBlocks out;
  out.type = GgmlType::Q8_0;
  const uint64_t block_bytes = ggml_block_bytes(out.type), row_bytes = L.cols / 32 * block_bytes;
  const uint64_t gpr = L.cols / g;
  out.bytes.assign(L.rows * row_bytes, 0);
  std::vector<float> check(L.cols);
  for (uint64_t r = 0; r < L.rows; ++r) {
    const float* x = decoded + r * L.cols;
    uint8_t* row = out.bytes.data() + gguf_row(r) * row_bytes;
    for (uint64_t b = 0; b < L.cols / 32; ++b) {
      uint8_t* blk = row + b * block_bytes;
      const uint16_t d = v.group_scales()[r * gpr + b * 32 / g];
      const float s = f16_to_f32(d);
      put_u16(blk, d);
      for (int j = 0; j < 32; ++j) {
        const float q = s == 0.0f ? 0.0f : std::nearbyint(x[b * 32 + uint64_t(j)] / s);
        blk[2 + j] = uint8_t(int8_t(q < -127.0f ? -127.0f : q > 127.0f ? 127.0f : q));
      }
    }
    ggml_dequantize(out.type, row, L.cols, check.data());
    if (std::memcmp(check.data(), x, L.cols * 4) != 0) return std::nullopt;  // bit for bit, or not at all
  }
  return out;
}

}  // namespace

std::optional<GgufBlocks> gguf_blocks_exact(const TensorView& v, const float* decoded,
                                            const std::function<uint64_t(uint64_t)>& gguf_row) {
  const TensorLayout& L = v.layout;
  const uint32_t g = L.group_size;
  if (L.value_type == ValueType::I8G) return q8_0_blocks(v, decoded, gguf_row);
  if (L.value_type != ValueType::I4 || g == 0 || g % 32 != 0 || L.cols % g != 0) return std::nullopt;
  const bool k = L.int4_params == Int4Params::Coded6;
  const uint64_t gpr = L.cols / g;
  if (k && (L.cols % 256 != 0 || gpr % kInt4kSuperGroups != 0)) return std::nullopt;
  GgufBlocks out;
  out.type = k ? GgmlType::Q4_K : GgmlType::Q4_1;
  const uint64_t block = ggml_block_elements(out.type), block_bytes = ggml_block_bytes(out.type);
  const uint64_t row_bytes = L.cols / block * block_bytes;
  out.bytes.assign(L.rows * row_bytes, 0);
  std::vector<float> S(gpr), M(gpr), check(L.cols);
  for (uint64_t r = 0; r < L.rows; ++r) {
    int4_params_f32(v, r * gpr, gpr, S.data(), M.data());
    const float* x = decoded + r * L.cols;
    uint8_t* row = out.bytes.data() + gguf_row(r) * row_bytes;
    for (uint64_t b = 0; b < L.cols / block; ++b) {
      uint8_t* blk = row + b * block_bytes;
      if (!k) {  // Q4_1: d, m, 16 bytes of nibbles (element j < 16 low nibble of byte j, else high of j − 16)
        const uint64_t grp = b * 32 / g, p = r * gpr + grp;
        put_u16(blk, v.group_scales()[p]);
        put_u16(blk + 2, v.group_mins()[p]);
        for (int j = 0; j < 32; ++j) {
          const uint8_t q = code_of(x[b * 32 + j], S[grp], M[grp]);
          blk[4 + (j & 15)] |= uint8_t(j < 16 ? q : q << 4);
        }
        continue;
      }
      // Q4_K: d, dmin, 12 scale bytes, 128 bytes (element i·32 + e: nibble i % 2 of byte (i / 2)·32 + e)
      const uint64_t p0 = r * gpr + b * 256 / g, sb = p0 / kInt4kSuperGroups;
      put_u16(blk, v.super_scales()[2 * sb]);
      put_u16(blk + 2, v.super_scales()[2 * sb + 1]);
      uint8_t sc[8], mn[8];
      for (int i = 0; i < 8; ++i) {
        const uint64_t p = r * gpr + (b * 256 + uint64_t(i) * 32) / g;  // this sub-block's parameter
        sc[i] = code6(v.param_codes() + 12 * sb, int(p % kInt4kSuperGroups));
        mn[i] = code6(v.param_codes() + 12 * sb, int(8 + p % kInt4kSuperGroups));
        const uint64_t grp = p - r * gpr;
        for (int e = 0; e < 32; ++e) {
          const uint8_t q = code_of(x[b * 256 + uint64_t(i) * 32 + e], S[grp], M[grp]);
          blk[16 + (i / 2) * 32 + e] |= uint8_t(q << (4 * (i % 2)));
        }
      }
      pack_scale_min(sc, mn, blk + 4);
    }
    ggml_dequantize(out.type, row, L.cols, check.data());
    if (std::memcmp(check.data(), x, L.cols * 4) != 0) return std::nullopt;  // bit for bit, or not at all
  }
  return out;
}

}  // namespace endor
