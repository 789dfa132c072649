// Internal to the AVX-512 int8-activation kernel files (weight_kernels_avx512_vnni*.cpp, compiled
// with -mavx512vnni besides the flags of weight_kernels_avx512.h): the scheme they share, the
// per-call tables of the quantized x, the int4 zero-code check, and the one-token kernels of each
// weight form, which weight_kernels_avx512_vnni.cpp's dot_rows_q8 dispatches to.
//
// A word's 64 weight codes are one byte vector (vpexpandb of the stored bytes, or a load for
// dense), multiplied by the word's 64 quantized x with one vpdpbusd per token: 16 int32 lanes, lane
// j the exact sum over columns 4j..4j+3, so lanes 0-7 belong to activation block 2w and lanes 8-15
// to block 2w + 1 (kActBlock = 32). One conversion and one fma with a vector of the two blocks'
// d then accumulate the word in f32. vpdpbusd multiplies unsigned by signed bytes:
//   int8  the codes + 128 (xor 0x80) times q, the accumulator started at −128·Σ(the lane's 4 q):
//         exact Σ q_w·q per lane (an absent weight, byte 0, becomes 128 and cancels the same way);
//   int4  the bare codes (0..15) times q; a dense row's Σ q per group is the same for every row, so
//         Σ_g M_g·(Σ_{b∈g} d_b·sums_b) is taken once per call and per row is a short dot. A bitmap
//         row whose groups have zero codes (M = −z·S, zero_codes: what the packer writes) is the
//         same, its absent columns expanded as code z; any other bitmap row also sums its present
//         q (a vpdpbusd of the word's mask as 0/1 bytes) for the mins.
// Per word and token: 1-2 vpdpbusd, 1-2 conversions, 1-2 fmas; the shuffle port only expands.
#pragma once

#include "weight_kernels_avx512.h"

namespace endor::cpu::detail {

// The one-token kernels (y[r] for r in [r0, r1), token 0 of qx), one file per weight form; each
// computes the same sums as the general kernel (dot_rows_q8_t) or, where its comment says so,
// sums in another order inside the same bound. Instantiated for the template arguments
// dot_rows_q8 uses.
namespace avx512_vnni {
// weight_kernels_avx512_vnni_int4.cpp: dense int4 from its packed bytes, groups of 128/GPU columns.
template <int GPU>
void dot_rows_q8_i4_dense_1(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y);
// weight_kernels_avx512_vnni_int4.cpp: int4 (bitmap or dense) in groups of WPG whole words; kCopy: a
// bitmap weight's rows from TensorView::dense_codes.
template <int WPG, bool kBitmap, bool kCopy = false>
void dot_rows_q8_i4_1(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y);
// weight_kernels_avx512_vnni_int8.cpp: int8, dense or bitmap.
void dot_rows_q8_i8_1(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y);
// weight_kernels_avx512_vnni_int8.cpp: int8g in groups of 32 << kShift columns.
template <int kShift>
void dot_rows_q8_i8g_1(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y);
// weight_kernels_avx512_vnni_int8.cpp: 2 <= NT <= 8 tokens (y[t·ys + r]) on int8 (kShift 0) or int8g
// in groups of 32 << kShift columns, dense or bitmap; each token's results those of the one-token
// kernel above for that token alone, bit for bit.
template <ValueType VT, int NT, int kShift>
void dot_rows_q8_i8_t(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y, size_t ys);
}  // namespace avx512_vnni

namespace {

// Per-call tables of one token's quantized x, shared by the int8-activation kernels.
// Each 64-column word's two block scales as one vector: lanes 0-7 block 2w, lanes 8-15 block 2w + 1
// (the lanes of a word's vpdpbusd).
inline void word_scales(const QuantizedX& xt, uint64_t words, float* dv) {
  for (uint64_t wi = 0; wi < words; ++wi)
    _mm512_store_ps(dv + wi * 16, _mm512_mask_blend_ps(__mmask16(0xFF00), _mm512_set1_ps(xt.d[2 * wi]), _mm512_set1_ps(xt.d[2 * wi + 1])));
}
// int8: each word's accumulator start, −128·Σ of each lane's 4 q (cancels the codes' +128).
inline void int8_starts(const QuantizedX& xt, uint64_t words, int32_t* start) {
  for (uint64_t wi = 0; wi < words; ++wi) {
    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(char(0x80)), _mm512_loadu_si512(xt.q + 64 * wi));
    _mm512_store_si512(start + wi * 16, _mm512_sub_epi32(_mm512_setzero_si512(), s));
  }
}
// The int32 → f32 conversion of a word's sums without vcvtdq2ps: the sums start from
// kMagic + start (add_magic), so a lane holds the bits of the float 1.5·2^23 + sum, and one
// subtraction gives the sum as f32, exactly as vcvtdq2ps does (|sum| < 2^18 < 2^22: 4 products of
// 255·127 plus start's 4·128·127). Why: on Intel cores vpdpbusd and vcvtdq2ps of 512 bits both
// issue on port 0 only, so a token's word cost 2 cycles there while port 5 idled; vsubps issues
// on either. The one-token kernels keep vcvtdq2ps (their port 5 carries the expand).
constexpr int32_t kMagic = 0x4B400000;  // the bits of 12582912.0f = 1.5·2^23
inline void add_magic(int32_t* start, uint64_t words) {
  for (uint64_t i = 0; i < words * 16; i += 16)
    _mm512_store_si512(start + i, _mm512_add_epi32(_mm512_load_si512(start + i), _mm512_set1_epi32(kMagic)));
}
__attribute__((always_inline)) inline __m512 magic_to_ps(__m512i s) {
  return _mm512_sub_ps(_mm512_castsi512_ps(s), _mm512_set1_ps(12582912.0f));
}

// Sixteen horizontal sums at once: lane i of the result is _mm512_reduce_add_ps(v[reduce16_slot(i)]),
// bit for bit. The one-token kernels and the per-token results of the multi-token ones must agree
// to the bit (batch invariance), so this adds exactly the pairs GCC's _mm512_reduce_add_ps adds
// (avx512fintrin.h, __MM512_REDUCE_OP): T3[i] = A[i] + A[i+8], T6[j] = T3[j] + T3[j+4],
// T8[k] = T6[k] + T6[k+2], T8[0] + T8[1] (f32 addition commutes bitwise), but as a transposed
// tree over 16 vectors: 45 vector µops (30 on the shuffle port before the blends) for 16 sums
// against about 8 a sum (4 shuffles) one at a time.
inline constexpr int reduce16_slot(int i) { return 4 * (i & 3) + (i >> 2); }
__attribute__((always_inline)) inline __m512 reduce16(const __m512* v) {
  // Step 1, pairs (a, b): [a.lo, b.hi] + [a.hi, b.lo] = [T3 of a, T3 of b] (a blend, not a shuffle).
  __m512 s1[8];
  for (int p = 0; p < 8; ++p) {
    const __m512 a = v[2 * p], b = v[2 * p + 1];
    s1[p] = _mm512_add_ps(_mm512_mask_blend_ps(__mmask16(0xFF00), a, b), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 3, 2)));
  }
  // Step 2: [T3a, T3b] and [T3c, T3d] -> the 128-bit quarters [T6a, T6b, T6c, T6d].
  __m512 s2[4];
  for (int p = 0; p < 4; ++p) {
    const __m512 a = s1[2 * p], b = s1[2 * p + 1];
    s2[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // Step 3, per quarter (X from the first, Y from the second): [X0, X1, Y2, Y3] + [X2, X3, Y0, Y1].
  __m512 s3[2];
  for (int p = 0; p < 2; ++p) {
    const __m512 a = s2[2 * p], b = s2[2 * p + 1];
    s3[p] = _mm512_add_ps(_mm512_mask_blend_ps(__mmask16(0xCCCC), a, b), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 3, 2)));
  }
  // Step 4, per quarter: [P0, Q0, R0, S0] + [P1, Q1, R1, S1]. Quarter q lane j: the sum of v[4j + q].
  return _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Rows [r0, r1) of NT tokens in blocks of 16, each block's results reduced 16 rows at a time:
// rows(rb, n, sums) computes rows rb .. rb + n − 1 (n <= 16), leaving token t's vector of row rb + i
// (the one whose _mm512_reduce_add_ps is the row's sum) in sums[t][reduce16_slot(i)]; then
// y[t·ys + r] = that sum (times row_scales[r] when row_scales is not null, as the scalar product).
template <int NT, typename Rows>
__attribute__((always_inline)) inline void reduce_row_blocks(uint64_t r0, uint64_t r1, const float* row_scales, float* y,
                                                             size_t ys, Rows&& rows) {
  __m512 sums[NT][16];
  for (uint64_t rb = r0; rb < r1; rb += 16) {
    const int n = int(std::min<uint64_t>(16, r1 - rb));
    rows(rb, n, sums);
    for (int i = n; i < 16; ++i)  // a short last block: defined lanes, not stored
      for (int t = 0; t < NT; ++t) sums[t][reduce16_slot(i)] = _mm512_setzero_ps();
    const __mmask16 k = __mmask16(first_bits(uint64_t(n)));
    const __m512 scales = row_scales ? _mm512_maskz_loadu_ps(k, row_scales + rb) : _mm512_setzero_ps();
    for (int t = 0; t < NT; ++t) {
      __m512 v = reduce16(sums[t]);
      if (row_scales) v = _mm512_mul_ps(v, scales);
      _mm512_mask_storeu_ps(y + size_t(t) * ys + rb, k, v);
    }
  }
}

// v + Σ_g M_g·P_g over a row's gpr groups (mins m, dense_group_sums p), in the lanes a reduction
// sums anyway.
inline __m512 plus_min_term(__m512 v, const float* m, const float* p, uint64_t gpr) {
  for (uint64_t g = 0; g < gpr; g += 16) {
    const __mmask16 k = __mmask16(first_bits(std::min<uint64_t>(16, gpr - g)));
    v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, m + g), _mm512_maskz_loadu_ps(k, p + g), v);
  }
  return v;
}

// int4 groups with an exact zero code: M = −z·S for an integer z in [0, 15] (endor::int4_grid's
// grid, so every group the packer writes bar values near ±65504). A bitmap word of such a group
// can be multiplied as a dense one, its absent columns given code z (z·S + M = 0 exactly): one
// vpdpbusd a word instead of two, and the min term is the dense one, Σ_g M_g·P_g. Writes each of
// the n groups' z (0 for an empty group, S = M = 0; z·S is exact in binary32, 4 × 11 bits) and
// says whether every group has one.
inline bool zero_codes(const float* s, const float* m, uint64_t n, uint8_t* z) {
  __mmask16 bad = 0;
  for (uint64_t i = 0; i < n; i += 16) {
    const __mmask16 k = __mmask16(first_bits(std::min<uint64_t>(16, n - i)));
    const __m512 S = _mm512_maskz_loadu_ps(k, s + i), neg_m = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(k, m + i));
    // −M/S is an integer <= 15 where there is one, so the reciprocal's 2^-14 error rounds away
    // (and a wrong z would fail the exact test below, not pass it).
    const __m512 zf = _mm512_roundscale_ps(_mm512_mul_ps(neg_m, _mm512_rcp14_ps(S)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 ok = _mm512_cmp_ps_mask(_mm512_mul_ps(zf, S), neg_m, _CMP_EQ_OQ) &
                         _mm512_cmp_ps_mask(zf, _mm512_setzero_ps(), _CMP_GE_OQ) & _mm512_cmp_ps_mask(zf, _mm512_set1_ps(15.0f), _CMP_LE_OQ);
    const __mmask16 empty = _mm512_cmp_ps_mask(S, _mm512_setzero_ps(), _CMP_EQ_OQ) & _mm512_cmp_ps_mask(neg_m, _mm512_setzero_ps(), _CMP_EQ_OQ);
    bad |= k & ~(ok | empty);
    _mm_mask_storeu_epi8(z + i, k, _mm512_cvtepi32_epi8(_mm512_maskz_cvtps_epi32(ok & ~empty, zf)));
  }
  return bad == 0;
}

}  // namespace
}  // namespace endor::cpu::detail
