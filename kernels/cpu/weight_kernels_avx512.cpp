// AVX-512 (F, BW, VL, DQ, VBMI, VBMI2) fused decode-multiply kernels. These files alone
// (weight_kernels_avx512*.cpp) are compiled with those flags; isa.cpp calls into them only on CPUs
// that report all of them.
//
// Why a second x86 path: on AVX2 a bitmap chunk of 8 columns needs a table lookup and a shuffle
// per chunk (18.7 instructions per 8 int4 columns), which made the fused kernels compute-bound
// far below the memory-bandwidth floor. AVX-512 VBMI2 has the bitmap decode as one instruction:
// vpexpand{b,w}/vexpandps place the next popcount(mask) stored values at the set bits of a 64-,
// 32- or 16-bit mask and zero the rest, and its memory form reads only the popcount(mask) values
// (no over-read past the values section, no padded copies). One bitmap word (64 columns) then
// costs about 20 instructions for every value type.
//
// Arithmetic is the AVX2 kernels' (and the reference decoder's): each weight is decoded exactly
// (int4: fma(q, s, m), q·s being exact; int8: q, the row scale applied to the sum; int8g: q·S, exact),
// then multiplied into 16-lane accumulators. This file holds the f32- and f16-activation kernels
// (dot_rows, dot_rows_hx and int8g's decode_rows) and the kernel table; the int8-activation ones
// are the VNNI files' (weight_kernels_avx512_vnni*.cpp), the helpers both use
// weight_kernels_avx512.h. decode_rows, decode_rows_u16 and dense_dot, int4 tensors whose group
// size is not a multiple of 64 and int8g ones whose group size is not a multiple of 32, use the
// AVX2 kernels.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "weight_kernels_avx512.h"

namespace endor::cpu::detail {
namespace {

constexpr uint64_t value_bytes(ValueType vt) {
  return vt == ValueType::F32 ? 4 : (vt == ValueType::F16 || vt == ValueType::BF16) ? 2 : 1;
}

inline __m512 half_to_ps(__m256i h) { return _mm512_cvtph_ps(h); }
inline __m512 bfloat_to_ps(__m256i b) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)); }

// The per-row parameters of a byte-valued row's words: int4's decode tables, int8g's block scales
// (int8: none, an empty Groups).
template <ValueType VT>
using RowParams = std::conditional_t<VT == ValueType::I8G, BlockScales, Groups>;
template <ValueType VT>
constexpr bool has_row_params() { return VT == ValueType::I4 || VT == ValueType::I8G; }
template <ValueType VT>
uint64_t row_params_floats(const TensorView& w) {
  if constexpr (VT == ValueType::I8G) return block_scale_floats(w);
  else return 2 * Groups::padded_groups(w);
}

// int4 weights of one word from its 64 code bytes (0x10 | code where present, 0 where absent),
// by table lookup rather than convert-and-fma: vpermt2ps picks table[code] for a flagged byte and
// 0 for an absent one, from the low byte of each 32-bit lane. w[r] lane j is column 4j + r of the
// word (byte r of lane j), so x must be in the same order (StridedX). Per word: 3 shifts, 4
// lookups, against 4 conversions, 4 fmas and 7 shuffles for the plain column order.
inline void int4_word(__m512i q, const Groups& grp, __m512 (&w)[4]) {
  const __m512 zero = _mm512_setzero_ps();
  w[0] = _mm512_permutex2var_ps(zero, q, grp.table);
  w[1] = _mm512_permutex2var_ps(zero, _mm512_srli_epi32(q, 8), grp.table);
  w[2] = _mm512_permutex2var_ps(zero, _mm512_srli_epi32(q, 16), grp.table);
  w[3] = _mm512_permutex2var_ps(zero, _mm512_srli_epi32(q, 24), grp.table);
}

// int8 weights of one word from its 64 bytes (0 where absent), in int4_word's column order: the
// byte r of each 32-bit lane sign-extended in place by two shifts (one for r = 3), against an
// extract and a widening shuffle per 16 columns in the plain order. The shifts run on port 0,
// beside the expand on port 5.
inline void int8_word(__m512i q, __m512 (&w)[4]) {
  w[0] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(q, 24), 24));
  w[1] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(q, 16), 24));
  w[2] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(q, 8), 24));
  w[3] = _mm512_cvtepi32_ps(_mm512_srai_epi32(q, 24));
}

// The weights of one word of byte-valued codes (int8/int8g values or flagged int4 codes) in the
// strided column order. int8g: q·S, exact (8 × 11 significand bits), the reference's value.
template <ValueType VT>
inline void byte_word(__m512i q, const RowParams<VT>& grp, __m512 (&w)[4]) {
  if constexpr (VT == ValueType::I4) {
    int4_word(q, grp, w);
  } else {
    int8_word(q, w);
    if constexpr (VT == ValueType::I8G)
      for (int i = 0; i < 4; ++i) w[i] = _mm512_mul_ps(w[i], grp.vec);
  }
}

// x of the int8 and int4 kernels, per token, in int4_word's column order: for each 64-column word, the
// columns ≡ 0 (mod 4) first, then ≡ 1, ≡ 2, ≡ 3; zero past the row's end (whole words only).
// The storage is the calling thread's, reused by its next call (no allocation per task).
struct StridedX {
  float* data;
  size_t stride;  // floats per token: cols rounded up to 64
  StridedX(const float* x, size_t xs, size_t nt, uint64_t cols)
      : data(thread_buffer<0>(nt * ((cols + 63) / 64 * 64))), stride((cols + 63) / 64 * 64) {
    // Per word: a 4 × 16 transpose in two shuffle steps (columns 4j + r of a pair of 16-column
    // quarters, then the two halves joined).
    alignas(64) int32_t idx[4][16];
    for (int r = 0; r < 4; ++r)
      for (int j = 0; j < 16; ++j) idx[r][j] = j < 4 ? 4 * j + r : j < 8 ? 16 + 4 * (j - 4) + r : 0;
    for (size_t t = 0; t < nt; ++t)
      for (uint64_t c0 = 0; c0 < cols; c0 += 64) {
        const float* src = x + t * xs + c0;
        const uint64_t bits = first_bits(cols - c0);
        const __m512 a = _mm512_maskz_loadu_ps(lanes16(bits, 0), src), b = _mm512_maskz_loadu_ps(lanes16(bits, 1), src + 16);
        const __m512 c = _mm512_maskz_loadu_ps(lanes16(bits, 2), src + 32), d = _mm512_maskz_loadu_ps(lanes16(bits, 3), src + 48);
        float* dst = data + t * stride + c0;
        for (int r = 0; r < 4; ++r) {
          const __m512i ir = _mm512_load_si512(idx[r]);
          const __m512 ab = _mm512_permutex2var_ps(a, ir, b), cd = _mm512_permutex2var_ps(c, ir, d);
          _mm512_storeu_ps(dst + 16 * r, _mm512_shuffle_f32x4(ab, cd, 0x44));
        }
      }
  }
};

// The 64 weights of one bitmap word as four 16-lane vectors (columns 16i..16i+15 in w[i]).
// wp: the word in memory (8 bytes, already cut to the row), bits: its value; p: the first stored
// value of the word. Not int8 or int4 (byte_word).
template <ValueType VT>
inline void expand_word(const uint8_t* wp, uint64_t bits, const uint8_t* p, __m512 (&w)[4]) {
  if constexpr (VT == ValueType::F32) {
    const float* f = reinterpret_cast<const float*>(p);
    for (int i = 0; i < 4; ++i) {
      w[i] = expandload_ps(mask16_at(wp ? wp + 2 * i : nullptr, bits >> (16 * i)), f);
      f += _mm_popcnt_u32(uint32_t(bits >> (16 * i)) & 0xFFFF);
    }
  } else {
    static_assert(VT == ValueType::F16 || VT == ValueType::BF16, "int8 and int4 words go through byte_word");
    // Four 16-column expands into ymm, each converted as it is: two 32-column zmm expands and
    // their upper-half extracts cost 20 % more on Zen 4 (bench_kernels --rows, f16 @ 50 %: 50 ->
    // 42 ns a 576-wide row), where 512-bit shuffles are two 256-bit ones anyway.
    for (int i = 0; i < 4; ++i) {
      const __m256i h = expandload_epi16(mask16_at(wp ? wp + 2 * i : nullptr, bits >> (16 * i)), p);
      w[i] = VT == ValueType::F16 ? half_to_ps(h) : bfloat_to_ps(h);
      p += 2 * _mm_popcnt_u32(uint32_t(bits >> (16 * i)) & 0xFFFF);
    }
  }
}

// The weights of 64 dense columns starting at stored value p (n ≤ 64 of them are inside the row;
// lanes past n are 0 and their bytes are not read). Not int8 or int4 (byte_word).
template <ValueType VT>
inline void dense_word(const uint8_t* p, uint64_t n, __m512 (&w)[4]) {
  const uint64_t bits = first_bits(n);
  if (n == 64) {
    if constexpr (VT == ValueType::F32) {
      const float* f = reinterpret_cast<const float*>(p);
      for (int i = 0; i < 4; ++i) w[i] = _mm512_loadu_ps(f + 16 * i);
    } else if constexpr (VT == ValueType::F16 || VT == ValueType::BF16) {
      for (int i = 0; i < 4; ++i) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * i));
        w[i] = VT == ValueType::F16 ? half_to_ps(h) : bfloat_to_ps(h);
      }
    } else {
      static_assert(VT == ValueType::F32 || VT == ValueType::F16 || VT == ValueType::BF16, "byte-valued words go through byte_word");
    }
    return;
  }
  // The row's last, partial word: masked loads read nothing past the row.
  if constexpr (VT == ValueType::F32) {
    const float* f = reinterpret_cast<const float*>(p);
    for (int i = 0; i < 4; ++i) w[i] = _mm512_maskz_loadu_ps(lanes16(bits, i), f + 16 * i);
  } else if constexpr (VT == ValueType::F16 || VT == ValueType::BF16) {
    for (int i = 0; i < 4; ++i) {
      const __m256i h = _mm256_maskz_loadu_epi16(lanes16(bits, i), p + 32 * i);
      w[i] = VT == ValueType::F16 ? half_to_ps(h) : bfloat_to_ps(h);
    }
  }
}

// NT tokens × A 16-lane accumulators. A = 4 (one per 16-column quarter of a word) while the
// registers allow; past 4 tokens the tokens themselves give the independent FMA chains.
// XT: float (x as given) or uint16_t (x rounded to f16 by the caller, dot_rows_hx: half the bytes,
// so a wide row's x stays in L1 while the weights stream through it; widened by one vcvtph2ps).
template <int NT, typename XT = float>
struct Accumulators {
  static constexpr int kA = NT <= 4 ? 4 : 1;
  static constexpr bool kHalfX = std::is_same_v<XT, uint16_t>;
  __m512 a[NT][kA];
  const XT* x;
  size_t xs;
  Accumulators(const XT* x_, size_t xs_) : x(x_), xs(xs_) {
    for (int t = 0; t < NT; ++t)
      for (int i = 0; i < kA; ++i) a[t][i] = _mm512_setzero_ps();
  }
  static inline __m512 load_x(const XT* p) {
    if constexpr (kHalfX) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    else return _mm512_loadu_ps(p);
  }
  static inline __m512 load_x(__mmask16 k, const XT* p) {
    if constexpr (kHalfX) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
    else return _mm512_maskz_loadu_ps(k, p);
  }
  // n: columns of the word inside the row (x is not read past them).
  inline void add(const __m512 (&w)[4], uint64_t c0, uint64_t n) {
    if (n == 64) {
      for (int t = 0; t < NT; ++t) {
        const XT* xt = x + t * xs + c0;
        for (int i = 0; i < 4; ++i) a[t][i % kA] = _mm512_fmadd_ps(w[i], load_x(xt + 16 * i), a[t][i % kA]);
      }
    } else {
      const uint64_t bits = first_bits(n);
      for (int t = 0; t < NT; ++t) {
        const XT* xt = x + t * xs + c0;
        for (int i = 0; i < 4; ++i)
          a[t][i % kA] = _mm512_fmadd_ps(w[i], load_x(lanes16(bits, i), xt + 16 * i), a[t][i % kA]);
      }
    }
  }
  inline void store(float* y, size_t ys, uint64_t r, float scale) {
    for (int t = 0; t < NT; ++t) {
      __m512 v = a[t][0];
      if constexpr (kA == 4) v = _mm512_add_ps(_mm512_add_ps(a[t][0], a[t][1]), _mm512_add_ps(a[t][2], a[t][3]));
      y[t * ys + r] = _mm512_reduce_add_ps(v) * scale;
    }
  }
};

// Byte-valued weights (int8, int4, int8g) are decoded in the strided column order of StridedX.
constexpr bool strided(ValueType vt) { return vt == ValueType::I8 || vt == ValueType::I4 || vt == ValueType::I8G; }

// One bitmap word of the row: wp its 8 bytes in memory (cut to the row), bits their value, p the
// word's first stored value (int4: its first code byte in the unpacked scratch), advanced past them.
template <ValueType VT, typename Acc>
__attribute__((always_inline)) inline void dot_bitmap_word(const uint8_t* wp, uint64_t bits, const uint8_t*& p, uint64_t c0,
                                                           uint64_t n, Acc& acc, RowParams<VT>& grp) {
  __m512 wv[4];
  if constexpr (strided(VT)) {
    if constexpr (has_row_params<VT>()) grp.next_word();
    byte_word<VT>(expandload_epi8(mask64_at(wp, bits), p), grp, wv);
    acc.add(wv, c0, 64);  // strided x: whole, zero-padded words
  } else {
    expand_word<VT>(wp, bits, p, wv);
    acc.add(wv, c0, n);
  }
  p += uint64_t(_mm_popcnt_u64(bits)) * value_bytes(VT);
}

// always_inline: the accumulators must stay in registers across the word loop (an out-of-line
// walker would keep them in memory, a store-to-load chain per FMA).
template <ValueType VT, typename Acc>
__attribute__((always_inline)) inline void dot_bitmap_row(const TensorView& w, uint64_t r, Acc& acc, CodeScratch& scratch) {
  const TensorLayout& L = w.layout;
  const uint64_t wpr = L.words_per_row, bpr = L.blocks_per_row, last_n = L.cols - 64 * (wpr - 1);
  const uint8_t* words = w.data + L.bitmap_offset + 8 * r * wpr;
  const uint8_t* values = w.values();
  RowParams<VT> grp;
  if constexpr (has_row_params<VT>()) grp = RowParams<VT>(w, r, scratch.groups);
  for (uint64_t b = 0; b < bpr; ++b) {
    const uint64_t flat = r * bpr + b;
    const uint64_t k0 = load_u32(w.data + L.index_offset + 4 * flat);
    const uint8_t* p;
    if constexpr (VT == ValueType::I4) {
      const uint64_t k1 = flat + 1 < L.rows * bpr ? load_u32(w.data + L.index_offset + 4 * (flat + 1)) : L.nnz;
      unpack_nibbles(values, k0, k1 - k0, scratch.bytes);
      p = scratch.bytes + (k0 & 1);
    } else {
      p = values + k0 * value_bytes(VT);
    }
    // The block's words but the row's last one, which may be partial and is cut below. No branch
    // on an empty word: at the sparsities that matter it is never taken, and an empty word
    // decodes to zeros anyway.
    const uint64_t w_begin = b * (kIndexBlockCols / 64), w_end = std::min(wpr, w_begin + kIndexBlockCols / 64);
    for (uint64_t wi = w_begin; wi < std::min(w_end, wpr - 1); ++wi) {
      if ((wi & 7) == 0) prefetch(words + 8 * wi + kPrefetchBytes / 8);
      if constexpr (VT != ValueType::I4) prefetch(p + kPrefetchBytes);  // int4: in unpack_nibbles
      dot_bitmap_word<VT>(words + 8 * wi, load_u64(words + 8 * wi), p, 64 * wi, 64, acc, grp);
    }
    if (w_end == wpr) {
      const uint64_t bits = load_u64(words + 8 * (wpr - 1)) & first_bits(last_n);
      dot_bitmap_word<VT>(nullptr, bits, p, 64 * (wpr - 1), last_n, acc, grp);
    }
  }
}

template <ValueType VT, typename Acc>
__attribute__((always_inline)) inline void dot_dense_row(const TensorView& w, uint64_t r, Acc& acc, CodeScratch& scratch) {
  const uint64_t cols = w.layout.cols;
  const uint8_t* values = w.values();
  RowParams<VT> grp;
  if constexpr (has_row_params<VT>()) grp = RowParams<VT>(w, r, scratch.groups);
  // Segments of one index block's width: int4 codes are unpacked per segment.
  for (uint64_t s0 = 0; s0 < cols; s0 += kIndexBlockCols) {
    const uint64_t s1 = std::min(cols, s0 + kIndexBlockCols);
    const uint8_t* p;
    if constexpr (VT == ValueType::I4) {
      const uint64_t k0 = r * cols + s0;
      unpack_nibbles(values, k0, s1 - s0, scratch.bytes);
      p = scratch.bytes + (k0 & 1);
    } else {
      p = values + (r * cols + s0) * value_bytes(VT);
    }
    for (uint64_t c0 = s0; c0 < s1; c0 += 64) {
      const uint64_t n = std::min<uint64_t>(64, s1 - c0);
      // With f16 x the hardware prefetcher alone keeps a dense f16 row streaming at the read probe
      // (one core: 1.01-1.04 of it, against 0.85-0.88 with this hint); with f32 x the hint helps.
      if constexpr (VT != ValueType::I4 && !Acc::kHalfX) {
        for (uint64_t b = 0; b < 64 * value_bytes(VT); b += 64) prefetch_l2(p + kPrefetchL2Bytes + b);
      }
      __m512 wv[4];
      if constexpr (strided(VT)) {
        if constexpr (has_row_params<VT>()) grp.next_word();
        const __m512i q = n == 64 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(__mmask64(first_bits(n)), p);
        byte_word<VT>(q, grp, wv);
        acc.add(wv, c0, 64);  // strided x: whole, zero-padded words
      } else {
        dense_word<VT>(p, n, wv);
        acc.add(wv, c0, n);
      }
      p += 64 * value_bytes(VT);
    }
  }
}

template <ValueType VT, int NT, typename XT = float>
void dot_rows_t(const TensorView& w, uint64_t r0, uint64_t r1, const XT* x, size_t xs, float* y, size_t ys) {
  CodeScratch scratch;
  const bool bitmap = w.layout.encoding == Encoding::Bitmap;
  if constexpr (strided(VT)) {
    static_assert(std::is_same_v<XT, float>, "int8/int4/int8g weights take f32 x");
    // Once per call (a task of many rows): 3 shuffles per 16 x values against rows·cols·T/16 FMAs.
    const StridedX sx(x, xs, NT, w.layout.cols);
    x = sx.data;
    xs = sx.stride;
  }
  if constexpr (has_row_params<VT>()) scratch.groups = thread_buffer<1>(row_params_floats<VT>(w));
  for (uint64_t r = r0; r < r1; ++r) {
    Accumulators<NT, XT> acc(x, xs);
    if (bitmap) dot_bitmap_row<VT>(w, r, acc, scratch);
    else dot_dense_row<VT>(w, r, acc, scratch);
    acc.store(y, ys, r, VT == ValueType::I8 ? w.row_scales()[r] : 1.0f);
  }
}

template <ValueType VT, typename XT = float>
void dot_rows_vt(const TensorView& w, uint64_t r0, uint64_t r1, const XT* x, size_t xs, size_t nt, float* y,
                 size_t ys) {
  with_token_count(nt, [&](auto n) { dot_rows_t<VT, decltype(n)::value>(w, r0, r1, x, xs, y, ys); });
}

void dot_rows(const TensorView& w, uint64_t r0, uint64_t r1, const float* x, size_t xs, size_t nt, float* y,
              size_t ys) {
  switch (w.layout.value_type) {
    case ValueType::F16: return dot_rows_vt<ValueType::F16>(w, r0, r1, x, xs, nt, y, ys);
    case ValueType::BF16: return dot_rows_vt<ValueType::BF16>(w, r0, r1, x, xs, nt, y, ys);
    case ValueType::F32: return dot_rows_vt<ValueType::F32>(w, r0, r1, x, xs, nt, y, ys);
    case ValueType::I8: return dot_rows_vt<ValueType::I8>(w, r0, r1, x, xs, nt, y, ys);
    case ValueType::I4:
      if (w.layout.group_size % 64 == 0) return dot_rows_vt<ValueType::I4>(w, r0, r1, x, xs, nt, y, ys);
      return avx2_kernels().dot_rows(w, r0, r1, x, xs, nt, y, ys);
    case ValueType::I8G:
      if (w.layout.group_size % kActBlock == 0) return dot_rows_vt<ValueType::I8G>(w, r0, r1, x, xs, nt, y, ys);
      return avx2_kernels().dot_rows(w, r0, r1, x, xs, nt, y, ys);
  }
}

// decode_rows of int8g in groups of a multiple of 32 (the AVX2 kernel's 8-column chunks and
// per-chunk group checks cost it 2.5x int8's decode on bitmap rows): a word's 64 codes by one
// vpexpandb (bitmap) or load, widened 16 at a time and multiplied by their block's scale, q·S
// exactly; absent elements are +0 (the product zero-masked), as the reference decoder has them
// whatever the scale's sign, stored codes 0 q·S (−0 under a negative scale), also as it has them.
void decode_rows_i8g(const TensorView& w, uint64_t r0, uint64_t r1, float* out) {
  const TensorLayout& L = w.layout;
  const uint64_t cols = L.cols, words = (cols + 63) / 64, gpr = L.groups_per_row, per = L.group_size / kActBlock;
  const bool bitmap = L.encoding == Encoding::Bitmap;
  float* const sc = thread_buffer<1>((gpr + 15) / 16 * 16);
  const uint8_t* const values = w.values();
  for (uint64_t r = r0; r < r1; ++r) {
    widen_halves(w.group_scales() + r * gpr, gpr, sc);
    float* const dst = out + (r - r0) * cols;
    const uint8_t* p = bitmap ? values + bitmap_row_start(w, r) : values + r * cols;
    const uint8_t* const wp = w.data + L.bitmap_offset + 8 * r * L.words_per_row;
    const float* s = sc;  // the scale of the current block's group
    uint64_t left = per;  // blocks left in it
    for (uint64_t wi = 0; wi < words; ++wi) {
      const uint64_t n = std::min<uint64_t>(64, cols - 64 * wi), in_row = first_bits(n);
      uint64_t present = in_row;
      __m512i codes;
      if (bitmap) {
        present = load_u64(wp + 8 * wi) & in_row;
        codes = expandload_epi8(__mmask64(present), p);
        p += _mm_popcnt_u64(present);
      } else {
        codes = n == 64 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(__mmask64(in_row), p);
        p += 64;
      }
      float* const o = dst + 64 * wi;
      auto quarter = [&](__m128i q, int i, __m512 scale) {
        const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
        _mm512_mask_storeu_ps(o + 16 * i, lanes16(in_row, i), _mm512_maskz_mul_ps(lanes16(present, i), v, scale));
      };
      const __m512 s0 = _mm512_set1_ps(*s);
      if (--left == 0) ++s, left = per;
      quarter(_mm512_castsi512_si128(codes), 0, s0);
      quarter(_mm512_extracti32x4_epi32(codes, 1), 1, s0);
      if (n <= 32) break;  // the row's last word, one block
      const __m512 s1 = _mm512_set1_ps(*s);
      if (--left == 0) ++s, left = per;
      quarter(_mm512_extracti32x4_epi32(codes, 2), 2, s1);
      quarter(_mm512_extracti32x4_epi32(codes, 3), 3, s1);
    }
  }
}

void decode_rows(const TensorView& w, uint64_t r0, uint64_t r1, float* out) {
  if (w.layout.value_type == ValueType::I8G && w.layout.group_size % kActBlock == 0) return decode_rows_i8g(w, r0, r1, out);
  return avx2_kernels().decode_rows(w, r0, r1, out);
}

void dot_rows_hx(const TensorView& w, uint64_t r0, uint64_t r1, const uint16_t* x, size_t xs, size_t nt, float* y,
                 size_t ys) {
  switch (w.layout.value_type) {
    case ValueType::F16: return dot_rows_vt<ValueType::F16>(w, r0, r1, x, xs, nt, y, ys);
    case ValueType::BF16: return dot_rows_vt<ValueType::BF16>(w, r0, r1, x, xs, nt, y, ys);
    default: throw Error("dot_rows_hx: f16/bf16 weights only");
  }
}

// Whether the CPU has AVX-512 VNNI (vpdpbusd), which the int8-activation kernels need beyond the
// features isa.cpp checks. Asked here, in a file compiled without -mavx512vnni, so that nothing
// compiled for VNNI runs before the answer.
bool cpu_has_vnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni");
  }();
  return has;
}

void dot_rows_q8(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, size_t nt, float* y, size_t ys) {
  if (!cpu_has_vnni()) return avx2_kernels().dot_rows_q8(w, r0, r1, qx, nt, y, ys);
  return avx512_vnni::dot_rows_q8(w, r0, r1, qx, nt, y, ys);
}

}  // namespace

const WeightKernels& avx512_kernels() {
  const WeightKernels& avx2 = avx2_kernels();
  static const WeightKernels kernels{"avx512-vbmi2", decode_rows, avx2.decode_rows_u16, dot_rows, avx2.dense_dot, dot_rows_q8, dot_rows_hx};
  return kernels;
}

}  // namespace endor::cpu::detail
