// STREAM-like memory bandwidth probes (read and copy, all threads), the ceiling the weight
// kernels and the runtime's decode floor are compared against.
#include <omp.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
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

// Sum of p[0, n) (n floats, a multiple of 64) in the widest loads this CPU has. The load width
// matters: one core keeps only so many loads in flight, so 16-byte loads (what the compiler makes
// of a plain loop without -mavx) reached ~70 % of the bandwidth 64-byte loads reach on the same
// machine (21.5 against 30.5 GB/s on 2 threads of a Xeon, bench/RESULTS.md), which understated
// the floor every decode figure is compared against. The vector loops add the floats' bits as
// 64-bit integers in four independent accumulators (no FP latency chain; vector loads may alias
// anything).
using ReadLoop = double (*)(const float* p, size_t n);

double read_portable(const float* p, size_t n) {
  float a[16] = {};  // 16 independent lanes: vectorised by the compiler without reassociation
  for (size_t i = 0; i < n; i += 16)
    for (size_t j = 0; j < 16; ++j) a[j] += p[i + j];
  double total = 0.0;
  for (float v : a) total += v;
  return total;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) double read_avx2(const float* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 32) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 16)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 24)));
  }
  const __m256i t = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  return double(_mm256_extract_epi64(t, 0) + _mm256_extract_epi64(t, 1) + _mm256_extract_epi64(t, 2) + _mm256_extract_epi64(t, 3));
}

__attribute__((target("avx512f"))) double read_avx512(const float* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 64) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 16));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 32));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 48));
  }
  alignas(64) int64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  double total = 0.0;
  for (int64_t v : lanes) total += double(v);
  return total;
}
#endif

ReadLoop widest_read_loop() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return read_avx512;
  if (__builtin_cpu_supports("avx2")) return read_avx2;
#endif
  return read_portable;
}

}  // namespace

double measure_read_bandwidth_gbps(size_t bytes, int n_threads) {
  const int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
  const size_t n = std::max<size_t>(64, (bytes ? bytes : kDefaultBytes) / sizeof(float) / 64 * 64);  // whole 256-byte steps
  FloatBuffer buf = alloc_touched(n, nt, 1.0f);
  const float* p = buf.get();
  const ReadLoop read = widest_read_loop();
  volatile double sink = 0;  // keeps the sums alive
  const double s = best_seconds([&] {
    double total = 0;
#pragma omp parallel num_threads(nt) reduction(+ : total)
    {
      // Each thread reads its contiguous share, in whole 256-byte steps.
      const size_t n_thr = size_t(omp_get_num_threads()), id = size_t(omp_get_thread_num()), steps = n / 64;
      const size_t begin = steps * id / n_thr, end = steps * (id + 1) / n_thr;
      total += read(p + 64 * begin, 64 * (end - begin));
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
