// Dequantization of GGUF tensor data to f32, as gguf-py's `dequantize` (numpy, f32 arithmetic).
// Compiled with -ffp-contract=off (packer/CMakeLists.txt): d·q + m must round twice, as numpy
// does, not once as a fused multiply-add would.
#include <cstring>

#include "endor/gguf.h"

namespace endor {
namespace {

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
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
    case GgmlType::Q8_0:  // block: f16 d, 32 × int8 q; x = d·q
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 34;
        const float d = f16_at(blk);
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * float(int8_t(blk[2 + j]));
      }
      return;
    case GgmlType::Q4_0:  // block: f16 d, 16 bytes of nibbles; x = d·(q − 8)
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 18;
        const float d = f16_at(blk);
        for (int j = 0; j < 16; ++j) {
          out[b * 32 + j] = d * float(int(blk[2 + j] & 0x0F) - 8);
          out[b * 32 + 16 + j] = d * float(int(blk[2 + j] >> 4) - 8);
        }
      }
      return;
    case GgmlType::Q4_1:  // block: f16 d, f16 m, 16 bytes of nibbles; x = d·q + m
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 20;
        const float d = f16_at(blk), m = f16_at(blk + 2);
        for (int j = 0; j < 16; ++j) {
          out[b * 32 + j] = d * float(blk[4 + j] & 0x0F) + m;
          out[b * 32 + 16 + j] = d * float(blk[4 + j] >> 4) + m;
        }
      }
      return;
    default:
      throw Error(std::string("cannot dequantize GGUF tensor type ") + ggml_type_name(type) +
                  " (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1)");
  }
}

}  // namespace endor
