// Norms, elementwise ops and RoPE on f32 activations, following Hugging Face's f32 arithmetic
// (the library is built with -ffp-contract=off so products and sums round as written); silu_mul's
// exp is exp8 (vec8.h), the same bits on every instruction set.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "ops.h"
#include "vec8.h"

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

// out[i] = (g / (1 + e^-g))·up[i] (silu(g)·up, silu = g·sigmoid(g), g = gate[i]) for i in [i0, i1),
// 8 at a time with exp8, the last (i1 - i0) mod 8 padded into one more vector: every element takes
// the same operations wherever a range starts or ends, so the result does not depend on how
// for_ranges splits n, nor on how many tokens share the call (batch invariance). exp8 is within
// 1 ulp of e^x, as glibc's expf; where it saturates (g < -88: inf where expf is still finite) silu
// gives -0 for a value below 6e-37 in magnitude. out may be gate or up.
ENDOR_AI void silu_mul_body(const float* gate, const float* up, size_t i0, size_t i1, float* out) {
  const v8f one = splat(1.0f);
  size_t i = i0;
  for (; i + 8 <= i1; i += 8) {
    const v8f g = load8(gate + i);
    store8(out + i, (g / (one + exp8(-g))) * load8(up + i));
  }
  if (i == i1) return;
  float g_tail[8] = {}, up_tail[8] = {}, out_tail[8];
  std::memcpy(g_tail, gate + i, (i1 - i) * sizeof(float));
  std::memcpy(up_tail, up + i, (i1 - i) * sizeof(float));
  const v8f g = load8(g_tail);
  store8(out_tail, (g / (one + exp8(-g))) * load8(up_tail));
  std::memcpy(out + i, out_tail, (i1 - i) * sizeof(float));
}

// One copy of the body per instruction set (the same bits on each: vec8.h), picked by Context::isa.
#if defined(__x86_64__)
__attribute__((target("avx512f,avx512vl,avx2,fma"))) void silu_mul_avx512(const float* gate, const float* up,
                                                                           size_t i0, size_t i1, float* out) {
  silu_mul_body(gate, up, i0, i1, out);
}
__attribute__((target("avx2,fma"))) void silu_mul_avx2(const float* gate, const float* up, size_t i0, size_t i1,
                                                       float* out) {
  silu_mul_body(gate, up, i0, i1, out);
}
#endif
void silu_mul_portable(const float* gate, const float* up, size_t i0, size_t i1, float* out) {
  silu_mul_body(gate, up, i0, i1, out);
}

using SiluMulFn = void (*)(const float*, const float*, size_t, size_t, float*);
SiluMulFn silu_mul_for(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return silu_mul_avx512;
  if (isa == Isa::Avx2) return silu_mul_avx2;
#endif
  (void)isa;
  return silu_mul_portable;
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
  const SiluMulFn range = silu_mul_for(ctx.isa);
  for_ranges(ctx, n, kParallelMinElements / 4, [&](size_t i0, size_t i1) { range(gate, up, i0, i1, out); });
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
