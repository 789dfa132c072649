// The AVX2 kernels' tables and small helpers: the bitmap expand tables, broadcasts, the
// horizontal sum, partial-chunk lane masks, the prefetch distance and int4 nibble unpacking, used
// by the f32/f16-activation kernels (weight_kernels_avx2_f32.h) and the int8-activation kernels
// (weight_kernels_avx2_q8.h).
//
// Part of the one translation unit weight_kernels_avx2.cpp (included there, in this order:
// weight_kernels_avx2.h, weight_kernels_avx2_f32.h, weight_kernels_avx2_q8.h). The parts share
// the AVX2 flags, so they stay one unit: compiled apart, GCC inlined differently (its unit-growth
// cap binds on this code) and the int4 and int8-activation kernels changed. Everything has
// internal linkage; include from nowhere else.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "weight_kernels.h"

namespace endor::cpu::detail {
namespace {

// ---- tables and small helpers ---------------------------------------------------------------

// A chunk's shuffle control and its keep mask share one 64-byte entry: one index computation,
// one cache line per chunk.
struct alignas(64) PermuteEntry {
  int32_t perm[8];  // vpermps: lane j <- stored value rank_j of the chunk
  int32_t keep[8];  // all ones where column j is present, else 0
};
struct alignas(64) CodeEntry {
  uint8_t ctl[32];  // vpshufb: code byte rank_j -> byte 0 of lane j (zero elsewhere)
  int32_t keep[8];
};

struct ExpandTables {
  PermuteEntry permute[256];                // f32, f16
  CodeEntry codes[256];                     // int4 codes (one per byte after unpacking)
  alignas(32) uint8_t bytes_top[256][32];   // int8: value byte rank_j -> byte 3 of lane j
  alignas(32) uint8_t halves_top[256][32];  // bf16: 16-bit value rank_j -> bytes 2-3 of lane j
  alignas(16) uint8_t halves[256][16];      // decode_u16: 16-bit value rank_j -> 16-bit lane j
  uint64_t byte_ranks[256];                 // row_code_bytes: byte j <- byte rank_j, 0x80 (zero) if absent
  ExpandTables() {
    for (int m = 0; m < 256; ++m) {
      int rank = 0;
      for (int j = 0; j < 8; ++j) {
        const bool present = (m >> j) & 1;
        permute[m].perm[j] = present ? rank : 0;
        permute[m].keep[j] = codes[m].keep[j] = present ? -1 : 0;
        // vpshufb indexes within each 128-bit half; the source is broadcast to both halves, so
        // lane j (half j/4, bytes 4(j%4)..4(j%4)+3) may take any of the 16 source bytes.
        uint8_t* top = &bytes_top[m][4 * j];
        uint8_t* low = &codes[m].ctl[4 * j];
        uint8_t* hal = &halves_top[m][4 * j];
        for (int b = 0; b < 4; ++b) top[b] = low[b] = hal[b] = 0x80;  // 0x80: write a zero byte
        halves[m][2 * j] = present ? uint8_t(2 * rank) : 0x80;
        halves[m][2 * j + 1] = present ? uint8_t(2 * rank + 1) : 0x80;
        if (present) {
          top[3] = uint8_t(rank);
          low[0] = uint8_t(rank);
          hal[2] = uint8_t(2 * rank);
          hal[3] = uint8_t(2 * rank + 1);
        }
        byte_ranks[m] = (byte_ranks[m] & ~(uint64_t(0xFF) << (8 * j))) | (uint64_t(present ? rank : 0x80) << (8 * j));
        rank += present;
      }
    }
  }
};
const ExpandTables& expand_tables() {
  static const ExpandTables tables;
  return tables;
}

inline __m256i shuffle_control(const uint8_t (&table)[256][32], unsigned m) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(table[m]));
}
// 8 bytes at p in both 128-bit halves (a load-port broadcast, no shuffle uop).
inline __m256i broadcast8(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm256_set1_epi64x(v);
}
inline __m256i broadcast16(const uint8_t* p) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// int8 lanes carry q·2^24 (the byte in the top of the lane); 2^-24 joins the row scale.
constexpr float kInt8LaneScale = 1.0f / 16777216.0f;

// Values a chunk may load past its last stored value (8 lanes are always loaded).
constexpr uint64_t kOverreadValues = 8;

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // lanes j, j+4
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

inline float half(uint16_t h) { return _cvtsh_ss(h); }

// Lane mask for the first n (< 8) lanes: used for partial chunks at the end of a row.
inline __m256i first_lanes(uint64_t n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), lane);
}

// Software prefetch distance on the weight streams (see weight_kernels_avx512.h: the hardware
// prefetchers alone leave the interleaved bitmap/value streams well below dense bandwidth).
constexpr uint64_t kPrefetchBytes = 4096;
__attribute__((always_inline)) inline void prefetch(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }

// Writes the n int4 codes of stored values [k0, k0 + n) as bytes to out[0, n) (even value: low
// nibble). Reads only the bytes that hold those codes.
inline void unpack_nibbles(const uint8_t* values, uint64_t k0, uint64_t n, uint8_t* out) {
  const uint8_t* src = values + k0 / 2;
  uint64_t i = 0;
  if ((k0 & 1) && n > 0) out[i++] = uint8_t(*src++ >> 4);
  const __m128i low4 = _mm_set1_epi8(0x0F);
  for (; i + 32 <= n; i += 32, src += 16) {
    prefetch(src + kPrefetchBytes);
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i lo = _mm_and_si128(b, low4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low4);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_unpacklo_epi8(lo, hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 16), _mm_unpackhi_epi8(lo, hi));
  }
  for (; i + 2 <= n; i += 2, ++src) {
    out[i] = *src & 0x0F;
    out[i + 1] = uint8_t(*src >> 4);
  }
  if (i < n) out[i] = *src & 0x0F;
}

}  // namespace
}  // namespace endor::cpu::detail
