// The AVX2 f32/f16-activation kernels: per-row value decoding (group parameters, RowDecoder), the
// token accumulators, the bitmap and dense row walks, and the dot_rows, decode_rows,
// decode_rows_u16 and dense_dot entries of avx2_kernels(). How bitmap rows are decoded: the
// comment at the top of weight_kernels_avx2.cpp.
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

#include "weight_kernels_avx2.h"

namespace endor::cpu::detail {
namespace {

// ---- per-row value decoding -------------------------------------------------------------------

// How often an int4 row's group can change: every word (group_size % 64 == 0: checked once per
// 64 columns), every chunk (% 8 == 0), or inside a chunk (lanes filled one by one). int8g also
// has every 32 columns (% 32 == 0: Q8_0's groups; checked once per 4 chunks rather than per chunk,
// which cost its bitmap rows 3x int8's time).
enum GroupStep { kPerWord = 64, kPerBlock = 32, kPerChunk = 8, kPerLane = 1 };
constexpr GroupStep group_step(uint32_t group_size) {
  return group_size % 64 == 0 ? kPerWord : group_size % 8 == 0 ? kPerChunk : kPerLane;
}
constexpr GroupStep int8g_group_step(uint32_t group_size) {
  return group_size % 32 == 0 && group_size % 64 != 0 ? kPerBlock : group_step(group_size);
}

// int4 scale/min (int8g: scale, min 0) of the group(s) under the current chunk of one row.
template <GroupStep kStep>
struct GroupParams {
  const uint16_t* scales;
  const uint16_t* mins;  // null for int8g
  uint64_t group_size, cols;
  __m256 s = _mm256_setzero_ps(), m = _mm256_setzero_ps();
  uint64_t g = ~uint64_t(0);  // current group (none yet)
  uint64_t next = 0;          // first column of group g + 1
  float gs = 0.0f, gm = 0.0f; // group g's scale and min (kPerLane)

  const float* coded = nullptr;  // int4k (SPEC.md §6.7): the row's scales, then its mins, as f32
  uint64_t gpr = 0;

  // coded_buf: the caller's buffer for an int4k row's decoded params, reused from row to row (one
  // GroupParams of a thread is alive at a time), so a row costs no allocation.
  GroupParams(const TensorView& w, uint64_t r, std::vector<float>& coded_buf)
      : scales(w.group_scales() + r * w.layout.groups_per_row),
        mins(w.layout.value_type == ValueType::I8G ? nullptr : w.group_mins() + r * w.layout.groups_per_row),
        group_size(w.layout.group_size),
        cols(w.layout.cols),
        gpr(w.layout.groups_per_row) {
    if (w.layout.int4_params == Int4Params::Coded6 && gpr > 0) {
      if (coded_buf.size() < 2 * gpr) coded_buf.resize(2 * gpr);
      int4_params_f32(w, r * gpr, gpr, coded_buf.data(), coded_buf.data() + gpr);
      coded = coded_buf.data();
    }
  }
  inline float scale_of(uint64_t g) const { return coded ? coded[g] : half(scales[g]); }
  inline float min_of(uint64_t g) const { return coded ? coded[gpr + g] : mins ? half(mins[g]) : 0.0f; }

  // Columns only grow along a row, so the group index advances without a division (a 64-bit
  // div per group costs as much as the rest of the group's work).
  inline void at(uint64_t c0) {
    if constexpr (kStep != kPerLane) {
      if (c0 >= next) {
        do {
          ++g;
          next += group_size;
        } while (c0 >= next);
        s = _mm256_set1_ps(scale_of(g));
        m = _mm256_set1_ps(min_of(g));
      }
    } else {
      alignas(32) float sv[8], mv[8];
      for (int j = 0; j < 8; ++j) {
        const uint64_t c = std::min(c0 + uint64_t(j), cols - 1);
        if (c >= next) {
          do {
            ++g;
            next += group_size;
          } while (c >= next);
          gs = scale_of(g);
          gm = min_of(g);
        }
        sv[j] = gs;
        mv[j] = gm;
      }
      s = _mm256_load_ps(sv);
      m = _mm256_load_ps(mv);
    }
  }
};

// Everything a row needs to turn 8 stored values into 8 decoded weights. For int8 the lanes hold
// the codes q (the row scale is applied by the caller: after the sum for dots, per element for
// decode); for int4 the dequantized q·s + m; for int8g (q·2^24)·S, exact (8 + 11 significand bits,
// a power of two), the 2^-24 applied as int8's row scale is (exact again: q·S to the bit).
template <ValueType VT>
constexpr bool grouped(ValueType vt = VT) { return vt == ValueType::I4 || vt == ValueType::I8G; }
template <ValueType VT, GroupStep kStep>
struct RowDecoder {
  GroupParams<kStep> group;
  float row_scale = 1.0f;

  // coded_buf: see GroupParams (int4k rows' params; untouched for other weights).
  RowDecoder(const TensorView& w, uint64_t r, std::vector<float>& coded_buf) : group(init_group(w, r, coded_buf)) {
    if constexpr (VT == ValueType::I8) row_scale = w.row_scales()[r] * kInt8LaneScale;  // exact: a power of 2
    if constexpr (VT == ValueType::I8G) row_scale = kInt8LaneScale;
  }
  static GroupParams<kStep> init_group(const TensorView& w, uint64_t r, std::vector<float>& coded_buf) {
    if constexpr (grouped<VT>()) return GroupParams<kStep>(w, r, coded_buf);
    TensorView none = w;  // int4 fields unused: point the group at the row's (empty) params
    none.layout.groups_per_row = 0;
    none.layout.group_size = 1;
    return GroupParams<kStep>(none, 0, coded_buf);
  }

  // Dense: the 8 stored values at k, for columns c0..c0+7 (int8: q·2^24).
  inline __m256 dense(const ExpandTables& t, const uint8_t* src, uint64_t k, uint64_t c0) {
    if constexpr (VT == ValueType::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(src) + k);
    } else if constexpr (VT == ValueType::F16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * k)));
    } else if constexpr (VT == ValueType::BF16) {
      return _mm256_castsi256_ps(_mm256_shuffle_epi8(broadcast16(src + 2 * k), shuffle_control(t.halves_top, 0xFF)));
    } else if constexpr (VT == ValueType::I8) {
      return _mm256_cvtepi32_ps(_mm256_shuffle_epi8(broadcast8(src + k), shuffle_control(t.bytes_top, 0xFF)));
    } else if constexpr (VT == ValueType::I8G) {
      if constexpr (kStep != kPerWord && kStep != kPerBlock) group.at(c0);
      return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(broadcast8(src + k), shuffle_control(t.bytes_top, 0xFF))), group.s);
    } else {
      if constexpr (kStep != kPerWord && kStep != kPerBlock) group.at(c0);
      const __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + k)));
      return _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), group.s, group.m);
    }
  }

  // Dense int4 read in place: the 8 codes in the 4 bytes at `bytes`.
  inline __m256 dense_nibbles(const uint8_t* bytes, uint64_t c0) {
    if constexpr (kStep != kPerWord && kStep != kPerBlock) group.at(c0);
    int32_t packed;
    std::memcpy(&packed, bytes, 4);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);  // low nibble first
    const __m256i q = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(packed), shifts), _mm256_set1_epi32(0x0F));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), group.s, group.m);
  }

  // Bitmap: chunk with mask byte m whose first stored value is k, at columns c0..c0+7.
  // kStore: the values are stored as the decoded row (StoreSink), not multiplied.
  template <bool kStore = false>
  inline __m256 expand(const ExpandTables& t, unsigned m, const uint8_t* src, uint64_t k, uint64_t c0) {
    if constexpr (VT == ValueType::F32 || VT == ValueType::F16) {
      const PermuteEntry& e = t.permute[m];
      const __m256i idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(e.perm));
      const __m256 keep = _mm256_load_ps(reinterpret_cast<const float*>(e.keep));
      const __m256 v = VT == ValueType::F32
                           ? _mm256_loadu_ps(reinterpret_cast<const float*>(src) + k)
                           : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * k)));
      return _mm256_and_ps(_mm256_permutevar8x32_ps(v, idx), keep);
    } else if constexpr (VT == ValueType::BF16) {
      return _mm256_castsi256_ps(_mm256_shuffle_epi8(broadcast16(src + 2 * k), shuffle_control(t.halves_top, m)));
    } else if constexpr (VT == ValueType::I8) {
      return _mm256_cvtepi32_ps(_mm256_shuffle_epi8(broadcast8(src + k), shuffle_control(t.bytes_top, m)));
    } else if constexpr (VT == ValueType::I8G) {
      if constexpr (kStep != kPerWord && kStep != kPerBlock) group.at(c0);  // kPerWord, kPerBlock: the walker calls at() per word / block
      // Absent lanes are +0 times S: ±0, and the StoreSink's 2^-24 keeps the sign, so a negative
      // scale would decode an absent element as −0 where the reference has +0: masked to +0 when
      // stored (a product does not care).
      const __m256 q = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(broadcast8(src + k), shuffle_control(t.bytes_top, m)));
      if constexpr (!kStore) return _mm256_mul_ps(q, group.s);
      const __m256 keep = _mm256_load_ps(reinterpret_cast<const float*>(t.codes[m].keep));
      return _mm256_and_ps(_mm256_mul_ps(q, group.s), keep);
    } else {
      if constexpr (kStep != kPerWord && kStep != kPerBlock) group.at(c0);  // kPerWord, kPerBlock: the walker calls at() per word / block
      const CodeEntry& e = t.codes[m];
      const __m256i ctl = _mm256_load_si256(reinterpret_cast<const __m256i*>(e.ctl));
      const __m256 q = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(broadcast8(src + k), ctl));
      const __m256 keep = _mm256_load_ps(reinterpret_cast<const float*>(e.keep));
      return _mm256_and_ps(_mm256_fmadd_ps(q, group.s, group.m), keep);
    }
  }

  // Scalar decode of dense stored value v (row tails).
  inline float dense_scalar(const uint8_t* values, uint64_t v, uint64_t c) {
    if constexpr (VT == ValueType::F32) {
      float f;
      std::memcpy(&f, values + 4 * v, 4);
      return f;
    } else if constexpr (VT == ValueType::F16) {
      return half(load_u16(values + 2 * v));
    } else if constexpr (VT == ValueType::BF16) {
      return bfloat_to_f32(load_u16(values + 2 * v));
    } else if constexpr (VT == ValueType::I8) {
      return float(int8_t(values[v])) * 16777216.0f;  // q·2^24, as the vector lanes
    } else if constexpr (VT == ValueType::I8G) {
      return float(int8_t(values[v])) * 16777216.0f * group.scale_of(c / group.group_size);  // (q·2^24)·S, as the lanes
    } else {
      const uint8_t byte = values[v / 2];
      const float q = float((v % 2 == 0) ? (byte & 0x0Fu) : (byte >> 4));
      const uint64_t g = c / group.group_size;
      return q * group.scale_of(g) + group.min_of(g);
    }
  }
};

constexpr uint64_t value_bytes(ValueType vt) {
  return vt == ValueType::F32 ? 4 : (vt == ValueType::F16 || vt == ValueType::BF16) ? 2 : 1;
}

// ---- per-token accumulators ---------------------------------------------------------------------

// NT tokens, each with A = accumulators_per_token(NT) 8-lane accumulators that chunks take in
// turn (chunk parity P picks one), so the 4-cycle FMA latency does not bound small NT.
constexpr int accumulators_per_token(int nt) { return nt <= 2 ? 4 : nt <= 4 ? 2 : 1; }

template <int NT>
struct Accumulators {
  static constexpr int kA = accumulators_per_token(NT);
  __m256 a[NT][kA];
  const float* x;
  size_t xs;

  Accumulators(const float* x_, size_t xs_) : x(x_), xs(xs_) {
    for (int t = 0; t < NT; ++t)
      for (int i = 0; i < kA; ++i) a[t][i] = _mm256_setzero_ps();
  }
  template <int P>
  inline void add(__m256 w, uint64_t c0) {
    for (int t = 0; t < NT; ++t) a[t][P % kA] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + t * xs + c0), a[t][P % kA]);
  }
  // Partial chunk: only the first n lanes of x exist.
  inline void add_partial(__m256 w, uint64_t c0, uint64_t n) {
    const __m256i lanes = first_lanes(n);
    for (int t = 0; t < NT; ++t) a[t][0] = _mm256_fmadd_ps(w, _mm256_maskload_ps(x + t * xs + c0, lanes), a[t][0]);
  }
  inline void store(float* y, size_t ys, uint64_t r, float scale) {
    for (int t = 0; t < NT; ++t) {
      __m256 v = a[t][0];
      if constexpr (kA == 4) v = _mm256_add_ps(_mm256_add_ps(a[t][0], a[t][1]), _mm256_add_ps(a[t][2], a[t][3]));
      if constexpr (kA == 2) v = _mm256_add_ps(a[t][0], a[t][1]);
      y[t * ys + r] = hsum(v) * scale;
    }
  }
};

// Output sink of the row walkers: either accumulate into tokens or store the decoded row.
template <int NT>
struct DotSink {
  Accumulators<NT> acc;
  template <int P>
  inline void chunk(__m256 w, uint64_t c0) { acc.template add<P>(w, c0); }
  inline void partial(__m256 w, uint64_t c0, uint64_t n) { acc.add_partial(w, c0, n); }
};
struct StoreSink {
  float* out;      // the decoded row
  __m256 scale;    // int8 row scale (1 otherwise)
  template <int P>
  inline void chunk(__m256 w, uint64_t c0) { _mm256_storeu_ps(out + c0, _mm256_mul_ps(w, scale)); }
  inline void partial(__m256 w, uint64_t c0, uint64_t n) {
    _mm256_maskstore_ps(out + c0, first_lanes(n), _mm256_mul_ps(w, scale));
  }
};

// ---- row walkers ---------------------------------------------------------------------------------

// Scratch for one 4096-column block: int4 codes unpacked to bytes, or a padded copy of the last
// values of the tensor (so the 8-lane loads never read past the values section).
struct BlockScratch {
  alignas(32) uint8_t bytes[kIndexBlockCols * 4 + 64];
};

template <ValueType VT, GroupStep kStep, typename Sink>
inline void walk_bitmap_row(const TensorView& w, uint64_t r, RowDecoder<VT, kStep>& dec, Sink& sink,
                            BlockScratch& scratch) {
  const TensorLayout& L = w.layout;
  const ExpandTables& t = expand_tables();
  const uint64_t wpr = L.words_per_row, bpr = L.blocks_per_row, cols = L.cols;
  const uint8_t* words = w.data + L.bitmap_offset + 8 * r * wpr;
  const uint8_t* values = w.values();
  constexpr uint64_t vb = value_bytes(VT);
  constexpr bool kStore = std::is_same_v<Sink, StoreSink>;
  for (uint64_t b = 0; b < bpr; ++b) {
    const uint64_t flat = r * bpr + b;
    const uint64_t k0 = load_u32(w.data + L.index_offset + 4 * flat);
    const uint64_t k1 = flat + 1 < L.rows * bpr ? load_u32(w.data + L.index_offset + 4 * (flat + 1)) : L.nnz;
    const uint8_t* src;
    if constexpr (VT == ValueType::I4) {
      unpack_nibbles(values, k0, k1 - k0, scratch.bytes);
      src = scratch.bytes;
    } else if (k1 + kOverreadValues <= L.nnz) {
      src = values + k0 * vb;
    } else {
      std::memcpy(scratch.bytes, values + k0 * vb, (k1 - k0) * vb);
      src = scratch.bytes;
    }
    uint64_t k = 0;
    const uint64_t w_end = std::min(wpr, (b + 1) * (kIndexBlockCols / 64));
    for (uint64_t wi = b * (kIndexBlockCols / 64); wi < w_end; ++wi) {
      const uint64_t cbase = 64 * wi;
      if ((wi & 7) == 0) prefetch(words + 8 * wi + kPrefetchBytes / 8);
      if constexpr (VT != ValueType::I4) prefetch(src + k * vb + kPrefetchBytes);
      if (cbase + 64 <= cols) {
        const uint64_t bits = load_u64(words + 8 * wi);
        if constexpr (std::is_same_v<Sink, StoreSink>) {
          if (bits == 0) {
            for (int j = 0; j < 8; ++j) _mm256_storeu_ps(sink.out + cbase + 8 * j, _mm256_setzero_ps());
            continue;
          }
        } else {
          if (bits == 0) continue;
        }
        if constexpr (grouped<VT>() && kStep == kPerWord) dec.group.at(cbase);
        // Eight chunks, unrolled in fours so consecutive chunks use different accumulators.
        // Mask bytes are loaded from memory (one load each) rather than shifted out of `bits`.
        const uint8_t* mb = words + 8 * wi;
        for (int j = 0; j < 8; j += 4) {
          const uint64_t c0 = cbase + 8 * uint64_t(j);
          if constexpr (kStep == kPerBlock) dec.group.at(c0);  // 32 | c0: one group
          const unsigned m0 = mb[j], m1 = mb[j + 1], m2 = mb[j + 2], m3 = mb[j + 3];
          const uint64_t k1 = k + uint64_t(_mm_popcnt_u32(m0)), k2 = k1 + uint64_t(_mm_popcnt_u32(m1));
          const uint64_t k3 = k2 + uint64_t(_mm_popcnt_u32(m2));
          sink.template chunk<0>(dec.template expand<kStore>(t, m0, src, k, c0), c0);
          sink.template chunk<1>(dec.template expand<kStore>(t, m1, src, k1, c0 + 8), c0 + 8);
          sink.template chunk<2>(dec.template expand<kStore>(t, m2, src, k2, c0 + 16), c0 + 16);
          sink.template chunk<3>(dec.template expand<kStore>(t, m3, src, k3, c0 + 24), c0 + 24);
          k = k3 + uint64_t(_mm_popcnt_u32(m3));
        }
      } else {
        // The row's last, partial word: bits past cols are ignored and x is not read there.
        const uint64_t bits = load_u64(words + 8 * wi) & last_word_mask(cols);
        if constexpr (grouped<VT>() && kStep == kPerWord) dec.group.at(cbase);
        for (uint64_t c0 = cbase; c0 < cols; c0 += 8) {
          if constexpr (kStep == kPerBlock) dec.group.at(c0);
          const unsigned m = unsigned(bits >> (c0 - cbase)) & 0xFF;
          const __m256 v = dec.template expand<kStore>(t, m, src, k, c0);
          k += uint64_t(_mm_popcnt_u32(m));
          if (c0 + 8 <= cols) sink.template chunk<0>(v, c0);
          else sink.partial(v, c0, cols - c0);
        }
      }
    }
  }
}

template <ValueType VT, GroupStep kStep, typename Sink>
inline void walk_dense_row(const TensorView& w, uint64_t r, RowDecoder<VT, kStep>& dec, Sink& sink,
                           BlockScratch& scratch) {
  const ExpandTables& t = expand_tables();
  const uint64_t cols = w.layout.cols;
  const uint8_t* values = w.values();
  constexpr uint64_t vb = value_bytes(VT);
  // int4 rows that start on a byte boundary read their nibbles in place; the others (odd
  // row·cols, so odd cols) are unpacked one 4096-column segment at a time.
  const bool unpack = VT == ValueType::I4 && (r * cols) % 2 != 0;
  const uint64_t seg_cols = unpack ? kIndexBlockCols : cols;
  for (uint64_t s0 = 0; s0 < cols; s0 += seg_cols) {
    const uint64_t s1 = std::min(cols, s0 + seg_cols);
    const uint8_t* src = values;
    uint64_t k = r * cols + s0;  // stored value of column s0, relative to src
    if (unpack) {
      unpack_nibbles(values, k, s1 - s0, scratch.bytes);
      src = scratch.bytes;
      k = 0;
    }
    uint64_t c0 = s0;
    // Full chunks of [s0, s1); `chunk(k, c)` decodes the 8 values at stored value k / column c.
    auto run = [&](auto&& chunk) {
      for (; c0 + 32 <= s1; c0 += 32, k += 32) {
        if constexpr (VT != ValueType::I4) {
          for (uint64_t b = 0; b < 32 * vb; b += 64) prefetch(src + k * vb + kPrefetchBytes + b);
        }
        if constexpr (grouped<VT>() && (kStep == kPerWord || kStep == kPerBlock)) dec.group.at(c0);  // 32 | c0: one group
        sink.template chunk<0>(chunk(k, c0), c0);
        sink.template chunk<1>(chunk(k + 8, c0 + 8), c0 + 8);
        sink.template chunk<2>(chunk(k + 16, c0 + 16), c0 + 16);
        sink.template chunk<3>(chunk(k + 24, c0 + 24), c0 + 24);
      }
      for (; c0 + 8 <= s1; c0 += 8, k += 8) {
        if constexpr (grouped<VT>() && (kStep == kPerWord || kStep == kPerBlock)) dec.group.at(c0);
        sink.template chunk<0>(chunk(k, c0), c0);
      }
    };
    if (VT == ValueType::I4 && !unpack) {
      // In place: stored value k = r·cols + c (even) sits in byte k/2.
      const uint8_t* nibbles = values + (r * cols) / 2;
      for (; c0 + 32 <= s1; c0 += 32) {
        const uint8_t* p = nibbles + c0 / 2;  // 4 bytes per chunk
        if ((c0 & 127) == 0) prefetch(p + kPrefetchBytes);
        if constexpr (kStep == kPerWord) dec.group.at(c0);
        sink.template chunk<0>(dec.dense_nibbles(p, c0), c0);
        sink.template chunk<1>(dec.dense_nibbles(p + 4, c0 + 8), c0 + 8);
        sink.template chunk<2>(dec.dense_nibbles(p + 8, c0 + 16), c0 + 16);
        sink.template chunk<3>(dec.dense_nibbles(p + 12, c0 + 24), c0 + 24);
      }
      for (; c0 + 8 <= s1; c0 += 8) {
        if constexpr (kStep == kPerWord) dec.group.at(c0);
        sink.template chunk<0>(dec.dense_nibbles(nibbles + c0 / 2, c0), c0);
      }
    } else {
      run([&](uint64_t kk, uint64_t c) { return dec.dense(t, src, kk, c); });
    }
    if (c0 < s1) {
      // Fewer than 8 columns left in the row: decode them one by one (no read past the row).
      alignas(32) float tail[8] = {};
      for (uint64_t c = c0; c < s1; ++c) tail[c - c0] = dec.dense_scalar(values, r * cols + c, c);
      sink.partial(_mm256_load_ps(tail), c0, s1 - c0);
    }
  }
}

template <ValueType VT, GroupStep kStep, typename Sink>
inline void walk_row(const TensorView& w, uint64_t r, RowDecoder<VT, kStep>& dec, Sink& sink,
                     BlockScratch& scratch) {
  if (w.layout.encoding == Encoding::Bitmap) walk_bitmap_row(w, r, dec, sink, scratch);
  else walk_dense_row(w, r, dec, sink, scratch);
}

// ---- entry points ----------------------------------------------------------------------------

template <ValueType VT, GroupStep kStep, int NT>
void dot_rows_t(const TensorView& w, uint64_t r0, uint64_t r1, const float* x, size_t xs, float* y, size_t ys) {
  BlockScratch scratch;
  thread_local std::vector<float> coded;  // int4k params of the current row (grown once per thread)
  for (uint64_t r = r0; r < r1; ++r) {
    RowDecoder<VT, kStep> dec(w, r, coded);
    DotSink<NT> sink{Accumulators<NT>(x, xs)};
    walk_row(w, r, dec, sink, scratch);
    sink.acc.store(y, ys, r, dec.row_scale);
  }
}

template <ValueType VT, GroupStep kStep>
void dot_rows_vt(const TensorView& w, uint64_t r0, uint64_t r1, const float* x, size_t xs, size_t nt, float* y,
                 size_t ys) {
  with_token_count(nt, [&](auto n) { dot_rows_t<VT, kStep, decltype(n)::value>(w, r0, r1, x, xs, y, ys); });
}

void dot_rows(const TensorView& w, uint64_t r0, uint64_t r1, const float* x, size_t xs, size_t nt, float* y,
              size_t ys) {
  switch (w.layout.value_type) {
    case ValueType::F16: return dot_rows_vt<ValueType::F16, kPerWord>(w, r0, r1, x, xs, nt, y, ys);
    case ValueType::BF16: return dot_rows_vt<ValueType::BF16, kPerWord>(w, r0, r1, x, xs, nt, y, ys);
    case ValueType::F32: return dot_rows_vt<ValueType::F32, kPerWord>(w, r0, r1, x, xs, nt, y, ys);
    case ValueType::I8: return dot_rows_vt<ValueType::I8, kPerWord>(w, r0, r1, x, xs, nt, y, ys);
    case ValueType::I4:
      switch (group_step(w.layout.group_size)) {
        case kPerWord: return dot_rows_vt<ValueType::I4, kPerWord>(w, r0, r1, x, xs, nt, y, ys);
        case kPerBlock:  // int8g's only (int8g_group_step)
        case kPerChunk: return dot_rows_vt<ValueType::I4, kPerChunk>(w, r0, r1, x, xs, nt, y, ys);
        case kPerLane: return dot_rows_vt<ValueType::I4, kPerLane>(w, r0, r1, x, xs, nt, y, ys);
      }
      return;
    case ValueType::I8G:
      switch (int8g_group_step(w.layout.group_size)) {
        case kPerWord: return dot_rows_vt<ValueType::I8G, kPerWord>(w, r0, r1, x, xs, nt, y, ys);
        case kPerBlock: return dot_rows_vt<ValueType::I8G, kPerBlock>(w, r0, r1, x, xs, nt, y, ys);
        case kPerChunk: return dot_rows_vt<ValueType::I8G, kPerChunk>(w, r0, r1, x, xs, nt, y, ys);
        case kPerLane: return dot_rows_vt<ValueType::I8G, kPerLane>(w, r0, r1, x, xs, nt, y, ys);
      }
      return;
  }
}

template <ValueType VT, GroupStep kStep>
void decode_rows_t(const TensorView& w, uint64_t r0, uint64_t r1, float* out) {
  BlockScratch scratch;
  const uint64_t cols = w.layout.cols;
  thread_local std::vector<float> coded;  // int4k params of the current row (grown once per thread)
  for (uint64_t r = r0; r < r1; ++r) {
    RowDecoder<VT, kStep> dec(w, r, coded);
    StoreSink sink{out + (r - r0) * cols, _mm256_set1_ps(dec.row_scale)};
    walk_row(w, r, dec, sink, scratch);
  }
}

void decode_rows(const TensorView& w, uint64_t r0, uint64_t r1, float* out) {
  switch (w.layout.value_type) {
    case ValueType::F16: return decode_rows_t<ValueType::F16, kPerWord>(w, r0, r1, out);
    case ValueType::BF16: return decode_rows_t<ValueType::BF16, kPerWord>(w, r0, r1, out);
    case ValueType::F32: return decode_rows_t<ValueType::F32, kPerWord>(w, r0, r1, out);
    case ValueType::I8: return decode_rows_t<ValueType::I8, kPerWord>(w, r0, r1, out);
    case ValueType::I4:
      switch (group_step(w.layout.group_size)) {
        case kPerWord: return decode_rows_t<ValueType::I4, kPerWord>(w, r0, r1, out);
        case kPerBlock:  // int8g's only (int8g_group_step)
        case kPerChunk: return decode_rows_t<ValueType::I4, kPerChunk>(w, r0, r1, out);
        case kPerLane: return decode_rows_t<ValueType::I4, kPerLane>(w, r0, r1, out);
      }
      return;
    case ValueType::I8G:
      switch (int8g_group_step(w.layout.group_size)) {
        case kPerWord: return decode_rows_t<ValueType::I8G, kPerWord>(w, r0, r1, out);
        case kPerBlock: return decode_rows_t<ValueType::I8G, kPerBlock>(w, r0, r1, out);
        case kPerChunk: return decode_rows_t<ValueType::I8G, kPerChunk>(w, r0, r1, out);
        case kPerLane: return decode_rows_t<ValueType::I8G, kPerLane>(w, r0, r1, out);
      }
      return;
  }
}

// ---- 16-bit decode (decode_u16) ----------------------------------------------------------------

// Bitmap f16/bf16 rows to their 16-bit values: per chunk one 16-byte load and one vpshufb.
void decode_rows_u16(const TensorView& w, uint64_t r0, uint64_t r1, uint16_t* out) {
  const TensorLayout& L = w.layout;
  const uint8_t* values = w.values();
  if (L.encoding == Encoding::Dense) {
    std::memcpy(out, values + 2 * r0 * L.cols, 2 * (r1 - r0) * L.cols);
    return;
  }
  const ExpandTables& t = expand_tables();
  const uint64_t wpr = L.words_per_row, bpr = L.blocks_per_row, cols = L.cols;
  BlockScratch scratch;
  for (uint64_t r = r0; r < r1; ++r) {
    uint16_t* dst = out + (r - r0) * cols;
    const uint8_t* words = w.data + L.bitmap_offset + 8 * r * wpr;
    for (uint64_t b = 0; b < bpr; ++b) {
      const uint64_t flat = r * bpr + b;
      const uint64_t k0 = load_u32(w.data + L.index_offset + 4 * flat);
      const uint64_t k1 = flat + 1 < L.rows * bpr ? load_u32(w.data + L.index_offset + 4 * (flat + 1)) : L.nnz;
      const uint8_t* src = values + 2 * k0;
      if (k1 + kOverreadValues > L.nnz) {  // the tensor's last values: read from a padded copy
        std::memcpy(scratch.bytes, src, 2 * (k1 - k0));
        src = scratch.bytes;
      }
      uint64_t k = 0;
      const uint64_t w_end = std::min(wpr, (b + 1) * (kIndexBlockCols / 64));
      for (uint64_t wi = b * (kIndexBlockCols / 64); wi < w_end; ++wi) {
        const uint64_t cbase = 64 * wi;
        const uint64_t bits = load_u64(words + 8 * wi) & (wi + 1 == wpr ? last_word_mask(cols) : ~uint64_t(0));
        for (uint64_t c0 = cbase; c0 < std::min(cols, cbase + 64); c0 += 8) {
          const unsigned m = unsigned(bits >> (c0 - cbase)) & 0xFF;
          const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * k));
          const __m128i e = _mm_shuffle_epi8(v, _mm_load_si128(reinterpret_cast<const __m128i*>(t.halves[m])));
          if (c0 + 8 <= cols) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + c0), e);
          } else {
            alignas(16) uint16_t tail[8];
            _mm_store_si128(reinterpret_cast<__m128i*>(tail), e);
            std::memcpy(dst + c0, tail, 2 * (cols - c0));
          }
          k += uint64_t(_mm_popcnt_u32(m));
        }
      }
    }
  }
}

// ---- dense f32 block product ----------------------------------------------------------------------

// RB rows × TB tokens of y, eight k-lanes per accumulator.
template <int RB, int TB>
inline void dense_block(const float* a, size_t as, size_t k, const float* x, size_t xs, float* y, size_t ys) {
  __m256 acc[RB][TB];
  for (int i = 0; i < RB; ++i)
    for (int t = 0; t < TB; ++t) acc[i][t] = _mm256_setzero_ps();
  size_t c = 0;
  for (; c + 8 <= k; c += 8) {
    __m256 xv[TB];
    for (int t = 0; t < TB; ++t) xv[t] = _mm256_loadu_ps(x + t * xs + c);
    for (int i = 0; i < RB; ++i) {
      const __m256 av = _mm256_loadu_ps(a + i * as + c);
      for (int t = 0; t < TB; ++t) acc[i][t] = _mm256_fmadd_ps(av, xv[t], acc[i][t]);
    }
  }
  if (c < k) {
    const __m256i lanes = first_lanes(k - c);
    __m256 xv[TB];
    for (int t = 0; t < TB; ++t) xv[t] = _mm256_maskload_ps(x + t * xs + c, lanes);
    for (int i = 0; i < RB; ++i) {
      const __m256 av = _mm256_maskload_ps(a + i * as + c, lanes);
      for (int t = 0; t < TB; ++t) acc[i][t] = _mm256_fmadd_ps(av, xv[t], acc[i][t]);
    }
  }
  for (int i = 0; i < RB; ++i)
    for (int t = 0; t < TB; ++t) y[t * ys + i] = hsum(acc[i][t]);
}

void dense_dot(const float* a, size_t as, size_t n_rows, size_t k, const float* x, size_t xs, size_t n_tokens,
               float* y, size_t ys) {
  constexpr size_t kTokenBlock = 16;  // x slice reused across the row blocks while in cache
  for (size_t t0 = 0; t0 < n_tokens; t0 += kTokenBlock) {
    const size_t t1 = std::min(n_tokens, t0 + kTokenBlock);
    size_t n = 0;
    for (; n + 4 <= n_rows; n += 4) {
      size_t t = t0;
      for (; t + 2 <= t1; t += 2) dense_block<4, 2>(a + n * as, as, k, x + t * xs, xs, y + t * ys + n, ys);
      for (; t < t1; ++t) dense_block<4, 1>(a + n * as, as, k, x + t * xs, xs, y + t * ys + n, ys);
    }
    for (; n < n_rows; ++n) {
      size_t t = t0;
      for (; t + 4 <= t1; t += 4) dense_block<1, 4>(a + n * as, as, k, x + t * xs, xs, y + t * ys + n, ys);
      for (; t < t1; ++t) dense_block<1, 1>(a + n * as, as, k, x + t * xs, xs, y + t * ys + n, ys);
    }
  }
}

}  // namespace
}  // namespace endor::cpu::detail
