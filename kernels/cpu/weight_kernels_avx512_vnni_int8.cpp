// AVX-512 VNNI one-token kernels of int8 and int8g weights, dense or bitmap, two rows at a time.
// The scheme: weight_kernels_avx512_vnni.h.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "weight_kernels_avx512_vnni.h"

namespace endor::cpu::detail {
namespace avx512_vnni {
namespace {

// One row's next word of int8 codes, for the one-token int8 and int8g kernels: bitmap, its present
// codes expanded (absent lanes 0); dense, 64 bytes (the row's last word masked to `tail`, its bytes
// past the row not read). `p` advances past them; the row's streams are prefetched into L2.
__attribute__((always_inline)) inline __m512i next_int8_word(bool bitmap, const uint8_t* bits, const uint8_t*& p,
                                                              uint64_t wi, uint64_t words, __mmask64 tail) {
  __m512i codes;
  if (bitmap) {
    codes = expandload_epi8(mask64_load(bits + 8 * wi), p);
    p += _mm_popcnt_u64(load_u64(bits + 8 * wi));
    if ((wi & 7) == 0) prefetch_l2(bits + 8 * wi + kPrefetchL2Bytes / 8);
  } else {
    codes = wi + 1 < words ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(tail, p);
    p += 64;
  }
  prefetch_l2(p + kPrefetchL2Bytes);
  return codes;
}

}  // namespace

// Decode (one token) on an int8 weight, dense or bitmap: R = 2 rows at once as in
// dot_rows_q8_i4_1 (x, d and the accumulators' start loaded once per word for the R rows,
// independent chains, one stream of values per row); rows reduced 16 at a time
// (reduce_row_blocks). The sums and their order per row are dot_rows_q8_i8_t's, so are the results.
void dot_rows_q8_i8_1(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y) {
  const TensorLayout& L = w.layout;
  const uint64_t words = qx.q_stride / 64, cols = L.cols;
  const bool bitmap = L.encoding == Encoding::Bitmap;
  float* dv = thread_buffer<2>(words * 16);
  int32_t* start = reinterpret_cast<int32_t*>(thread_buffer<3>(words * 16));
  word_scales(qx, words, dv);
  int8_starts(qx, words, start);
  const uint8_t* const values = w.values();
  const uint8_t* const bitmap_words = w.data + L.bitmap_offset;
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  // The last word of a dense row: its bytes past `cols` belong to the next row (or lie past the
  // values), so it is a masked load; a bitmap row's padding bits are zero (validate_bitmap).
  const __mmask64 tail = __mmask64(first_bits(cols - 64 * (words - 1)));
  auto rows_at = [&](auto rows_tag, uint64_t r, __m512* sums, int i0) {
    constexpr int R = decltype(rows_tag)::value;
    const uint8_t* p[R];
    const uint8_t* bits[R];
    __m512 acc[R][2];
    for (int i = 0; i < R; ++i) {
      p[i] = values + (bitmap ? bitmap_row_start(w, r + i) : (r + i) * cols);
      bits[i] = bitmap_words + 8 * (r + i) * L.words_per_row;
      acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    }
    // The chain as a constant index (words unrolled by two): with acc[i][wi & 1] GCC may keep the
    // accumulators on the stack, a store-to-load round trip per fma (it did once this file grew).
    auto word = [&](uint64_t wi, auto a_tag) {
      constexpr int A = decltype(a_tag)::value;
      const __m512i xv = _mm512_load_si512(qx.q + 64 * wi);
      const __m512i s0 = _mm512_load_si512(start + 16 * wi);
      const __m512 d = _mm512_load_ps(dv + 16 * wi);
      for (int i = 0; i < R; ++i) {
        const __m512i codes = next_int8_word(bitmap, bits[i], p[i], wi, words, tail);
        const __m512i sum = _mm512_dpbusd_epi32(s0, _mm512_xor_si512(codes, flip), xv);
        acc[i][A] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), d, acc[i][A]);
      }
    };
    uint64_t wi = 0;
    for (; wi + 2 <= words; wi += 2) {
      word(wi, std::integral_constant<int, 0>{});
      word(wi + 1, std::integral_constant<int, 1>{});
    }
    if (wi < words) word(wi, std::integral_constant<int, 0>{});
    for (int i = 0; i < R; ++i) sums[reduce16_slot(i0 + i)] = _mm512_add_ps(acc[i][0], acc[i][1]);
  };
  // Two rows at a time, not int4's four: an int8 row streams its values straight from memory (no
  // unpacked run in L1), and four such streams (plus their bitmaps) beside x and the word tables
  // held a 5632-column row to 0.054 ns a weight on one core against 0.037-0.039 with two (1 B int8
  // decode +13-17 %, SmolLM2 +2-8 %; bench/RESULTS.md).
  reduce_row_blocks<1>(r0, r1, w.row_scales(), y, 0, [&](uint64_t rb, int n, __m512 (*sums)[16]) {
    int i = 0;
    for (; i + 2 <= n; i += 2) rows_at(std::integral_constant<int, 2>{}, rb + uint64_t(i), sums[0], i);
    for (; i < n; ++i) rows_at(std::integral_constant<int, 1>{}, rb + uint64_t(i), sums[0], i);
  });
}

// Decode (one token) on an int8g weight in groups of 32 << kShift columns (32, 64, 128), dense or
// bitmap: int8's kernel above with each word's d times its two block scales in place of d, and no
// row scale: y = Σ_w cvt(Σ_lane q_w·q)·(d_b·S_g(b)), the int8-activation contract of
// weight_kernels.h. A word's scales are read as f16 where they lie (the group of block b is
// b >> kShift) and widened by one vcvtph2ps: no per-row table, which on short rows (576 columns)
// cost as much as the row. The two accumulators of a row take alternate words, unrolled so that
// they stay in registers.
template <int kShift>
void dot_rows_q8_i8g_1(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y) {
  const TensorLayout& L = w.layout;
  const uint64_t words = qx.q_stride / 64, cols = L.cols;
  const bool bitmap = L.encoding == Encoding::Bitmap;
  float* dv = thread_buffer<2>(words * 16);
  int32_t* start = reinterpret_cast<int32_t*>(thread_buffer<3>(words * 16));
  word_scales(qx, words, dv);
  int8_starts(qx, words, start);
  const uint64_t gpr = L.groups_per_row;
  const uint8_t* const values = w.values();
  const uint8_t* const bitmap_words = w.data + L.bitmap_offset;
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  const __mmask64 tail = __mmask64(first_bits(cols - 64 * (words - 1)));
  auto rows_at = [&](auto rows_tag, uint64_t r, __m512* sums, int i0) {
    constexpr int R = decltype(rows_tag)::value;
    const uint8_t* p[R];
    const uint8_t* bits[R];
    const uint16_t* gs[R];
    __m512 acc[R][2];
    for (int i = 0; i < R; ++i) {
      p[i] = values + (bitmap ? bitmap_row_start(w, r + i) : (r + i) * cols);
      bits[i] = bitmap_words + 8 * (r + i) * L.words_per_row;
      gs[i] = w.group_scales() + (r + i) * gpr;
      acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    }
    auto word = [&](uint64_t wi, auto a_tag) {
      constexpr int A = decltype(a_tag)::value;
      const __m512i xv = _mm512_load_si512(qx.q + 64 * wi);
      const __m512i s0 = _mm512_load_si512(start + 16 * wi);
      const __m512 d = _mm512_load_ps(dv + 16 * wi);
      // The word's two blocks' groups; the second block of a row's last word may lie past its
      // groups (a row of 32·odd columns in groups of 32): its own first block's then (codes and
      // x are 0 there; the next row's scale, or a byte past the tensor, must not be read).
      const uint64_t ga = (2 * wi) >> kShift, gb = std::min<uint64_t>((2 * wi + 1) >> kShift, gpr - 1);
      for (int i = 0; i < R; ++i) {
        const __m512i codes = next_int8_word(bitmap, bits[i], p[i], wi, words, tail);
        const __m512i sum = _mm512_dpbusd_epi32(s0, _mm512_xor_si512(codes, flip), xv);
        __m256i h;
        if constexpr (kShift == 0) h = _mm256_mask_set1_epi16(_mm256_set1_epi16(short(gs[i][ga])), __mmask16(0xFF00), short(gs[i][gb]));
        else h = _mm256_set1_epi16(short(gs[i][ga]));  // one group a word
        const __m512 f = _mm512_mul_ps(d, _mm512_cvtph_ps(h));
        acc[i][A] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), f, acc[i][A]);
      }
    };
    uint64_t wi = 0;
    for (; wi + 2 <= words; wi += 2) {
      word(wi, std::integral_constant<int, 0>{});
      word(wi + 1, std::integral_constant<int, 1>{});
    }
    if (wi < words) word(wi, std::integral_constant<int, 0>{});
    for (int i = 0; i < R; ++i) sums[reduce16_slot(i0 + i)] = _mm512_add_ps(acc[i][0], acc[i][1]);
  };
  reduce_row_blocks<1>(r0, r1, nullptr, y, 0, [&](uint64_t rb, int n, __m512 (*sums)[16]) {
    int i = 0;
    for (; i + 2 <= n; i += 2) rows_at(std::integral_constant<int, 2>{}, rb + uint64_t(i), sums[0], i);
    for (; i < n; ++i) rows_at(std::integral_constant<int, 1>{}, rb + uint64_t(i), sums[0], i);
  });
}

// ---- 2 to 8 tokens -------------------------------------------------------------------------------

namespace {

// One (word, token) of the multi-token kernel's per-call table: everything the token's vpdpbusd and
// fma read for the word, 192 bytes together, the NT tokens of a word one after another. The word
// loop then addresses all of it from one pointer at constant offsets: indexed by token and word
// separately (t·words + wi, t·q_stride + 64·wi) GCC rebuilt 24 addresses a word at NT = 8 and kept
// them on the stack (about as many scalar µops as vector ones in the word loop).
struct TokenWord {
  int32_t start[16];  // kMagic − 128·Σ of each lane's 4 q (int8_starts, add_magic)
  float d[16];        // the word's two block scales (word_scales)
  int8_t q[64];       // the word's quantized x
};

template <int NT>
void token_word_table(const QuantizedX& qx, uint64_t words, TokenWord* table) {
  for (uint64_t wi = 0; wi < words; ++wi)
    for (int t = 0; t < NT; ++t) {
      const QuantizedX xt = qx.token(size_t(t));
      TokenWord& e = table[wi * NT + t];
      const __m512i xv = _mm512_load_si512(xt.q + 64 * wi);
      const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(char(0x80)), xv);
      _mm512_store_si512(e.start, _mm512_sub_epi32(_mm512_set1_epi32(kMagic), s));
      _mm512_store_ps(e.d, _mm512_mask_blend_ps(__mmask16(0xFF00), _mm512_set1_ps(xt.d[2 * wi]), _mm512_set1_ps(xt.d[2 * wi + 1])));
      _mm512_store_si512(e.q, xv);
    }
}

}  // namespace

// NT = 2..8 tokens on an int8 (kShift 0) or int8g (groups of 32 << kShift columns) weight, dense or
// bitmap: per row and word, the codes expanded once and multiplied by each token's x; per token the
// one-token kernels' sums in their order (two chains alternating by word, their sum, the reduction,
// the row scale), so a token's results are theirs bit for bit (batch invariance, linear.cpp).
// Rows in blocks of 16 (reduce_row_blocks): each (row, token)'s chain sum is kept and a block's 16
// rows of a token are reduced together.
template <ValueType VT, int NT, int kShift>
void dot_rows_q8_i8_t(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y, size_t ys) {
  static_assert(sizeof(TokenWord) == 192, "TokenWord: three 64-byte vectors");
  const TensorLayout& L = w.layout;
  const uint64_t words = qx.q_stride / 64, cols = L.cols;
  const bool bitmap = L.encoding == Encoding::Bitmap;
  TokenWord* const table = reinterpret_cast<TokenWord*>(thread_buffer<2>(words * NT * sizeof(TokenWord) / 4));
  token_word_table<NT>(qx, words, table);
  const uint8_t* const values = w.values();
  const uint8_t* const bitmap_words = w.data + L.bitmap_offset;
  const uint64_t gpr = L.groups_per_row;
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  const __mmask64 tail = __mmask64(first_bits(cols - 64 * (words - 1)));
  auto row = [&](uint64_t r, int slot, __m512 (*sums)[16]) {
    const uint8_t* p = values + (bitmap ? bitmap_row_start(w, r) : r * cols);
    const uint8_t* const bits = bitmap_words + 8 * r * L.words_per_row;
    const uint16_t* const gs = VT == ValueType::I8G ? w.group_scales() + r * gpr : nullptr;
    __m512 acc[NT][2];
    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    const TokenWord* e = table;
    auto word = [&](uint64_t wi, auto a_tag) {
      constexpr int A = decltype(a_tag)::value;
      const __m512i u = _mm512_xor_si512(next_int8_word(bitmap, bits, p, wi, words, tail), flip);
      __m512 scale = _mm512_setzero_ps();
      if constexpr (VT == ValueType::I8G) {  // dot_rows_q8_i8g_1's scales of the word's two blocks
        const uint64_t ga = (2 * wi) >> kShift, gb = std::min<uint64_t>((2 * wi + 1) >> kShift, gpr - 1);
        __m256i h;
        if constexpr (kShift == 0) h = _mm256_mask_set1_epi16(_mm256_set1_epi16(short(gs[ga])), __mmask16(0xFF00), short(gs[gb]));
        else h = _mm256_set1_epi16(short(gs[ga]));
        scale = _mm512_cvtph_ps(h);
      }
      for (int t = 0; t < NT; ++t) {
        const __m512i s = _mm512_dpbusd_epi32(_mm512_load_si512(e[t].start), u, _mm512_load_si512(e[t].q));
        __m512 f = _mm512_load_ps(e[t].d);
        if constexpr (VT == ValueType::I8G) f = _mm512_mul_ps(f, scale);  // d·S, as the one-token kernel
        acc[t][A] = _mm512_fmadd_ps(magic_to_ps(s), f, acc[t][A]);
      }
      e += NT;
    };
    uint64_t wi = 0;
    for (; wi + 2 <= words; wi += 2) {
      word(wi, std::integral_constant<int, 0>{});
      word(wi + 1, std::integral_constant<int, 1>{});
    }
    if (wi < words) word(wi, std::integral_constant<int, 0>{});
    for (int t = 0; t < NT; ++t) sums[t][slot] = _mm512_add_ps(acc[t][0], acc[t][1]);
  };
  reduce_row_blocks<NT>(r0, r1, VT == ValueType::I8 ? w.row_scales() : nullptr, y, ys, [&](uint64_t rb, int n, __m512 (*sums)[16]) {
    for (int i = 0; i < n; ++i) row(rb + uint64_t(i), reduce16_slot(i), sums);
  });
}

// Every (value type, token count, group shift) dot_rows_q8 dispatches to.
#define ENDOR_I8_T(NT)                                                                                                   \
  template void dot_rows_q8_i8_t<ValueType::I8, NT, 0>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*, size_t); \
  template void dot_rows_q8_i8_t<ValueType::I8G, NT, 0>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*, size_t); \
  template void dot_rows_q8_i8_t<ValueType::I8G, NT, 1>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*, size_t); \
  template void dot_rows_q8_i8_t<ValueType::I8G, NT, 2>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*, size_t);
ENDOR_I8_T(1)  // (not dispatched to: the one-token kernels take one token)
ENDOR_I8_T(2)
ENDOR_I8_T(3)
ENDOR_I8_T(4)
ENDOR_I8_T(5)
ENDOR_I8_T(6)
ENDOR_I8_T(7)
ENDOR_I8_T(8)
#undef ENDOR_I8_T
template void dot_rows_q8_i8g_1<0>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i8g_1<1>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i8g_1<2>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);

}  // namespace avx512_vnni
}  // namespace endor::cpu::detail
