// Score-only pruning without weight updates: magnitude and Wanda (wanda lib/prune.py).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "checks.h"
#include "endor/pruning.h"

namespace endor::pruning {

void detail::mark_lowest_n(const float* score, uint32_t m, uint32_t n, uint8_t* mask) {
  // m is small (4, 8, 16): an insertion sort of indices by (score, index) is a total order.
  uint32_t idx[256];
  uint32_t* order = idx;
  std::vector<uint32_t> big;
  if (m > 256) {
    big.resize(m);
    order = big.data();
  }
  for (uint32_t i = 0; i < m; ++i) {
    uint32_t j = i;
    while (j > 0 && score[order[j - 1]] > score[i]) {  // strict: equal scores keep index order
      order[j] = order[j - 1];
      --j;
    }
    order[j] = i;
  }
  for (uint32_t i = 0; i < n; ++i) mask[order[i]] = 1;
}

namespace {

// Scores [n_out, n_in] -> mask. Unstructured: the k lowest of each row, ties by column.
std::vector<uint8_t> mask_per_row(const std::vector<float>& score, size_t n_out, size_t n_in,
                                  const SparsityTarget& target) {
  std::vector<uint8_t> mask(n_out * n_in, 0);
  if (target.is_n_of_m()) {
#pragma omp parallel for schedule(static)
    for (long long r = 0; r < (long long)n_out; ++r)
      for (size_t c = 0; c < n_in; c += target.m)
        detail::mark_lowest_n(&score[size_t(r) * n_in + c], target.m, target.n, &mask[size_t(r) * n_in + c]);
    return mask;
  }
  const size_t k = size_t(double(n_in) * target.ratio);  // Python int(): truncation
  if (k == 0) return mask;
#pragma omp parallel
  {
    std::vector<std::pair<float, uint32_t>> order(n_in);  // (score, column): a total order
#pragma omp for schedule(static)
    for (long long r = 0; r < (long long)n_out; ++r) {
      const float* s = &score[size_t(r) * n_in];
      for (uint32_t j = 0; j < n_in; ++j) order[j] = {s[j], j};
      // The first k of a stable sort == the k smallest under (score, column) order.
      std::nth_element(order.begin(), order.begin() + (k - 1), order.end());
      for (size_t i = 0; i < k; ++i) mask[size_t(r) * n_in + order[i].second] = 1;
    }
  }
  return mask;
}

void apply_mask(float* w, const std::vector<uint8_t>& mask) {
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) w[i] = 0.0f;
}

}  // namespace

std::vector<uint8_t> magnitude_prune(float* w, size_t n_out, size_t n_in, const SparsityTarget& target) {
  const char* fn = "magnitude_prune";
  const size_t numel = detail::checked_numel(fn, n_out, n_in, "weight");
  detail::check_target(fn, target, n_in);
  detail::check_finite(fn, w, numel, "weight");
  std::vector<float> score(numel);
  for (size_t i = 0; i < numel; ++i) score[i] = std::fabs(w[i]);

  std::vector<uint8_t> mask;
  if (target.is_n_of_m()) {
    mask = mask_per_row(score, n_out, n_in, target);
  } else {
    std::vector<float> sorted = score;
    const size_t k = std::min(size_t(double(numel) * target.ratio), numel - 1);
    std::nth_element(sorted.begin(), sorted.begin() + k, sorted.end());
    const float thresh = sorted[k];
    mask.resize(numel);
    for (size_t i = 0; i < numel; ++i) mask[i] = score[i] <= thresh;
  }
  apply_mask(w, mask);
  return mask;
}

std::vector<uint8_t> wanda_prune(float* w, size_t n_out, size_t n_in, const float* scaler_row,
                                 const SparsityTarget& target) {
  const char* fn = "wanda_prune";
  const size_t numel = detail::checked_numel(fn, n_out, n_in, "weight");
  detail::check_target(fn, target, n_in);
  detail::check_finite(fn, w, numel, "weight");
  detail::check_finite(fn, scaler_row, n_in, "scaler_row");
  std::vector<float> col_norm(n_in);
  for (size_t j = 0; j < n_in; ++j) {
    if (scaler_row[j] < 0.0f) detail::fail(fn, "scaler_row[" + std::to_string(j) + "] is negative");
    col_norm[j] = std::sqrt(scaler_row[j]);
  }
  std::vector<float> score(numel);
  for (size_t r = 0; r < n_out; ++r)
    for (size_t j = 0; j < n_in; ++j) score[r * n_in + j] = std::fabs(w[r * n_in + j]) * col_norm[j];

  std::vector<uint8_t> mask = mask_per_row(score, n_out, n_in, target);
  apply_mask(w, mask);
  return mask;
}

}  // namespace endor::pruning
