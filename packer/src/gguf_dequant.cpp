// Dequantization of GGUF tensor data to f32, as gguf-py's `dequantize` (gguf/quants.py: numpy,
// f32 arithmetic). Each formula below keeps gguf-py's order of operations: a sub-block scale is
// rounded to f32 once (d·sc), then multiplied by the quant, then the minimum subtracted, each step
// rounding to f32. Compiled with -ffp-contract=off (packer/CMakeLists.txt): d·q + m must round
// twice, as numpy does, not once as a fused multiply-add would.
//
// Block layouts (ggml's; bytes in file order, f16 little-endian; "element" = index in the block):
//   Q8_0   d, q[32] int8                                   x = d·q
//   Q4_0   d, qs[16]                                       x = d·(q − 8)
//   Q4_1   d, m, qs[16]                                    x = d·q + m
//   Q5_0   d, qh u32, qs[16]                               x = d·(q − 16)
//   Q5_1   d, m, qh u32, qs[16]                            x = d·q + m
//   IQ4_NL d, qs[16]                                       x = d·kvalues[q]
//     (32-element types: element j < 16 is the low nibble of qs[j], j ≥ 16 the high nibble of
//      qs[j − 16]; Q5's fifth bit of element j is bit j of qh)
//   Q2_K   scales[16], qs[64], d, dmin                     x = (d·(sc & 15))·q − dmin·(sc >> 4)
//   Q3_K   hmask[32], qs[64], scales[12], d                x = (d·(sc − 32))·(q − 4·!hbit)
//   Q4_K   d, dmin, scales[12], qs[128]                    x = (d·sc)·q − dmin·m   (8 × 32)
//   Q5_K   d, dmin, scales[12], qh[32], qs[128]            x = (d·sc)·q − dmin·m   (8 × 32)
//   Q6_K   ql[128], qh[64], scales[16] int8, d             x = (d·sc)·(q − 32)     (16 × 16)
//   IQ4_XS d, scales_h u16, scales_l[4], qs[128]           x = (d·(sc − 32))·kvalues[q] (8 × 32)
#include <cstring>

#include "endor/gguf.h"
#include "gguf_blocks.h"

namespace endor {
namespace {

using gguf_blocks::k_nibble;
using gguf_blocks::k_scale_min;
using gguf_blocks::nibble32;

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// IQ4_NL / IQ4_XS: the 16 non-uniform levels a 4-bit index selects.
constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};



void q5_block(const uint8_t* qh_bytes, const uint8_t* qs, uint8_t q[32]) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 32; ++j) q[j] = uint8_t(nibble32(qs, j) | (((qh >> j) & 1u) << 4));
}

// Elements c·128 + s·32 + b (c < 2, s < 4, b < 32) hold bits 2s..2s+1 of byte c·32 + b: the
// 2-bit layout of Q2_K's qs, Q3_K's qs and Q6_K's qh.
inline uint8_t crumb256(const uint8_t* bytes, int e) {
  const int c = e / 128, s = (e % 128) / 32, b = e % 32;
  return (bytes[c * 32 + b] >> (2 * s)) & 3;
}

void dequant_q2_k(const uint8_t* blk, float* out) {
  const uint8_t* scales = blk;
  const uint8_t* qs = blk + 16;
  const float d = f16_at(blk + 80), dmin = f16_at(blk + 82);
  for (int i = 0; i < 16; ++i) {
    const float dl = d * float(scales[i] & 0x0F), ml = dmin * float(scales[i] >> 4);
    for (int k = 0; k < 16; ++k) {
      const int e = i * 16 + k;
      out[e] = dl * float(crumb256(qs, e)) - ml;
    }
  }
}

void dequant_q3_k(const uint8_t* blk, float* out) {
  const uint8_t* hmask = blk;
  const uint8_t* qs = blk + 32;
  const uint8_t* sc = blk + 96;
  const float d = f16_at(blk + 108);
  for (int i = 0; i < 16; ++i) {
    // Scale i: low nibble from byte i % 8 (low for i < 8, high for i ≥ 8), two high bits from
    // byte 8 + i % 4 at bit 2·(i / 4); 6 bits, offset 32.
    const int lo = (i < 8 ? sc[i] : sc[i - 8] >> 4) & 0x0F;
    const int hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
    const float dl = d * float(int8_t(uint8_t(lo | (hi << 4))) - 32);
    for (int k = 0; k < 16; ++k) {
      const int e = i * 16 + k;
      const int hbit = (hmask[e % 32] >> (e / 32)) & 1;  // set: no offset; clear: −4
      out[e] = dl * float(int(crumb256(qs, e)) - ((hbit ^ 1) << 2));
    }
  }
}

// Q4_K (qh == nullptr) and Q5_K: 8 sub-blocks of 32; element c·64 + h·32 + b is nibble h of
// qs[c·32 + b]; Q5_K's fifth bit of element e is bit e / 32 of qh[e % 32].
void dequant_q45_k(const uint8_t* blk, const uint8_t* qh, const uint8_t* qs, float* out) {
  const float d = f16_at(blk), dmin = f16_at(blk + 2);
  uint8_t sc[8], mn[8];
  k_scale_min(blk + 4, sc, mn);
  for (int i = 0; i < 8; ++i) {
    const float dl = d * float(sc[i]), ml = dmin * float(mn[i]);
    for (int b = 0; b < 32; ++b) {
      int q = k_nibble(qs, i, b);
      if (qh) q |= ((qh[b] >> i) & 1) << 4;
      out[i * 32 + b] = dl * float(q) - ml;
    }
  }
}

void dequant_q6_k(const uint8_t* blk, float* out) {
  const uint8_t* ql = blk;
  const uint8_t* qh = blk + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(blk + 192);
  const float d = f16_at(blk + 208);
  for (int i = 0; i < 16; ++i) {
    const float dl = d * float(scales[i]);
    for (int k = 0; k < 16; ++k) {
      const int e = i * 16 + k;
      // Low 4 bits: element c·128 + h·64 + b is nibble h of ql[c·64 + b].
      const int c = e / 128, h = (e % 128) / 64, b = e % 64;
      const int lo = (ql[c * 64 + b] >> (4 * h)) & 0x0F;
      out[e] = dl * float(int8_t(uint8_t(lo | (crumb256(qh, e) << 4))) - 32);
    }
  }
}

void dequant_iq4_xs(const uint8_t* blk, float* out) {
  const float d = f16_at(blk);
  uint16_t scales_h;
  std::memcpy(&scales_h, blk + 2, 2);
  const uint8_t* scales_l = blk + 4;
  const uint8_t* qs = blk + 8;
  for (int i = 0; i < 8; ++i) {
    const int lo = (scales_l[i / 2] >> (4 * (i % 2))) & 0x0F;
    const int hi = (scales_h >> (2 * i)) & 3;
    const float dl = d * float(int8_t(uint8_t(lo | (hi << 4))) - 32);
    for (int j = 0; j < 32; ++j) out[i * 32 + j] = dl * float(kIq4Values[nibble32(qs + i * 16, j)]);
  }
}

}  // namespace

void ggml_dequantize(GgmlType type, const uint8_t* src, uint64_t n, float* out) {
  switch (type) {
    case GgmlType::F32:
      std::memcpy(out, src, n * 4);
      return;
    case GgmlType::F16:
      for (uint64_t i = 0; i < n; ++i) out[i] = f16_at(src + 2 * i);
      return;
    case GgmlType::BF16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        out[i] = bf16_to_f32(b);
      }
      return;
    case GgmlType::Q8_0:
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 34;
        const float d = f16_at(blk);
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * float(int8_t(blk[2 + j]));
      }
      return;
    case GgmlType::Q4_0:
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 18;
        const float d = f16_at(blk);
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * float(int(nibble32(blk + 2, j)) - 8);
      }
      return;
    case GgmlType::Q4_1:
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 20;
        const float d = f16_at(blk), m = f16_at(blk + 2);
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * float(nibble32(blk + 4, j)) + m;
      }
      return;
    case GgmlType::Q5_0:
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 22;
        const float d = f16_at(blk);
        uint8_t q[32];
        q5_block(blk + 2, blk + 6, q);
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * float(int(q[j]) - 16);
      }
      return;
    case GgmlType::Q5_1:
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 24;
        const float d = f16_at(blk), m = f16_at(blk + 2);
        uint8_t q[32];
        q5_block(blk + 4, blk + 8, q);
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * float(q[j]) + m;
      }
      return;
    case GgmlType::IQ4_NL:
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 18;
        const float d = f16_at(blk);
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * float(kIq4Values[nibble32(blk + 2, j)]);
      }
      return;
    case GgmlType::Q2_K:
      for (uint64_t b = 0; b < n / 256; ++b) dequant_q2_k(src + b * 84, out + b * 256);
      return;
    case GgmlType::Q3_K:
      for (uint64_t b = 0; b < n / 256; ++b) dequant_q3_k(src + b * 110, out + b * 256);
      return;
    case GgmlType::Q4_K:
      for (uint64_t b = 0; b < n / 256; ++b) {
        const uint8_t* blk = src + b * 144;
        dequant_q45_k(blk, nullptr, blk + 16, out + b * 256);
      }
      return;
    case GgmlType::Q5_K:
      for (uint64_t b = 0; b < n / 256; ++b) {
        const uint8_t* blk = src + b * 176;
        dequant_q45_k(blk, blk + 16, blk + 48, out + b * 256);
      }
      return;
    case GgmlType::Q6_K:
      for (uint64_t b = 0; b < n / 256; ++b) dequant_q6_k(src + b * 210, out + b * 256);
      return;
    case GgmlType::IQ4_XS:
      for (uint64_t b = 0; b < n / 256; ++b) dequant_iq4_xs(src + b * 136, out + b * 256);
      return;
    default:
      throw Error(std::string("cannot dequantize GGUF tensor type ") + ggml_type_name(type) + " (readable: " +
                  ggml_readable_types() + ")");
  }
}

}  // namespace endor
