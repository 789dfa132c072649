// SparseGPT (IST-DASLab/sparsegpt sparsegpt.py fasterprune) with optional joint quantization,
// f32, on CPU: LAPACK for the inverse-Hessian factor, BLAS sgemm for the lazy block updates,
// OpenMP over rows inside a block (within a block every row evolves independently).
#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "checks.h"
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
  if ((o.quant.scheme == QuantScheme::Int4Group || o.quant.scheme == QuantScheme::Int4Coded ||
       o.quant.scheme == QuantScheme::Int8Group) && o.quant.group_size == 0)
    detail::fail(kFn, "group_size must be positive");
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
  res.scheme = opt.quant.scheme;
  res.mask.assign(numel, 0);
  const bool int8 = opt.quant.scheme == QuantScheme::Int8Row;
  const bool coded = opt.quant.scheme == QuantScheme::Int4Coded;
  const bool int4 = opt.quant.scheme == QuantScheme::Int4Group || coded;
  const bool int8g = opt.quant.scheme == QuantScheme::Int8Group;
  const bool fixed = opt.fixed_mask != nullptr;
  const bool statics = int4 && (coded || opt.static_groups || opt.act_order || fixed);
  // int8g: static scales (from the input W) where groups are not reached in column order.
  const bool statics8 = int8g && (opt.static_groups || opt.act_order);
  const bool prunes = !fixed && (opt.target.is_n_of_m() || opt.target.ratio > 0.0);
  const size_t group = int4 || int8g ? opt.quant.group_size : 0;
  const size_t groups_per_row = int4 || int8g ? (n_in + group - 1) / group : 0;
  std::vector<float> scales8;  // int8g: the widened group scales, [n_out, groups_per_row]
  if (int8g) {
    res.group_size = uint32_t(group);
    res.group_scales_f16.assign(n_out * groups_per_row, 0);
    scales8.assign(n_out * groups_per_row, 0.0f);
    res.int8_codes.assign(numel, 0);
  }
  if (int8) {
    // quantizer.find_params(W) runs on the input W, before dead columns are zeroed.
    res.row_scales.resize(n_out);
    for (size_t r = 0; r < n_out; ++r) res.row_scales[r] = int8_row_scale(w + r * n_in, n_in);
    res.int8_codes.assign(numel, 0);
  }
  if (int4) {
    res.group_size = uint32_t(group);
    if (!coded) {
      res.group_scales_f16.assign(n_out * groups_per_row, 0);
      res.group_mins_f16.assign(n_out * groups_per_row, 0);
    }
    res.int4_codes.assign(numel, 0);
  }

  // act_order: work on the columns in order of decreasing H_jj (stable), i.e. on W·P and PᵀHP;
  // perm[c] is the original column of working column c. Codes are stored at original columns.
  std::vector<size_t> perm(n_in);
  for (size_t j = 0; j < n_in; ++j) perm[j] = j;
  if (opt.act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](size_t a, size_t b) { return h[a * n_in + a] > h[b * n_in + b]; });
  std::vector<float> u(n_in * n_in);
  for (size_t i = 0; i < n_in; ++i)
    for (size_t j = 0; j < n_in; ++j) u[i * n_in + j] = h[perm[i] * n_in + perm[j]];
  std::vector<size_t> dead;  // inputs no calibration activation ever reached
  for (size_t j = 0; j < n_in; ++j) {
    if (u[j * n_in + j] != 0.0f) continue;
    u[j * n_in + j] = 1.0f;
    dead.push_back(j);
  }
  double diag_sum = 0.0;
  for (size_t j = 0; j < n_in; ++j) diag_sum += u[j * n_in + j];
  const float damp = opt.percdamp * float(diag_sum / double(n_in));
  for (size_t j = 0; j < n_in; ++j) u[j * n_in + j] += damp;
  upper_cholesky_of_inverse(u, n_in);  // may throw: w is not touched before this point
  for (size_t j : dead)
    for (size_t r = 0; r < n_out; ++r) w[r * n_in + perm[j]] = 0.0f;

  // Static groups: every group's parameters from the (dead-zeroed) input W, its squared errors
  // weighted by H_jj when searching a range.
  StaticInt4Params sp;
  if (statics) {
    std::vector<float> hdiag(n_in);
    for (size_t j = 0; j < n_in; ++j) hdiag[j] = h[j * n_in + j];
    sp = choose_int4_params(w, n_out, n_in, opt.quant, hdiag.data(), opt.fixed_mask);
    if (coded) {
      res.super_scales_f16 = sp.super_scales_f16;
      res.param_codes = sp.param_codes;
    } else {
      res.group_scales_f16 = sp.scales_f16;
      res.group_mins_f16 = sp.mins_f16;
    }
  }
  if (statics8)  // every group's scale from the (dead-zeroed) input W, over its kept entries
    for (size_t r = 0; r < n_out; ++r)
      for (size_t g = 0; g < groups_per_row; ++g) {
        float amax = 0.0f;
        for (size_t c = g * group; c < std::min(n_in, (g + 1) * group); ++c)
          if (!fixed || !opt.fixed_mask[r * n_in + c]) amax = std::max(amax, std::fabs(w[r * n_in + c]));
        const size_t p = r * groups_per_row + g;
        res.group_scales_f16[p] = int8g_scale(amax);
        scales8[p] = f16_to_f32(res.group_scales_f16[p]);
      }
  if (fixed)  // the given mask, in working column order
    for (size_t r = 0; r < n_out; ++r)
      for (size_t c = 0; c < n_in; ++c) res.mask[r * n_in + c] = opt.fixed_mask[r * n_in + perm[c]] != 0;
  std::vector<float> permuted;  // W·P when act_order (the loop below works on `w`)
  float* const w_orig = w;
  if (opt.act_order) {
    permuted.resize(numel);
    for (size_t r = 0; r < n_out; ++r)
      for (size_t c = 0; c < n_in; ++c) permuted[r * n_in + c] = w_orig[r * n_in + perm[c]];
    w = permuted.data();
  }

  const size_t bs = opt.block_size;
  std::vector<float> err(n_out * bs);   // Err1: [n_out, count] with row stride bs
  std::vector<float> score;             // unstructured block scores, [n_out, count]
  std::vector<double> row_loss(n_out, 0.0);
  const SparsityTarget& target = opt.target;

  for (size_t i1 = 0; i1 < n_in; i1 += bs) {
    const size_t i2 = std::min(i1 + bs, n_in), count = i2 - i1;

    if (prunes && !target.is_n_of_m()) {
      // One threshold over rows × block columns of the block-start W (the reference's mask1).
      score.resize(n_out * count);
      for (size_t r = 0; r < n_out; ++r)
        for (size_t i = 0; i < count; ++i) {
          const float x = w[r * n_in + i1 + i], d = u[(i1 + i) * n_in + i1 + i];
          score[r * count + i] = (x * x) / (d * d);
        }
      std::vector<float> sorted = score;
      const size_t k = std::min(size_t(double(sorted.size()) * target.ratio), sorted.size() - 1);
      std::nth_element(sorted.begin(), sorted.begin() + k, sorted.end());
      const float thresh = sorted[k];
      for (size_t r = 0; r < n_out; ++r)
        for (size_t i = 0; i < count; ++i) res.mask[r * n_in + i1 + i] = score[r * count + i] <= thresh;
    }

#pragma omp parallel for schedule(static)
    for (long long rr = 0; rr < (long long)n_out; ++rr) {
      const size_t r = size_t(rr);
      float* row = w + r * n_in;
      uint8_t* mask = &res.mask[r * n_in];
      float* row_err = &err[r * bs];
      float nm_score[256];
      std::vector<float> nm_big;
      Int4GroupParams gp;
      double loss = 0.0;
      for (size_t i = 0; i < count; ++i) {
        const size_t c = i1 + i;
        const float* u_row = &u[c * n_in];  // U[c, :], upper: entries from column c on
        if (prunes && target.is_n_of_m() && i % target.m == 0) {
          float* s = nm_score;
          if (target.m > 256) {
            nm_big.resize(target.m);
            s = nm_big.data();
          }
          for (size_t t = 0; t < target.m; ++t) {
            const float x = row[c + t], d = u[(c + t) * n_in + c + t];
            s[t] = (x * x) / (d * d);
          }
          detail::mark_lowest_n(s, target.m, target.n, mask + c);
        }
        if (int4 && !statics && (c % group == 0 || i == 0)) {
          const size_t g = c / group;
          if (c % group == 0) {
            gp = int4_group_params(row + c, std::min(group, n_in - c));
            res.group_scales_f16[r * groups_per_row + g] = gp.scale_f16;
            res.group_mins_f16[r * groups_per_row + g] = gp.min_f16;
          } else {  // a group that started in an earlier block
            gp.scale_f16 = res.group_scales_f16[r * groups_per_row + g];
            gp.min_f16 = res.group_mins_f16[r * groups_per_row + g];
            gp.scale = f16_to_f32(gp.scale_f16);
            gp.min = f16_to_f32(gp.min_f16);
          }
        }
        if (int8g && !statics8 && c % group == 0) {
          // The group's scale over its entries as they stand now, leaving out those already
          // marked pruned (this block's unstructured mask, a fixed mask, an N:M group decided).
          float amax = 0.0f;
          for (size_t k = c; k < std::min(n_in, c + group); ++k)
            if (!mask[k]) amax = std::max(amax, std::fabs(row[k]));
          const size_t p = r * groups_per_row + c / group;
          res.group_scales_f16[p] = int8g_scale(amax);
          scales8[p] = f16_to_f32(res.group_scales_f16[p]);
        }
        const float x = row[c], d = u_row[c];
        const size_t oc = perm[c];  // the original column
        float q = 0.0f;
        if (!mask[c]) {
          if (int8g) {
            const float s = scales8[r * groups_per_row + oc / group];
            const int8_t code = int8g_code(x, s);
            res.int8_codes[r * n_in + oc] = code;
            q = int8_value(code, s);
          } else if (int8) {
            const int8_t code = int8_code(x, res.row_scales[r]);
            res.int8_codes[r * n_in + oc] = code;
            q = int8_value(code, res.row_scales[r]);
          } else if (statics) {
            const size_t p = r * groups_per_row + oc / group;
            const uint8_t code = int4_code_on(x, sp.scales[p], sp.mins[p]);
            res.int4_codes[r * n_in + oc] = code;
            q = float(code) * sp.scales[p] + sp.mins[p];  // as SPEC.md §6.6 decodes it
          } else if (int4) {
            const uint8_t code = int4_code(x, gp);
            res.int4_codes[r * n_in + c] = code;
            q = int4_value(code, gp);
          } else {
            q = x;
          }
        }
        const float e = (x - q) / d;
        const float l = (x - q) * (x - q) / (d * d);
        loss += l;
        row[c] = q;
        row_err[i] = e;
        subtract_scaled(row + c + 1, u_row + c + 1, e, i2 - c - 1);
      }
      row_loss[r] += loss;
    }

    if (i2 < n_in) {
      // W[:, i2:] -= Err1 · U[i1:i2, i2:]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n_out), int(n_in - i2), int(count), -1.0f,
                  err.data(), int(bs), &u[i1 * n_in + i2], int(n_in), 1.0f, w + i2, int(n_in));
    }
  }
  if (opt.act_order) {  // back to the original column order
    std::vector<uint8_t> mask(numel);
    for (size_t r = 0; r < n_out; ++r)
      for (size_t c = 0; c < n_in; ++c) {
        w_orig[r * n_in + perm[c]] = w[r * n_in + c];
        mask[r * n_in + perm[c]] = res.mask[r * n_in + c];
      }
    res.mask = std::move(mask);
  }
  for (size_t r = 0; r < n_out; ++r) res.loss += row_loss[r];
  res.loss /= 2.0;
  return res;
}

}  // namespace endor::pruning
