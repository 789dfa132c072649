// Magnitude pruning of one weight W [out, in] (row = output feature): per row (Wanda's
// comparison group), whole matrix (wanda's prune_magnitude) and N:M, plus the Pruner factory.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "detail.h"
#include "endor/prune.h"

namespace endor {

namespace {

// |w| as a total order: NaN counts as the largest magnitude so it is never chosen first.
inline float magnitude(float w) {
  const float a = std::fabs(w);
  return std::isnan(a) ? std::numeric_limits<float>::infinity() : a;
}

// Zeroes the k smallest |w| of row[0, n), ties broken by lower index first (what a stable sort
// of |w| followed by taking the first k gives), in O(n) with one scratch buffer of n floats.
void zero_smallest(float* row, uint64_t n, uint64_t k, std::vector<float>& scratch) {
  if (k == 0) return;
  if (k >= n) {
    std::fill(row, row + n, 0.0f);
    return;
  }
  scratch.resize(n);
  for (uint64_t c = 0; c < n; ++c) scratch[c] = magnitude(row[c]);
  std::nth_element(scratch.begin(), scratch.begin() + (k - 1), scratch.end());
  const float t = scratch[k - 1];  // the k-th smallest magnitude
  uint64_t below = 0;
  for (uint64_t c = 0; c < n; ++c) below += magnitude(row[c]) < t;
  uint64_t ties_to_zero = k - below;  // entries equal to t, taken in column order
  for (uint64_t c = 0; c < n; ++c) {
    const float a = magnitude(row[c]);
    if (a < t) {
      row[c] = 0.0f;
    } else if (a == t && ties_to_zero > 0) {
      row[c] = 0.0f;
      --ties_to_zero;
    }
  }
}

// Below this many elements a thread team costs more than it saves.
constexpr uint64_t kParallelMin = 1 << 16;

uint64_t prune_count(uint64_t n, double sparsity) { return uint64_t(double(n) * sparsity); }

class MagnitudePruner final : public Pruner {
 public:
  explicit MagnitudePruner(PruneSpec spec) : spec_(std::move(spec)) {}
  void prune(const std::string& name, float* w, uint64_t rows, uint64_t cols) override {
    if (spec_.structured()) {
      if (cols % spec_.m != 0)
        throw Error("tensor '" + name + "': " + std::to_string(cols) + " input columns are not a multiple of M = " +
                    std::to_string(spec_.m) + " for " + spec_.pattern() + " pruning");
      magnitude_prune_n_m(w, rows, cols, spec_.n, spec_.m);
    } else if (spec_.scope == PruneScope::Matrix) {
      magnitude_prune_matrix(w, rows, cols, spec_.sparsity);
    } else {
      magnitude_prune_rows(w, rows, cols, spec_.sparsity);
    }
  }

 private:
  PruneSpec spec_;
};

}  // namespace

double PruneSpec::block_sparsity(uint32_t layer, uint32_t n_layers) const {
  if (n_layers < 2 || sparsity_ramp == 0.0) return sparsity;
  return sparsity + sparsity_ramp * (2.0 * double(layer) / double(n_layers - 1) - 1.0);
}

std::string PruneSpec::pattern() const {
  return structured() ? std::to_string(n) + ":" + std::to_string(m) : "unstructured";
}

void magnitude_prune_rows(float* w, uint64_t rows, uint64_t cols, double sparsity) {
  const uint64_t k = prune_count(cols, sparsity);
  if (k == 0) return;
#pragma omp parallel if (rows * cols >= kParallelMin)
  {
    std::vector<float> scratch;
#pragma omp for schedule(dynamic, 16)
    for (int64_t r = 0; r < int64_t(rows); ++r) zero_smallest(w + uint64_t(r) * cols, cols, k, scratch);
  }
}

void magnitude_prune_matrix(float* w, uint64_t rows, uint64_t cols, double sparsity) {
  const uint64_t numel = rows * cols;
  if (sparsity <= 0.0 || numel == 0) return;
  const uint64_t k = std::min(prune_count(numel, sparsity), numel - 1);
  std::vector<float> mags(numel);
  for (uint64_t i = 0; i < numel; ++i) mags[i] = magnitude(w[i]);
  std::nth_element(mags.begin(), mags.begin() + k, mags.end());
  const float thresh = mags[k];
  mags = std::vector<float>();
#pragma omp parallel for schedule(static) if (numel >= kParallelMin)
  for (int64_t i = 0; i < int64_t(numel); ++i)
    if (magnitude(w[i]) <= thresh) w[i] = 0.0f;
}

void magnitude_prune_n_m(float* w, uint64_t rows, uint64_t cols, uint32_t n, uint32_t m) {
  if (m == 0 || n == 0) return;
  if (n >= m) throw Error("N:M pruning needs N < M, got " + std::to_string(n) + ":" + std::to_string(m));
  const uint64_t groups = cols / m;
#pragma omp parallel if (rows * cols >= kParallelMin)
  {
    std::vector<float> scratch;
#pragma omp for schedule(dynamic, 16)
    for (int64_t r = 0; r < int64_t(rows); ++r)
      for (uint64_t g = 0; g < groups; ++g) zero_smallest(w + uint64_t(r) * cols + g * m, m, n, scratch);
  }
}

void check_prune_spec(const PruneSpec& spec) {
  if (calibrated(spec.method))
    throw Error(std::string("not implemented yet: --method ") + to_string(spec.method) +
                " needs calibration support (issue 6)");
  if (spec.sparsity_ramp != 0.0) throw Error("--sparsity-ramp needs a calibrated method (wanda, sparsegpt)");
  if (spec.structured()) {
    if (spec.n == 0 || spec.n >= spec.m)
      throw Error("N:M pattern needs 0 < N < M, got " + std::to_string(spec.n) + ":" + std::to_string(spec.m));
  } else if (!(spec.sparsity >= 0.0 && spec.sparsity < 1.0)) {
    throw Error("sparsity must be in [0, 1), got " + std::to_string(spec.sparsity));
  }
}

std::unique_ptr<Pruner> make_pruner(const PruneSpec& spec) {
  check_prune_spec(spec);
  return std::make_unique<MagnitudePruner>(spec);
}

}  // namespace endor
