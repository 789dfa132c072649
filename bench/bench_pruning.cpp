// Wall time of the calibrated pruning library on one LLM-sized Linear layer (default 4096 x 4096,
// a 4096² Hessian from 2048 synthetic correlated tokens). Prints a table; never pass/fail.
// Usage: bench_pruning [n_out] [n_in] [n_tokens]
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "endor/format.h"
#include "endor/pruning.h"

using namespace endor::pruning;
using endor::Dtype;
using endor::Quantization;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Timing {
  double wall_s, cpu_s;  // cpu_s: process CPU time over all threads (less sensitive to other load)
};

template <typename F>
Timing time_once(F&& f) {
  const auto t0 = Clock::now();
  const std::clock_t c0 = std::clock();
  f();
  return {seconds_since(t0), double(std::clock() - c0) / CLOCKS_PER_SEC};
}

// Best of `reps` runs of f() (one untimed warm-up first), wall and CPU minimised separately.
template <typename F>
Timing best_of(int reps, F&& f) {
  f();
  Timing best{1e30, 1e30};
  for (int i = 0; i < reps; ++i) {
    const Timing t = time_once(f);
    best = {std::min(best.wall_s, t.wall_s), std::min(best.cpu_s, t.cpu_s)};
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const size_t n_out = argc > 1 ? std::stoul(argv[1]) : 4096;
    const size_t n_in = argc > 2 ? std::stoul(argv[2]) : 4096;
    const size_t n_tokens = argc > 3 ? std::stoul(argv[3]) : 2048;
    const size_t tokens_per_sample = std::min<size_t>(n_tokens, 512);
    std::mt19937 rng(0);
    std::normal_distribution<float> normal(0.0f, 1.0f);

    // Correlated activations: a shared low-rank part plus noise, log-normal column scales.
    const size_t rank = 64;
    std::vector<float> basis(rank * n_in), scale(n_in), x(n_tokens * n_in), w(n_out * n_in);
    for (float& v : basis) v = normal(rng);
    for (float& v : scale) v = std::exp(0.7f * normal(rng));
    std::vector<float> z(rank);
    for (size_t t = 0; t < n_tokens; ++t) {
      for (float& v : z) v = normal(rng) / 8.0f;
      for (size_t j = 0; j < n_in; ++j) {
        float s = normal(rng);
        for (size_t k = 0; k < rank; ++k) s += z[k] * basis[k * n_in + j];
        x[t * n_in + j] = s * scale[j];
      }
    }
    for (float& v : w) v = 0.02f * normal(rng);

    std::printf("layer %zu x %zu, %zu calibration tokens (%zu per sample), %d OpenMP threads\n\n", n_out, n_in,
                n_tokens, tokens_per_sample, omp_get_max_threads());
    std::printf("%-34s %10s %10s %10s\n", "step", "wall_s", "cpu_s", "GFLOP/s");

    HessianAccumulator hess(n_in);
    WandaStats stats(n_in);
    // The accumulators keep state, so they are timed once (no warm-up).
    Timing t = time_once([&] {
      for (size_t i = 0; i < n_tokens; i += tokens_per_sample)
        hess.add_batch(&x[i * n_in], std::min(tokens_per_sample, n_tokens - i), n_in);
    });
    std::printf("%-34s %10.3f %10.3f %10.1f\n", "HessianAccumulator (all batches)", t.wall_s, t.cpu_s,
                double(n_tokens) * n_in * n_in / t.wall_s * 1e-9);
    for (size_t i = 0; i < n_tokens; i += tokens_per_sample)
      stats.add_batch(&x[i * n_in], std::min(tokens_per_sample, n_tokens - i), n_in);

    std::vector<float> work(w.size());
    t = best_of(2, [&] {
      work = w;
      wanda_prune(work.data(), n_out, n_in, stats.scaler_row().data(), SparsityTarget::unstructured(0.5));
    });
    std::printf("%-34s %10.3f %10.3f %10s\n", "wanda_prune 50%", t.wall_s, t.cpu_s, "-");

    struct Row { const char* name; SparsityTarget target; QuantSpec quant; };
    const Row rows[] = {
        {"sparsegpt_prune 50%", SparsityTarget::unstructured(0.5), {}},
        {"sparsegpt_prune 2:4", SparsityTarget::n_of_m(2, 4), {}},
        {"sparsegpt_prune 50% + int8", SparsityTarget::unstructured(0.5), {Dtype::Int8, 0}},
        {"sparsegpt_prune 50% + int4 g128", SparsityTarget::unstructured(0.5), {Dtype::Int4, 128}},
    };
    // (4/3)·n³ for chol -> inverse -> chol, n_out·n_in² for the lazy sgemm updates, n_out·n_in·128
    // for the in-block column updates (multiply-add = 2 flops).
    const double flops = 4.0 / 3.0 * std::pow(double(n_in), 3) + double(n_out) * n_in * n_in + double(n_out) * n_in * 128;
    for (const Row& r : rows) {
      SparseGptOptions opt;
      opt.target = r.target;
      opt.quant = r.quant;
      double loss = 0;
      t = best_of(2, [&] {
        work = w;
        loss = sparsegpt_prune(work.data(), n_out, n_in, hess.hessian().data(), opt).loss;
      });
      std::printf("%-34s %10.3f %10.3f %10.1f   (loss %.4g)\n", r.name, t.wall_s, t.cpu_s, flops / t.wall_s * 1e-9, loss);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
