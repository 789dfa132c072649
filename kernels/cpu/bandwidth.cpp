// STREAM-like memory bandwidth probes (read and copy, all threads), the ceiling the weight
// kernels and the runtime's decode floor are compared against.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "endor/kernels.h"

namespace endor::cpu {
namespace {

constexpr size_t kDefaultBytes = size_t(1) << 30;
constexpr int kPasses = 5;

struct FreeDeleter { void operator()(float* p) const { std::free(p); } };
using FloatBuffer = std::unique_ptr<float, FreeDeleter>;

FloatBuffer alloc_touched(size_t n, int nt, float value) {
  float* p = static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64));
  if (!p) throw Error("bandwidth probe: cannot allocate " + std::to_string(n * sizeof(float)) + " bytes");
  const int64_t m = int64_t(n);
  // First touch by the threads that will read it (page placement on NUMA machines).
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t i = 0; i < m; ++i) p[i] = value;
  return FloatBuffer(p);
}

template <typename F>
double best_seconds(F&& pass) {
  double best = 1e30;
  for (int i = 0; i < kPasses; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
  }
  return best;
}

}  // namespace

double measure_read_bandwidth_gbps(size_t bytes, int n_threads) {
  const int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
  const size_t n = (bytes ? bytes : kDefaultBytes) / sizeof(float);
  FloatBuffer buf = alloc_touched(n, nt, 1.0f);
  const float* p = buf.get();
  volatile float sink = 0.0f;  // keeps the sums alive
  const double s = best_seconds([&] {
    float total = 0.0f;
#pragma omp parallel num_threads(nt) reduction(+ : total)
    {
      // Each thread sums its contiguous share with 16 independent lanes (vectorised by the
      // compiler without reassociation), so the loop is bound by loads, not by add latency.
      const size_t n_thr = size_t(omp_get_num_threads()), id = size_t(omp_get_thread_num());
      const size_t begin = (n / 16 * id / n_thr) * 16, end = (n / 16 * (id + 1) / n_thr) * 16;
      float acc[16] = {};
      for (size_t i = begin; i < end; i += 16)
        for (size_t j = 0; j < 16; ++j) acc[j] += p[i + j];
      for (size_t j = 0; j < 16; ++j) total += acc[j];
    }
    sink = total;
  });
  (void)sink;
  return double(n * sizeof(float)) / s * 1e-9;
}

double measure_copy_bandwidth_gbps(size_t bytes, int n_threads) {
  const int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
  const size_t n = (bytes ? bytes : kDefaultBytes) / 2 / sizeof(float);  // src + dst = bytes
  FloatBuffer src = alloc_touched(n, nt, 1.0f), dst = alloc_touched(n, nt, 0.0f);
  const float* s_ptr = src.get();
  float* d_ptr = dst.get();
  const int64_t m = int64_t(n);
  const double s = best_seconds([&] {
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (int64_t i = 0; i < m; ++i) d_ptr[i] = s_ptr[i];
  });
  return 2.0 * double(n * sizeof(float)) / s * 1e-9;  // STREAM convention: read + write bytes
}

}  // namespace endor::cpu
