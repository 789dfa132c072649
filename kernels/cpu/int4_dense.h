// Internal to endor_kernels, included by cpu_backend.cpp alone: the load-time dense copy of the
// codes of resident bitmap int4 weights (cpu::Options::int4_dense, issue 40), made by the CPU
// backend's prepare_resident_weight. Header-only so that it needs no build-file change.
//
// A packer-written int4 group has a zero code z with z·S + M = 0 exactly (endor::int4_grid), and
// the one-token bitmap kernel already multiplies a bitmap word as a dense one with its absent
// columns expanded as z (weight_kernels_avx512_vnni.h). Storing those codes once at load time leaves
// that kernel nothing to expand a token: 4/3 of the value bytes at 50 % (0.5 against 0.375 a
// weight), and the same sums in the same order, so the same results bit for bit (a resident model
// still matches the same file streamed through the offload tiers, which keep the bitmap). The copy
// (TensorView::dense_codes) is read by the AVX-512 VNNI one-token kernel and by the AVX2 kernels at
// every token count (weight_kernels_avx2_q8.h: rows with zero codes summed as dense ones over z);
// every other path reads the bitmap.
//
// Layout (dense_codes_row_bytes a row, rows back to back): words 2u and 2u + 1 of a row share the
// 64 bytes of pair u, byte b holding column b of word 2u in its low nibble and column b of word
// 2u + 1 in its high one, so one load, an and, a shift and an and give both words' codes in column
// order; a row's last word, when its count is odd, is 32 bytes of nibbles in column order (low
// nibble first, as SPEC §6.5 packs values). Columns past the row are 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>


#include "endor/format.h"
#include "endor/kernels.h"
#include "weight_kernels.h"

namespace endor::cpu::detail {

// The codes of a bitmap int4 weight (densify_int4_bitmap), 64-aligned, with 64 bytes of slack.
using DenseCodes = std::unique_ptr<uint8_t, void (*)(void*)>;

// weight_kernels_avx512_vnni_int4.cpp: dense_row below in vectors (AVX-512 VBMI2; scratch: cols + 129
// bytes), the same bytes.
namespace avx512_vnni {
void dense_codes_row(const TensorView& b, uint64_t r, const uint8_t* z, uint8_t* scratch, uint8_t* out);
}  // namespace avx512_vnni

namespace int4_dense_impl {

// ENDOR_INT4_DENSE: unset, "on" or "auto" -> Auto; "off" -> Off.
inline Int4Dense env_rule() {
  const char* env = std::getenv("ENDOR_INT4_DENSE");
  if (!env || !*env) return Int4Dense::Auto;
  const std::string s = env;
  if (s == "on" || s == "auto") return Int4Dense::Auto;
  if (s == "off") return Int4Dense::Off;
  throw Error("ENDOR_INT4_DENSE: unknown value '" + s + "' (expected on, off or auto)");
}

// A CPU whose AVX-512 int8-activation kernels run (VNNI), with VBMI2's byte expand for the copy.
inline bool avx512_vnni_cpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw");
#else
  return false;
#endif
}

// MemAvailable of /proc/meminfo in bytes, or UINT64_MAX where it cannot be read (no such file).
inline uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return UINT64_MAX;
}

// The zero code of each of the n groups (scales s, mins m as f16 bits), false when one has none:
// the exact test of zero_codes in weight_kernels_avx512_vnni.h (−M/S an integer in [0, 15] with
// z·S == −M in binary32; an empty group, S = M = 0, takes 0).
inline bool group_zero_codes(const uint16_t* s, const uint16_t* m, uint64_t n, uint8_t* z) {
  for (uint64_t g = 0; g < n; ++g)
    if (!int4_zero_code(f16_to_f32(s[g]), f16_to_f32(m[g]), z[g])) return false;
  return true;
}

// Word wi of row r as 64 code bytes, absent columns z (the group's), columns past the row z too
// (padding bits are 0). k: the word's first stored value, advanced past it.
inline void word_codes(const TensorView& b, uint64_t r, uint64_t wi, const uint8_t* z, uint64_t& k, uint8_t* codes) {
  const TensorLayout& L = b.layout;
  const uint8_t* vals = b.values();
  std::memset(codes, z[wi * 64 / L.group_size], 64);  // groups of whole words
  for (uint64_t w = b.bitmap()[r * L.words_per_row + wi]; w; w &= w - 1, ++k)
    codes[__builtin_ctzll(w)] = uint8_t(vals[k / 2] >> (4 * (k & 1)) & 15);
}

// Row r of the copy (layout above) from its bitmap, a word at a time, its set bits walked: the
// reference of avx512_vnni::dense_codes_row (tests/kernels/test_int4_dense.cpp) and the path of a CPU without
// AVX-512. k0: the row's first stored value; z: its groups' zero codes.
inline void dense_row(const TensorView& b, uint64_t r, uint64_t k0, const uint8_t* z, uint8_t* out) {
  const TensorLayout& L = b.layout;
  const uint64_t words = (L.cols + 63) / 64;
  uint64_t k = k0;
  uint8_t lo[64], hi[64];
  for (uint64_t wi = 0; wi < words; wi += 2, out += 64) {
    word_codes(b, r, wi, z, k, lo);
    for (uint64_t c = L.cols - 64 * wi; c < 64; ++c) lo[c] = 0;  // past the row
    if (wi + 1 == words) {  // the odd last word: 32 bytes in column order
      for (int j = 0; j < 32; ++j) out[j] = uint8_t(lo[2 * j] | lo[2 * j + 1] << 4);
      return;
    }
    word_codes(b, r, wi + 1, z, k, hi);
    for (uint64_t c = L.cols - 64 * (wi + 1); c < 64; ++c) hi[c] = 0;
    for (int j = 0; j < 64; ++j) out[j] = uint8_t(lo[j] | hi[j] << 4);
  }
}

}  // namespace int4_dense_impl

// Whether the rule of Options::int4_dense re-encodes on this machine with these kernels
// (kernel_name: WeightKernels::name of the set in use): unless Off or exact, where the AVX-512 or
// AVX2 int8-activation kernels run, which read the copy (the AVX-512 VNNI one-token kernel; the
// AVX2 kernels, also the AVX-512 set's on a CPU without VNNI, at every token count). The portable
// kernels do not. Throws endor::Error on a bad ENDOR_INT4_DENSE.
inline bool int4_dense_enabled(const Options& options, const char* kernel_name) {
  using namespace int4_dense_impl;
  if (options.exact) return false;  // the reference keeps every weight as stored
  Int4Dense rule = options.int4_dense;
  if (rule == Int4Dense::Auto) rule = env_rule();
  if (rule == Int4Dense::Off) return false;
  return std::strncmp(kernel_name, "avx512", 6) == 0 || std::strncmp(kernel_name, "avx2", 4) == 0;
}

// Whether a copy of `bytes` leaves this machine enough memory: MemAvailable at least the copy plus
// an eighth of it and 256 MiB. Each copy lowers MemAvailable, so a model re-encodes until memory runs
// short and keeps its other weights as bitmaps (the same results either way).
inline bool int4_dense_memory_allows(uint64_t bytes) {
  const uint64_t avail = int4_dense_impl::mem_available();
  return avail == UINT64_MAX || avail >= bytes + bytes / 8 + (uint64_t(256) << 20);
}

// The dense copy of the codes of bitmap int4 weight b (layout above; the caller sets
// TensorView::dense_codes to it), or null where it would not be the same function: value type not
// int4 with f16 parameters, groups that are not whole words (64, 128, ... columns), a 2:4 weight
// (TensorView::two_of_four: that kernel gathers x and sums in its own order), or a group without an
// exact zero code (the packer always writes one). vector: avx512_vnni::dense_codes_row (the caller checked the
// CPU), else dense_row.
inline DenseCodes densify_int4_bitmap(const TensorView& b, bool vector = false) {
  using namespace int4_dense_impl;
  const TensorLayout& L = b.layout;
  DenseCodes none{nullptr, std::free};
  if (L.encoding != Encoding::Bitmap || L.value_type != ValueType::I4 || L.int4_params != Int4Params::F16) return none;
  if (L.group_size == 0 || L.group_size % 64 != 0 || b.two_of_four) return none;
  const uint64_t gpr = L.groups_per_row;
  std::unique_ptr<uint8_t[]> z(new uint8_t[L.rows * gpr]);
  if (!group_zero_codes(b.group_scales(), b.group_mins(), L.rows * gpr, z.get())) return none;
  const uint64_t row_bytes = dense_codes_row_bytes(L.cols);
  const size_t bytes = (L.rows * row_bytes + 63) / 64 * 64 + 64;
  DenseCodes out{static_cast<uint8_t*>(std::aligned_alloc(64, bytes)), std::free};
  if (!out) throw Error("cpu backend: out of memory copying the codes of an int4 weight (" + std::to_string(bytes) + " bytes)");
  std::memset(out.get() + bytes - 64, 0, 64);
  std::unique_ptr<uint8_t[]> scratch(vector ? new uint8_t[L.cols + 192] : nullptr);
  for (uint64_t r = 0; r < L.rows; ++r) {
    uint8_t* row = out.get() + r * row_bytes;
#if defined(__x86_64__)
    if (vector) {
      avx512_vnni::dense_codes_row(b, r, z.get() + r * gpr, scratch.get(), row);
      continue;
    }
#endif
    dense_row(b, r, bitmap_row_start(b, r), z.get() + r * gpr, row);
  }
  return out;
}

}  // namespace endor::cpu::detail
