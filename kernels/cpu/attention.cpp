// Causal (optionally sliding-window) GQA attention over a [capacity, n_kv_heads, head_dim] cache,
// numerically stable softmax in f32. Decode: parallel over (query, head) pairs; prefill under batch
// invariance (the default): every query as decode computes it, parallel over queries; prefill
// otherwise: over (head, block of 16 queries) with the dot products on the register-blocked
// dense_dot kernel.

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "half.h"
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

// Decode reads a run of every cached key and value row (attend_heads), each run on a new page,
// where the hardware prefetchers (which stay inside a page) start over. The run kAheadKeys keys
// ahead is prefetched. Measured on int4 50 % at a 1500-token context (bench/RESULTS.md): when
// decode still walked one head at a time (a 256-byte slice per row), the prefetch took it from
// 11.1 to 17.2 tok/s (4 ahead: 15.8, 16: 17.2); with keys outer it adds little (18.0 -> 18.3).
// always_inline: GCC drops the calls of an out-of-line wrapper around the builtin as side-effect
// free.
constexpr size_t kAheadKeys = 8;
__attribute__((always_inline)) inline void prefetch_row(const float* row, size_t n, bool inside) {
  if (!inside) return;
  for (size_t i = 0; i < n; i += 16) __builtin_prefetch(row + i, 0, 3);
}

// The first key a query at position pos sees: pos + 1 - window with a sliding window, else 0.
inline size_t first_visible_key(size_t pos, uint32_t window) {
  return (window && pos + 1 > window) ? pos + 1 - window : 0;
}

// Prefill (T >= 2): per (head, block of up to kQueryBlock queries), the scores of the block
// against every key any of its queries sees come from the weight kernels' dense_dot (register
// blocked over keys and queries: each key row is loaded once per block instead of once per
// query), then each query's softmax over its own window, then P·V through dense_dot again on a
// transposed copy of V (keys a query does not see have weight exactly 0, and their v is finite:
// only rows below n_past + T are read). Same arithmetic per element as the decode path below
// except the summation order of the two dot products (8-lane partial sums either way).
constexpr size_t kQueryBlock = 16;

void attention_prefill(Context& ctx, const float* q, const float* k_cache, const float* v_cache, size_t n_past,
                       size_t n_tokens, const AttentionParams& p, float* out) {
  const size_t n_ctx = n_past + n_tokens;
  const size_t hd = p.head_dim, n_heads = p.n_heads, n_kv = p.n_kv_heads, group = n_heads / n_kv;
  const size_t kv_row = n_kv * hd;
  // vt[g][d][j] = v_cache[j][g][d] for j < n_ctx.
  float* vt = ctx.attn_v_scratch.floats(n_kv * hd * n_ctx);
  const int64_t n_vt = int64_t(n_kv * hd);
  ctx.pool.run(n_vt, threads_for(uint64_t(n_vt) * n_ctx, ctx.n_threads), [&](int64_t gd, int) {
    const size_t g = size_t(gd) / hd, d = size_t(gd) % hd;
    float* row = vt + size_t(gd) * n_ctx;
    for (size_t j = 0; j < n_ctx; ++j) row[j] = v_cache[j * kv_row + g * hd + d];
  });
  const size_t n_blocks = (n_tokens + kQueryBlock - 1) / kQueryBlock;
  const int64_t n_tasks = int64_t(n_heads * n_blocks);
  float* scores_all = ctx.attn_scratch.floats(size_t(ctx.n_threads) * kQueryBlock * n_ctx);
  const WeightKernels& kern = *ctx.kernels;
  auto window_start = [&](size_t pos) { return first_visible_key(pos, p.sliding_window); };
  ctx.pool.run(n_tasks, threads_for(uint64_t(n_tokens) * n_heads * n_ctx * hd, ctx.n_threads), [&](int64_t task,
                                                                                                  int thread) {
    float* sc = scores_all + size_t(thread) * kQueryBlock * n_ctx;
    const size_t h = size_t(task) % n_heads, t0 = (size_t(task) / n_heads) * kQueryBlock;
    const size_t t1 = std::min(n_tokens, t0 + kQueryBlock), nt = t1 - t0;
    const size_t g = h / group;
    const size_t lo = window_start(n_past + t0), hi = n_past + t1;  // keys [lo, hi) of the block
    const size_t nk = hi - lo;
    kern.dense_dot(k_cache + lo * kv_row + g * hd, kv_row, nk, hd, q + (t0 * n_heads + h) * hd, n_heads * hd, nt,
                   sc, nk);
    for (size_t i = 0; i < nt; ++i) {
      const size_t pos = n_past + t0 + i, first = window_start(pos) - lo, last = pos - lo;  // [first, last]
      float* e = sc + i * nk;
      float m = -std::numeric_limits<float>::infinity();
      for (size_t j = first; j <= last; ++j) {
        e[j] *= p.scale;
        m = e[j] > m ? e[j] : m;
      }
      float sum = 0.0f;
      for (size_t j = first; j <= last; ++j) {
        e[j] = std::exp(e[j] - m);
        sum += e[j];
      }
      for (size_t j = 0; j < first; ++j) e[j] = 0.0f;
      for (size_t j = first; j <= last; ++j) e[j] = e[j] / sum;
      for (size_t j = last + 1; j < nk; ++j) e[j] = 0.0f;
    }
    // out[t, h, d] = Σ_j p[t, j]·vt[g][d][lo + j]
    kern.dense_dot(vt + g * hd * n_ctx + lo, n_ctx, hd, nk, sc, nk, nt, out + (t0 * n_heads + h) * hd, n_heads * hd);
  });
}

// Decode: query heads [h0, h1) of one token against keys [lo, pos]. Keys are the outer loop, so
// each cache row is read as one contiguous run of the heads' slices (h1 - h0 of them, or fewer kv
// heads under GQA) rather than one 256-byte slice per row per head, which touched a new page every
// key and defeated the TLB and the hardware prefetchers at long contexts. Per head the arithmetic
// is the single-query attention it always was, in the same order: the scores, the max, exp and
// sum, then Σ_j p_j·v_j in key order. e: (h1 - h0) rows of n_keys scores; o: out of head h0.
// Compiled for AVX-512, AVX2 and the baseline, chosen once by the loader (ifunc); the clones run
// the same operations in the same order (8-lane partial sums, no contraction), so their results
// are identical.
// Caches of IEEE halves (k16/v16 non-null, k_cache/v_cache null): each row's slice is widened into
// row_buf (kv_row floats, at the same offsets) right before it is used, one conversion per cached
// value per step and nothing written beyond L1; the arithmetic after that is the f32 path's.
__attribute__((target_clones("avx512f", "avx2", "default"))) void attend_heads(
    const float* q, const float* k_cache, const float* v_cache, const uint16_t* k16, const uint16_t* v16,
    size_t kv_row, size_t group, size_t lo, size_t pos, size_t hd, float scale, size_t h0, size_t h1, float* e,
    float* o, float* row_buf) {
  const size_t n_keys = pos - lo + 1, nh = h1 - h0;
  // The kv heads these query heads read: one contiguous slice [kv0, kv1) of each cache row.
  const size_t kv0 = (h0 / group) * hd, kv1 = ((h1 - 1) / group + 1) * hd;
  // Row j of a cache as f32 (widened into row_buf for halves).
  auto row = [&](const float* f32, const uint16_t* f16, size_t j) -> const float* {
    if (f32) return f32 + j * kv_row;
    widen_half(f16 + j * kv_row + kv0, row_buf + kv0, kv1 - kv0);
    return row_buf;
  };
  // Prefetch of the row kAheadKeys keys ahead (halves: half the bytes).
  auto ahead = [&](const float* f32, const uint16_t* f16, size_t j) {
    if (f32) prefetch_row(f32 + (j + kAheadKeys) * kv_row + kv0, kv1 - kv0, j + kAheadKeys <= pos);
    else prefetch_row(reinterpret_cast<const float*>(f16 + (j + kAheadKeys) * kv_row + kv0), (kv1 - kv0) / 2,
                      j + kAheadKeys <= pos);
  };
  for (size_t j = lo; j <= pos; ++j) {
    ahead(k_cache, k16, j);
    const float* kj = row(k_cache, k16, j);
    for (size_t i = 0; i < nh; ++i)
      e[i * n_keys + (j - lo)] = dot_f32(q + (h0 + i) * hd, kj + ((h0 + i) / group) * hd, hd) * scale;
  }
  for (size_t i = 0; i < nh; ++i) {
    float* ei = e + i * n_keys;
    float m = -std::numeric_limits<float>::infinity();
    for (size_t j = 0; j < n_keys; ++j) m = ei[j] > m ? ei[j] : m;
    float sum = 0.0f;
    for (size_t j = 0; j < n_keys; ++j) {
      ei[j] = std::exp(ei[j] - m);
      sum += ei[j];
    }
    for (size_t j = 0; j < n_keys; ++j) ei[j] = ei[j] / sum;
  }
  for (size_t d = 0; d < nh * hd; ++d) o[d] = 0.0f;
  for (size_t j = lo; j <= pos; ++j) {
    ahead(v_cache, v16, j);
    const float* vj = row(v_cache, v16, j);
    for (size_t i = 0; i < nh; ++i) {
      const float pj = e[i * n_keys + (j - lo)];
      const float* vh = vj + ((h0 + i) / group) * hd;
      float* oh = o + i * hd;
      for (size_t d = 0; d < hd; ++d) oh[d] += pj * vh[d];
    }
  }
}

// Decode: one token over f32 caches (k_cache, v_cache) or half ones (k16, v16).
void attention_decode(Context& ctx, const float* q, const float* k_cache, const float* v_cache, const uint16_t* k16,
                      const uint16_t* v16, size_t n_past, const AttentionParams& p, float* out) {
  // Tasks are contiguous ranges of heads, whole kv groups where there are enough of them (a
  // group's query heads share its rows).
  const size_t pos = n_past, lo = first_visible_key(pos, p.sliding_window), n_keys = pos - lo + 1;
  const size_t hd = p.head_dim, n_heads = p.n_heads, group = p.n_heads / p.n_kv_heads;
  const size_t kv_row = size_t(p.n_kv_heads) * hd;  // floats per cache position
  float* scores = ctx.attn_scratch.floats(n_heads * n_keys);
  const int threads = threads_for(uint64_t(n_heads) * n_keys * hd, ctx.n_threads);
  const size_t n_tasks = threads == 1                          ? 1
                         : p.n_kv_heads >= size_t(2 * threads) ? p.n_kv_heads
                                                               : std::min(n_heads, size_t(2 * threads));
  float* rows = k16 ? ctx.kv_k_scratch.floats(size_t(ctx.n_threads) * kv_row) : nullptr;  // a widened row per thread
  ctx.pool.run(int64_t(n_tasks), threads, [&](int64_t task, int thread) {
    const size_t h0 = n_heads * size_t(task) / n_tasks, h1 = n_heads * size_t(task + 1) / n_tasks;
    if (h1 > h0)
      attend_heads(q, k_cache, v_cache, k16, v16, kv_row, group, lo, pos, hd, p.scale, h0, h1, scores + h0 * n_keys,
                   out + h0 * hd, rows + size_t(thread) * kv_row);
  });
}

// Batch invariance (T >= 2, cpu::Options::batch_invariant): every query as a one-query call computes
// it (attend_heads over its own keys, every head of the query in one task; a head's values do not
// depend on which heads share its task), so a query's output does not depend on the other queries of
// the call: a prompt prefilled whole, in chunks, or token by token gives the same values. f16 caches
// are widened row by row as decode widens them. Queries are the parallel tasks.
void attention_queries(Context& ctx, const float* q, const float* k_cache, const float* v_cache, const uint16_t* k16,
                       const uint16_t* v16, size_t n_past, size_t n_tokens, const AttentionParams& p, float* out) {
  const size_t hd = p.head_dim, n_heads = p.n_heads, group = n_heads / p.n_kv_heads;
  const size_t kv_row = size_t(p.n_kv_heads) * hd, n_ctx = n_past + n_tokens;
  float* scores = ctx.attn_scratch.floats(size_t(ctx.n_threads) * n_heads * n_ctx);
  float* rows = k16 ? ctx.kv_k_scratch.floats(size_t(ctx.n_threads) * kv_row) : nullptr;  // a widened row per thread
  const int threads = threads_for(uint64_t(n_tokens) * n_heads * n_ctx * hd, ctx.n_threads);
  ctx.pool.run(int64_t(n_tokens), threads, [&](int64_t t, int thread) {
    const size_t pos = n_past + size_t(t), lo = first_visible_key(pos, p.sliding_window);
    attend_heads(q + size_t(t) * n_heads * hd, k_cache, v_cache, k16, v16, kv_row, group, lo, pos, hd, p.scale, 0,
                 n_heads, scores + size_t(thread) * n_heads * n_ctx, out + size_t(t) * n_heads * hd,
                 rows ? rows + size_t(thread) * kv_row : nullptr);
  });
}

void check_params(const AttentionParams& p) {
  if (p.n_heads == 0 || p.n_kv_heads == 0 || p.head_dim == 0 || p.n_heads % p.n_kv_heads != 0)
    throw Error("attention: n_heads " + std::to_string(p.n_heads) + " must be a positive multiple of n_kv_heads " +
                std::to_string(p.n_kv_heads) + " and head_dim must be positive");
}

}  // namespace

void attention(Context& ctx, const float* q, const float* k_cache, const float* v_cache, size_t n_past,
               size_t n_tokens, const AttentionParams& p, float* out) {
  check_params(p);
  if (n_tokens == 0) return;
  if (n_tokens >= 2 && ctx.options.batch_invariant)
    return attention_queries(ctx, q, k_cache, v_cache, nullptr, nullptr, n_past, n_tokens, p, out);
  if (n_tokens >= 2) return attention_prefill(ctx, q, k_cache, v_cache, n_past, n_tokens, p, out);
  attention_decode(ctx, q, k_cache, v_cache, nullptr, nullptr, n_past, p, out);
}

void attention_f16(Context& ctx, const float* q, const uint16_t* k_cache, const uint16_t* v_cache, size_t n_past,
                   size_t n_tokens, const AttentionParams& p, float* out) {
  check_params(p);
  if (n_tokens == 0) return;
  if (n_tokens == 1) return attention_decode(ctx, q, nullptr, nullptr, k_cache, v_cache, n_past, p, out);
  if (ctx.options.batch_invariant)
    return attention_queries(ctx, q, nullptr, nullptr, k_cache, v_cache, n_past, n_tokens, p, out);
  // Prefill: the rows it reads widened to f32 once per call, then the f32 prefill attention over
  // them: the same arithmetic on the cached values.
  const size_t n_ctx = n_past + n_tokens, kv_row = size_t(p.n_kv_heads) * p.head_dim;
  const size_t lo = first_visible_key(n_past, p.sliding_window);  // no query sees a key before lo
  float* k = ctx.kv_k_scratch.floats(n_ctx * kv_row);
  float* v = ctx.kv_v_scratch.floats(n_ctx * kv_row);
  constexpr size_t kRowsPerTask = 64;
  const size_t n_rows = n_ctx - lo, n_tasks = (n_rows + kRowsPerTask - 1) / kRowsPerTask;
  ctx.pool.run(int64_t(n_tasks), threads_for(uint64_t(n_rows) * kv_row * 8, ctx.n_threads), [&](int64_t t, int) {
    const size_t r0 = lo + size_t(t) * kRowsPerTask, r1 = std::min(n_ctx, r0 + kRowsPerTask);
    widen_half(k_cache + r0 * kv_row, k + r0 * kv_row, (r1 - r0) * kv_row);
    widen_half(v_cache + r0 * kv_row, v + r0 * kv_row, (r1 - r0) * kv_row);
  });
  attention(ctx, q, k, v, n_past, n_tokens, p, out);
}

}  // namespace endor::cpu::detail
