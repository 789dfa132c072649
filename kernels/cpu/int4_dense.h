// Internal to endor_kernels, included by cpu_backend.cpp alone: the load-time re-encoding of
// resident bitmap int4 weights as dense int4 (cpu::Options::int4_dense, issue 40), used by the CPU
// backend's prepare_resident_weight. Header-only so that it needs no build-file change.
//
// A packer-written int4 group has a zero code z with z·S + M = 0 exactly (endor::int4_grid), and
// the one-token bitmap kernel already multiplies a bitmap word as a dense one with its absent
// columns expanded as z (weight_kernels_avx512_vnni.h). Storing those z once at load time leaves
// the kernel nothing to expand a token: 4/3 of the bytes (0.5 against 0.375 a weight at 50 %), and
// the same sums in the same order (TensorView::sums_as_bitmap routes the copy to the word-by-word
// kernel), so the copy gives the bitmap's results bit for bit: a resident model still matches the
// same file streamed through the offload tiers, which keep the bitmap.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "endor/format.h"
#include "endor/kernels.h"
#include "weight_kernels.h"

namespace endor::cpu::detail {

// A dense int4 copy of a bitmap int4 weight (densify_int4_bitmap). view.data points into `bytes`
// (64-aligned), which lives as long as this; view.info is the original's (its name for errors).
struct DenseInt4 {
  TensorView view;
  std::unique_ptr<uint8_t, void (*)(void*)> bytes{nullptr, nullptr};
};

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
  for (uint64_t g = 0; g < n; ++g) {
    const float S = f16_to_f32(s[g]), neg_m = -f16_to_f32(m[g]);
    if (S == 0.0f && neg_m == 0.0f) {
      z[g] = 0;
      continue;
    }
    const float zf = std::nearbyint(neg_m / S);
    if (!(zf >= 0.0f && zf <= 15.0f && zf * S == neg_m)) return false;
    z[g] = uint8_t(zf);
  }
  return true;
}

// Row r's codes, absent columns z: nibbles of dense code k = r·cols + c (SPEC §6.5; cols even, so
// a row starts on a byte). k0: the row's first stored value. A word at a time, its set bits walked.
// The reference of dense_row_avx512 (tests/kernels/test_int4_dense.cpp) and the path of a CPU
// without AVX-512.
inline void dense_row(const TensorView& b, uint64_t r, uint64_t k0, const uint8_t* z, uint8_t* out) {
  const TensorLayout& L = b.layout;
  const uint64_t* bits = b.bitmap() + r * L.words_per_row;
  const uint8_t* vals = b.values();
  uint64_t k = k0;
  uint8_t codes[64];
  for (uint64_t c0 = 0; c0 < L.cols; c0 += 64) {
    const uint64_t n = std::min<uint64_t>(64, L.cols - c0);  // even: cols is
    std::memset(codes, z[c0 / L.group_size], 64);  // groups of whole words
    for (uint64_t w = bits[c0 / 64]; w; w &= w - 1, ++k) codes[__builtin_ctzll(w)] = uint8_t(vals[k / 2] >> (4 * (k & 1)) & 15);
    for (uint64_t j = 0; j < n; j += 2) out[(c0 + j) / 2] = uint8_t(codes[j] | codes[j + 1] << 4);
  }
}

// dense_row in vectors (about 2 ns a word where dense_row took about 60): the row's codes unpacked
// to bytes in `scratch` (cols + 128 bytes), then per word one expand over z and one pack to nibbles.
#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2"))) inline void dense_row_avx512(const TensorView& b, uint64_t r, uint64_t k0,
                                                                                   uint64_t k1, const uint8_t* z,
                                                                                   uint8_t* scratch, uint8_t* out) {
  const TensorLayout& L = b.layout;
  const uint64_t* bits = b.bitmap() + r * L.words_per_row;
  // Codes k0 & ~1 .. k1 as bytes (low nibble first): each source byte widened to 16 bits, its high
  // nibble moved to the upper byte.
  const uint8_t* src = b.values() + k0 / 2;
  const uint64_t n_bytes = (k1 + 1) / 2 - k0 / 2;
  const __m512i lo4 = _mm512_set1_epi16(0x000F), hi4 = _mm512_set1_epi16(0x0F00);
  for (uint64_t j = 0; j < n_bytes; j += 32) {
    const __mmask32 k = __mmask32(n_bytes - j >= 32 ? ~0u : (1u << (n_bytes - j)) - 1);
    const __m512i w = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(k, src + j));
    _mm512_storeu_si512(scratch + 2 * j, _mm512_or_si512(_mm512_and_si512(w, lo4), _mm512_and_si512(_mm512_slli_epi16(w, 4), hi4)));
  }
  const uint8_t* p = scratch + (k0 & 1);
  const __m512i pair = _mm512_set1_epi16(0x1001);  // even byte ·1, odd byte ·16
  for (uint64_t c0 = 0, wi = 0; c0 < L.cols; c0 += 64, ++wi) {
    const uint64_t word = bits[wi];
    const __m512i codes = _mm512_mask_expandloadu_epi8(_mm512_set1_epi8(char(z[c0 / L.group_size])), __mmask64(word), p);
    p += __builtin_popcountll(word);
    const __m256i packed = _mm512_maskz_cvtepi16_epi8(~__mmask32(0), _mm512_maddubs_epi16(codes, pair));  // c_even + 16·c_odd <= 255
    const uint64_t n = std::min<uint64_t>(64, L.cols - c0) / 2;
    _mm256_mask_storeu_epi8(out + c0 / 2, __mmask32(n >= 32 ? ~0u : (1u << n) - 1), packed);
  }
}
#endif

}  // namespace int4_dense_impl

// Whether the rule of Options::int4_dense re-encodes on this machine with these kernels
// (kernel_name: WeightKernels::name of the set in use): unless Off or exact, where the AVX-512
// int8-activation kernels run, the only ones whose word-by-word kernel is routed by sums_as_bitmap.
// Throws endor::Error on a bad ENDOR_INT4_DENSE.
inline bool int4_dense_enabled(const Options& options, const char* kernel_name) {
  using namespace int4_dense_impl;
  if (options.exact) return false;  // the reference keeps every weight as stored
  Int4Dense rule = options.int4_dense;
  if (rule == Int4Dense::Auto) rule = env_rule();
  if (rule == Int4Dense::Off) return false;
  return std::strncmp(kernel_name, "avx512", 6) == 0 && avx512_vnni_cpu();
}

// Whether a copy of `bytes` leaves this machine enough memory: MemAvailable at least the copy plus
// an eighth of it and 256 MiB. Each copy lowers MemAvailable, so a model re-encodes until memory runs
// short and keeps its other weights as bitmaps (the same results either way).
inline bool int4_dense_memory_allows(uint64_t bytes) {
  const uint64_t avail = int4_dense_impl::mem_available();
  return avail == UINT64_MAX || avail >= bytes + bytes / 8 + (uint64_t(256) << 20);
}

// The dense int4 copy of bitmap int4 weight b (sums_as_bitmap set), or null where it would not be
// the same function: value type not int4 with f16 parameters, an odd width, groups that are not
// whole words (64, 128, ... columns), a 2:4 weight (TensorView::two_of_four), or a group without an
// exact zero code (the packer always writes one). vector: dense_row_avx512 (the caller checked the CPU), else dense_row.
inline std::unique_ptr<DenseInt4> densify_int4_bitmap(const TensorView& b, bool vector = false) {
  using namespace int4_dense_impl;
  const TensorLayout& L = b.layout;
  if (L.encoding != Encoding::Bitmap || L.value_type != ValueType::I4 || L.int4_params != Int4Params::F16) return nullptr;
  if (L.cols % 2 != 0 || L.group_size == 0 || L.group_size % 64 != 0) return nullptr;
  if (b.two_of_four) return nullptr;  // the 2:4 kernel gathers x and sums in its own order
  const uint64_t gpr = L.groups_per_row;
  std::unique_ptr<uint8_t[]> z(new uint8_t[L.rows * gpr]);
  if (!group_zero_codes(b.group_scales(), b.group_mins(), L.rows * gpr, z.get())) return nullptr;
  auto out = std::make_unique<DenseInt4>();
  out->view = b;
  out->view.two_of_four = false;
  out->view.sums_as_bitmap = true;
  out->view.layout = compute_layout({L.rows, L.cols}, Encoding::Dense, ValueType::I4, L.group_size, L.rows * L.cols, Int4Params::F16);
  const TensorLayout& D = out->view.layout;
  const size_t bytes = (D.total_bytes + 63) / 64 * 64 + 128;  // slack: a dense word loop reads a row's last word whole
  out->bytes = {static_cast<uint8_t*>(std::aligned_alloc(64, bytes)), std::free};
  if (!out->bytes) throw Error("cpu backend: out of memory re-encoding an int4 weight as dense (" + std::to_string(bytes) + " bytes)");
  uint8_t* data = out->bytes.get();
  std::memset(data, 0, bytes);
  std::memcpy(data + D.scales_offset, b.data + L.scales_offset, D.scales_bytes);  // the same (row, group) params
  std::memcpy(data + D.mins_offset, b.data + L.mins_offset, D.mins_bytes);
  std::unique_ptr<uint8_t[]> scratch(vector ? new uint8_t[L.cols + 192] : nullptr);
  auto row_start = [&](uint64_t r) { return r < L.rows ? load_u32(b.data + L.index_offset + 4 * (r * L.blocks_per_row)) : L.nnz; };
  for (uint64_t r = 0; r < L.rows; ++r) {
    uint8_t* row = data + D.values_offset + r * (L.cols / 2);
#if defined(__x86_64__)
    if (vector) {
      dense_row_avx512(b, r, row_start(r), row_start(r + 1), z.get() + r * gpr, scratch.get(), row);
      continue;
    }
#endif
    dense_row(b, r, row_start(r), z.get() + r * gpr, row);
  }
  out->view.data = data;
  return out;
}

}  // namespace endor::cpu::detail
