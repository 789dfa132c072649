// SparseGPT (IST-DASLab/sparsegpt sparsegpt.py fasterprune) with optional joint quantization,
// f32, on CPU: LAPACK for the inverse-Hessian factor, BLAS sgemm for the lazy block updates,
// OpenMP over rows inside a block (within a block every row evolves independently).
#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "checks.h"
#include "quantizer.h"
#include "symmetric.h"
#include "endor/format.h"
#include "endor/pruning.h"

namespace endor::pruning {

namespace {

constexpr const char* kFn = "sparsegpt_prune";

// The _work variants skip LAPACKE's NaN scan: the Hessian was checked finite on entry.
// h [n, n] symmetric positive definite -> upper U with H⁻¹ = Uᵀ·U, computed as the reference
// does: L = chol(H), H⁻¹ = cholesky_inverse(L), U = chol(H⁻¹, upper). LAPACK runs column-major:
// a row-major symmetric buffer is the same matrix, and a column-major upper triangle is the
// row-major lower one, hence the swapped 'U'/'L'. The strict lower triangle is zeroed.
void upper_cholesky_of_inverse(std::vector<float>& h, size_t n) {
  const lapack_int ln = lapack_int(n);
  lapack_int info = LAPACKE_spotrf_work(LAPACK_COL_MAJOR, 'U', ln, h.data(), ln);
  if (info > 0)
    detail::fail(kFn, "the dampened Hessian is not positive definite (Cholesky failed at column " +
                          std::to_string(info) + "); use more calibration data or a larger percdamp");
  if (info < 0) detail::fail(kFn, "LAPACK spotrf rejected argument " + std::to_string(-info));
  info = LAPACKE_spotri_work(LAPACK_COL_MAJOR, 'U', ln, h.data(), ln);
  if (info != 0) detail::fail(kFn, "the Hessian's Cholesky factor is singular (spotri info " + std::to_string(info) + ")");
  // Row-major view: the lower triangle holds H⁻¹; mirror it to make the full matrix.
  detail::mirror_triangle(h.data(), n, /*from_upper=*/false);
  info = LAPACKE_spotrf_work(LAPACK_COL_MAJOR, 'L', ln, h.data(), ln);
  if (info != 0)
    detail::fail(kFn, "the inverse Hessian is not numerically positive definite (Cholesky failed at column " +
                          std::to_string(info) + "); use a larger percdamp");
  for (size_t i = 1; i < n; ++i) std::fill(h.begin() + i * n, h.begin() + i * n + i, 0.0f);
}

// row[j] -= e·u_row[j] for j in [0, n): the in-block column update of one row. Cloned for AVX2
// with a run-time dispatch (the baseline build is SSE2 only); multiply and subtract stay unfused.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target_clones("avx2", "default")))
#endif
void subtract_scaled(float* row, const float* u_row, float e, size_t n) {
  for (size_t j = 0; j < n; ++j) row[j] -= e * u_row[j];
}

void check_options(const SparseGptOptions& o, size_t n_in) {
  if (!o.fixed_mask && (o.target.is_n_of_m() || o.target.ratio != 0.0)) detail::check_target(kFn, o.target, n_in);  // 0: GPTQ
  if (o.act_order && o.target.is_n_of_m() && !o.fixed_mask) detail::fail(kFn, "act_order does not combine with N:M sparsity");
  if (o.block_size == 0) detail::fail(kFn, "block_size must be positive");
  if (o.target.is_n_of_m() && o.block_size % o.target.m != 0)
    detail::fail(kFn, "N:M group size " + std::to_string(o.target.m) + " does not divide block_size " +
                          std::to_string(o.block_size));
  if (!(o.percdamp >= 0.0f && std::isfinite(o.percdamp))) detail::fail(kFn, "percdamp must be finite and >= 0");
  if (o.quant.dtype && is_grouped(*o.quant.dtype) && o.quant.group_size == 0)
    detail::fail(kFn, "group_size must be positive");
}

}  // namespace

namespace {

// What one sparsegpt_prune call decided up front, shared by its steps. Everything about the stored
// form is the quantizer's (quantizer.h).
struct Plan {
  size_t n_out = 0, n_in = 0;
  bool fixed = false;
  bool prunes = false;
  std::vector<size_t> perm;  // perm[c]: the original column of working column c
  std::vector<float> u;      // the upper Cholesky factor of the dampened H⁻¹, in working order
};

Plan make_plan(size_t n_out, size_t n_in, const SparseGptOptions& opt) {
  Plan p;
  p.n_out = n_out;
  p.n_in = n_in;
  p.fixed = opt.fixed_mask != nullptr;
  p.prunes = !p.fixed && (opt.target.is_n_of_m() || opt.target.ratio > 0.0);
  return p;
}

// act_order: work on the columns in order of decreasing H_jj (stable), i.e. on W·P and PᵀHP.
// Then U: dead inputs (H_jj = 0, no calibration activation reached them) get H_jj = 1 and their
// weights 0, the diagonal is dampened, and U = chol(H⁻¹) (may throw: w untouched before).
void factor_hessian(Plan& p, float* w, const float* h, const SparseGptOptions& opt) {
  const size_t n_in = p.n_in;
  p.perm.resize(n_in);
  for (size_t j = 0; j < n_in; ++j) p.perm[j] = j;
  if (opt.act_order)
    std::stable_sort(p.perm.begin(), p.perm.end(), [&](size_t a, size_t b) { return h[a * n_in + a] > h[b * n_in + b]; });
  std::vector<float>& u = p.u;
  u.resize(n_in * n_in);
  for (size_t i = 0; i < n_in; ++i)
    for (size_t j = 0; j < n_in; ++j) u[i * n_in + j] = h[p.perm[i] * n_in + p.perm[j]];
  std::vector<size_t> dead;
  for (size_t j = 0; j < n_in; ++j) {
    if (u[j * n_in + j] != 0.0f) continue;
    u[j * n_in + j] = 1.0f;
    dead.push_back(j);
  }
  double diag_sum = 0.0;
  for (size_t j = 0; j < n_in; ++j) diag_sum += u[j * n_in + j];
  const float damp = opt.percdamp * float(diag_sum / double(n_in));
  for (size_t j = 0; j < n_in; ++j) u[j * n_in + j] += damp;
  upper_cholesky_of_inverse(u, n_in);
  for (size_t j : dead)
    for (size_t r = 0; r < p.n_out; ++r) w[r * n_in + p.perm[j]] = 0.0f;
}

// Static parameters (quantizer.h): from the (dead-zeroed) input W, with the Hessian's diagonal.
void choose_static_params(const Plan& p, detail::Quantizer& quant, const float* w, const float* h,
                          const SparseGptOptions& opt) {
  std::vector<float> hdiag(p.n_in);
  for (size_t j = 0; j < p.n_in; ++j) hdiag[j] = h[j * p.n_in + j];
  quant.choose_static(w, hdiag.data(), opt.fixed_mask);
}

// Unstructured: one threshold over rows × block columns [i1, i2) of the block-start W (the
// reference's mask1).
void mask_block(const Plan& p, SparseGptResult& res, const float* w, size_t i1, size_t i2, double ratio,
                std::vector<float>& score) {
  const size_t count = i2 - i1, n_in = p.n_in;
  score.resize(p.n_out * count);
  for (size_t r = 0; r < p.n_out; ++r)
    for (size_t i = 0; i < count; ++i) {
      const float x = w[r * n_in + i1 + i], d = p.u[(i1 + i) * n_in + i1 + i];
      score[r * count + i] = (x * x) / (d * d);
    }
  std::vector<float> sorted = score;
  const size_t k = std::min(size_t(double(sorted.size()) * ratio), sorted.size() - 1);
  std::nth_element(sorted.begin(), sorted.begin() + k, sorted.end());
  const float thresh = sorted[k];
  for (size_t r = 0; r < p.n_out; ++r)
    for (size_t i = 0; i < count; ++i) res.mask[r * n_in + i1 + i] = score[r * count + i] <= thresh;
}

// Row r through block columns [i1, i2): each column decided (N:M groups as they start), quantized
// (the quantizer choosing parameters as it is reached), its error e = (x − q)/d written to row_err
// and fed back to the rest of the block. Returns the row's Σ (x − q)²/d². Rows are independent
// within a block.
double sweep_row(const Plan& p, SparseGptResult& res, detail::Quantizer& quant, float* w, size_t r, size_t i1,
                 size_t i2, const SparseGptOptions& opt, float* row_err) {
  const size_t n_in = p.n_in;
  const SparsityTarget& target = opt.target;
  float* row = w + r * n_in;
  uint8_t* mask = &res.mask[r * n_in];
  float nm_score[256];
  std::vector<float> nm_big;
  double loss = 0.0;
  for (size_t i = 0; i < i2 - i1; ++i) {
    const size_t c = i1 + i;
    const float* u_row = &p.u[c * n_in];  // U[c, :], upper: entries from column c on
    if (p.prunes && target.is_n_of_m() && i % target.m == 0) {
      float* sc = nm_score;
      if (target.m > 256) {
        nm_big.resize(target.m);
        sc = nm_big.data();
      }
      for (size_t t = 0; t < target.m; ++t) {
        const float x = row[c + t], d = p.u[(c + t) * n_in + c + t];
        sc[t] = (x * x) / (d * d);
      }
      detail::mark_lowest_n(sc, target.m, target.n, mask + c);
    }
    quant.reach(r, c, row, mask);
    const float x = row[c], d = u_row[c];
    const float q = mask[c] ? 0.0f : quant.quantize(r, c, p.perm[c], x);
    const float e = (x - q) / d;
    const float l = (x - q) * (x - q) / (d * d);
    loss += l;
    row[c] = q;
    row_err[i] = e;
    subtract_scaled(row + c + 1, u_row + c + 1, e, i2 - c - 1);
  }
  return loss;
}

}  // namespace

SparseGptResult sparsegpt_prune(float* w, size_t n_out, size_t n_in, const float* h,
                                const SparseGptOptions& opt) {
  const size_t numel = detail::checked_numel(kFn, n_out, n_in, "weight");
  detail::checked_numel(kFn, n_in, n_in, "Hessian");
  if (n_in > size_t(INT32_MAX) || n_out > size_t(INT32_MAX)) detail::fail(kFn, "layer too large for LAPACK/BLAS");
  check_options(opt, n_in);
  detail::check_finite(kFn, w, numel, "weight");
  detail::check_finite(kFn, h, n_in * n_in, "Hessian");

  SparseGptResult res;
  Plan p = make_plan(n_out, n_in, opt);
  res.mask.assign(numel, 0);
  const std::unique_ptr<detail::Quantizer> quant = detail::make_quantizer(opt, n_out, n_in, w, res);
  factor_hessian(p, w, h, opt);
  choose_static_params(p, *quant, w, h, opt);
  if (p.fixed)  // the given mask, in working column order
    for (size_t r = 0; r < n_out; ++r)
      for (size_t c = 0; c < n_in; ++c) res.mask[r * n_in + c] = opt.fixed_mask[r * n_in + p.perm[c]] != 0;
  std::vector<float> permuted;  // W·P when act_order (the sweep works on `w`)
  float* const w_orig = w;
  if (opt.act_order) {
    permuted.resize(numel);
    for (size_t r = 0; r < n_out; ++r)
      for (size_t c = 0; c < n_in; ++c) permuted[r * n_in + c] = w_orig[r * n_in + p.perm[c]];
    w = permuted.data();
  }

  const size_t bs = opt.block_size;
  std::vector<float> err(n_out * bs);  // Err1: [n_out, count] with row stride bs
  std::vector<float> score;            // unstructured block scores, [n_out, count]
  std::vector<double> row_loss(n_out, 0.0);
  for (size_t i1 = 0; i1 < n_in; i1 += bs) {
    const size_t i2 = std::min(i1 + bs, n_in), count = i2 - i1;
    if (p.prunes && !opt.target.is_n_of_m()) mask_block(p, res, w, i1, i2, opt.target.ratio, score);
#pragma omp parallel for schedule(static)
    for (long long rr = 0; rr < (long long)n_out; ++rr)
      row_loss[size_t(rr)] += sweep_row(p, res, *quant, w, size_t(rr), i1, i2, opt, &err[size_t(rr) * bs]);
    if (i2 < n_in) {
      // W[:, i2:] -= Err1 · U[i1:i2, i2:]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n_out), int(n_in - i2), int(count), -1.0f,
                  err.data(), int(bs), &p.u[i1 * n_in + i2], int(n_in), 1.0f, w + i2, int(n_in));
    }
  }
  if (opt.act_order) {  // back to the original column order
    std::vector<uint8_t> mask(numel);
    for (size_t r = 0; r < n_out; ++r)
      for (size_t c = 0; c < n_in; ++c) {
        w_orig[r * n_in + p.perm[c]] = w[r * n_in + c];
        mask[r * n_in + p.perm[c]] = res.mask[r * n_in + c];
      }
    res.mask = std::move(mask);
  }
  for (size_t r = 0; r < n_out; ++r) res.loss += row_loss[r];
  res.loss /= 2.0;
  return res;
}

}  // namespace endor::pruning
