// Shared helpers of the CUDA backend tests: skipping without a device, device buffers, random
// and exactly-representable encoded weights, and the double-precision linear reference.
//
// Skipping: every GPU test case is declared with GPU_TEST_CASE and starts with REQUIRE_GPU().
// Without a device REQUIRE_GPU() returns at once, and test_cuda_device.cpp prints one line
// "no CUDA device: skipping N GPU tests (<reason>)", which ctest turns into a "skipped" result.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "endor/cuda_backend.h"
#include "endor/format.h"
#include "endor/kernels.h"
#include "../kernels/kernel_test_util.h"

namespace endor::cudatest {

// ---- skipping without a device ----
inline int& gpu_test_count() {
  static int n = 0;
  return n;
}
struct GpuTestRegistration {
  GpuTestRegistration() { ++gpu_test_count(); }
};
inline bool gpu_available(std::string* why = nullptr) {
  static std::string reason;
  static const bool ok = cuda_device_available(&reason);
  if (why) *why = reason;
  return ok;
}

#define GPU_TEST_CASE(name)                                                                   \
  static const ::endor::cudatest::GpuTestRegistration DOCTEST_ANONYMOUS(endor_gpu_test_reg_); \
  TEST_CASE(name)
#define REQUIRE_GPU() \
  if (!::endor::cudatest::gpu_available()) return

inline constexpr double kU = std::numeric_limits<float>::epsilon() / 2;  // f32 unit roundoff 2^-24

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---- device buffers ----
// f32 device buffer owned through a backend's alloc/free.
class DeviceFloats {
 public:
  DeviceFloats(Backend& b, size_t n) : b_(b), n_(n), p_(b.alloc(n)) {}
  DeviceFloats(Backend& b, const std::vector<float>& host) : DeviceFloats(b, host.size()) {
    b_.upload(p_, host.data(), host.size());
  }
  ~DeviceFloats() {
    try {
      b_.free(p_);
    } catch (...) {
    }
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* get() const { return p_; }
  size_t size() const { return n_; }
  std::vector<float> download() const {
    std::vector<float> h(n_);
    b_.download(h.data(), p_, n_);
    return h;
  }

 private:
  Backend& b_;
  size_t n_;
  float* p_;
};

// ---- random inputs ----
// Random weights (exactly round(sparsity·numel) zeros) and encoded weights
// are the CPU kernel tests' (tests/kernels/kernel_test_util.h): one definition for both backends.
using ktest::EncodedWeight;
using ktest::encode;
using ktest::random_weights;

inline std::vector<float> random_normal(size_t n, uint32_t seed, float mean = 0.0f, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, stddev);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// Multiples of 1/8 in [-limit/8, limit/8]: exact in f32, f16 and bf16.
inline std::vector<float> random_eighths(size_t n, uint32_t seed, int limit) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> k(-limit, limit);
  std::vector<float> x(n);
  for (float& v : x) v = float(k(rng)) / 8.0f;
  return x;
}

// A weight whose decoded values are all multiples of 1/32 with |w| < 8 and at most 7 significant
// bits (exact in f16 and bf16), for every value type, through endor::encode_tensor's quantizers:
//   f16/bf16/f32: j/16, 1 ≤ |j| ≤ 16;
//   int8: j/16, 1 ≤ |j| ≤ 127, every row holding a ±127/16, so s = (127/16)/127 = 1/16 exactly
//         and q = j (SPEC.md §7.1: s = max|w|/127, q = round(w/s));
//   int4: per (row, group) (q − 8)/16 with the group's first two present values at q = 0 and
//         q = 15, so the grid (endor::int4_grid: [−1/2, 7/16] holds 0) has scale 1/16 exactly and
//         min −1/2 (z = 8); q = 8 (the value 0) is never drawn, so sparsity comes from the mask
//         alone. A group with one present value holds −15/16: grid [−15/16, 0], scale 1/16, z = 15.
//   int8g: per (row, group) j·S with S = 1/16 or 1/32 (drawn per group, so a value decoded with
//         another group's scale is off by a factor of 2), 1 ≤ |j| ≤ 127, the group's first present
//         value at ±127·S, so S = f16((127·S)/127) exactly and q = j (SPEC.md §7.5).
inline std::vector<float> exact_weights(uint64_t rows, uint64_t cols, double sparsity, ValueType vt,
                                        uint32_t group_size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<float> w(rows * cols, 0.0f);
  std::vector<bool> present(rows * cols);
  for (uint64_t i = 0; i < present.size(); ++i) present[i] = !(sparsity >= 1.0 || (sparsity > 0.0 && coin(rng) < sparsity));
  for (uint64_t r = 0; r < rows; ++r) {
    if (vt == ValueType::I4) {
      for (uint64_t c0 = 0; c0 < cols; c0 += group_size) {
        const uint64_t c1 = std::min<uint64_t>(cols, c0 + group_size);
        int n_present = 0;
        for (uint64_t c = c0; c < c1; ++c) n_present += present[r * cols + c];
        int seen = 0;
        for (uint64_t c = c0; c < c1; ++c) {
          if (!present[r * cols + c]) continue;
          if (n_present == 1) {
            w[r * cols + c] = -15.0f / 16.0f;
            continue;
          }
          int q = seen == 0 ? 0 : seen == 1 ? 15 : int(rng() % 15);
          if (seen >= 2 && q >= 8) ++q;  // 0..7, 9..15
          ++seen;
          w[r * cols + c] = float(q - 8) / 16.0f;
        }
      }
      continue;
    }
    if (vt == ValueType::I8G) {
      for (uint64_t c0 = 0; c0 < cols; c0 += group_size) {
        const uint64_t c1 = std::min<uint64_t>(cols, c0 + group_size);
        const float scale = (rng() & 1) ? 1.0f / 16.0f : 1.0f / 32.0f;
        bool pinned = false;
        for (uint64_t c = c0; c < c1; ++c) {
          if (!present[r * cols + c]) continue;
          const int j = pinned ? 1 + int(rng() % 127u) : 127;
          pinned = true;
          w[r * cols + c] = float((rng() & 1) ? j : -j) * scale;
        }
      }
      continue;
    }
    const int jmax = vt == ValueType::I8 ? 127 : 16;
    for (uint64_t c = 0; c < cols; ++c) {
      if (!present[r * cols + c]) continue;
      const int j = 1 + int(rng() % uint32_t(jmax));
      w[r * cols + c] = float((rng() & 1) ? j : -j) / 16.0f;
    }
    if (vt == ValueType::I8) {  // pin the row's max |w| at 127/16 on a present element
      for (uint64_t c = 0; c < cols; ++c)
        if (present[r * cols + c]) {
          w[r * cols + c] = (rng() & 1) ? 127.0f / 16.0f : -127.0f / 16.0f;
          break;
        }
    }
  }
  return w;
}

// ---- linear reference ----
// For output rows `rows_checked`: y[t][i] = Σ_c W[r, c]·x[t, c] in double from the reference
// decoder, abs[t][i] = Σ_c |W[r, c]·x[t, c]| (the scale of every summation error), and the
// per-row Σ|W| and per-token Σ|x| (scales of absolute conversion errors).
struct LinearReference {
  std::vector<uint64_t> rows;
  std::vector<std::vector<double>> y, abs;  // [t][i]
  std::vector<double> w_abs_sum;            // [i]
  std::vector<double> x_abs_sum;            // [t]
};

inline LinearReference reference_linear(const TensorView& v, const std::vector<float>& x, size_t n_tokens,
                                        const std::vector<uint64_t>& rows_checked) {
  const uint64_t cols = v.layout.cols;
  LinearReference ref;
  ref.rows = rows_checked;
  ref.y.assign(n_tokens, std::vector<double>(rows_checked.size()));
  ref.abs.assign(n_tokens, std::vector<double>(rows_checked.size()));
  ref.w_abs_sum.assign(rows_checked.size(), 0.0);
  ref.x_abs_sum.assign(n_tokens, 0.0);
  for (size_t t = 0; t < n_tokens; ++t)
    for (uint64_t c = 0; c < cols; ++c) ref.x_abs_sum[t] += std::fabs(double(x[t * cols + c]));
  std::vector<float> w(cols);
  for (size_t i = 0; i < rows_checked.size(); ++i) {
    decode_rows_f32(v, rows_checked[i], rows_checked[i] + 1, w.data());
    for (uint64_t c = 0; c < cols; ++c) ref.w_abs_sum[i] += std::fabs(double(w[c]));
    for (size_t t = 0; t < n_tokens; ++t) {
      double s = 0.0, a = 0.0;
      for (uint64_t c = 0; c < cols; ++c) {
        const double p = double(w[c]) * double(x[t * cols + c]);
        s += p;
        a += std::fabs(p);
      }
      ref.y[t][i] = s;
      ref.abs[t][i] = a;
    }
  }
  return ref;
}

// Every row for small weights; otherwise the first two, the last and `n_random` others.
inline std::vector<uint64_t> rows_to_check(uint64_t rows, size_t n_random, uint32_t seed) {
  std::vector<uint64_t> out;
  if (rows <= n_random + 3) {
    for (uint64_t r = 0; r < rows; ++r) out.push_back(r);
    return out;
  }
  out = {0, 1, rows - 1};
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n_random; ++i) out.push_back(2 + rng() % (rows - 3));
  return out;
}

}  // namespace endor::cudatest
