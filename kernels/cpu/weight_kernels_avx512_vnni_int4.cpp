// AVX-512 VNNI one-token kernels of int4 weights (int4k's alike: its parameters are expanded by
// widen_params): dense rows from their packed bytes, bitmap and dense rows word by word in runs of
// rows, and 2:4 rows by gathering x. The scheme: weight_kernels_avx512_vnni.h.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "weight_kernels_avx512_vnni.h"

namespace endor::cpu::detail {
namespace avx512_vnni {
namespace {

// 2:4 int4 rows (TensorView::two_of_four, groups of 128 columns): 128 columns hold exactly 64
// codes, so instead of expanding codes over columns, the x of each stored code is gathered: code
// k of a 128-column block sits at column 4·(k/2) + (the first or second set bit of its nibble of
// the mask), and one vpermi2b picks those 64 x bytes from the block's two x vectors. One vpdpbusd
// then multiplies 64 codes, half the multiplies of the expand path and no expand. Lane j of it
// sums codes 4j..4j+3 = columns 8j..8j+7: activation block j/4 of the four (pair_scales). The
// min term needs the sum of the present x (a second vpdpbusd, of ones).
struct TwoOfFour {
  __m512i ctl, low, parity, table, base;
  TwoOfFour() {
    alignas(64) uint8_t c[64], par[64], t[64], b[64];
    for (int k = 0; k < 64; ++k) {
      c[k] = uint8_t(4 * ((k & 7) / 2));  // code lane k of a qword: nibble (k & 7) / 2 of its 16 mask bits
      par[k] = uint8_t((k & 1) ? 16 : 0);  // odd codes: the nibble's second set bit
      b[k] = uint8_t(4 * (k / 2));
      t[k] = 0;
    }
    for (int n = 0; n < 16; ++n) {
      int first = -1, second = -1;
      for (int bit = 0; bit < 4; ++bit)
        if (n >> bit & 1) (first < 0 ? first : second) = bit;
      t[n] = uint8_t(first < 0 ? 0 : first);
      t[16 + n] = uint8_t(second < 0 ? 0 : second);
    }
    ctl = _mm512_load_si512(c);
    low = _mm512_set1_epi8(0x0F);
    parity = _mm512_load_si512(par);
    table = _mm512_load_si512(t);
    base = _mm512_load_si512(b);
  }
  // The 64 gather indices (0..127) of a 128-column block from its 16 mask bytes (half: the first
  // 8 only, a 64-column block, whose indices 32..63 are then meaningless).
  template <bool kHalf = false>
  __m512i indices(const uint8_t* mask) const {
    const __m128i m = kHalf ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mask))
                            : _mm_loadu_si128(reinterpret_cast<const __m128i*>(mask));
    const __m512i chunks = _mm512_cvtepu16_epi64(m);
    const __m512i sel = _mm512_multishift_epi64_epi8(ctl, chunks);  // byte k: bits 4·((k&7)/2).. of its chunk
    const __m512i nib = _mm512_ternarylogic_epi32(sel, low, parity, 0xEA);  // (sel & 0x0F) | parity
    return _mm512_add_epi8(_mm512_permutexvar_epi8(nib, table), base);
  }
};
// Each 128-column block's four activation block scales, lane j block 4p + j/4 (the lanes of its
// vpdpbusd); a last block of 64 columns has two, its lanes 8-15 0.
inline void pair_scales(const QuantizedX& xt, uint64_t cols, float* dv) {
  const __m512i lane_block = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 2);
  const uint64_t blocks = (cols + kActBlock - 1) / kActBlock;
  for (uint64_t p = 0; 4 * p < blocks; ++p) {
    const __mmask8 k = __mmask8(first_bits(std::min<uint64_t>(4, blocks - 4 * p)));
    _mm512_store_ps(dv + p * 16, _mm512_permutexvar_ps(lane_block, _mm512_castps128_ps512(_mm_maskz_loadu_ps(k, xt.d + 4 * p))));
  }
}

}  // namespace

// Decode (one token) on a dense int4 weight with groups of 128 columns and an even width, straight
// from its packed bytes (no unpacked run): the nibbles of 128 columns are 64 bytes, low nibbles the
// even columns and high ones the odd, so one load, an and, a shift and an and give two vectors of
// codes, multiplied by x reordered once per call into the same even/odd halves (vpermt2b). vpdpbusd
// lane j of either half then sums columns 8j..8j+7 of the 128: activation block j/4 of its four,
// the same for both halves, so the two products share one accumulator, one conversion and one
// scale (pair_scales' lanes), and a group is one such unit: per 128 columns 2 vpdpbusd, 1 cvt, 1
// mul and 1 fma, where the word-by-word loop needs an unpack pass (a store and a load per 64
// codes) and 2 of each. R rows at once as in dot_rows_q8_i4_1 (x, d loaded once for the R rows).
// Sums in another order than dot_rows_q8_t (each block's integer sums are the same; the float
// steps are one per 128 columns), inside the same bound.
// Groups of 64 or 32 (GPU = 2 or 4 groups a unit: int4k's groups of 32): lane j's columns belong
// to group j / (16 / GPU) of the unit, so the unit's GPU scales are spread over the lanes by one
// permute (masked at the row's end), and the rest is the same.
template <int GPU>
void dot_rows_q8_i4_dense_1(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y) {
  const TensorLayout& L = w.layout;
  const uint64_t cols = L.cols, gpr = L.groups_per_row, units = (cols + 127) / 128;  // gpr == GPU·units at most
  // x in even/odd halves per 128 columns (zero past cols: q is zero there, and past q_stride).
  int8_t* xs = reinterpret_cast<int8_t*>(thread_buffer<6>(units * 128 / 4 + 16));
  {
    alignas(64) uint8_t even[64], odd[64];
    for (int j = 0; j < 64; ++j) {
      even[j] = uint8_t(2 * j);
      odd[j] = uint8_t(2 * j + 1);
    }
    const __m512i ie = _mm512_load_si512(even), io = _mm512_load_si512(odd);
    const uint64_t words = qx.q_stride / 64;
    for (uint64_t u = 0; u < units; ++u) {
      const __m512i x0 = _mm512_load_si512(qx.q + 128 * u);
      const __m512i x1 = 2 * u + 1 < words ? _mm512_load_si512(qx.q + 128 * u + 64) : _mm512_setzero_si512();
      _mm512_store_si512(xs + 128 * u, _mm512_permutex2var_epi8(x0, ie, x1));
      _mm512_store_si512(xs + 128 * u + 64, _mm512_permutex2var_epi8(x0, io, x1));
    }
  }
  float* pv = thread_buffer<5>(units * 16);
  pair_scales(qx, cols, pv);
  float* group_p = thread_buffer<3>(gpr + 16);
  dense_group_sums(qx, L, group_p);
  // Chunks of rows: their groups' scales and mins widened to f32 in one pass over the contiguous
  // f16 (per row, the masked loop and its setup cost SmolLM2's 5-group rows a fifth of the kernel).
  // About 1024 groups a chunk (4 KiB of each table beside the streams in L1), whole steps of 4 rows.
  const uint64_t kChunkRows = std::max<uint64_t>(4, 1024 / gpr / 4 * 4);
  const uint64_t chunk_groups = kChunkRows * gpr + 16;
  float* const sm = thread_buffer<1>(2 * chunk_groups);
  float* const mins = sm + chunk_groups;
  uint64_t c0 = r0;  // the chunk's first row
  const uint64_t row_bytes = cols / 2, tail_bytes = row_bytes - 64 * (units - 1);  // the last unit's bytes (1..64)
  const __mmask64 tail = __mmask64(first_bits(tail_bytes));
  const __m512i lo4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
  const __m512i lane_group = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               GPU == 4 ? 2 : 3);
  const __mmask8 last_groups = __mmask8(first_bits(gpr - uint64_t(GPU) * (units - 1)));  // the last unit's groups
  const uint8_t* const values = w.values();
  auto rows_at = [&](auto rows_tag, uint64_t r) {
    constexpr int R = decltype(rows_tag)::value;
    const uint8_t* p[R];
    const float *s[R], *m[R];
    __m512 acc[R];
    for (int i = 0; i < R; ++i) {
      p[i] = values + (r + i) * row_bytes;
      s[i] = sm + (r + i - c0) * gpr;
      m[i] = mins + (r + i - c0) * gpr;
      acc[i] = _mm512_setzero_ps();
    }
    auto unit = [&](uint64_t u, auto tail_tag) {
      const __m512i xe = _mm512_load_si512(xs + 128 * u), xo = _mm512_load_si512(xs + 128 * u + 64);
      const __m512 d = _mm512_load_ps(pv + 16 * u);
      for (int i = 0; i < R; ++i) {
        // The R rows are one stretch of memory read as R streams, which the hardware prefetcher
        // follows badly: fetch the same line two steps of R rows ahead into L2 (8-22 KiB at the 1 B
        // shape's widths; one step ahead gave 15.5 ms a token on its dense int4 file, two 14.8,
        // none 26.8 against 18.4 for the unpacked-run kernel).
        prefetch_l2(p[i] + 64 * u + 2 * R * row_bytes);
        const __m512i v = decltype(tail_tag)::value ? _mm512_maskz_loadu_epi8(tail, p[i] + 64 * u) : _mm512_loadu_si512(p[i] + 64 * u);
        const __m512i lo = _mm512_and_si512(v, lo4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);
        const __m512i sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo, xe), hi, xo);
        __m512 scale;
        if constexpr (GPU == 1) {
          scale = _mm512_set1_ps(s[i][u]);
        } else {
          const __mmask8 k = decltype(tail_tag)::value ? last_groups : __mmask8((1u << GPU) - 1);
          scale = _mm512_permutexvar_ps(lane_group, _mm512_castps128_ps512(_mm_maskz_loadu_ps(k, s[i] + GPU * u)));
        }
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sum), d), scale, acc[i]);
      }
    };
    for (uint64_t u = 0; u + 1 < units; ++u) unit(u, std::false_type{});
    unit(units - 1, std::true_type{});
    for (int i = 0; i < R; ++i) {
      y[r + i] = _mm512_reduce_add_ps(plus_min_term(acc[i], m[i], group_p, gpr));
    }
  };
  for (; c0 < r1; c0 += kChunkRows) {
    const uint64_t c1 = std::min(r1, c0 + kChunkRows), n = (c1 - c0) * gpr;
    widen_params(w, c0 * gpr, n, sm, mins);
    uint64_t r = c0;
    for (; r + 4 <= c1; r += 4) rows_at(std::integral_constant<int, 4>{}, r);
    for (; r < c1; ++r) rows_at(std::integral_constant<int, 1>{}, r);
  }
}

// Decode (one token) on an int4 weight (bitmap or dense) whose groups are WPG whole words: the hot
// loop of int4 decode on a small model, whose weights stay in cache so the kernel is bound by its
// instruction stream rather than by memory. Unlike the general kernel it
//  - multiplies R rows at once (the x and d loads, the loop's scalar work and the final horizontal
//    reductions shared; independent accumulator chains hide the expand-dpbusd-cvt-fma latency),
//  - walks one value stream per row: rows are stored back to back, so after the codes of a run of
//    rows are unpacked a row's codes start where the index says (dense: at row·cols) and are then
//    consumed word by word (popcnt), with no per-index-block lookups,
//  - widens the scales and mins of the whole run of rows at once,
//  - loads each word's mask straight into a mask register; padding bits past `cols` are zero
//    (validate_bitmap, SPEC §6 check 16, which every weight the runtime hands a kernel has passed),
//    so the last word needs no cut; a dense row's last word reads the next codes, which meet the
//    quantized x's zero padding (q = 0 past `cols`), so it needs none either;
//  - a bitmap row whose groups have zero codes (zero_codes) expands its codes over z, not 0.
//  - kCopy (a bitmap weight with TensorView::dense_codes, whose groups all have zero codes): its
//    rows are multiplied as dense ones from the copy, a pair of words from one 64-byte load (an
//    and, a shift and an and), no unpack pass;
// Same arithmetic as dot_rows_q8_t (the same sums in the same order per row), so the same results;
// kCopy sums a row as the bitmap path does with its absent codes expanded as z, bit for bit.
template <int WPG, bool kBitmap, bool kCopy>
void dot_rows_q8_i4_1(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y) {
  static_assert(!(kBitmap && kCopy), "the copy's rows are dense");
  const TensorLayout& L = w.layout;
  const uint64_t wpr = (L.cols + 63) / 64, gpr = L.groups_per_row, words = qx.q_stride / 64;  // wpr: words_per_row is 0 when dense
  float* dv = thread_buffer<2>(words * 16);
  word_scales(qx, words, dv);
  // Runs of rows: at most kUnpackedCodes codes (whole rows; one row may exceed it) and kRunRows rows
  // (the widened scales and mins, the zero codes). The unpacked codes share L1 (32 KiB on Zen 4)
  // with x, its word scales (a byte each per column) and the streams: 16 KiB runs made a
  // 5632-column down projection 25 % slower per weight than 8 KiB ones, and the 1 B shape's int4
  // decode 9-17 % slower (bench/RESULTS.md); 4-8 KiB measured the same.
  constexpr uint64_t kUnpackedCodes = 8192, kRunRows = 256;
  uint8_t* unpacked = kCopy ? nullptr : reinterpret_cast<uint8_t*>(thread_buffer<4>((std::max(kUnpackedCodes, L.cols) + 2 * 64 + 3) / 4 + 16));
  // kCopy: a row's bytes; an odd last word is 32 bytes of nibbles in column order (unpack_nibbles').
  const uint64_t copy_row_bytes = dense_codes_row_bytes(L.cols), odd_last = wpr % 2 ? wpr - 1 : ~uint64_t(0);
  const __m512i fields = _mm512_set1_epi64(0x1C1814100C080400LL), lo4 = _mm512_set1_epi8(0x0F);
  const uint64_t run_groups = kRunRows * gpr + 16;
  float* sm = thread_buffer<1>(2 * run_groups + run_groups / 4 + 16);
  float* const mins = sm + run_groups;
  uint8_t* const zero_code = reinterpret_cast<uint8_t*>(sm + 2 * run_groups);
  bool run_z = false;  // every group of the run's rows has a zero code (zero_codes)
  auto row_start = [&](uint64_t row) -> uint64_t {
    if (!kBitmap) return row * L.cols;
    return row < L.rows ? load_u32(w.data + L.index_offset + 4 * (row * L.blocks_per_row)) : L.nnz;
  };
  const uint8_t* const bitmap = w.data + L.bitmap_offset;
  const int8_t* const xq = qx.q;
  float* group_p = reinterpret_cast<float*>(thread_buffer<3>(gpr + 16));
  dense_group_sums(qx, L, group_p);
  const __m512i ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
  // The 2:4 path: groups of 128 columns (WPG 2) over 128-column blocks, the last one possibly 64.
  const bool two_of_four = kBitmap && WPG == 2 && w.two_of_four && L.cols % 64 == 0;
  static const TwoOfFour nm;
  float* pv = nullptr;
  if (two_of_four) {
    pv = thread_buffer<5>((words + 1) / 2 * 16);
    pair_scales(qx, L.cols, pv);
  }
  uint64_t ra = r0, k_a = row_start(r0);
  while (ra < r1) {
    uint64_t rb = ra + 1, k_b = row_start(rb);
    while (rb < r1 && rb - ra < kRunRows) {
      const uint64_t k_next = row_start(rb + 1);
      if (!kCopy && k_next - k_a > kUnpackedCodes) break;  // kCopy: nothing unpacked, runs of kRunRows
      ++rb;
      k_b = k_next;
    }
    if (rb < r1 && rb - ra > 4 && (rb - ra) % 4 != 0) {  // whole steps of 4 rows (the rest would take 2 + 1)
      rb = ra + (rb - ra) / 4 * 4;
      k_b = row_start(rb);
    }
    if constexpr (!kCopy) unpack_nibbles<false>(w.values(), k_a, k_b - k_a, unpacked);
    const uint8_t* const base = kCopy ? w.dense_codes : unpacked - (k_a & ~uint64_t(1));  // code k at base[k] (kCopy: rows)
    {
      const uint64_t n = (rb - ra) * gpr;
      widen_params(w, ra * gpr, n, sm, mins);
      run_z = kBitmap && !two_of_four && zero_codes(sm, mins, n, zero_code);  // the 2:4 path reads no z
    }
    // Rows r..r+n-1 of the run: code streams, bitmap rows, widened scales and mins, zero codes.
    auto row_pointers = [&](uint64_t r, int n, const uint8_t** p, const uint8_t** bits, const float** s,
                            const float** m, const uint8_t** z) {
      for (int i = 0; i < n; ++i) {
        p[i] = kCopy ? base + (r + i) * copy_row_bytes : base + row_start(r + i);
        bits[i] = bitmap + 8 * (r + i) * wpr;
        s[i] = sm + (r + i - ra) * gpr;
        m[i] = mins + (r + i - ra) * gpr;
        z[i] = zero_code + (r + i - ra) * gpr;
      }
    };
    // kZ: bitmap rows whose absent codes are z (zero_codes): one vpdpbusd a word, dense min term.
    auto rows_at = [&](auto rows_tag, auto z_tag, uint64_t r) {
      constexpr int R = decltype(rows_tag)::value;
      constexpr bool kZ = decltype(z_tag)::value, kPresence = kBitmap && !kZ;
      const uint8_t *p[R], *bits[R], *z[R];
      const float *s[R], *m[R];
      __m512 acc_q[R], acc_p[R];
      __m512i pair[R];  // kCopy: the current pair of words' 64 bytes
      row_pointers(r, R, p, bits, s, m, z);
      for (int i = 0; i < R; ++i) acc_q[i] = acc_p[i] = _mm512_setzero_ps();
      // One word of every row into its group sums.
      auto word = [&](uint64_t wi, const __m512i (&zv)[R], __m512 (&gq)[R], __m512 (&gp)[R]) {
        const __m512i xv = _mm512_load_si512(xq + 64 * wi);
        const __m512 d = _mm512_load_ps(dv + 16 * wi);
        for (int i = 0; i < R; ++i) {
          if constexpr (kBitmap) {
            // Mask and popcount written from one 64-bit value (GCC still folds both loads into the two
            // instructions, but schedules the loop differently): 0.034-0.035 against 0.038-0.041 ns a
            // weight with mask64_load (5632x2048, one core, bench_kernels --stream, rounds alternating).
            const uint64_t bw = load_u64(bits[i] + 8 * wi);
            const __mmask64 k = _cvtu64_mask64(bw);
            __m512i codes;
            if constexpr (kZ) codes = _mm512_mask_expandloadu_epi8(zv[i], k, p[i]);
            else codes = expandload_epi8(k, p[i]);
            p[i] += _mm_popcnt_u64(bw);
            gq[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, codes, xv)), d, gq[i]);
            if constexpr (kPresence) {
              const __m512i pres = _mm512_maskz_mov_epi8(k, ones);
              gp[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, pres, xv)), d, gp[i]);
            }
          } else if constexpr (kCopy) {
            __m512i codes;
            if (wi & 1) {  // the pair's second word: its high nibbles
              codes = _mm512_and_si512(_mm512_srli_epi16(pair[i], 4), lo4);
              p[i] += 64;
            } else if (wi == odd_last) {
              const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[i]));
              codes = _mm512_and_si512(_mm512_multishift_epi64_epi8(fields, _mm512_cvtepu32_epi64(b)), lo4);
            } else {
              // The R rows are R streams: fetch two steps of R rows ahead into L2.
              prefetch_l2(p[i] + 2 * R * copy_row_bytes);
              pair[i] = _mm512_loadu_si512(p[i]);
              codes = _mm512_and_si512(pair[i], lo4);
            }
            gq[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, codes, xv)), d, gq[i]);
          } else {
            const __m512i codes = _mm512_loadu_si512(p[i]);
            p[i] += 64;
            gq[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, codes, xv)), d, gq[i]);
          }
        }
      };
      // Group g of every row, its n words from w0 (WPG, a compile-time count, but in a short last group).
      auto group = [&](uint64_t g, uint64_t w0, auto n) {
        const uint64_t w1 = w0 + n;
        __m512 gq[R], gp[R];
        __m512i zv[R];
        for (int i = 0; i < R; ++i) {
          gq[i] = gp[i] = _mm512_setzero_ps();
          zv[i] = kZ ? _mm512_set1_epi8(char(z[i][g])) : zero;
        }
        for (uint64_t j = 0; j < uint64_t(n); ++j) word(w0 + j, zv, gq, gp);
        for (int i = 0; i < R; ++i) {
          if (kBitmap && (WPG == 1 || (g & 1) == 0)) prefetch_l2(bits[i] + 8 * w1 + kPrefetchL2Bytes / 8);
          acc_q[i] = _mm512_fmadd_ps(gq[i], _mm512_set1_ps(s[i][g]), acc_q[i]);
          if (kPresence) acc_p[i] = _mm512_fmadd_ps(gp[i], _mm512_set1_ps(m[i][g]), acc_p[i]);
        }
      };
      // Whole groups with a constant trip count (no end-of-row test per word), then the short one.
      const uint64_t whole = wpr / WPG;
      for (uint64_t g = 0; g < whole; ++g) group(g, g * WPG, std::integral_constant<uint64_t, WPG>{});
      if (whole < gpr) group(whole, whole * WPG, wpr - whole * WPG);
      for (int i = 0; i < R; ++i) {
        __m512 v = _mm512_add_ps(acc_q[i], acc_p[i]);
        if (!kPresence) v = plus_min_term(v, m[i], group_p, gpr);
        y[r + i] = _mm512_reduce_add_ps(v);
      }
    };
    // 2:4 rows (WPG 2: a group is one 128-column block): codes gathered against x (TwoOfFour).
    auto rows_nm = [&](auto rows_tag, uint64_t r) {
      constexpr int R = decltype(rows_tag)::value;
      const uint8_t *p[R], *bits[R], *z[R];
      const float *s[R], *m[R];
      __m512 acc_q[R], acc_p[R];
      row_pointers(r, R, p, bits, s, m, z);
      for (int i = 0; i < R; ++i) acc_q[i] = acc_p[i] = _mm512_setzero_ps();
      // A block's codes against its gathered x (lanes of a 64-column tail block past 32 zero).
      auto block = [&](int i, uint64_t g, __m512i codes, __m512i gx, __m512 d) {
        const __m512 q = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, codes, gx)), d);
        const __m512 pr = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, ones, gx)), d);
        acc_q[i] = _mm512_fmadd_ps(q, _mm512_set1_ps(s[i][g]), acc_q[i]);
        acc_p[i] = _mm512_fmadd_ps(pr, _mm512_set1_ps(m[i][g]), acc_p[i]);
      };
      const uint64_t full = L.cols / 128;
      for (uint64_t g = 0; g < full; ++g) {
        const __m512i x0 = _mm512_load_si512(xq + 128 * g), x1 = _mm512_load_si512(xq + 128 * g + 64);
        const __m512 d = _mm512_load_ps(pv + 16 * g);
        for (int i = 0; i < R; ++i) {
          if ((g & 3) == 0) prefetch_l2(bits[i] + 16 * g + kPrefetchL2Bytes / 8);
          const __m512i gx = _mm512_permutex2var_epi8(x0, nm.indices(bits[i] + 16 * g), x1);
          block(i, g, _mm512_loadu_si512(p[i]), gx, d);
          p[i] += 64;
        }
      }
      if (full < gpr) {  // a last block of 64 columns: 32 codes, x from its one word
        const __mmask64 half = __mmask64(first_bits(32));
        const __m512i x0 = _mm512_load_si512(xq + 128 * full);
        const __m512 d = _mm512_load_ps(pv + 16 * full);
        for (int i = 0; i < R; ++i) {
          const __m512i gx = _mm512_maskz_permutexvar_epi8(half, nm.indices<true>(bits[i] + 16 * full), x0);
          block(i, full, _mm512_maskz_loadu_epi8(half, p[i]), gx, d);
        }
      }
      for (int i = 0; i < R; ++i) y[r + i] = _mm512_reduce_add_ps(_mm512_add_ps(acc_q[i], acc_p[i]));
    };
    auto all_rows = [&](auto z_tag) {
      uint64_t r = ra;
      for (; r + 4 <= rb; r += 4) rows_at(std::integral_constant<int, 4>{}, z_tag, r);
      for (; r + 2 <= rb; r += 2) rows_at(std::integral_constant<int, 2>{}, z_tag, r);
      if (r < rb) rows_at(std::integral_constant<int, 1>{}, z_tag, r);
    };
    if constexpr (!kBitmap) {
      all_rows(std::false_type{});
    } else if (two_of_four) {
      uint64_t r = ra;
      for (; r + 4 <= rb; r += 4) rows_nm(std::integral_constant<int, 4>{}, r);
      for (; r < rb; ++r) rows_nm(std::integral_constant<int, 1>{}, r);
    } else if (run_z) {  // every run of a file from Endor's packer
      all_rows(std::true_type{});
    } else {  // some group without a zero code: each row on its own path
      for (uint64_t r = ra; r < rb; ++r) {
        if (zero_codes(sm + (r - ra) * gpr, mins + (r - ra) * gpr, gpr, zero_code + (r - ra) * gpr))
          rows_at(std::integral_constant<int, 1>{}, std::true_type{}, r);
        else
          rows_at(std::integral_constant<int, 1>{}, std::false_type{}, r);
      }
    }
    ra = rb;
    k_a = k_b;
  }
}

// Row r of the dense copy of bitmap int4 weight b's codes (kernels/cpu/int4_dense.h's layout and its
// dense_row's bytes; z: the row's groups' zero codes; scratch: cols + 129 bytes): the row's codes
// unpacked, then a word at a time one expand over z (0 past the row), two words a 64-byte pair.
void dense_codes_row(const TensorView& b, uint64_t r, const uint8_t* z, uint8_t* scratch, uint8_t* out) {
  const TensorLayout& L = b.layout;
  const uint64_t k0 = bitmap_row_start(b, r), k1 = r + 1 < L.rows ? bitmap_row_start(b, r + 1) : L.nnz;
  unpack_nibbles<false>(b.values(), k0, k1 - k0, scratch);
  const uint8_t* p = scratch + (k0 & 1);
  const uint64_t* bits = b.bitmap() + r * L.words_per_row;
  const uint64_t words = (L.cols + 63) / 64;
  auto word = [&](uint64_t wi) {
    const uint64_t bw = bits[wi];
    const __m512i codes = _mm512_mask_expandloadu_epi8(_mm512_set1_epi8(char(z[wi * 64 / L.group_size])), __mmask64(bw), p);
    p += _mm_popcnt_u64(bw);
    return _mm512_maskz_mov_epi8(__mmask64(first_bits(L.cols - 64 * wi)), codes);
  };
  for (uint64_t wi = 0; wi < words; wi += 2, out += 64) {
    const __m512i lo = word(wi);
    if (wi + 1 == words) {  // the odd last word: c_even + 16·c_odd a byte
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(_mm512_maddubs_epi16(lo, _mm512_set1_epi16(0x1001))));
      return;
    }
    const __m512i hi = word(wi + 1);
    _mm512_storeu_si512(out, _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4)));  // codes < 16: no carry across bytes
  }
}

template void dot_rows_q8_i4_dense_1<1>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i4_dense_1<2>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i4_dense_1<4>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i4_1<1, true>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i4_1<1, false>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i4_1<2, true>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i4_1<2, false>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i4_1<4, true>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i4_1<4, false>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i4_1<1, false, true>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);  // kCopy
template void dot_rows_q8_i4_1<2, false, true>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);
template void dot_rows_q8_i4_1<4, false, true>(const TensorView&, uint64_t, uint64_t, const QuantizedX&, float*);

}  // namespace avx512_vnni
}  // namespace endor::cpu::detail
