// AVX-512 VNNI int8-activation kernels: dot_rows_q8's dispatch to the one-token kernel of each
// weight form and to int8/int8g's multi-token kernel (weight_kernels_avx512_vnni_{int4,int8}.cpp),
// and the general kernel of 1 to 8 tokens for int4 weights and int8g groups those kernels do not
// take. The scheme: weight_kernels_avx512_vnni.h.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "weight_kernels_avx512_vnni.h"

namespace endor::cpu::detail {
namespace avx512_vnni {
namespace {

// The words of one int8/int4 row in column order: f(wi, codes, present) with the word's 64 codes as
// bytes (0 where absent or past the row) and its presence mask (all ones for dense words).
// unpacked: null, or (int4) the codes of every stored value from value index unpacked_k0 & ~1
// on, one byte each (unpack_nibbles of the caller's whole row range, done before its first row).
template <ValueType VT, typename F>
__attribute__((always_inline)) inline void for_each_code_word(const TensorView& w, uint64_t r, uint8_t* scratch,
                                                              const uint8_t* unpacked, uint64_t unpacked_k0, F&& f) {
  const TensorLayout& L = w.layout;
  const uint8_t* values = w.values();
  if (L.encoding == Encoding::Bitmap) {
    const uint64_t wpr = L.words_per_row, bpr = L.blocks_per_row, last_n = L.cols - 64 * (wpr - 1);
    const uint8_t* words = w.data + L.bitmap_offset + 8 * r * wpr;
    for (uint64_t b = 0; b < bpr; ++b) {
      const uint64_t flat = r * bpr + b;
      const uint64_t k0 = load_u32(w.data + L.index_offset + 4 * flat);
      const uint8_t* p;
      if constexpr (VT == ValueType::I4) {
        if (unpacked) {
          p = unpacked + (k0 - (unpacked_k0 & ~uint64_t(1)));
        } else {
          const uint64_t k1 = flat + 1 < L.rows * bpr ? load_u32(w.data + L.index_offset + 4 * (flat + 1)) : L.nnz;
          unpack_nibbles<false>(values, k0, k1 - k0, scratch);
          p = scratch + (k0 & 1);
        }
      } else {
        p = values + k0;
      }
      const uint64_t w_begin = b * (kIndexBlockCols / 64), w_end = std::min(wpr, w_begin + kIndexBlockCols / 64);
      for (uint64_t wi = w_begin; wi < w_end; ++wi) {
        const bool last = wi + 1 == wpr;
        const uint64_t bits = last ? load_u64(words + 8 * wi) & first_bits(last_n) : load_u64(words + 8 * wi);
        if ((wi & 7) == 0) prefetch_l2(words + 8 * wi + kPrefetchL2Bytes / 8);
        if constexpr (VT != ValueType::I4) prefetch_l2(p + kPrefetchL2Bytes);
        const __mmask64 k = mask64_at(last ? nullptr : words + 8 * wi, bits);
        f(wi, expandload_epi8(k, p), k);
        p += _mm_popcnt_u64(bits);
      }
    }
    return;
  }
  const uint64_t cols = L.cols;
  for (uint64_t s0 = 0; s0 < cols; s0 += kIndexBlockCols) {
    const uint64_t s1 = std::min(cols, s0 + kIndexBlockCols);
    const uint8_t* p;
    if constexpr (VT == ValueType::I4) {
      const uint64_t k0 = r * cols + s0;
      if (unpacked) {
        p = unpacked + (k0 - (unpacked_k0 & ~uint64_t(1)));
      } else {
        unpack_nibbles<false>(values, k0, s1 - s0, scratch);
        p = scratch + (k0 & 1);
      }
    } else {
      p = values + r * cols + s0;
    }
    for (uint64_t c0 = s0; c0 < s1; c0 += 64, p += 64) {
      const uint64_t n = std::min<uint64_t>(64, s1 - c0);
      if constexpr (VT != ValueType::I4) prefetch_l2(p + kPrefetchL2Bytes);
      const __mmask64 k = __mmask64(first_bits(n));
      f(c0 / 64, n == 64 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(k, p), k);
    }
  }
}

template <ValueType VT, int NT>
void dot_rows_q8_t(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y, size_t ys) {
  const TensorLayout& L = w.layout;
  const uint64_t words = qx.q_stride / 64;
  const bool bitmap = L.encoding == Encoding::Bitmap;
  // Per call: each (token, word)'s vector of block scales, and for int8/int8g the accumulators' start
  // (−128·Σ of each lane's 4 q); for dense int4 P[t][g] = Σ_{b∈g} d_b·sums_b.
  float* dv = thread_buffer<2>(NT * words * 16);
  int32_t* start = reinterpret_cast<int32_t*>(thread_buffer<3>(NT * words * 16 + NT * (L.groups_per_row + 1)));
  float* group_p = reinterpret_cast<float*>(start + NT * words * 16);
  for (int t = 0; t < NT; ++t) {
    const QuantizedX xt = qx.token(size_t(t));
    word_scales(xt, words, dv + t * words * 16);
    if constexpr (VT != ValueType::I4) {
      int8_starts(xt, words, start + t * words * 16);
      add_magic(start + t * words * 16, words);
    }
    if (VT == ValueType::I4) dense_group_sums(xt, L, group_p + t * L.groups_per_row);
  }
  CodeScratch scratch;
  // int4: the row's scales and mins as f32 (Groups), then its groups' zero codes (zero_codes).
  uint8_t* zero_code = nullptr;
  if constexpr (VT == ValueType::I4) {
    scratch.groups = thread_buffer<1>(2 * Groups::padded_groups(w) + Groups::padded_groups(w) / 4 + 1);
    zero_code = reinterpret_cast<uint8_t*>(scratch.groups + 2 * Groups::padded_groups(w));
  }
  if constexpr (VT == ValueType::I8G) scratch.groups = thread_buffer<1>(block_scale_floats(w));
  // int4: the codes of the rows unpacked ahead of them. Unpacking each index block just
  // before its words (as the f32 path does) puts every expand load right behind the stores it
  // reads, misaligned to them: no store forwarding, and on short rows (576 columns) that stall
  // dominated the row.
  // Rows go in runs of up to kUnpackedCodes codes (L1-sized), each unpacked before its first row.
  constexpr uint64_t kUnpackedCodes = 16384;
  const bool pre_unpack = VT == ValueType::I4;
  uint8_t* unpacked = nullptr;
  uint64_t unpacked_k0 = 0, unpacked_end_row = r0;
  auto row_start = [&](uint64_t row) -> uint64_t {  // first stored value of a row (all of them past the last)
    if (!bitmap) return row * L.cols;
    return row < L.rows ? load_u32(w.data + L.index_offset + 4 * (row * L.blocks_per_row)) : L.nnz;
  };
  if (pre_unpack)  // + 2 · 64: the odd-nibble shift and a whole 64-byte expand load past the last code.
    unpacked = reinterpret_cast<uint8_t*>(thread_buffer<4>((std::max(kUnpackedCodes, L.cols) + 2 * 64 + 3) / 4 + 16));
  const uint64_t words_per_group = VT == ValueType::I4 ? L.group_size / 64 : 1;
  const __m512i ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
  for (uint64_t r = r0; r < r1; ++r) {
    // Two f32 chains per token: int8/int8g words alternate between them at every token count (the
    // one-token kernels' order, so a token's sum does not depend on the call's count: batch
    // invariance, linear.cpp); int4's scale and min terms take one each while there are few tokens.
    constexpr int kA = VT != ValueType::I4 || NT <= 2 ? 2 : 1;
    __m512 acc[NT][kA], gq[NT], gp[NT];
    for (int t = 0; t < NT; ++t) {
      for (int a = 0; a < kA; ++a) acc[t][a] = _mm512_setzero_ps();
      gq[t] = gp[t] = _mm512_setzero_ps();
    }
    Groups grp;
    BlockScales bs;
    if constexpr (VT == ValueType::I8G) bs = BlockScales(w, r, scratch.groups);
    bool row_z = false;  // a bitmap int4 row whose absent codes are z: as dense (zero_codes)
    if constexpr (VT == ValueType::I4) {
      grp = Groups(w, r, scratch.groups);
      if (bitmap) row_z = zero_codes(grp.s, grp.m, L.groups_per_row, zero_code);
    }
    const bool presence = bitmap && !row_z;
    const uint8_t* z = zero_code;
    __m512i zv = VT == ValueType::I4 && row_z ? _mm512_set1_epi8(char(*z)) : _mm512_setzero_si512();
    if (pre_unpack && r == unpacked_end_row) {
      unpacked_k0 = row_start(r);
      uint64_t end = r + 1, k_end = row_start(end);
      while (end < r1) {
        const uint64_t k_next = row_start(end + 1);
        if (k_next - unpacked_k0 > kUnpackedCodes) break;
        ++end;
        k_end = k_next;
      }
      unpack_nibbles<false>(w.values(), unpacked_k0, k_end - unpacked_k0, unpacked);
      unpacked_end_row = end;
    }
    uint64_t left = words_per_group;
    for_each_code_word<VT>(w, r, scratch.bytes, unpacked, unpacked_k0, [&](uint64_t wi, __m512i codes, __mmask64 k) {
      if constexpr (VT != ValueType::I4) {
        const __m512i u = _mm512_xor_si512(codes, _mm512_set1_epi8(char(0x80)));
        if constexpr (VT == ValueType::I8G) bs.next_word();
        // The chain as a constant index in each branch: with acc[t][wi % 2] the compiler kept the
        // 2·NT accumulators on the stack, a store-to-load round trip per FMA (same sums either way).
        auto tokens = [&](auto chain_tag) {
          constexpr int A = decltype(chain_tag)::value;
          for (int t = 0; t < NT; ++t) {
            const size_t at = (t * words + wi) * 16;
            const __m512i s = _mm512_dpbusd_epi32(_mm512_load_si512(start + at), u, _mm512_loadu_si512(qx.q + t * qx.q_stride + 64 * wi));
            __m512 f = _mm512_load_ps(dv + at);
            if constexpr (VT == ValueType::I8G) f = _mm512_mul_ps(f, bs.vec);  // d_b·S_g(b)
            acc[t][A] = _mm512_fmadd_ps(magic_to_ps(s), f, acc[t][A]);
          }
        };
        if (wi & 1) tokens(std::integral_constant<int, kA - 1>{});
        else tokens(std::integral_constant<int, 0>{});
      } else {
        const __m512i pres = presence ? _mm512_maskz_mov_epi8(k, ones) : zero;  // only the presence path reads it
        if (row_z) codes = _mm512_mask_blend_epi8(k, zv, codes);
        for (int t = 0; t < NT; ++t) {
          const size_t at = (t * words + wi) * 16;
          const __m512i xv = _mm512_loadu_si512(qx.q + t * qx.q_stride + 64 * wi);
          const __m512 d = _mm512_load_ps(dv + at);
          gq[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, codes, xv)), d, gq[t]);
          if (presence) gp[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, pres, xv)), d, gp[t]);
        }
        if (--left == 0 || wi + 1 == words) {  // the group's end (or the row's): apply its scale and min
          const __m512 s = _mm512_set1_ps(*grp.s++), m = _mm512_set1_ps(*grp.m++);
          // Scale and min terms in separate chains where there are two (few tokens): the per-group
          // fmas are the row's critical path on short rows.
          for (int t = 0; t < NT; ++t) {
            acc[t][0] = _mm512_fmadd_ps(gq[t], s, acc[t][0]);
            if (presence) acc[t][kA - 1] = _mm512_fmadd_ps(gp[t], m, acc[t][kA - 1]);
            gq[t] = gp[t] = _mm512_setzero_ps();
          }
          left = words_per_group;
          if (row_z && wi + 1 < words) zv = _mm512_set1_epi8(char(*++z));
        }
      }
    });
    for (int t = 0; t < NT; ++t) {
      __m512 v = acc[t][0];
      if constexpr (kA == 2) v = _mm512_add_ps(acc[t][0], acc[t][1]);
      if (VT == ValueType::I4 && !presence) {  // Σ_g M_g·P[t][g], in the lanes the reduction sums anyway
        const float* mins = scratch.groups + Groups::padded_groups(w);
        const float* p = group_p + t * L.groups_per_row;
        for (uint64_t g = 0; g < L.groups_per_row; g += 16) {
          const __mmask16 k = __mmask16(first_bits(std::min<uint64_t>(16, L.groups_per_row - g)));
          v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, mins + g), _mm512_maskz_loadu_ps(k, p + g), v);
        }
      }
      float sum = _mm512_reduce_add_ps(v);
      if constexpr (VT == ValueType::I8) sum *= w.row_scales()[r];
      y[t * ys + r] = sum;
    }
  }
}

template <ValueType VT>
void dot_rows_q8_vt(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, size_t nt, float* y, size_t ys) {
  if (VT == ValueType::I8 && nt == 1) return dot_rows_q8_i8_1(w, r0, r1, qx, y);
  if constexpr (VT == ValueType::I8) {
    return with_token_count(nt, [&](auto n) { dot_rows_q8_i8_t<VT, decltype(n)::value, 0>(w, r0, r1, qx, y, ys); });
  }
  if constexpr (VT == ValueType::I8G) {
    auto i8g = [&](auto shift) {
      constexpr int kShift = decltype(shift)::value;
      if (nt == 1) return dot_rows_q8_i8g_1<kShift>(w, r0, r1, qx, y);
      with_token_count(nt, [&](auto n) { dot_rows_q8_i8_t<VT, decltype(n)::value, kShift>(w, r0, r1, qx, y, ys); });
    };
    switch (w.layout.group_size) {
      case 32: return i8g(std::integral_constant<int, 0>{});
      case 64: return i8g(std::integral_constant<int, 1>{});
      case 128: return i8g(std::integral_constant<int, 2>{});
      default: break;  // other multiples of 32: the general kernel
    }
  }
  if (VT == ValueType::I4 && nt == 1) {
    // Word by word: bitmap rows, from their dense copy where the backend made one
    // (TensorView::dense_codes), and dense rows (a dense int4 file in groups of 128 of an even width
    // takes the packed-byte kernel instead).
    const bool bitmap = w.layout.encoding == Encoding::Bitmap;
    auto words = [&](auto wpg) {
      constexpr int G = decltype(wpg)::value;
      if (bitmap && w.dense_codes) return dot_rows_q8_i4_1<G, false, true>(w, r0, r1, qx, y);
      if (bitmap) return dot_rows_q8_i4_1<G, true>(w, r0, r1, qx, y);
      return dot_rows_q8_i4_1<G, false>(w, r0, r1, qx, y);
    };
    switch (w.layout.group_size / 64) {  // a multiple of 64 here (dot_rows_q8)
      case 1: return words(std::integral_constant<int, 1>{});
      case 2:
        if (!bitmap && w.layout.cols % 2 == 0) return dot_rows_q8_i4_dense_1<1>(w, r0, r1, qx, y);
        return words(std::integral_constant<int, 2>{});
      case 4: return words(std::integral_constant<int, 4>{});
      default: break;
    }
  }
  if constexpr (VT != ValueType::I8)  // int8 never gets here
    with_token_count(nt, [&](auto n) { dot_rows_q8_t<VT, decltype(n)::value>(w, r0, r1, qx, y, ys); });
}

}  // namespace

// The int8-activation product of weight_kernels.h for int8, int8g and int4 weights: the one-token
// kernel of the weight's form where it has one, else the general kernel; group sizes the kernels
// here do not take go to the AVX2 set. Only on a CPU with VNNI (the caller checks).
void dot_rows_q8(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, size_t nt, float* y, size_t ys) {
  if (w.layout.value_type == ValueType::I8) return dot_rows_q8_vt<ValueType::I8>(w, r0, r1, qx, nt, y, ys);
  if (w.layout.value_type == ValueType::I8G) {
    if (w.layout.group_size % kActBlock == 0) return dot_rows_q8_vt<ValueType::I8G>(w, r0, r1, qx, nt, y, ys);
    return avx2_kernels().dot_rows_q8(w, r0, r1, qx, nt, y, ys);
  }
  // Decode on dense int4 in groups of 32 or 64 (int4k's usual groups): the packed-byte kernel.
  if (nt == 1 && w.layout.encoding == Encoding::Dense && w.layout.cols % 2 == 0) {
    if (w.layout.group_size == 32) return dot_rows_q8_i4_dense_1<4>(w, r0, r1, qx, y);
    if (w.layout.group_size == 64) return dot_rows_q8_i4_dense_1<2>(w, r0, r1, qx, y);
  }
  if (w.layout.group_size % 64 == 0) return dot_rows_q8_vt<ValueType::I4>(w, r0, r1, qx, nt, y, ys);
  return avx2_kernels().dot_rows_q8(w, r0, r1, qx, nt, y, ys);
}

}  // namespace avx512_vnni
}  // namespace endor::cpu::detail
