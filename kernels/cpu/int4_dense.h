// Internal to endor_kernels, included by cpu_backend.cpp alone: the load-time re-encoding of
// resident bitmap int4 weights as dense int4 (cpu::Options::int4_dense, issue 40), used by the CPU
// backend's prepare_resident_weight. Header-only so that it needs no build-file change.
//
// A packer-written int4 group has a zero code z with z·S + M = 0 exactly (endor::int4_grid), and
// the one-token bitmap kernel already multiplies a bitmap word as a dense one with its absent
// columns expanded as z (weight_kernels_avx512_vnni.h). Storing those z once at load time leaves
// the dense kernel nothing to expand: 4/3 of the bytes, and on a CPU whose int4 decode is bound by
// the kernel rather than by memory (AMD Zen 4: a bitmap row costs 1.5-2.2x a dense one in cache,
// bench/RESULTS.md) the faster function of the two.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

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

inline Int4Dense env_rule() {
  const char* env = std::getenv("ENDOR_INT4_DENSE");
  if (!env || !*env) return Int4Dense::Off;  // opt-in until measured on a Zen 4 (kernels.h)
  const std::string s = env;
  if (s == "on") return Int4Dense::On;
  if (s == "off") return Int4Dense::Off;
  if (s == "auto") return Int4Dense::Auto;
  throw Error("ENDOR_INT4_DENSE: unknown value '" + s + "' (expected on, off or auto)");
}

// An AMD CPU with AVX-512 VNNI (where the AVX-512 set's int8-activation kernels run).
inline bool amd_vnni_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_is("amd") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
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
// a row starts on a byte). k0: the row's first stored value. A word at a time, its set bits walked
// (a column at a time with a bit test each, a 1 B file took ~8 s to load on the Intel VM).
inline void dense_row(const TensorView& b, uint64_t r, uint64_t k0, const uint8_t* z, uint8_t* out) {
  const TensorLayout& L = b.layout;
  const uint64_t* bits = b.bitmap() + r * L.words_per_row;
  const uint8_t* vals = b.values();
  uint64_t k = k0;
  uint8_t codes[64];
  for (uint64_t c0 = 0; c0 < L.cols; c0 += 64) {
    const uint64_t n = std::min<uint64_t>(64, L.cols - c0);  // even: cols is
    for (uint64_t g0 = c0; g0 < c0 + n; g0 += L.group_size)  // groups of 32, 64 or 128 start on 32s
      std::memset(codes + (g0 - c0), z[g0 / L.group_size], std::min<uint64_t>(L.group_size - g0 % L.group_size, c0 + n - g0));
    for (uint64_t w = bits[c0 / 64]; w; w &= w - 1, ++k) codes[__builtin_ctzll(w)] = uint8_t(vals[k / 2] >> (4 * (k & 1)) & 15);
    for (uint64_t j = 0; j < n; j += 2) out[(c0 + j) / 2] = uint8_t(codes[j] | codes[j + 1] << 4);
  }
}

}  // namespace int4_dense_impl

// Whether the rule of Options::int4_dense re-encodes on this machine with these kernels
// (kernel_name: WeightKernels::name of the set in use). Throws endor::Error on a bad ENDOR_INT4_DENSE.
inline bool int4_dense_enabled(const Options& options, const char* kernel_name) {
  using namespace int4_dense_impl;
  if (options.exact) return false;  // the reference keeps every weight as stored
  Int4Dense rule = options.int4_dense;
  if (rule == Int4Dense::Auto) rule = env_rule();  // unset: Off; "auto": the CPU rule below
  if (rule != Int4Dense::Auto) return rule == Int4Dense::On;
  return std::strncmp(kernel_name, "avx512", 6) == 0 && amd_vnni_cpu();
}

// The dense int4 copy of bitmap int4 weight b, or null where it would not be the same function or
// would not run the dense one-token kernel: value type not int4 with f16 parameters, an odd width,
// groups other than 32, 64 or 128 columns, or a group without an exact zero code (the packer always
// writes one).
inline std::unique_ptr<DenseInt4> densify_int4_bitmap(const TensorView& b) {
  using namespace int4_dense_impl;
  const TensorLayout& L = b.layout;
  if (L.encoding != Encoding::Bitmap || L.value_type != ValueType::I4 || L.int4_params != Int4Params::F16) return nullptr;
  if (L.cols % 2 != 0 || (L.group_size != 32 && L.group_size != 64 && L.group_size != 128)) return nullptr;
  const uint64_t gpr = L.groups_per_row;
  std::unique_ptr<uint8_t[]> z(new uint8_t[L.rows * gpr]);
  if (!group_zero_codes(b.group_scales(), b.group_mins(), L.rows * gpr, z.get())) return nullptr;
  auto out = std::make_unique<DenseInt4>();
  out->view = b;
  out->view.two_of_four = false;
  out->view.layout = compute_layout({L.rows, L.cols}, Encoding::Dense, ValueType::I4, L.group_size, L.rows * L.cols, Int4Params::F16);
  const TensorLayout& D = out->view.layout;
  const size_t bytes = (D.total_bytes + 63) / 64 * 64 + 128;  // slack: a dense word loop reads a row's last word whole
  out->bytes = {static_cast<uint8_t*>(std::aligned_alloc(64, bytes)), std::free};
  if (!out->bytes) throw Error("cpu backend: out of memory re-encoding an int4 weight as dense (" + std::to_string(bytes) + " bytes)");
  uint8_t* data = out->bytes.get();
  std::memset(data, 0, bytes);
  std::memcpy(data + D.scales_offset, b.data + L.scales_offset, D.scales_bytes);  // the same (row, group) params
  std::memcpy(data + D.mins_offset, b.data + L.mins_offset, D.mins_bytes);
  for (uint64_t r = 0; r < L.rows; ++r) {
    const uint64_t k0 = load_u32(b.data + L.index_offset + 4 * (r * L.blocks_per_row));
    dense_row(b, r, k0, z.get() + r * gpr, data + D.values_offset + r * (L.cols / 2));
  }
  out->view.data = data;
  return out;
}

}  // namespace endor::cpu::detail
