// The pruning library against the reference implementations, via the committed fixtures
// (tools/make_pruning_fixtures.py: wanda's WrappedGPT / prune_wanda / prune_magnitude,
// sparsegpt's add_batch / fasterprune and gptq's fasterquant with static groups, re-implemented
// in torch, f32, CPU).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "endor/format.h"
#include "endor/pruning.h"
#include "fixtures.h"

using namespace endor::pruning;
using endor::Dtype;
using endor::Quantization;
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
  if (q == "int8") opt.quant.dtype = Dtype::Int8;
  if (q == "int4") {
    opt.quant.dtype = Dtype::Int4;
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
  const bool int8 = opt.quant.dtype == Dtype::Int8, int4 = opt.quant.dtype == Dtype::Int4;
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
    if (opt.quant.dtype == Dtype::Int8) CHECK(res.row_scales == ref.row_scales);  // same input, same ops
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

// ---- GPTQ: sparsegpt_prune without pruning, static groups, act-order on and off ------------------

namespace {

SparseGptOptions gptq_options_of(const json& c) {
  SparseGptOptions opt;
  opt.target = SparsityTarget::unstructured(0.0);
  opt.block_size = c.value("block_size", 128);
  opt.percdamp = c.value("percdamp", 0.01f);
  opt.act_order = c.value("act_order", false);
  opt.static_groups = true;  // the fixtures are fasterquant(static_groups=True)
  const std::string q = c["quant"];
  opt.quant.dtype = q == "int8" ? Dtype::Int8 : q == "int4" ? Dtype::Int4 : Dtype::Int4k;
  if (q != "int8") opt.quant.group_size = c["group_size"];
  return opt;
}

struct GptqReference {  // one fasterquant fixture case
  size_t rows = 0, n_in = 0, group = 0, groups_per_row = 0;
  Quantization scheme = std::nullopt;
  std::vector<float> prequant, row_scales, hinv_diag;
  std::vector<int32_t> perm;  // processing order: perm[k] = original column of the k-th column quantized
  std::vector<uint8_t> int4_codes, param_codes;
  std::vector<int8_t> int8_codes;
  std::vector<uint16_t> group_scales, group_mins, super_scales;
  double loss = 0;

  GptqReference(const json& c, size_t n_in_) : rows(c["rows"]), n_in(n_in_), scheme(gptq_options_of(c).quant.dtype) {
    const std::string p = "gptq_" + c["name"].get<std::string>() + "_";
    prequant = fixtures::load<float>(p + "prequant");
    hinv_diag = fixtures::load<float>(p + "hinv_diag");
    perm = fixtures::load<int32_t>(p + "perm");
    loss = fixtures::load<double>(p + "loss").at(0);
    if (scheme == Dtype::Int8) {
      row_scales = fixtures::load<float>(p + "row_scales");
      int8_codes = fixtures::load<int8_t>(p + "codes");
      return;
    }
    group = c["group_size"];
    groups_per_row = (n_in + group - 1) / group;
    int4_codes = fixtures::load<uint8_t>(p + "codes");
    if (scheme == Dtype::Int4) {
      group_scales = fixtures::load<uint16_t>(p + "group_scales");
      group_mins = fixtures::load<uint16_t>(p + "group_mins");
    } else {
      super_scales = fixtures::load<uint16_t>(p + "super_scales");
      param_codes = fixtures::load<uint8_t>(p + "param_codes");
    }
  }
  // The reference's decoded step and offset of element (r, col): value = code·step + offset.
  std::pair<float, float> grid(size_t r, size_t col) const {
    if (scheme == Dtype::Int8) return {row_scales[r], 0.0f};
    const size_t p = r * groups_per_row + col / group;
    if (scheme == Dtype::Int4) return {endor::f16_to_f32(group_scales[p]), endor::f16_to_f32(group_mins[p])};
    const size_t b = p / endor::kInt4kSuperGroups;  // SPEC.md §6.7
    return {endor::f16_to_f32(super_scales[2 * b]) * float(param_codes[2 * p]),
            -(endor::f16_to_f32(super_scales[2 * b + 1]) * float(param_codes[2 * p + 1]))};
  }
  int code(size_t i) const { return scheme == Dtype::Int8 ? int8_codes[i] : int4_codes[i]; }
};

int code_of(const SparseGptResult& res, size_t i) {
  return res.dtype == Dtype::Int8 ? res.int8_codes[i] : res.int4_codes[i];
}

// As compare() above, with the reference's processing order: a row is compared column by column
// in the order fasterquant quantized it, up to its first differing code, which must be a near-tie
// (the reference's code argument (w − offset)/step within 2·tol/step of a rounding boundary, the
// codes one apart). The static parameters are compared beforehand (they must be identical).
// A dead input sorts where gptq.py puts it (H_jj set to 1 first) in the reference's order and
// last in ours (H_jj = 0); its row and column of H⁻¹'s factor are zero off the diagonal, so where
// it is quantized changes nothing but rounding.
struct GptqComparison {
  size_t diverged_rows = 0;
  std::vector<std::string> non_ties;
  double max_abs_diff = 0;        // |w − w_ref| over each row's columns before divergence
  double max_tie_distance = 0;    // largest |arg − boundary| (code units) among the divergences
};

GptqComparison compare_gptq(const GptqReference& ref, const std::vector<float>& w, const SparseGptResult& res,
                            double tol) {
  GptqComparison out;
  for (size_t r = 0; r < ref.rows; ++r) {
    for (size_t k = 0; k < ref.n_in; ++k) {
      const size_t col = size_t(ref.perm[k]), i = r * ref.n_in + col;
      const auto [step, offset] = ref.grid(r, col);
      if (code_of(res, i) != ref.code(i)) {
        ++out.diverged_rows;
        const double dist = nearest_half_distance((double(ref.prequant[i]) - offset) / step);
        out.max_tie_distance = std::max(out.max_tie_distance, dist);
        if (std::abs(code_of(res, i) - ref.code(i)) != 1 || dist > 2 * tol / step)
          out.non_ties.push_back("row " + std::to_string(r) + " col " + std::to_string(col) + " (step " +
                                 std::to_string(k) + "): code " + std::to_string(code_of(res, i)) + " vs " +
                                 std::to_string(ref.code(i)) + ", " + std::to_string(dist) + " code units from a tie");
        break;
      }
      const float want = float(ref.code(i)) * step + offset;  // q·step is exact: one rounding
      out.max_abs_diff = std::max(out.max_abs_diff, double(std::fabs(w[i] - want)));
    }
  }
  return out;
}

// h: the Hessian given to sparsegpt_prune; h_layer: the reference's (for κ); h_rel: their relative
// difference (0 for the reference's own), which widens the tolerance as in the SparseGPT case.
void check_gptq_case(const json& c, const std::vector<float>& h, const std::vector<float>& h_layer, double h_rel,
                     bool own_hessian) {
  const std::string name = c["name"];
  const fixtures::Layer l = fixtures::layer(c["layer"]);
  const GptqReference ref(c, l.n_in);
  const SparseGptOptions opt = gptq_options_of(c);
  std::vector<float> w(l.w.begin(), l.w.begin() + long(ref.rows * l.n_in));
  const SparseGptResult res = sparsegpt_prune(w.data(), ref.rows, l.n_in, h.data(), opt);
  REQUIRE(res.dtype == opt.quant.dtype);
  for (uint8_t m : res.mask) REQUIRE(m == 0);  // nothing pruned
  // The static parameters come from the input W (dead inputs zeroed) by the same f32 operations.
  if (opt.quant.dtype == Dtype::Int8) CHECK(res.row_scales == ref.row_scales);
  if (opt.quant.dtype == Dtype::Int4) {
    CHECK(res.group_scales_f16 == ref.group_scales);
    CHECK(res.group_mins_f16 == ref.group_mins);
  }
  if (opt.quant.dtype == Dtype::Int4k) {
    CHECK(res.super_scales_f16 == ref.super_scales);
    CHECK(res.param_codes == ref.param_codes);
  }
  double scale = max_abs(ref.prequant);
  for (float x : w) scale = std::max(scale, double(std::fabs(x)));
  const double tol = kappa_bound(h_layer, l.n_in, opt.percdamp) * (kU + h_rel) * scale;
  const GptqComparison cmp = compare_gptq(ref, w, res, tol);
  std::ostringstream non_ties;
  for (const auto& s : cmp.non_ties) non_ties << s << "; ";
  CHECK_MESSAGE(cmp.non_ties.empty(), "divergences that are not near-ties: " << non_ties.str());
  CHECK(cmp.diverged_rows <= std::max<size_t>(1, ref.rows / 10));
  CHECK(cmp.max_abs_diff == 0.0);  // same codes on the same parameters: the same values
  // The loss Σ (w − q)²/d² / 2 is continuous in the rounding errors; without divergence it must
  // agree to first order: |Δ| <= Σ (2|w − q|·tol + tol²)/d² + 2·κ·u·loss (d's relative error).
  double loss_bound = 2 * kappa_bound(h_layer, l.n_in, opt.percdamp) * (kU + h_rel) * ref.loss;
  for (size_t r = 0; r < ref.rows; ++r)
    for (size_t k = 0; k < l.n_in; ++k) {
      const size_t i = r * l.n_in + size_t(ref.perm[k]);
      const auto [step, offset] = ref.grid(r, size_t(ref.perm[k]));
      const double e = std::fabs(double(ref.prequant[i]) - (float(ref.code(i)) * step + offset));
      loss_bound += (2 * e * tol + tol * tol) / (double(ref.hinv_diag[k]) * ref.hinv_diag[k]) / 2;
    }
  const double loss_diff = std::fabs(res.loss - ref.loss);
  if (cmp.diverged_rows == 0) CHECK(loss_diff <= loss_bound);
  const std::string source = own_hessian ? " (own Hessian, rel diff " + std::to_string(h_rel) + ")" : "";
  MESSAGE("gptq " << name << source << ": codes identical in "
                  << ref.rows - cmp.diverged_rows << "/" << ref.rows << " rows; divergences at most "
                  << cmp.max_tie_distance << " code units from a tie (bound 2·tol/step, tol " << tol
                  << "); loss " << res.loss << " vs " << ref.loss << " (|d| " << loss_diff << ", bound " << loss_bound
                  << ")");
}

}  // namespace

// GPTQ = sparsegpt_prune with SparsityTarget::unstructured(0) and static groups, against
// gptq.py fasterquant(static_groups=True, actorder) with Endor's quantizers (zero-code int4,
// int4k's coded grid with mse_clip off, int8 per row). Same tolerance argument as SparseGPT's.
// Measured on this machine (2026-11-27, "AMD EPYC", 2 cores): every code of every case identical (no
// diverged row), loss within 1.3e-6 relative of the reference's (bound 0.05-1.4 relative: κ_bound is loose).
TEST_CASE("GPTQ matches fasterquant (static groups, act-order) given the reference Hessian") {
  for (const auto& c : fixtures::cases()["gptq"]) {
    const std::string name = c["name"];
    CAPTURE(name);
    const fixtures::Layer l = fixtures::layer(c["layer"]);
    check_gptq_case(c, l.h, l.h, 0.0, false);
  }
}

TEST_CASE("GPTQ from our own Hessian still matches fasterquant") {
  for (const auto& c : fixtures::cases()["gptq"]) {
    const std::string name = c["name"];
    CAPTURE(name);
    const fixtures::Layer l = fixtures::layer(c["layer"]);
    HessianAccumulator acc(l.n_in);
    feed(acc, l);
    double diff_sq = 0, ref_sq = 0;
    for (size_t i = 0; i < l.h.size(); ++i) {
      diff_sq += std::pow(double(acc.hessian()[i]) - l.h[i], 2);
      ref_sq += std::pow(double(l.h[i]), 2);
    }
    check_gptq_case(c, acc.hessian(), l.h, std::sqrt(double(l.n_in) * diff_sq / ref_sq), true);
  }
}
