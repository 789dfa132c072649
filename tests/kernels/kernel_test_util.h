// Shared helpers of the kernel tests: random encoded weights (via endor::encode_tensor), the
// double-precision reference product built on decode_rows_f32, and the derived error bound.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "endor/format.h"
#include "endor/kernels.h"

namespace endor::ktest {

inline constexpr double kEpsF32 = std::numeric_limits<float>::epsilon() / 2;  // unit roundoff 2^-24

// Every instruction set of the CPU kernels this machine (and build) runs, portable first.
inline std::vector<cpu::Isa> cpu_isas() {
  std::vector<cpu::Isa> v{cpu::Isa::Portable};
  if (cpu::cpu_has_avx2()) v.push_back(cpu::Isa::Avx2);
  if (cpu::cpu_has_avx512()) v.push_back(cpu::Isa::Avx512);
  return v;
}
inline const char* isa_name(cpu::Isa i) {
  return i == cpu::Isa::Avx512 ? "avx512" : i == cpu::Isa::Avx2 ? "avx2" : "portable";
}

// Random values ~U(-1, 1) (magnitudes in [1e-3, 1] so no value rounds to 0 by accident), with
// round(sparsity·numel) of them set to 0 at random positions.
inline std::vector<float> random_weights(uint64_t rows, uint64_t cols, double sparsity, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(1e-3f, 1.0f);
  std::vector<float> w(rows * cols);
  for (float& v : w) v = (rng() & 1) ? mag(rng) : -mag(rng);
  const uint64_t n_zero = uint64_t(std::llround(sparsity * double(w.size())));
  std::vector<uint64_t> idx(w.size());
  for (uint64_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::shuffle(idx.begin(), idx.end(), rng);
  for (uint64_t i = 0; i < n_zero; ++i) w[idx[i]] = 0.0f;
  return w;
}

// Attention of nh query heads over nkv kv heads of hd dims, scale 1/sqrt(hd), a sliding window
// (0: none).
inline AttentionParams attention_params(uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t window) {
  AttentionParams p;
  p.n_heads = nh;
  p.n_kv_heads = nkv;
  p.head_dim = hd;
  p.scale = 1.0f / std::sqrt(float(hd));
  p.sliding_window = window;
  return p;
}
inline std::vector<float> random_activations(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// An encoded weight that owns its bytes; view() is what the kernels consume.
struct EncodedWeight {
  EncodedTensor enc;
  TensorView view() const {
    TensorView v;
    v.layout = enc.layout;
    v.data = enc.bytes.data();
    return v;
  }
};

// group_size: int4's and int8g's (ignored for other types); ip: int4's parameter storage (F16, or
// int4k's codes, SPEC.md §6.7; ignored for other types).
inline EncodedWeight encode(const std::vector<float>& w, uint64_t rows, uint64_t cols, Encoding e, ValueType vt,
                            uint32_t group_size = kDefaultGroupSize, Int4Params ip = Int4Params::F16) {
  EncodeOptions opt;
  opt.encoding = e;
  opt.value_type = vt;
  opt.group_size = vt == ValueType::I4 || vt == ValueType::I8G ? group_size : 0;
  opt.int4_params = vt == ValueType::I4 ? ip : Int4Params::F16;
  return EncodedWeight{encode_tensor(w.data(), {rows, cols}, opt)};
}

// Every weight's product with x[T, in] through backend.linear() one by one (want) and through one
// backend.linear_group() of all of them (got), for tests that compare the two.
struct GroupAndSingles {
  std::vector<std::vector<float>> want, got;
};
inline GroupAndSingles run_group_and_singles(Backend& backend, const std::vector<std::unique_ptr<Weight>>& ws,
                                             const uint64_t* rows, const std::vector<float>& x, size_t n_tokens) {
  GroupAndSingles r{std::vector<std::vector<float>>(ws.size()), std::vector<std::vector<float>>(ws.size())};
  std::vector<Backend::LinearTarget> targets;
  for (size_t i = 0; i < ws.size(); ++i) {
    r.want[i].assign(n_tokens * rows[i], 0.0f);
    r.got[i].assign(n_tokens * rows[i], -1.0f);
    backend.linear(*ws[i], x.data(), n_tokens, nullptr, r.want[i].data());
    targets.push_back({ws[i].get(), nullptr, r.got[i].data()});
  }
  backend.linear_group(targets.data(), targets.size(), x.data(), n_tokens);
  return r;
}

// y_ref[t, r] = Σ_c W[r, c]·x[t, c] in double from the reference decoder, and bound[t, r] =
// Σ_c |W[r, c]·x[t, c]|, the scale of every rounding error a summation of those products makes.
struct Reference {
  std::vector<double> y, bound;
};
inline Reference reference_linear(const TensorView& v, const std::vector<float>& x, size_t n_tokens) {
  const TensorLayout& L = v.layout;
  std::vector<float> w(L.rows * L.cols);
  decode_rows_f32(v, 0, L.rows, w.data());
  Reference ref{std::vector<double>(n_tokens * L.rows), std::vector<double>(n_tokens * L.rows)};
  for (size_t t = 0; t < n_tokens; ++t)
    for (uint64_t r = 0; r < L.rows; ++r) {
      double s = 0.0, b = 0.0;
      for (uint64_t c = 0; c < L.cols; ++c) {
        s += double(w[r * L.cols + c]) * double(x[t * L.cols + c]);
        b += std::fabs(double(w[r * L.cols + c]) * double(x[t * L.cols + c]));
      }
      ref.y[t * L.rows + r] = s;
      ref.bound[t * L.rows + r] = b;
    }
  return ref;
}

}  // namespace endor::ktest
