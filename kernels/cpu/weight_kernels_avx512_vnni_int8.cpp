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
// independent chains, one stream of values per row). Same sums in the same order per row as
// dot_rows_q8_t, so the same results.
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
  const float* const row_scales = w.row_scales();
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  // The last word of a dense row: its bytes past `cols` belong to the next row (or lie past the
  // values), so it is a masked load; a bitmap row's padding bits are zero (validate_bitmap).
  const __mmask64 tail = __mmask64(first_bits(cols - 64 * (words - 1)));
  auto rows_at = [&](auto rows_tag, uint64_t r) {
    constexpr int R = decltype(rows_tag)::value;
    const uint8_t* p[R];
    const uint8_t* bits[R];
    __m512 acc[R][2];
    for (int i = 0; i < R; ++i) {
      p[i] = values + (bitmap ? bitmap_row_start(w, r + i) : (r + i) * cols);
      bits[i] = bitmap_words + 8 * (r + i) * L.words_per_row;
      acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    }
    for (uint64_t wi = 0; wi < words; ++wi) {
      const __m512i xv = _mm512_load_si512(qx.q + 64 * wi);
      const __m512i s0 = _mm512_load_si512(start + 16 * wi);
      const __m512 d = _mm512_load_ps(dv + 16 * wi);
      for (int i = 0; i < R; ++i) {
        const __m512i codes = next_int8_word(bitmap, bits[i], p[i], wi, words, tail);
        const __m512i sum = _mm512_dpbusd_epi32(s0, _mm512_xor_si512(codes, flip), xv);
        acc[i][wi & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), d, acc[i][wi & 1]);
      }
    }
    for (int i = 0; i < R; ++i) y[r + i] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1])) * row_scales[r + i];
  };
  // Two rows at a time, not int4's four: an int8 row streams its values straight from memory (no
  // unpacked run in L1), and four such streams (plus their bitmaps) beside x and the word tables
  // held a 5632-column row to 0.054 ns a weight on one core against 0.037-0.039 with two (1 B int8
  // decode +13-17 %, SmolLM2 +2-8 %; bench/RESULTS.md).
  uint64_t r = r0;
  for (; r + 2 <= r1; r += 2) rows_at(std::integral_constant<int, 2>{}, r);
  for (; r < r1; ++r) rows_at(std::integral_constant<int, 1>{}, r);
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
  auto rows_at = [&](auto rows_tag, uint64_t r) {
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
    for (int i = 0; i < R; ++i) y[r + i] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]));
  };
  uint64_t r = r0;
  for (; r + 2 <= r1; r += 2) rows_at(std::integral_constant<int, 2>{}, r);
  for (; r < r1; ++r) rows_at(std::integral_constant<int, 1>{}, r);
}

template void dot_rows_q8_i8g_1<0>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i8g_1<1>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i8g_1<2>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);

}  // namespace avx512_vnni
}  // namespace endor::cpu::detail
