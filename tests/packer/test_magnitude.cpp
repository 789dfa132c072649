// Magnitude masks (per row, whole matrix, N:M) against an independent computation in the test:
// a full stable sort of |w| per comparison group, as the references do.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "endor/prune.h"

using namespace endor;

namespace {

// Random weights drawn from few distinct magnitudes, so ties at the threshold are common.
std::vector<float> tied_weights(uint64_t n, uint32_t seed, int levels = 7) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> lvl(0, levels - 1), sign(0, 1);
  std::vector<float> w(n);
  for (float& x : w) x = float(lvl(rng) + 1) * 0.125f * (sign(rng) ? 1.0f : -1.0f);
  return w;
}

// Reference: in each group of `len` entries starting at `begin`, stable-sort indices by |w| and
// zero the first k.
void reference_zero_group(std::vector<float>& w, uint64_t begin, uint64_t len, uint64_t k) {
  std::vector<uint64_t> idx(len);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](uint64_t a, uint64_t b) { return std::fabs(w[begin + a]) < std::fabs(w[begin + b]); });
  for (uint64_t i = 0; i < k && i < len; ++i) w[begin + idx[i]] = 0.0f;
}

}  // namespace

TEST_CASE("row magnitude: int(cols*S) smallest |w| per row, ties to the lower column") {
  for (const auto& [rows, cols, s] : std::vector<std::tuple<uint64_t, uint64_t, double>>{
           {7, 33, 0.5}, {16, 64, 0.5}, {5, 100, 0.3}, {3, 4097, 0.75}, {9, 10, 0.95}, {4, 17, 0.01}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    CAPTURE(s);
    std::vector<float> w = tied_weights(rows * cols, uint32_t(rows * 31 + cols));
    std::vector<float> expect = w;
    const uint64_t k = uint64_t(double(cols) * s);
    for (uint64_t r = 0; r < rows; ++r) reference_zero_group(expect, r * cols, cols, k);
    magnitude_prune_rows(w.data(), rows, cols, s);
    CHECK(w == expect);
    for (uint64_t r = 0; r < rows; ++r)
      CHECK(uint64_t(std::count(w.begin() + long(r * cols), w.begin() + long((r + 1) * cols), 0.0f)) >= k);
  }
}

TEST_CASE("row magnitude on continuous random values matches a full sort") {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const uint64_t rows = 32, cols = 96;
  std::vector<float> w(rows * cols);
  for (float& x : w) x = d(rng);
  std::vector<float> expect = w;
  for (uint64_t r = 0; r < rows; ++r) reference_zero_group(expect, r * cols, cols, 48);
  magnitude_prune_rows(w.data(), rows, cols, 0.5);
  CHECK(w == expect);
}

TEST_CASE("matrix magnitude: thresh = sorted(|W|)[int(numel*S)], prune |W| <= thresh") {
  for (const auto& [rows, cols, s] : std::vector<std::tuple<uint64_t, uint64_t, double>>{
           {8, 16, 0.5}, {13, 7, 0.3}, {32, 64, 0.9}, {1, 50, 0.5}}) {
    CAPTURE(s);
    std::vector<float> w = tied_weights(rows * cols, uint32_t(rows + cols), 11);
    std::vector<float> sorted(w.size());
    std::transform(w.begin(), w.end(), sorted.begin(), [](float x) { return std::fabs(x); });
    std::sort(sorted.begin(), sorted.end());
    const float thresh = sorted[size_t(double(w.size()) * s)];
    std::vector<float> expect = w;
    for (float& x : expect)
      if (std::fabs(x) <= thresh) x = 0.0f;
    magnitude_prune_matrix(w.data(), rows, cols, s);
    CHECK(w == expect);
    CHECK(double(std::count(w.begin(), w.end(), 0.0f)) >= double(w.size()) * s);
  }
}

TEST_CASE("N:M magnitude: N smallest of every M consecutive columns, stable") {
  for (const auto& [n, m] : std::vector<std::pair<uint32_t, uint32_t>>{{2, 4}, {1, 4}, {4, 8}, {3, 4}}) {
    CAPTURE(n);
    CAPTURE(m);
    const uint64_t rows = 11, cols = 64;
    std::vector<float> w = tied_weights(rows * cols, n * 10 + m, 5);
    std::vector<float> expect = w;
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t g = 0; g < cols / m; ++g) reference_zero_group(expect, r * cols + g * m, m, n);
    magnitude_prune_n_m(w.data(), rows, cols, n, m);
    CHECK(w == expect);
    for (uint64_t i = 0; i < w.size(); i += m) CHECK(std::count(w.begin() + long(i), w.begin() + long(i + m), 0.0f) >= n);
  }
}

TEST_CASE("NaN counts as the largest magnitude; existing zeros are pruned first") {
  std::vector<float> w = {NAN, 3.0f, -1.0f, 0.0f, 2.0f, 0.5f};
  magnitude_prune_rows(w.data(), 1, 6, 0.5);  // k = 3: 0, 0.5, -1
  CHECK(std::isnan(w[0]));
  CHECK(w[1] == 3.0f);
  CHECK(w[2] == 0.0f);
  CHECK(w[3] == 0.0f);
  CHECK(w[4] == 2.0f);
  CHECK(w[5] == 0.0f);
}

TEST_CASE("Pruner factory validates the spec") {
  PruneSpec s;
  s.sparsity = 0.5;
  auto p = make_pruner(s);
  std::vector<float> w = tied_weights(4 * 8, 3);
  std::vector<float> expect = w;
  magnitude_prune_rows(expect.data(), 4, 8, 0.5);
  p->prune("x", w.data(), 4, 8);
  CHECK(w == expect);

  s.scope = PruneScope::Matrix;
  w = tied_weights(4 * 8, 3);
  expect = w;
  magnitude_prune_matrix(expect.data(), 4, 8, 0.5);
  make_pruner(s)->prune("x", w.data(), 4, 8);
  CHECK(w == expect);

  PruneSpec bad = s;
  bad.sparsity = 1.0;
  CHECK_THROWS_WITH_AS(make_pruner(bad), doctest::Contains("sparsity must be in [0, 1)"), Error);
  bad.sparsity = -0.1;
  CHECK_THROWS_AS(make_pruner(bad), Error);
  bad.sparsity = NAN;
  CHECK_THROWS_AS(make_pruner(bad), Error);
  PruneSpec wanda;
  wanda.method = PruneMethod::Wanda;
  CHECK_THROWS_WITH_AS(make_pruner(wanda), "not implemented yet: --method wanda needs calibration support (issue 6)", Error);
  PruneSpec nm;
  nm.n = 4;
  nm.m = 4;
  CHECK_THROWS_AS(make_pruner(nm), Error);
  nm.n = 2;
  auto p24 = make_pruner(nm);
  std::vector<float> odd(3 * 10, 1.0f);
  CHECK_THROWS_WITH_AS(p24->prune("layers.0.fc1.weight", odd.data(), 3, 10), doctest::Contains("layers.0.fc1.weight"), Error);
  CHECK(nm.pattern() == "2:4");
  CHECK(PruneSpec().pattern() == "unstructured");
}

TEST_CASE("PruneMethod: one spelling each, parsed back; no other spelling parses") {
  const PruneMethod all[] = {PruneMethod::Magnitude, PruneMethod::Wanda, PruneMethod::SparseGpt, PruneMethod::Gptq};
  const char* names[] = {"magnitude", "wanda", "sparsegpt", "gptq"};
  for (size_t i = 0; i < 4; ++i) {
    CHECK(std::string(to_string(all[i])) == names[i]);
    CHECK(parse_prune_method(names[i]) == all[i]);
    CHECK(calibrated(all[i]) == (all[i] != PruneMethod::Magnitude));
  }
  for (const char* bad : {"", "SparseGPT", "sparse-gpt", "gptq ", "none"}) CHECK_FALSE(parse_prune_method(bad).has_value());
  CHECK_FALSE(PruneSpec{}.active());
  PruneSpec gptq;
  gptq.method = PruneMethod::Gptq;
  CHECK(gptq.active());  // quantizes with calibration, prunes nothing
}
