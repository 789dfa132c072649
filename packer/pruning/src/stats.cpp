// Calibration statistics: Wanda's per-column activation energy and SparseGPT's Hessian, both
// updated batch by batch with the references' running-mean arithmetic (pruning.h).
#include <cblas.h>

#include <cmath>
#include <string>

#include "checks.h"
#include "symmetric.h"
#include "endor/pruning.h"

namespace endor::pruning {

namespace {
void check_batch(const char* fn, const float* x, size_t n_tokens, size_t n_in, size_t expected_n_in,
                 size_t n_samples) {
  if (n_in != expected_n_in)
    detail::fail(fn, "batch has " + std::to_string(n_in) + " input columns, the layer has " +
                         std::to_string(expected_n_in));
  if (n_samples == 0) detail::fail(fn, "a batch must hold at least one sample");
  detail::check_finite(fn, x, detail::checked_numel(fn, n_tokens, n_in, "batch"), "batch");
}
}  // namespace

WandaStats::WandaStats(size_t n_in) : scaler_row_(n_in, 0.0f) {
  if (n_in == 0) detail::fail("WandaStats", "a layer needs at least one input column");
}

void WandaStats::add_batch(const float* x, size_t n_tokens, size_t n_in, size_t n_samples) {
  check_batch("WandaStats::add_batch", x, n_tokens, n_in, scaler_row_.size(), n_samples);
  // The reference multiplies an f32 tensor by the Python float n/(n+b): torch rounds it to f32.
  const float keep = float(double(n_samples_) / double(n_samples_ + n_samples));
  n_samples_ += n_samples;
  const float n_f = float(n_samples_);

  std::vector<double> sum_sq(n_in, 0.0);
  for (size_t t = 0; t < n_tokens; ++t) {
    const float* row = x + t * n_in;
    for (size_t j = 0; j < n_in; ++j) sum_sq[j] += double(row[j]) * double(row[j]);
  }
  for (size_t j = 0; j < n_in; ++j) {
    const float norm = float(std::sqrt(sum_sq[j]));  // torch.norm(p=2), then ** 2 in f32
    scaler_row_[j] = scaler_row_[j] * keep + (norm * norm) / n_f;
  }
}

HessianAccumulator::HessianAccumulator(size_t n_in) : n_in_(n_in) {
  h_.assign(detail::checked_numel("HessianAccumulator", n_in, n_in, "Hessian"), 0.0f);
}

void HessianAccumulator::add_batch(const float* x, size_t n_tokens, size_t n_in, size_t n_samples) {
  const char* fn = "HessianAccumulator::add_batch";
  check_batch(fn, x, n_tokens, n_in, n_in_, n_samples);
  if (n_in_ > size_t(INT32_MAX) || n_tokens > size_t(INT32_MAX)) detail::fail(fn, "batch too large for BLAS");
  const float keep = float(double(n_samples_) / double(n_samples_ + n_samples));
  n_samples_ += n_samples;
  const float row_scale = float(std::sqrt(2.0 / double(n_samples_)));  // math.sqrt(2/n) -> f32

  scaled_.resize(n_tokens * n_in);
  for (size_t i = 0; i < n_tokens * n_in; ++i) scaled_[i] = row_scale * x[i];
  // Upper triangle: H = keep·H + Xsᵀ·Xs (X is [n_tokens, n_in] row-major, so Xsᵀ·Xs is "Trans").
  const int n = int(n_in_), k = int(n_tokens);
  cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, n, k, 1.0f, scaled_.data(), n, keep, h_.data(), n);
  mirrored_ = false;
}

const std::vector<float>& HessianAccumulator::hessian() const {
  if (!mirrored_) {
    detail::mirror_triangle(h_.data(), n_in_, /*from_upper=*/true);
    mirrored_ = true;
  }
  return h_;
}

}  // namespace endor::pruning
