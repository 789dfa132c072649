// Private to the GGUF block code (gguf_dequant.cpp, gguf_grid.cpp): the bit layouts both the
// dequantizers and the exact int4 mappings read.
#pragma once

#include <cstdint>

namespace endor::gguf_blocks {

// The 4-bit nibble of element j (0..31) of a 32-element block's 16 bytes: element j < 16 is the
// low nibble of byte j, element j ≥ 16 the high nibble of byte j − 16.
inline uint8_t nibble32(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4; }

// Q4_K / Q5_K's low four bits of element i·32 + b (sub-block i < 8, b < 32): nibble i % 2 of
// byte (i / 2)·32 + b of the block's 128 quant bytes.
inline uint8_t k_nibble(const uint8_t* qs, int i, int b) { return (qs[(i / 2) * 32 + b] >> (4 * (i % 2))) & 0x0F; }

// Q4_K / Q5_K: eight 6-bit scales and minimums packed in 12 bytes (bytes 0..3 low six bits of
// scales 0..3, bytes 4..7 of minimums 0..3; bytes 8..11 the low nibbles of scales 4..7 and high
// nibbles of minimums 4..7, whose top two bits are bytes 0..3 / 4..7's top two bits).
inline void k_scale_min(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 0x3F;
    mn[j] = s[4 + j] & 0x3F;
    sc[4 + j] = uint8_t((s[8 + j] & 0x0F) | ((s[j] >> 2) & 0x30));
    mn[4 + j] = uint8_t((s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30));
  }
}

}  // namespace endor::gguf_blocks
