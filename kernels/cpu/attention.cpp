// Causal (optionally sliding-window) GQA attention over a [capacity, n_kv_heads, head_dim] cache,
// numerically stable softmax in f32; parallel over (query, head) pairs.
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>

#include "ops.h"

namespace endor::cpu::detail {
namespace {

inline float dot_f32(const float* a, const float* b, size_t n) {
  float acc[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  for (size_t j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

void attention(Context& ctx, const float* q, const float* k_cache, const float* v_cache, size_t n_past,
               size_t n_tokens, const AttentionParams& p, float* out) {
  if (p.n_heads == 0 || p.n_kv_heads == 0 || p.head_dim == 0 || p.n_heads % p.n_kv_heads != 0)
    throw Error("attention: n_heads " + std::to_string(p.n_heads) + " must be a positive multiple of n_kv_heads " +
                std::to_string(p.n_kv_heads) + " and head_dim must be positive");
  if (n_tokens == 0) return;
  const size_t n_ctx = n_past + n_tokens;
  const size_t hd = p.head_dim, n_heads = p.n_heads, group = p.n_heads / p.n_kv_heads;
  const size_t kv_row = size_t(p.n_kv_heads) * hd;  // floats per cache position
  float* scores_all = ctx.attn_scratch.floats(size_t(ctx.n_threads) * n_ctx);
  const int64_t n_pairs = int64_t(n_tokens * n_heads);
#pragma omp parallel num_threads(threads_for(uint64_t(n_pairs) * n_ctx * hd, ctx.n_threads))
  {
    float* e = scores_all + size_t(omp_get_thread_num()) * n_ctx;
#pragma omp for schedule(dynamic, 1)
    for (int64_t pair = 0; pair < n_pairs; ++pair) {
      const size_t t = size_t(pair) / n_heads, h = size_t(pair) % n_heads;
      const size_t pos = n_past + t;
      const size_t lo = (p.sliding_window && pos + 1 > p.sliding_window) ? pos + 1 - p.sliding_window : 0;
      const float* qv = q + (t * n_heads + h) * hd;
      const size_t kv_off = (h / group) * hd;
      float m = -std::numeric_limits<float>::infinity();
      for (size_t j = lo; j <= pos; ++j) {
        const float s = dot_f32(qv, k_cache + j * kv_row + kv_off, hd) * p.scale;
        e[j - lo] = s;
        m = s > m ? s : m;
      }
      float sum = 0.0f;
      for (size_t j = lo; j <= pos; ++j) {
        e[j - lo] = std::exp(e[j - lo] - m);
        sum += e[j - lo];
      }
      float* o = out + (t * n_heads + h) * hd;
      for (size_t d = 0; d < hd; ++d) o[d] = 0.0f;
      for (size_t j = lo; j <= pos; ++j) {
        const float pj = e[j - lo] / sum;
        const float* vj = v_cache + j * kv_row + kv_off;
        for (size_t d = 0; d < hd; ++d) o[d] += pj * vj[d];
      }
    }
  }
}

}  // namespace endor::cpu::detail
