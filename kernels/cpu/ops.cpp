// Norms, elementwise ops and RoPE on f32 activations, following Hugging Face's f32 arithmetic
// (the library is built with -ffp-contract=off so products and sums round as written).
#include <algorithm>
#include <cmath>
#include <string>

#include "ops.h"

namespace endor::cpu::detail {
namespace {

// Elementwise loops below this size are not worth waking the thread team.
constexpr size_t kParallelMinElements = size_t(1) << 15;

// f(i0, i1) over [0, n) in a few contiguous ranges per thread (one range below min_parallel).
template <class F>
void for_ranges(Context& ctx, size_t n, size_t min_parallel, F&& f) {
  if (n < min_parallel || ctx.n_threads <= 1) return f(size_t(0), n);
  const size_t n_ranges = size_t(ctx.n_threads) * 4, step = (n + n_ranges - 1) / n_ranges;
  ctx.pool.run(int64_t(n_ranges), ctx.n_threads, [&](int64_t r, int) {
    const size_t i0 = std::min(n, size_t(r) * step), i1 = std::min(n, i0 + step);
    if (i1 > i0) f(i0, i1);
  });
}

}  // namespace

void layer_norm(Context& ctx, const float* x, const float* gamma, const float* beta, float eps, size_t n_tokens,
                size_t dim, float* out) {
  const int64_t n = int64_t(n_tokens);
  ctx.pool.run(n, (n_tokens * dim >= kParallelMinElements) ? ctx.n_threads : 1, [&](int64_t t, int) {
    const float* xt = x + size_t(t) * dim;
    float* ot = out + size_t(t) * dim;
    double sum = 0.0;
    for (size_t i = 0; i < dim; ++i) sum += xt[i];
    const double mean = sum / double(dim);
    double sq = 0.0;  // two-pass (biased) variance, as torch computes it
    for (size_t i = 0; i < dim; ++i) sq += (xt[i] - mean) * (xt[i] - mean);
    const float mean_f = float(mean);
    const float rstd = 1.0f / std::sqrt(float(sq / double(dim)) + eps);
    for (size_t i = 0; i < dim; ++i) {
      const float v = (xt[i] - mean_f) * rstd * gamma[i];
      ot[i] = beta ? v + beta[i] : v;
    }
  });
}

void rms_norm(Context& ctx, const float* x, const float* gamma, float eps, size_t n_tokens, size_t dim, float* out) {
  const int64_t n = int64_t(n_tokens);
  ctx.pool.run(n, (n_tokens * dim >= kParallelMinElements) ? ctx.n_threads : 1, [&](int64_t t, int) {
    const float* xt = x + size_t(t) * dim;
    float* ot = out + size_t(t) * dim;
    double sq = 0.0;  // the mean of x² to within one f32 rounding
    for (size_t i = 0; i < dim; ++i) sq += double(xt[i]) * double(xt[i]);
    const float r = 1.0f / std::sqrt(float(sq / double(dim)) + eps);
    for (size_t i = 0; i < dim; ++i) ot[i] = gamma[i] * (xt[i] * r);  // HF: weight * (x * rsqrt)
  });
}

void add(Context& ctx, float* x, const float* y, size_t n) {
  for_ranges(ctx, n, kParallelMinElements, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) x[i] += y[i];
  });
}

void scale(Context& ctx, float* x, float s, size_t n) {
  for_ranges(ctx, n, kParallelMinElements, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) x[i] *= s;
  });
}

void relu(Context& ctx, float* x, size_t n) {
  for_ranges(ctx, n, kParallelMinElements, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
  });
}

void silu_mul(Context& ctx, const float* gate, const float* up, size_t n, float* out) {
  for_ranges(ctx, n, kParallelMinElements / 4, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) {
      const float g = gate[i];
      out[i] = (g / (1.0f + std::exp(-g))) * up[i];  // silu(g)·up, silu = g·sigmoid(g)
    }
  });
}

void add_bias(Context& ctx, float* x, const float* bias, size_t n_tokens, size_t dim) {
  const int64_t n = int64_t(n_tokens);
  ctx.pool.run(n, (n_tokens * dim >= kParallelMinElements) ? ctx.n_threads : 1, [&](int64_t t, int) {
    for (size_t i = 0; i < dim; ++i) x[size_t(t) * dim + i] += bias[i];
  });
}

void rope(Context& ctx, float* x, size_t n_tokens, uint32_t n_heads, const int32_t* positions, const RopeParams& p) {
  const uint32_t head_dim = p.head_dim;
  const uint32_t rotary_dim = p.rotary_dim ? p.rotary_dim : p.head_dim;
  constexpr uint32_t kMaxRotaryDim = 1024;
  if (head_dim == 0 || rotary_dim > head_dim || rotary_dim % 2 != 0 || rotary_dim > kMaxRotaryDim)
    throw Error("rope: rotary_dim " + std::to_string(rotary_dim) + " must be even, <= head_dim " +
                std::to_string(head_dim) + " and <= " + std::to_string(kMaxRotaryDim));
  if (!p.inv_freq) throw Error("rope: inv_freq table is null");
  const uint32_t half = rotary_dim / 2;
  const int64_t n = int64_t(n_tokens);
  ctx.pool.run(n, (n_tokens * n_heads * head_dim >= kParallelMinElements) ? ctx.n_threads : 1, [&](int64_t t, int) {
    float cos_f[kMaxRotaryDim / 2], sin_f[kMaxRotaryDim / 2];
    const float pos = float(positions[t]);
    for (uint32_t i = 0; i < half; ++i) {
      const float freq = pos * p.inv_freq[i];  // HF: inv_freq @ position_ids in f32
      cos_f[i] = std::cos(freq) * p.attention_factor;
      sin_f[i] = std::sin(freq) * p.attention_factor;
    }
    for (uint32_t h = 0; h < n_heads; ++h) {
      float* v = x + (size_t(t) * n_heads + h) * head_dim;
      for (uint32_t i = 0; i < half; ++i) {
        const float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * cos_f[i] + (-x2) * sin_f[i];        // q·cos + rotate_half(q)·sin
        v[i + half] = x2 * cos_f[i] + x1 * sin_f[i];
      }
    }
  });
}

}  // namespace endor::cpu::detail
