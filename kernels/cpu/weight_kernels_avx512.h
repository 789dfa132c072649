// Internal to the AVX-512 kernel files (weight_kernels_avx512*.cpp): the helpers both the
// f32/f16-activation kernels and the int8-activation (VNNI) kernels are built from: expand-loads,
// mask loads, prefetch distances, int4 nibble unpacking, per-thread scratch, and the per-row group
// parameters of int4 (Groups) and int8g (BlockScales) weights.
//
// Include only from a translation unit compiled with at least -mavx512{f,bw,vl,dq,vbmi,vbmi2} (and
// AVX2/FMA/F16C/POPCNT), which isa.cpp calls into only on CPUs that report every one of them.
// Everything here has internal linkage (an unnamed namespace): each kernel file is compiled with
// its own ISA flags, and an inline function with external linkage would be merged by the linker
// into one copy compiled under whichever file's flags it picked (the VNNI files' flags are a
// superset). It also keeps what the single file had: direct calls to the noinline helpers and
// thread_local scratch of local linkage, so the kernels compile as they did. Each file therefore
// has its own scratch slots (thread_buffer), which no kernel relies on across files.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>

#include "weight_kernels.h"

namespace endor::cpu::detail {

// The int8-activation entry point of the VNNI files (weight_kernels_avx512_vnni.cpp): call only
// when the CPU reports AVX-512 VNNI (avx512_kernels' dot_rows_q8 checks, else the AVX2 kernel).
namespace avx512_vnni {
void dot_rows_q8(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, size_t nt, float* y, size_t ys);
}  // namespace avx512_vnni

namespace {

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
  // Two super-blocks a step (16 scales, 16 mins): their 24 code bytes gathered into 32 16-bit lanes
  // by one vpermb, and their four f16 (d, dmin) widened by one vcvtph2ps and placed per lane by
  // vpermps; the step below (one super-block, its d and dmin by the scalar conversion) takes a
  // third of the instructions per parameter more, which on a dense int4k decode (a parameter per
  // 32 weights) was as much as the product itself (perf: widen_params 44 %, the kernel 38 % on the
  // Qwen3-MoE shape). Same products, so the same floats.
  {
    alignas(64) static constexpr uint8_t kPairs2[64] = {
        0,  1,  0,  1,  1,  2,  2,  3,  3,  4,  3,  4,  4,  5,  5,  6,  6,  7,  6,  7,  7,  8,
        8,  9,  9,  10, 9,  10, 10, 11, 11, 12, 12, 13, 12, 13, 13, 14, 14, 15, 15, 16, 15, 16,
        16, 17, 17, 18, 18, 19, 18, 19, 19, 20, 20, 21, 21, 22, 21, 22, 22, 23, 23, 24};
    alignas(64) static constexpr int32_t kLaneOf[2][16] = {{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
                                                           {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3}};
    const __m512i pairs2 = _mm512_load_si512(kPairs2);
    const __m512i shifts2 = _mm512_broadcast_i64x4(shifts);
    const __m512i six2 = _mm512_set1_epi16(63);
    const __m512i lane0 = _mm512_load_si512(kLaneOf[0]), lane1 = _mm512_load_si512(kLaneOf[1]);
    const __m128 negate_mins = _mm_castsi128_ps(_mm_setr_epi32(0, int(0x80000000u), 0, int(0x80000000u)));
    for (; i + 2 * kInt4kSuperGroups <= n; i += 2 * kInt4kSuperGroups) {
      const uint64_t b = (p0 + i) / kInt4kSuperGroups;
      const __m512i bytes = _mm512_castsi256_si512(_mm256_maskz_loadu_epi8(__mmask32(0x00FFFFFF), codes + kInt4kCodeBytes * b));
      const __m512i c16 = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi8(pairs2, bytes), shifts2), six2);
      const __m512 c0 = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(c16)));
      const __m512 c1 = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(c16, 1)));
      // (d0, -dmin0, d1, -dmin1): exact widening, then the mins' sign.
      const __m128 dd = _mm_xor_ps(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(super + 2 * b))), negate_mins);
      const __m512 v0 = _mm512_mul_ps(c0, _mm512_permutexvar_ps(lane0, _mm512_castps128_ps512(dd)));
      const __m512 v1 = _mm512_mul_ps(c1, _mm512_permutexvar_ps(lane1, _mm512_castps128_ps512(dd)));
      _mm256_storeu_ps(scales + i, _mm512_castps512_ps256(v0));
      _mm256_storeu_ps(mins + i, _mm512_extractf32x8_ps(v0, 1));
      _mm256_storeu_ps(scales + i + kInt4kSuperGroups, _mm512_castps512_ps256(v1));
      _mm256_storeu_ps(mins + i + kInt4kSuperGroups, _mm512_extractf32x8_ps(v1, 1));
    }
  }
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

}  // namespace
}  // namespace endor::cpu::detail
