// AVX-512 (F, BW, VL, DQ, VBMI, VBMI2) fused decode-multiply kernels. This translation unit alone is
// compiled with those flags; isa.cpp calls into it only on CPUs that report all of them.
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
// then multiplied into 16-lane accumulators. Only dot_rows (and int8g's decode_rows) is implemented
// here; decode_rows, decode_rows_u16 and dense_dot, int4 tensors whose group size is not a multiple
// of 64 and int8g ones whose group size is not a multiple of 32, use the AVX2 kernels.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>

#include "weight_kernels.h"

namespace endor::cpu::detail {
namespace {

constexpr uint64_t value_bytes(ValueType vt) {
  return vt == ValueType::F32 ? 4 : (vt == ValueType::F16 || vt == ValueType::BF16) ? 2 : 1;
}

inline __m512 half_to_ps(__m256i h) { return _mm512_cvtph_ps(h); }
inline __m512 bfloat_to_ps(__m256i b) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)); }
// A zeroed register the compiler cannot see is zero. On Zen 4 a zero-masked vpexpandb/w waits for
// its destination register's previous value (same register: ~5 cycles an expand; eight registers
// in turn, or a zero idiom first: ~1.5), so expands merge into one of these instead ({z} form
// semantics). GCC may run the zero idiom once and copy its register before each expand; either way
// the expand's destination is written from a zero that is ready, not by the previous expand.
inline __m512i fresh_zero512() {
  __m512i z;
  asm("vpxord %x0, %x0, %x0" : "=v"(z));
  return z;
}
inline __m256i fresh_zero256() {
  __m256i z;
  asm("vpxord %x0, %x0, %x0" : "=v"(z));
  return z;
}
// Expand-loads with the {z} form's result (lanes without a mask bit 0), merged into a fresh zero.
inline __m512i expandload_epi8(__mmask64 k, const void* p) { return _mm512_mask_expandloadu_epi8(fresh_zero512(), k, p); }
inline __m256i expandload_epi16(__mmask16 k, const void* p) { return _mm256_mask_expandloadu_epi16(fresh_zero256(), k, p); }
inline __m512 expandload_ps(__mmask16 k, const float* p) {
  return _mm512_mask_expandloadu_ps(_mm512_castsi512_ps(fresh_zero512()), k, p);
}
// out[i] = f32 of the f16 h[i], i < n (a group table's scales or mins, widened once per chunk of rows).
// Not inlined: it runs once a chunk, and inlined it cost the int4 kernels around it 3-5 % a row
// (bench_kernels --rows, alternating builds), by the compiler's choices for their loops.
__attribute__((noinline)) void widen_halves(const uint16_t* h, uint64_t n, float* out) {
  uint64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
  if (i < n) _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(__mmask16((1u << (n - i)) - 1), h + i)));
}
// The f32 scales and mins of int4 parameters [p0, p0 + n): f16 widened, or int4k's codes expanded
// (SPEC.md §6.7, the format library's scalar expansion: one parameter per 32 or more weights).
// int4k: the super-blocks wholly inside [p0, p0 + n) expanded 8 parameters at a time (the 16 six-bit
// codes of 12 bytes gathered into 16-bit lanes by one vpermb, shifted per lane, masked, widened and
// multiplied by d or −dmin: the same exact products as int4_params_f32); partial ones by it.
__attribute__((noinline)) void widen_params(const TensorView& w, uint64_t p0, uint64_t n, float* scales, float* mins) {
  if (w.layout.int4_params != Int4Params::Coded6) {
    widen_halves(w.group_scales() + p0, n, scales);
    widen_halves(w.group_mins() + p0, n, mins);
    return;
  }
  const uint64_t head = std::min(n, (kInt4kSuperGroups - p0 % kInt4kSuperGroups) % kInt4kSuperGroups);
  if (head) int4_params_f32(w, p0, head, scales, mins);
  alignas(32) static constexpr uint8_t kPairs[32] = {0, 1, 0, 1, 1, 2, 2, 3, 3, 4, 3, 4, 4, 5, 5, 6,
                                                     6, 7, 6, 7, 7, 8, 8, 9, 9, 10, 9, 10, 10, 11, 11, 12};
  alignas(32) static constexpr uint16_t kShifts[16] = {0, 6, 4, 2, 0, 6, 4, 2, 0, 6, 4, 2, 0, 6, 4, 2};
  const __m256i pairs = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairs));
  const __m256i shifts = _mm256_load_si256(reinterpret_cast<const __m256i*>(kShifts));
  const __m256i six = _mm256_set1_epi16(63);
  const uint16_t* super = w.super_scales();
  const uint8_t* codes = w.param_codes();
  uint64_t i = head;
  for (; i + kInt4kSuperGroups <= n; i += kInt4kSuperGroups) {
    const uint64_t b = (p0 + i) / kInt4kSuperGroups;
    const __m128i bytes = _mm_maskz_loadu_epi8(__mmask16(0x0FFF), codes + kInt4kCodeBytes * b);
    const __m256i c16 = _mm256_and_si256(
        _mm256_srlv_epi16(_mm256_permutexvar_epi8(pairs, _mm256_castsi128_si256(bytes)), shifts), six);
    const __m512 c = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(c16));
    const float d = half_to_f32(super[2 * b]), dmin = half_to_f32(super[2 * b + 1]);
    const __m512 mul = _mm512_insertf32x8(_mm512_set1_ps(d), _mm256_set1_ps(-dmin), 1);
    const __m512 v = _mm512_mul_ps(c, mul);
    _mm256_storeu_ps(scales + i, _mm512_castps512_ps256(v));
    _mm256_storeu_ps(mins + i, _mm512_extractf32x8_ps(v, 1));
  }
  if (i < n) int4_params_f32(w, p0 + i, n - i, scales + i, mins + i);
}
inline __mmask16 lanes16(uint64_t bits, int i) { return __mmask16(bits >> (16 * i)); }
inline uint64_t first_bits(uint64_t n) { return n >= 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1; }

// A bitmap word's masks loaded straight into mask registers (kmov k, m: a load µop) rather than
// moved from the general register that also feeds popcnt (kmov k, r: a µop on port 5, the port the
// expands, permutes and conversions of every kernel here queue on; bitmap f16 streams 4-5 % faster).
// Inline asm, because the compiler otherwise merges the two loads of the same address into one
// and moves. The asm takes the address, not an "m" operand (which made GCC keep the accumulators
// in memory across the word loop): the bitmap is read-only while a kernel runs, so nothing the
// compiler could reorder the asm across writes it. p = nullptr: the mask of `bits` (a word cut to
// the row's end, which is not in memory).
inline __mmask64 mask64_load(const uint8_t* p) {
  __mmask64 k;
  asm("kmovq (%1), %0" : "=k"(k) : "r"(p));
  return k;
}
inline __mmask64 mask64_at(const uint8_t* p, uint64_t bits) { return p ? mask64_load(p) : __mmask64(bits); }
inline __mmask32 mask32_at(const uint8_t* p, uint64_t bits) {
  if (!p) return __mmask32(bits);
  __mmask32 k;
  asm("kmovd (%1), %0" : "=k"(k) : "r"(p));
  return k;
}
inline __mmask16 mask16_at(const uint8_t* p, uint64_t bits) {
  if (!p) return __mmask16(bits);
  __mmask16 k;
  asm("kmovw (%1), %0" : "=k"(k) : "r"(p));
  return k;
}

// Software prefetch distance on the weight streams. The hardware prefetchers alone left the bitmap
// kernels at ~60 % of the bandwidth a dense stream gets on one core (several interleaved streams,
// data-dependent strides); 4 KiB ahead on the values (and the same time ahead on the bitmap, 1/8
// of the bytes for f16) brought them level with dense (bench/RESULTS.md, "CPU kernels").
constexpr uint64_t kPrefetchBytes = 4096;
__attribute__((always_inline)) inline void prefetch(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
// The streams of the dense kernels and of every int8-activation kernel are prefetched into L2
// instead, twice as far ahead: on the 2026-11-25 machine (AMD EPYC, Zen 4) an L1 prefetch 4 KiB
// ahead held one core's dense f16 stream at 11 GB/s, below the 22 GB/s it gets with no software
// prefetch at all, and L2 prefetches 8 KiB ahead reach 29 GB/s (its read probe: ~29 GB/s per core);
// bitmap int8/int4 with int8 activations 11.6 -> 13.9 and 6.7 -> 8.3 GB/s. The f32-activation
// bitmap kernels keep the L1 prefetch (the L2 one made bitmap f16 12.2 -> 9.5 GB/s).
// (bench_kernels --stream, bench/RESULTS.md "CPU kernels".)
constexpr uint64_t kPrefetchL2Bytes = 8192;
__attribute__((always_inline)) inline void prefetch_l2(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1); }

// int4 codes of stored values [k0, k0 + n) as one byte each, 0x10 | code (the flag marks the value
// as present for the table lookup of int4_word): code k0 + i lands in out[(k0 & 1) + i] (the
// source is read from the byte holding code k0, so an odd k0 leaves its byte's low nibble in
// out[0]). Whole 64-byte stores: out needs n + 129 bytes. Reads only the bytes that hold the codes
// (masked loads). Low nibble first (SPEC.md).
//
// Per 32 source bytes: dword i (codes 8i..8i+7) is widened into qword i, and vpmultishiftqb
// (VBMI) pulls the 4-bit field at bit 4t of that qword into its byte t; the mask and the flag are
// one ternary-logic op. Three vector µops per 64 codes.
// kFlag = false: the bare codes (the int8-activation kernels, which take presence from the bitmap).
template <bool kFlag = true>
__attribute__((always_inline)) inline void unpack_nibbles(const uint8_t* values, uint64_t k0, uint64_t n, uint8_t* out) {
  const uint8_t* src = values + k0 / 2;
  const uint64_t n_bytes = ((k0 & 1) + n + 1) / 2;
  const __m512i fields = _mm512_set1_epi64(0x1C1814100C080400LL);  // bit offsets 0, 4, ..., 28
  const __m512i lo4 = _mm512_set1_epi8(0x0F), flag = _mm512_set1_epi8(kFlag ? 0x10 : 0);
  auto unpack32 = [&](__m256i bytes, uint64_t j) {
    const __m512i codes = _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(fields, _mm512_cvtepu32_epi64(bytes)), lo4, flag, 0xEA);  // (a & b) | c
    _mm512_storeu_si512(out + 2 * j, codes);
  };
  uint64_t j = 0;
  for (; j + 32 <= n_bytes; j += 32) {  // whole 32-byte steps: plain loads, no mask to build
    prefetch_l2(src + j + kPrefetchL2Bytes);
    unpack32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j)), j);
  }
  if (j < n_bytes) unpack32(_mm256_maskz_loadu_epi8(__mmask32(first_bits(n_bytes - j)), src + j), j);
}

// Scratch for one 4096-column block of int4 codes (plus the odd-nibble shift and a full 64-byte
// load past the last code).
struct CodeScratch {
  alignas(64) uint8_t bytes[kIndexBlockCols + 2 * 64];
  float* groups = nullptr;  // a row's group scales and mins as f32 (Groups, BlockScales), thread scratch slot 1
};

// At least n floats of this thread's scratch slot, 64-byte aligned; valid until the slot's next
// call on this thread.
template <int Slot>
inline float* thread_buffer(size_t n) {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<float, Free> buffer;
  thread_local size_t capacity = 0;
  if (n > capacity) {
    capacity = (n + 1023) / 1024 * 1024;
    buffer.reset(static_cast<float*>(std::aligned_alloc(64, capacity * sizeof(float))));
    if (!buffer) throw std::bad_alloc();
  }
  return buffer.get();
}

// int4 decode table of the group under the current word of one row: table[q] = fma(q, s, m), the
// reference decoder's q·s + m (q·s is exact, so it rounds once either way). group_size % 64 == 0,
// so a word never straddles two groups; columns only grow, so the group advances without a division.
// The row's scales and mins are widened to f32 once per row (thread scratch), so a new group's
// table is one fma with two broadcast loads rather than two scalar half conversions and two
// register broadcasts on the shuffle port.
struct Groups {
  const float* s = nullptr;  // the next group's scale as f32
  const float* m = nullptr;  // and its min
  uint64_t words_per_group = 1, left = 0;
  __m512 table = _mm512_setzero_ps();
  Groups() = default;
  // buf: room for 2 · padded_groups(w) floats (the row's scales, then its mins), reused row after
  // row (taken once per call: thread_local storage costs a call per access in a shared library).
  __attribute__((always_inline)) Groups(const TensorView& w, uint64_t r, float* buf) : words_per_group(w.layout.group_size / 64) {
    const uint64_t gpr = w.layout.groups_per_row, padded = padded_groups(w);
    widen_params(w, r * gpr, gpr, buf, buf + padded);
    s = buf;
    m = buf + padded;
  }
  static uint64_t padded_groups(const TensorView& w) { return (w.layout.groups_per_row + 15) / 16 * 16; }
  // Called once per word, in column order: a new group's table every group_size / 64 words.
  inline void next_word() {
    if (left == 0) {
      const __m512 q = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
      table = _mm512_fmadd_ps(q, _mm512_set1_ps(*s++), _mm512_set1_ps(*m++));
      left = words_per_group;
    }
    --left;
  }
};

// int8g in groups of a multiple of 32 other than 32, 64 and 128 (those read their f16 scales in
// place, BlockScales): the scale of every 32-column activation block of a row, out[b] = S of block
// b's group as f32 for b < 2·⌈cols/64⌉ (a row's whole words; 0 for a block past the row's groups,
// where codes and x are 0). group_size % 32 == 0, so a block never straddles two groups. Built
// once per row, so that a word's two scales are two loads at a fixed stride.
inline uint64_t int8g_blocks(const TensorLayout& L) { return 2 * ((L.cols + 63) / 64); }
inline uint64_t block_scale_floats(const TensorView& w) {
  return (int8g_blocks(w.layout) + 15) / 16 * 16 + (w.layout.groups_per_row + 15) / 16 * 16;
}
__attribute__((noinline)) void row_block_scales(const TensorView& w, uint64_t r, float* out) {
  const TensorLayout& L = w.layout;
  const uint64_t gpr = L.groups_per_row, per = L.group_size / kActBlock, blocks = int8g_blocks(L);
  float* s = out + (blocks + 15) / 16 * 16;  // the row's group scales
  widen_halves(w.group_scales() + r * gpr, gpr, s);
  for (uint64_t b = 0; b < blocks; ++b) out[b] = b / per < gpr ? s[b / per] : 0.0f;
}
// A word's scale vector from its two block scales: lanes 0-7 block 2w (columns 0-31 of the word),
// lanes 8-15 block 2w + 1, the lanes of int4_word's strided order and of a word's vpdpbusd alike.
inline __m512 word_scale_vec(const float* b) {
  return _mm512_mask_broadcastss_ps(_mm512_set1_ps(b[0]), __mmask16(0xFF00), _mm_load_ss(b + 1));
}
// A word's scale vector from f16 scales where they lie: groups ga (lanes 0-7) and gb (8-15).
inline __m512 word_scale_vec_f16(const uint16_t* gs, uint64_t ga, uint64_t gb) {
  return _mm512_cvtph_ps(_mm256_mask_set1_epi16(_mm256_set1_epi16(short(gs[ga])), __mmask16(0xFF00), short(gs[gb])));
}
// The scale vectors of a row's words in turn. Groups of 32, 64 or 128 columns: read as f16 where
// they lie (block b's group is b >> shift; no per-row table, which on short rows costs as much as
// the row); other multiples of 32: from the row's table of block scales (row_block_scales).
struct BlockScales {
  const float* b = nullptr;      // table mode: the next word's two block scales
  const uint16_t* gs = nullptr;  // f16 mode: the row's scales
  uint64_t wi = 0, shift = 0, last = 0;  // f16 mode: the next word, log2(blocks a group), the last group
  __m512 vec = _mm512_setzero_ps();  // the current word's (next_word)
  BlockScales() = default;
  // buf: room for block_scale_floats(w) (table mode only), reused row after row.
  __attribute__((always_inline)) BlockScales(const TensorView& w, uint64_t r, float* buf) {
    const TensorLayout& L = w.layout;
    if (L.group_size == 32 || L.group_size == 64 || L.group_size == 128) {
      gs = w.group_scales() + r * L.groups_per_row;
      shift = L.group_size == 32 ? 0 : L.group_size == 64 ? 1 : 2;
      last = L.groups_per_row - 1;
    } else {
      b = buf;
      row_block_scales(w, r, buf);
    }
  }
  // Called once per word, in column order.
  __attribute__((always_inline)) inline void next_word() {
    if (gs) {
      // The second block of a row's last word may lie past its groups (32·odd columns in groups
      // of 32): the first block's group then (codes and x are 0 there; the next row's scale, or
      // a byte past the tensor, is not read).
      vec = word_scale_vec_f16(gs, (2 * wi) >> shift, std::min((2 * wi + 1) >> shift, last));
      ++wi;
    } else {
      vec = word_scale_vec(b);
      b += 2;
    }
  }
};
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

// ---- int8 activations: vpdpbusd (AVX-512 VNNI) ------------------------------------------------
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

bool cpu_has_vnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni");
  }();
  return has;
}

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

// Per-call tables of one token's quantized x, shared by the int8-activation kernels below.
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
// Same arithmetic as dot_rows_q8_t (the same sums in the same order per row), so the same results.
template <int WPG, bool kBitmap>
void dot_rows_q8_i4_1(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, float* y) {
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
  uint8_t* unpacked = reinterpret_cast<uint8_t*>(thread_buffer<4>((std::max(kUnpackedCodes, L.cols) + 2 * 64 + 3) / 4 + 16));
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
      if (k_next - k_a > kUnpackedCodes) break;
      ++rb;
      k_b = k_next;
    }
    if (rb < r1 && rb - ra > 4 && (rb - ra) % 4 != 0) {  // whole steps of 4 rows (the rest would take 2 + 1)
      rb = ra + (rb - ra) / 4 * 4;
      k_b = row_start(rb);
    }
    unpack_nibbles<false>(w.values(), k_a, k_b - k_a, unpacked);
    const uint8_t* const base = unpacked - (k_a & ~uint64_t(1));  // code k at base[k]
    {
      const uint64_t n = (rb - ra) * gpr;
      widen_params(w, ra * gpr, n, sm, mins);
      run_z = kBitmap && !two_of_four && zero_codes(sm, mins, n, zero_code);  // the 2:4 path reads no z
    }
    // Rows r..r+n-1 of the run: code streams, bitmap rows, widened scales and mins, zero codes.
    auto row_pointers = [&](uint64_t r, int n, const uint8_t** p, const uint8_t** bits, const float** s,
                            const float** m, const uint8_t** z) {
      for (int i = 0; i < n; ++i) {
        p[i] = base + row_start(r + i);
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
    if constexpr (VT != ValueType::I4) int8_starts(xt, words, start + t * words * 16);
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
    constexpr int kA = NT <= 2 ? 2 : 1;  // two f32 chains per token while there are few tokens
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
        for (int t = 0; t < NT; ++t) {
          const size_t at = (t * words + wi) * 16;
          const __m512i s = _mm512_dpbusd_epi32(_mm512_load_si512(start + at), u, _mm512_loadu_si512(qx.q + t * qx.q_stride + 64 * wi));
          __m512 f = _mm512_load_ps(dv + at);
          if constexpr (VT == ValueType::I8G) f = _mm512_mul_ps(f, bs.vec);  // d_b·S_g(b)
          acc[t][wi % kA] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), f, acc[t][wi % kA]);
        }
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
  if (VT == ValueType::I8G && nt == 1) {
    switch (w.layout.group_size) {
      case 32: return dot_rows_q8_i8g_1<0>(w, r0, r1, qx, y);
      case 64: return dot_rows_q8_i8g_1<1>(w, r0, r1, qx, y);
      case 128: return dot_rows_q8_i8g_1<2>(w, r0, r1, qx, y);
      default: break;  // other multiples of 32: the general kernel
    }
  }
  if (VT == ValueType::I4 && nt == 1) {
    const bool bitmap = w.layout.encoding == Encoding::Bitmap;
    switch (w.layout.group_size / 64) {  // a multiple of 64 here (dot_rows_q8)
      case 1: return bitmap ? dot_rows_q8_i4_1<1, true>(w, r0, r1, qx, y) : dot_rows_q8_i4_1<1, false>(w, r0, r1, qx, y);
      case 2:
        if (!bitmap && w.layout.cols % 2 == 0) return dot_rows_q8_i4_dense_1<1>(w, r0, r1, qx, y);
        return bitmap ? dot_rows_q8_i4_1<2, true>(w, r0, r1, qx, y) : dot_rows_q8_i4_1<2, false>(w, r0, r1, qx, y);
      case 4: return bitmap ? dot_rows_q8_i4_1<4, true>(w, r0, r1, qx, y) : dot_rows_q8_i4_1<4, false>(w, r0, r1, qx, y);
      default: break;
    }
  }
  with_token_count(nt, [&](auto n) { dot_rows_q8_t<VT, decltype(n)::value>(w, r0, r1, qx, y, ys); });
}

void dot_rows_q8(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, size_t nt, float* y, size_t ys) {
  if (!cpu_has_vnni()) return avx2_kernels().dot_rows_q8(w, r0, r1, qx, nt, y, ys);
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

}  // namespace

const WeightKernels& avx512_kernels() {
  const WeightKernels& avx2 = avx2_kernels();
  static const WeightKernels kernels{"avx512-vbmi2", decode_rows, avx2.decode_rows_u16, dot_rows, avx2.dense_dot, dot_rows_q8, dot_rows_hx};
  return kernels;
}

}  // namespace endor::cpu::detail
