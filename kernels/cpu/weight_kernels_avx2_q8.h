// The AVX2 int8-activation kernels (vpmaddubsw): the dot_rows_q8 entry of avx2_kernels(), and the
// fallback of the AVX-512 VNNI kernels.
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
#include <type_traits>
#include <vector>

#include "weight_kernels_avx2_f32.h"

namespace endor::cpu::detail {
namespace {

// ---- int8 activations: vpmaddubsw -----------------------------------------------------------
//
// The fallback of the VNNI kernels, per 32-column activation block: the row's codes are first laid
// out densely in a per-thread buffer (0 where absent, with 0/1 presence bytes for int4), then each
// block is vpmaddubsw (unsigned × signed bytes into saturating 16-bit pairs) + vpmaddwd by ones into
// 8 exact int32 sums. int8 (and int8g) weights go in as |q_w| times q with q_w's sign (vpsignb), so a
// pair is at most 2·127·127 = 32258 and never saturates; int4 codes (≤ 15) go in as they are. The
// block's sums are then scaled by d_b (int8: the row scale after the sum), by d_b·S_g(b) (int8g), or
// combined with the group's scale and min (int4). Needs int4 and int8g group sizes that are
// multiples of 32 (one group per block); others take the portable kernel.

// One row's codes an activation block (32 columns) at a time, as bytes at their columns (0 where
// absent or past cols), and for int4 the presence bytes (1 or 0). Dense rows are laid out once per
// row; bitmap rows place their stored codes 16 columns at a time by one vpshufb whose control is
// two 8-column rank tables (the upper shifted by the lower's popcount; absent bytes keep 0x80,
// which writes a zero), straight into the block's register; the same control over a vector of
// ones gives the presence bytes. (A scalar loop per set bit into a row buffer made the default
// int8-activation path 4-6x slower than --exact on bitmap files.)
// Block b (32 columns) of a row of TensorView::dense_codes (kernels/cpu/int4_dense.h; `words`: the
// row's 64-column words) as code bytes: a word is the low or high nibbles of its pair's 64 bytes, a
// block half of them; an odd last word is 32 bytes of nibbles in column order; 0 past the row.
inline __m256i copy_block(const uint8_t* row, uint64_t b, uint64_t words) {
  const uint64_t wi = b / 2;
  if (wi >= words) return _mm256_setzero_si256();
  if (wi % 2 == 0 && wi + 1 == words) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 64 * (wi / 2) + 16 * (b & 1)));
    const __m128i lo = _mm_and_si128(v, _mm_set1_epi8(0x0F)), hi = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F));
    return _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
  }
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 64 * (wi / 2) + 32 * (b & 1)));
  return _mm256_and_si256(wi % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0F));
}

// Scales and mins of int4 parameters p0 .. p0 + n - 1 as f32: f16 ones widened 8 at a time (F16C),
// int4k ones by int4_params_f32 (the same values either way: the conversions are exact).
inline void int4_params_widened(const TensorView& w, uint64_t p0, uint64_t n, float* scales, float* mins) {
  uint64_t i = 0;
  if (w.layout.int4_params == Int4Params::F16) {
    const uint16_t *fs = w.group_scales() + p0, *fm = w.group_mins() + p0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(scales + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(fs + i))));
      _mm256_storeu_ps(mins + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(fm + i))));
    }
  }
  if (i < n) int4_params_f32(w, p0 + i, n - i, scales + i, mins + i);
}

// A bitmap int4 row with TensorView::dense_codes (`copy`: the caller checked that its groups have
// zero codes) reads its codes from the copy instead (copy_block), the same bytes the bitmap placed
// over z gives.
template <ValueType VT>
class RowCodes {
 public:
  RowCodes(const TensorView& w, uint64_t r, uint64_t padded, bool copy = false) : L_(w.layout) {
    const uint8_t* values = w.values();
    thread_local std::vector<uint8_t> buf;
    if (VT == ValueType::I4 && copy) {
      copy_ = w.dense_codes + r * dense_codes_row_bytes(L_.cols);
      return;
    }
    if (L_.encoding == Encoding::Dense) {
      buf.resize(padded);
      if constexpr (VT != ValueType::I4) std::memcpy(buf.data(), values + r * L_.cols, L_.cols);
      else unpack_nibbles(values, r * L_.cols, L_.cols, buf.data());
      std::memset(buf.data() + L_.cols, 0, padded - L_.cols);
      dense_ = buf.data();
      return;
    }
    const uint64_t v0 = bitmap_row_start(w, r), n = (r + 1 < L_.rows ? bitmap_row_start(w, r + 1) : L_.nnz) - v0;
    if (VT != ValueType::I4 && v0 + n + 16 <= L_.nnz) {  // the 16-byte loads stay inside the values
      src_ = values + v0;
    } else {
      buf.resize(n + 16);
      if constexpr (VT != ValueType::I4) std::memcpy(buf.data(), values + v0, n);
      else unpack_nibbles(values, v0, n, buf.data());
      std::memset(buf.data() + n, 0, 16);
      src_ = buf.data();
    }
    words_ = w.data + L_.bitmap_offset + 8 * r * L_.words_per_row;
  }
  // Block b's codes and (int4) presence; bitmap rows must be walked in order b = 0, 1, ...
  void block(uint64_t b, __m256i& codes, __m256i& present) {
    if (copy_) {
      present = _mm256_set1_epi8(1);  // every column has a code (z where absent)
      codes = copy_block(copy_, b, (L_.cols + 63) / 64);
      return;
    }
    if (dense_) {
      codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dense_ + 32 * b));
      if constexpr (VT == ValueType::I4) {
        const uint64_t left = L_.cols > 32 * b ? std::min<uint64_t>(32, L_.cols - 32 * b) : 0;
        present = _mm256_and_si256(_mm256_cmpgt_epi8(_mm256_set1_epi8(char(left)), lane_bytes()), _mm256_set1_epi8(1));
      }
      return;
    }
    const uint64_t wi = b / 2;
    uint64_t word = wi < L_.words_per_row ? load_u64(words_ + 8 * wi) : 0;
    if (wi + 1 == L_.words_per_row) word &= last_word_mask(L_.cols);
    const uint32_t bits = uint32_t(word >> (32 * (b & 1)));
    __m128i c_lo, c_hi;
    const __m128i lo = place16(bits & 0xFFFF, c_lo), hi = place16(bits >> 16, c_hi);
    codes = _mm256_set_m128i(hi, lo);
    if constexpr (VT == ValueType::I4) {
      const __m128i ones = _mm_set1_epi8(1);
      present = _mm256_set_m128i(_mm_shuffle_epi8(ones, c_hi), _mm_shuffle_epi8(ones, c_lo));
    }
  }

 private:
  // The next stored codes placed at the 16 columns of mask m; ctl: the control used.
  __m128i place16(uint32_t m, __m128i& ctl) {
    const uint64_t* ranks = ranks_;
    const unsigned m0 = m & 0xFF, m1 = m >> 8;
    const uint64_t k0 = uint64_t(__builtin_popcount(m0));
    ctl = _mm_set_epi64x(int64_t(ranks[m1] + k0 * 0x0101010101010101ULL), int64_t(ranks[m0]));
    const __m128i got = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src_)), ctl);
    src_ += k0 + uint64_t(__builtin_popcount(m1));
    return got;
  }
  // Dense int4 presence: byte c of the block is present iff c < cols − 32b (as 32 byte lanes).
  static __m256i lane_bytes() {
    return _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
                            26, 27, 28, 29, 30, 31);
  }
  const TensorLayout& L_;
  // The rank table, looked up once a row (a call to expand_tables per 16 columns, where GCC does
  // not inline it, cost a tenth of a bitmap row).
  const uint64_t* ranks_ = expand_tables().byte_ranks;
  const uint8_t* dense_ = nullptr;
  const uint8_t* copy_ = nullptr;
  const uint8_t* src_ = nullptr;
  const uint8_t* words_ = nullptr;
};

// NT tokens, a compile-time count so that the accumulators stay in registers (with a runtime count
// GCC kept them on the stack: a store and a reload on every block's chain).
//
// int4 rows whose groups all have a zero code z (z·S + M = 0 exactly: int4_zero_code, every group
// Endor's packer writes) are multiplied as dense ones, their absent columns given z: one
// vpmaddubsw a block (no presence bytes), the block sums times d_b gathered per group and scaled by
// S once, and the min term Σ_g M_g·P_g added after (dense_group_sums), as the AVX-512 kernels do.
// So a row reads the same sums from the bitmap as from the load-time copy of its codes
// (TensorView::dense_codes), whatever the token count: the same results. Other rows (int4k, a group
// without a zero code) keep the presence form.
template <ValueType VT, int NT>
void dot_rows_q8_nt(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y, size_t ys) {
  constexpr size_t nt = NT;
  const TensorLayout& L = w.layout;
  const uint64_t padded = qx.q_stride, blocks = padded / kActBlock, gpr = L.groups_per_row;
  const __m256i ones16 = _mm256_set1_epi16(1), zero = _mm256_setzero_si256();
  // int4: a row's scales, mins and zero codes; the tokens' group sums P_g (dense_group_sums).
  thread_local std::vector<float> params_buf, group_p_buf;
  thread_local std::vector<uint8_t> z_buf;
  float *row_s = nullptr, *row_m = nullptr, *group_p = nullptr;
  uint8_t* row_z = nullptr;
  if constexpr (VT == ValueType::I4) {
    params_buf.resize(2 * gpr);
    z_buf.resize(gpr);
    group_p_buf.resize(nt * gpr);
    row_s = params_buf.data();
    row_m = row_s + gpr;
    row_z = z_buf.data();
    group_p = group_p_buf.data();
    for (size_t t = 0; t < nt; ++t) dense_group_sums(qx.token(t), L, group_p + t * gpr);
  }
  // A weight with a copy of its codes had every group's zero code checked when it was made.
  const bool copied = VT == ValueType::I4 && w.dense_codes && L.encoding == Encoding::Bitmap;
  for (uint64_t r = r0; r < r1; ++r) {
    bool kz = false;  // int4: the row's groups all have zero codes
    if constexpr (VT == ValueType::I4) {
      int4_params_widened(w, r * gpr, gpr, row_s, row_m);
      kz = L.int4_params == Int4Params::F16;  // int4k parameters: the presence form
      for (uint64_t g = 0; kz && !copied && g < gpr; ++g) kz = int4_zero_code(row_s[g], row_m[g], row_z[g]);
    }
    RowCodes<VT> row(w, r, padded, copied);
    __m256 acc[NT], gq[NT];
    float min_term[NT];
    for (size_t t = 0; t < nt; ++t) {
      acc[t] = gq[t] = _mm256_setzero_ps();
      min_term[t] = 0.0f;
    }
    // int4 (int8g): the block's group (group_size is a multiple of 32), its scale and min (its
    // scale) widened once a group.
    const uint64_t blocks_per_group = grouped<VT>() ? L.group_size / kActBlock : 1;
    uint64_t g = 0, left_in_group = 0;
    __m256 s = _mm256_setzero_ps(), m = _mm256_setzero_ps();
    __m256i zv = zero;
    for (uint64_t b = 0; b < blocks; ++b) {
      __m256i cw, pw = _mm256_setzero_si256();
      row.block(b, cw, pw);
      __m256i aw = cw;
      if constexpr (VT == ValueType::I4) {
        if (left_in_group == 0) {
          if (kz)  // the group just ended, into the row's sum with its scale
            for (size_t t = 0; t < nt; ++t) {
              acc[t] = _mm256_fmadd_ps(gq[t], s, acc[t]);
              gq[t] = _mm256_setzero_ps();
            }
          left_in_group = blocks_per_group;
          if (b * kActBlock < L.cols) {
            s = _mm256_set1_ps(row_s[g]);
            m = _mm256_set1_ps(row_m[g]);
            zv = _mm256_set1_epi8(char(row_z[g]));
            if (kz)
              for (size_t t = 0; t < nt; ++t) min_term[t] += row_m[g] * group_p[t * gpr + g];
          } else {
            s = m = _mm256_setzero_ps();
            zv = zero;
          }
          ++g;
        }
        --left_in_group;
        // The bitmap's absent columns (presence 0) coded z; the copy holds them so already.
        if (kz && !copied) aw = _mm256_or_si256(cw, _mm256_and_si256(_mm256_cmpeq_epi8(pw, zero), zv));
      } else {
        aw = _mm256_abs_epi8(cw);
        if constexpr (VT == ValueType::I8G) {
          if (left_in_group == 0) {
            left_in_group = blocks_per_group;
            s = _mm256_set1_ps(b * kActBlock < L.cols ? half(w.group_scales()[r * L.groups_per_row + g]) : 0.0f);
            ++g;
          }
          --left_in_group;
        }
      }
      for (size_t t = 0; t < nt; ++t) {
        const QuantizedX xt = qx.token(t);
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xt.q + b * kActBlock));
        const __m256 d = _mm256_set1_ps(xt.d[b]);
        if constexpr (VT == ValueType::I8) {
          const __m256i sq = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, cw)), ones16);
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sq), d, acc[t]);
        } else if constexpr (VT == ValueType::I8G) {  // d_b·S_g(b)
          const __m256i sq = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, cw)), ones16);
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sq), _mm256_mul_ps(d, s), acc[t]);
        } else if (kz) {
          const __m256i sq = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xv), ones16);
          gq[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sq), d, gq[t]);
        } else {
          const __m256i sq = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xv), ones16);
          const __m256i sp = _mm256_madd_epi16(_mm256_maddubs_epi16(pw, xv), ones16);
          const __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sq), s, _mm256_mul_ps(_mm256_cvtepi32_ps(sp), m));
          acc[t] = _mm256_fmadd_ps(v, d, acc[t]);
        }
      }
    }
    if (kz)
      for (size_t t = 0; t < nt; ++t) acc[t] = _mm256_fmadd_ps(gq[t], s, acc[t]);
    for (size_t t = 0; t < nt; ++t) {
      const float v = hsum(acc[t]) * (VT == ValueType::I8 ? w.row_scales()[r] : 1.0f);
      y[t * ys + r] = kz ? v + min_term[t] : v;
    }
  }
}

// Decode (one token) on dense int4 with groups of 128 and an even width, as the AVX-512 kernel of
// that name does (weight_kernels_avx512_vnni_int4.cpp): the packed bytes of 64 columns (32) hold
// the even columns in their low nibbles and the odd in their high ones, multiplied by x reordered once per
// call into the same halves; vpmaddubsw pairs of both halves are added (at most 2·15·127·2 = 7620,
// no saturation) before one vpmaddwd, whose lane j sums columns 8j..8j+7: activation block j/4 of
// the word's two. No per-row unpack and presence pass. R rows at once (x and d loaded once).
void dot_rows_q8_i4_dense128_1(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y) {
  const TensorLayout& L = w.layout;
  const uint64_t cols = L.cols, gpr = L.groups_per_row, words = (cols + 63) / 64, row_bytes = cols / 2;
  thread_local std::vector<int8_t> xs_buf;
  thread_local std::vector<float> dv_buf, gp_buf;
  xs_buf.resize(64 * words);
  dv_buf.resize(8 * words);
  gp_buf.resize(gpr);
  int8_t* xs = xs_buf.data();
  float* dv = dv_buf.data();
  float* group_p = gp_buf.data();
  for (uint64_t c = 0; c < 64 * words; ++c)  // q is zero past cols, up to q_stride = 64·words
    xs[64 * (c / 64) + (c % 2) * 32 + (c % 64) / 2] = qx.q[c];
  for (uint64_t wi = 0; wi < words; ++wi)
    for (int j = 0; j < 8; ++j) dv[8 * wi + j] = qx.d[2 * wi + j / 4];
  dense_group_sums(qx, L, group_p);
  const __m256i lo4 = _mm256_set1_epi8(0x0F), ones16 = _mm256_set1_epi16(1);
  const uint8_t* const values = w.values();
  thread_local std::vector<float> params_buf;  // rows_at's rows' scales and mins as f32
  params_buf.resize(4 * gpr);
  float* const params = params_buf.data();
  const uint64_t last_bytes = row_bytes - 32 * (words - 1);  // the last word's bytes (1..32)
  auto rows_at = [&](auto rows_tag, uint64_t r) {
    constexpr int R = decltype(rows_tag)::value;
    const uint8_t* p[R];
    __m256 acc[R];
    const float* scales[R];
    const float* mins[R];
    for (int i = 0; i < R; ++i) {
      p[i] = values + (r + i) * row_bytes;
      acc[i] = _mm256_setzero_ps();
      scales[i] = params + 2 * i * gpr;
      mins[i] = scales[i] + gpr;
      int4_params_widened(w, (r + i) * gpr, gpr, params + 2 * i * gpr, params + (2 * i + 1) * gpr);
    }
    for (uint64_t g = 0; g < gpr; ++g) {
      __m256 gq[R];
      for (int i = 0; i < R; ++i) gq[i] = _mm256_setzero_ps();
      for (uint64_t wi = 2 * g; wi < std::min(words, 2 * g + 2); ++wi) {
        const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + 64 * wi));
        const __m256i xo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + 64 * wi + 32));
        const __m256 d = _mm256_loadu_ps(dv + 8 * wi);
        for (int i = 0; i < R; ++i) {
          __m256i v;
          if (wi + 1 < words) {
            prefetch(p[i] + 32 * wi + kPrefetchBytes);
            v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[i] + 32 * wi));
          } else {  // the row's last bytes only (the tensor's last row ends there)
            alignas(32) uint8_t tail[32] = {};
            std::memcpy(tail, p[i] + 32 * wi, last_bytes);
            v = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
          }
          const __m256i lo = _mm256_and_si256(v, lo4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
          const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
          gq[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones16)), d, gq[i]);
        }
      }
      for (int i = 0; i < R; ++i) acc[i] = _mm256_fmadd_ps(gq[i], _mm256_set1_ps(scales[i][g]), acc[i]);
    }
    for (int i = 0; i < R; ++i) {
      float m = 0.0f;
      for (uint64_t g = 0; g < gpr; ++g) m += mins[i][g] * group_p[g];
      y[r + i] = hsum(acc[i]) + m;
    }
  };
  uint64_t r = r0;
  for (; r + 2 <= r1; r += 2) rows_at(std::integral_constant<int, 2>{}, r);
  if (r < r1) rows_at(std::integral_constant<int, 1>{}, r);
}

// Decode (one token) on a bitmap int4 weight with a copy of its codes (TensorView::dense_codes,
// kernels/cpu/int4_dense.h): dot_rows_q8_nt<I4, 1>'s arithmetic for rows with zero codes (every row
// of a copied weight), the same operations in the same order, so the same results; two rows at once
// (x and d loaded once for both), the parameters widened a row at a time, no per-row setup.
void dot_rows_q8_i4_copy_1(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y) {
  const TensorLayout& L = w.layout;
  const uint64_t cols = L.cols, gpr = L.groups_per_row, blocks = qx.q_stride / kActBlock, bpg = L.group_size / kActBlock;
  const uint64_t words = (cols + 63) / 64, row_bytes = dense_codes_row_bytes(cols);
  thread_local std::vector<float> gp_buf, params_buf;
  gp_buf.resize(gpr);
  params_buf.resize(4 * gpr);
  float* const group_p = gp_buf.data();
  dense_group_sums(qx, L, group_p);
  const __m256i ones16 = _mm256_set1_epi16(1);
  auto rows_at = [&](auto rows_tag, uint64_t r) {
    constexpr int R = decltype(rows_tag)::value;
    const uint8_t* p[R];
    const float *s[R], *m[R];
    __m256 acc[R], gq[R];
    for (int i = 0; i < R; ++i) {
      p[i] = w.dense_codes + (r + i) * row_bytes;
      float* sm = params_buf.data() + 2 * i * gpr;
      int4_params_widened(w, (r + i) * gpr, gpr, sm, sm + gpr);
      s[i] = sm;
      m[i] = sm + gpr;
      acc[i] = gq[i] = _mm256_setzero_ps();
    }
    for (uint64_t g = 0; g < gpr; ++g) {
      const uint64_t b1 = std::min(blocks, (g + 1) * bpg);
      for (uint64_t b = g * bpg; b < b1; ++b) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx.q + b * kActBlock));
        const __m256 d = _mm256_set1_ps(qx.d[b]);
        for (int i = 0; i < R; ++i) {
          if (b % 4 == 0) prefetch(p[i] + 16 * b + kPrefetchBytes);  // the rows are R streams
          const __m256i sq = _mm256_madd_epi16(_mm256_maddubs_epi16(copy_block(p[i], b, words), xv), ones16);
          gq[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sq), d, gq[i]);
        }
      }
      for (int i = 0; i < R; ++i) {
        acc[i] = _mm256_fmadd_ps(gq[i], _mm256_set1_ps(s[i][g]), acc[i]);
        gq[i] = _mm256_setzero_ps();
      }
    }
    for (int i = 0; i < R; ++i) {
      float min_term = 0.0f;
      for (uint64_t g = 0; g < gpr; ++g) min_term += m[i][g] * group_p[g];
      y[r + i] = hsum(acc[i]) + min_term;
    }
  };
  uint64_t r = r0;
  for (; r + 2 <= r1; r += 2) rows_at(std::integral_constant<int, 2>{}, r);
  if (r < r1) rows_at(std::integral_constant<int, 1>{}, r);
}

template <ValueType VT>
void dot_rows_q8_vt(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, size_t nt, float* y, size_t ys) {
  with_token_count(nt, [&](auto n) { dot_rows_q8_nt<VT, decltype(n)::value>(w, r0, r1, qx, y, ys); });
}

void dot_rows_q8(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, size_t nt, float* y, size_t ys) {
  if (nt == 1 && w.layout.value_type == ValueType::I4 && w.layout.encoding == Encoding::Dense && w.layout.group_size == 128 &&
      w.layout.cols % 2 == 0)
    return dot_rows_q8_i4_dense128_1(w, r0, r1, qx, y);
  if (nt == 1 && w.layout.value_type == ValueType::I4 && w.layout.encoding == Encoding::Bitmap && w.dense_codes &&
      w.layout.group_size % 64 == 0)
    return dot_rows_q8_i4_copy_1(w, r0, r1, qx, y);
  if (w.layout.value_type == ValueType::I8) return dot_rows_q8_vt<ValueType::I8>(w, r0, r1, qx, nt, y, ys);
  if (w.layout.value_type == ValueType::I4 && w.layout.group_size % kActBlock == 0)
    return dot_rows_q8_vt<ValueType::I4>(w, r0, r1, qx, nt, y, ys);
  if (w.layout.value_type == ValueType::I8G && w.layout.group_size % kActBlock == 0)
    return dot_rows_q8_vt<ValueType::I8G>(w, r0, r1, qx, nt, y, ys);
  return portable_dot_rows_q8(w, r0, r1, qx, nt, y, ys);
}

}  // namespace
}  // namespace endor::cpu::detail
