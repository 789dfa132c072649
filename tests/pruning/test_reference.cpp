// The pruning library against the reference implementations, via the committed fixtures
// (tools/make_pruning_fixtures.py: wanda's WrappedGPT / prune_wanda / prune_magnitude and
// sparsegpt's add_batch / fasterprune, re-implemented in torch, f32, CPU).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "endor/format.h"
#include "endor/pruning.h"
#include "fixtures.h"

using namespace endor::pruning;
using nlohmann::json;

namespace {

constexpr double kU = 0x1p-24;  // unit roundoff of f32

template <typename Accumulator>
void feed(Accumulator& acc, const fixtures::Layer& l) {
  size_t sample = 0;
  for (size_t b : l.batch_samples) {
    acc.add_batch(&l.x[sample * l.tokens_per_sample * l.n_in], b * l.tokens_per_sample, l.n_in, b);
    sample += b;
  }
}

// Rounding-error factor of the references' f32 statistics: every column sum of a batch runs over
// at most all T tokens (relative error <= T·u for non-negative terms, naive order), plus about 5
// roundings per batch (rescale, scale, square/sqrt, divide, add). Ours sum in double or BLAS.
double stats_error_factor(const fixtures::Layer& l) {
  return double(l.x.size() / l.n_in + 5 * l.batch_samples.size()) * kU;
}

// Upper bound on κ(H + damp·I) for the PSD H the fixtures use: λmax <= max_i Σ_j |H_ij|
// (Gershgorin) + damp and λmin >= damp. Dead inputs get H_jj = 1 first, as the algorithm does.
double kappa_bound(const std::vector<float>& h, size_t n, double percdamp) {
  double diag_sum = 0, gersh = 0;
  for (size_t i = 0; i < n; ++i) diag_sum += h[i * n + i] == 0.0f ? 1.0 : h[i * n + i];
  for (size_t i = 0; i < n; ++i) {
    double row = h[i * n + i] == 0.0f ? 1.0 : 0.0;
    for (size_t j = 0; j < n; ++j) row += std::fabs(h[i * n + j]);
    gersh = std::max(gersh, row);
  }
  const double damp = percdamp * diag_sum / double(n);
  return (gersh + damp) / damp;
}

SparseGptOptions options_of(const json& c) {
  SparseGptOptions opt;
  opt.target = fixtures::target(c);
  opt.block_size = c.value("block_size", 128);
  opt.percdamp = c.value("percdamp", 0.01f);
  const std::string q = c.value("quant", "none");
  if (q == "int8") opt.quant.scheme = QuantScheme::Int8Row;
  if (q == "int4") {
    opt.quant.scheme = QuantScheme::Int4Group;
    opt.quant.group_size = c["group_size"];
  }
  return opt;
}

struct Reference {  // one fasterprune fixture case
  std::vector<float> w, score, thresh, hinv_diag, prequant, row_scales;
  std::vector<uint8_t> mask, int4_codes;
  std::vector<int8_t> int8_codes;
  std::vector<uint16_t> group_scales, group_mins;

  explicit Reference(const std::string& name) {
    const std::string p = "sparsegpt_" + name + "_";
    w = fixtures::load<float>(p + "W");
    mask = fixtures::load<uint8_t>(p + "mask");
    score = fixtures::load<float>(p + "score");
    hinv_diag = fixtures::load<float>(p + "hinv_diag");
    if (fixtures::exists(p + "thresh")) thresh = fixtures::load<float>(p + "thresh");
    if (fixtures::exists(p + "prequant")) prequant = fixtures::load<float>(p + "prequant");
    if (fixtures::exists(p + "row_scales")) {
      row_scales = fixtures::load<float>(p + "row_scales");
      int8_codes = fixtures::load<int8_t>(p + "codes");
    }
    if (fixtures::exists(p + "group_scales")) {
      group_scales = fixtures::load<uint16_t>(p + "group_scales");
      group_mins = fixtures::load<uint16_t>(p + "group_mins");
      int4_codes = fixtures::load<uint8_t>(p + "codes");
    }
  }
};

// Our result vs the reference's, row by row. Rows evolve independently inside SparseGPT, so a
// row is compared up to its first differing decision (mask, code, int4 params); that decision
// must be a near-tie: the reference's deciding quantity within the weight tolerance `tol` of the
// boundary. Beyond it the row legitimately follows another path.
struct Comparison {
  size_t diverged_rows = 0;
  std::vector<std::string> non_ties;  // divergences that are NOT near-ties (must stay empty)
  double max_abs_diff = 0;            // |W − W_ref| over each row's columns before divergence
};

double nearest_half_distance(double v) { return std::fabs(v - (std::floor(v) + 0.5)); }

Comparison compare(const json& c, size_t n_out, size_t n_in, const std::vector<float>& w,
                   const SparseGptResult& res, const Reference& ref, double tol) {
  const SparseGptOptions opt = options_of(c);
  const size_t bs = opt.block_size, g = opt.quant.group_size;
  const size_t groups_per_row = (n_in + g - 1) / g;
  const bool int8 = opt.quant.scheme == QuantScheme::Int8Row, int4 = opt.quant.scheme == QuantScheme::Int4Group;
  Comparison out;
  for (size_t r = 0; r < n_out; ++r) {
    size_t diverge = n_in;
    std::string why;
    bool tie = false;
    for (size_t col = 0; col < n_in && diverge == n_in; ++col) {
      const size_t i = r * n_in + col;
      if (int4 && col % g == 0) {
        const size_t gi = r * groups_per_row + col / g;
        const uint16_t s = res.group_scales_f16[gi], m = res.group_mins_f16[gi];
        if (s != ref.group_scales[gi] || m != ref.group_mins[gi]) {
          diverge = col, why = "int4 params";  // near-tie: f16 rounding of min/scale went the other way
          tie = std::abs(int(s) - int(ref.group_scales[gi])) <= 1 && std::abs(int(m) - int(ref.group_mins[gi])) <= 1;
          break;
        }
      }
      if (res.mask[i] != ref.mask[i]) {
        diverge = col, why = "mask";
        if (!opt.target.is_n_of_m()) {
          const size_t b0 = col / bs * bs, b1 = std::min(b0 + bs, n_in);
          const double d_min = *std::min_element(&ref.hinv_diag[b0], &ref.hinv_diag[b1]);
          tie = std::fabs(std::sqrt(double(ref.score[i])) - std::sqrt(double(ref.thresh[col / bs]))) <=
                2 * tol * (1 / ref.hinv_diag[col] + 1 / d_min);
        } else {  // the n-th and (n+1)-th lowest scores of the group
          const size_t m = opt.target.m, g0 = col - col % m;
          std::vector<size_t> idx(m);
          for (size_t t = 0; t < m; ++t) idx[t] = g0 + t;
          std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return ref.score[r * n_in + a] < ref.score[r * n_in + b]; });
          const size_t a = idx[opt.target.n - 1], b = idx[opt.target.n];
          tie = std::fabs(std::sqrt(double(ref.score[r * n_in + a])) - std::sqrt(double(ref.score[r * n_in + b]))) <=
                2 * tol * (1 / ref.hinv_diag[a] + 1 / ref.hinv_diag[b]);
        }
        break;
      }
      if (ref.mask[i]) continue;
      if (int8 && res.int8_codes[i] != ref.int8_codes[i]) {
        diverge = col, why = "int8 code";
        tie = std::abs(res.int8_codes[i] - ref.int8_codes[i]) == 1 &&
              nearest_half_distance(ref.prequant[i] / ref.row_scales[r]) <= 2 * tol / ref.row_scales[r];
      }
      if (int4 && res.int4_codes[i] != ref.int4_codes[i]) {
        const size_t gi = r * groups_per_row + col / g;
        const double scale = endor::f16_to_f32(ref.group_scales[gi]), mn = endor::f16_to_f32(ref.group_mins[gi]);
        diverge = col, why = "int4 code";
        tie = std::abs(res.int4_codes[i] - ref.int4_codes[i]) == 1 &&
              nearest_half_distance((ref.prequant[i] - mn) / scale) <= 2 * tol / scale;
      }
    }
    for (size_t col = 0; col < diverge; ++col)
      out.max_abs_diff = std::max(out.max_abs_diff, double(std::fabs(w[r * n_in + col] - ref.w[r * n_in + col])));
    if (diverge < n_in) {
      ++out.diverged_rows;
      if (!tie) out.non_ties.push_back("row " + std::to_string(r) + " col " + std::to_string(diverge) + ": " + why);
    }
  }
  return out;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

}  // namespace

TEST_CASE("WandaStats reproduces WrappedGPT.add_batch (samples-weighted running mean)") {
  for (const auto& [name, _] : fixtures::cases()["layers"].items()) {
    CAPTURE(name);
    const fixtures::Layer l = fixtures::layer(name);
    WandaStats stats(l.n_in);
    feed(stats, l);
    CHECK(stats.n_samples() == l.x.size() / (l.tokens_per_sample * l.n_in));
    const double tol = stats_error_factor(l);
    for (size_t j = 0; j < l.n_in; ++j) {
      CAPTURE(j);
      CHECK(std::fabs(stats.scaler_row()[j] - l.scaler[j]) <= tol * l.scaler[j]);
    }
  }
}

TEST_CASE("HessianAccumulator reproduces SparseGPT.add_batch") {
  for (const auto& [name, _] : fixtures::cases()["layers"].items()) {
    CAPTURE(name);
    const fixtures::Layer l = fixtures::layer(name);
    HessianAccumulator acc(l.n_in);
    feed(acc, l);
    // |ΔH_ij| <= 2·factor·(2/N)·Σ_t |x_ti|·|x_tj| (dot-product error bound, both sides).
    const size_t n_tokens = l.x.size() / l.n_in;
    const double n_samples = double(acc.n_samples()), factor = stats_error_factor(l);
    size_t bad = 0;
    for (size_t i = 0; i < l.n_in; ++i)
      for (size_t j = 0; j < l.n_in; ++j) {
        double abs_dot = 0;
        for (size_t t = 0; t < n_tokens; ++t) abs_dot += std::fabs(double(l.x[t * l.n_in + i]) * l.x[t * l.n_in + j]);
        const double bound = 2 * factor * (2 / n_samples) * abs_dot;
        bad += std::fabs(acc.hessian()[i * l.n_in + j] - l.h[i * l.n_in + j]) > bound;
      }
    CHECK(bad == 0);
  }
}

TEST_CASE("Wanda masks are identical to prune_wanda's") {
  for (const auto& c : fixtures::cases()["wanda"]) {
    const std::string name = c["name"];
    CAPTURE(name);
    const fixtures::Layer l = fixtures::layer(c["layer"]);
    const auto mask_ref = fixtures::load<uint8_t>("wanda_" + name + "_mask");
    // With the reference's statistics: the scores are the same f32 values, so the masks are too.
    std::vector<float> w = l.w;
    CHECK(wanda_prune(w.data(), l.n_out, l.n_in, l.scaler.data(), fixtures::target(c)) == mask_ref);
    for (size_t i = 0; i < w.size(); ++i) CHECK(w[i] == (mask_ref[i] ? 0.0f : l.w[i]));
    // End to end from our own statistics (the fixtures' cut gaps are >= 9e-5 relative, far above
    // the statistics' error, so the masks must still agree exactly).
    WandaStats stats(l.n_in);
    feed(stats, l);
    std::vector<float> w2 = l.w;
    CHECK(wanda_prune(w2.data(), l.n_out, l.n_in, stats.scaler_row().data(), fixtures::target(c)) == mask_ref);
  }
}

TEST_CASE("Magnitude masks are identical to prune_magnitude's") {
  for (const auto& c : fixtures::cases()["magnitude"]) {
    const std::string name = c["name"];
    CAPTURE(name);
    const fixtures::Layer l = fixtures::layer(c["layer"]);
    std::vector<float> w = l.w;
    CHECK(magnitude_prune(w.data(), l.n_out, l.n_in, fixtures::target(c)) ==
          fixtures::load<uint8_t>("magnitude_" + name + "_mask"));
  }
}

// Tolerance: the two implementations differ only in rounding (LAPACK blocking, BLAS summation
// order). To first order the inverse-Hessian factor U carries a relative error <= κ(H_d)·u, and
// W' depends linearly on U with coefficients bounded by max|W|, so
//   tol = κ_bound(H_d) · u · max|W_ref|           (κ_bound from Gershgorin, ~1e4 here).
// Measured on this machine: max|ΔW| <= 1e-6·max|W| (~1/300 of tol), 0 diverged rows.
TEST_CASE("SparseGPT matches fasterprune given the reference Hessian") {
  for (const auto& c : fixtures::cases()["sparsegpt"]) {
    const std::string name = c["name"];
    CAPTURE(name);
    const fixtures::Layer l = fixtures::layer(c["layer"]);
    const Reference ref(name);
    const SparseGptOptions opt = options_of(c);
    std::vector<float> w = l.w;
    const SparseGptResult res = sparsegpt_prune(w.data(), l.n_out, l.n_in, l.h.data(), opt);
    const double tol = kappa_bound(l.h, l.n_in, opt.percdamp) * kU * max_abs(ref.w);
    const Comparison cmp = compare(c, l.n_out, l.n_in, w, res, ref, tol);
    std::ostringstream non_ties;
    for (const auto& s : cmp.non_ties) non_ties << s << "; ";
    CHECK_MESSAGE(cmp.non_ties.empty(), "divergences that are not near-ties: " << non_ties.str());
    CHECK(cmp.diverged_rows <= l.n_out / 10);
    CHECK(cmp.max_abs_diff <= tol);
    MESSAGE(name << ": max|dW| " << cmp.max_abs_diff << " (tol " << tol << "), diverged rows " << cmp.diverged_rows);
    if (opt.quant.scheme == QuantScheme::Int8Row) CHECK(res.row_scales == ref.row_scales);  // same input, same ops
    size_t pruned = 0;
    for (size_t i = 0; i < w.size(); ++i) pruned += res.mask[i];
    if (!opt.target.is_n_of_m()) {  // at least int(numel·p) per block, as the reference's `<= thresh`
      CHECK(double(pruned) >= std::floor(double(w.size()) * opt.target.ratio) - double(l.n_in / opt.block_size + 1));
    }
  }
}

// End to end: our Hessian differs from the reference's by ΔH (summation order); to first order
// that moves U by κ·‖ΔH‖₂/‖H‖₂ <= κ·sqrt(n)·‖ΔH‖_F/‖H‖_F relative, on top of the rounding above.
TEST_CASE("SparseGPT from our own Hessian still matches fasterprune") {
  for (const auto& c : fixtures::cases()["sparsegpt"]) {
    const std::string name = c["name"];
    CAPTURE(name);
    const fixtures::Layer l = fixtures::layer(c["layer"]);
    const Reference ref(name);
    const SparseGptOptions opt = options_of(c);
    HessianAccumulator acc(l.n_in);
    feed(acc, l);
    double diff_sq = 0, ref_sq = 0;
    for (size_t i = 0; i < l.h.size(); ++i) {
      diff_sq += std::pow(double(acc.hessian()[i]) - l.h[i], 2);
      ref_sq += std::pow(double(l.h[i]), 2);
    }
    const double h_rel = std::sqrt(double(l.n_in) * diff_sq / ref_sq);
    std::vector<float> w = l.w;
    const SparseGptResult res = sparsegpt_prune(w.data(), l.n_out, l.n_in, acc.hessian().data(), opt);
    const double tol = kappa_bound(l.h, l.n_in, opt.percdamp) * (kU + h_rel) * max_abs(ref.w);
    const Comparison cmp = compare(c, l.n_out, l.n_in, w, res, ref, tol);
    CHECK(cmp.non_ties.empty());
    CHECK(cmp.diverged_rows <= l.n_out / 10);
    CHECK(cmp.max_abs_diff <= tol);
    MESSAGE(name << " (own Hessian, rel diff " << h_rel << "): max|dW| " << cmp.max_abs_diff << " (tol " << tol
                 << "), diverged rows " << cmp.diverged_rows);
  }
}
