// Causal (optionally sliding-window) GQA attention over a [capacity, n_kv_heads, head_dim] cache,
// numerically stable softmax in f32. Decode: parallel over (query, head) pairs; prefill under batch
// invariance (the default): every query as decode computes it, parallel over queries; prefill
// otherwise: over (head, block of 16 queries) with the dot products on the register-blocked
// dense_dot kernel.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "half.h"
#include "ops.h"
#include "vec8.h"

namespace endor::cpu::detail {
namespace {

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
// only rows below n_past + T are read). The decode path's operations except the summation order
// of the dot products and of the softmax's sum, and std::exp for its exp8: within rounding of it,
// not bit for bit (which is why batch invariance takes attention_queries instead).
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

// Decode: query heads [h0, h1) of one token against keys [lo, pos] (AttendJob). Keys are the
// outer loop, in blocks of kBlockKeys, so each cache row is read as one contiguous run of the
// heads' slices (h1 - h0 of them, or fewer kv heads under GQA) rather than one 256-byte slice per
// row per head, which touched a new page every key and defeated the TLB and the hardware
// prefetchers at long contexts. Per head: the scores of a block of 8 keys at once (8 independent
// 8-lane accumulators, then one transposing reduction: ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) over the
// lanes of a key's accumulator), their
// max, exp8 and an 8-lane sum, then Σ_j p_j·v_j in key order with the output in registers across a
// block. A head's values do not depend on h0, h1 nor on where a block starts (a key's lanes see
// the same operations whichever block it is in), so a query computed alone (decode), with other
// queries (attention_queries) or split over tasks gets the same bits.
// The code is compiled three times (AVX-512, AVX2, baseline) from one body of GCC vector
// operations that are all elementwise IEEE operations (no contraction: -ffp-contract=off) or lane
// shuffles, so every instruction set computes the same bits; tests/kernels/test_ops.cpp checks it.
// Context::isa picks the copy, as it picks the weight kernels.
// Caches of IEEE halves (k16/v16 non-null, k_cache/v_cache null): each block's row slices are
// widened into row_buf (kBlockKeys rows of kv_row floats, at the same offsets) right before they
// are used, one conversion per cached value per step and nothing written beyond L1; the
// arithmetic after that is the f32 path's.
constexpr size_t kBlockKeys = 8;

struct AttendJob {
  const float* q;
  const float *k_cache, *v_cache;
  const uint16_t *k16, *v16;
  size_t kv_row, group, lo, pos, hd;
  float scale;
  size_t h0, h1;
  float* e;        // (h1 - h0) rows of pos - lo + 1 scores
  float* o;        // out of head h0
  float* row_buf;  // halves: kBlockKeys widened rows
};

// Lane k of the result: ((a[k]_0 + a[k]_1) + (a[k]_2 + a[k]_3)) + ((a[k]_4 + a[k]_5) + (a[k]_6 + a[k]_7)):
// reduce1 of 8 vectors at once.
ENDOR_AI v8f pair_sums(const v8f& a, const v8f& b) {  // [a0+a1, b0+b1, a2+a3, b2+b3, a4+a5, b4+b5, a6+a7, b6+b7]
  return __builtin_shuffle(a, b, v8i{0, 8, 2, 10, 4, 12, 6, 14}) + __builtin_shuffle(a, b, v8i{1, 9, 3, 11, 5, 13, 7, 15});
}
ENDOR_AI v8f quad_sums(const v8f& u, const v8f& w) {  // of pair_sums(A, B), pair_sums(C, D): A0-3, B0-3, C0-3, D0-3, A4-7, ..., D4-7
  return __builtin_shuffle(u, w, v8i{0, 1, 8, 9, 4, 5, 12, 13}) + __builtin_shuffle(u, w, v8i{2, 3, 10, 11, 6, 7, 14, 15});
}
ENDOR_AI v8f reduce8(const v8f* a) {
  const v8f lo = quad_sums(pair_sums(a[0], a[1]), pair_sums(a[2], a[3]));
  const v8f hi = quad_sums(pair_sums(a[4], a[5]), pair_sums(a[6], a[7]));
  return __builtin_shuffle(lo, hi, v8i{0, 1, 2, 3, 8, 9, 10, 11}) + __builtin_shuffle(lo, hi, v8i{4, 5, 6, 7, 12, 13, 14, 15});
}
ENDOR_AI float reduce1(const v8f& a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

// e[b] = (q · k[b]) · scale for b < nb (k[b] for b >= nb: any readable row, ignored): column c
// summed into lane c mod 8 in column order, then reduce1's tree; 8 keys at once.
ENDOR_AI void score_block(const float* q, const float* const* k, size_t nb, size_t hd, float scale, float* e) {
  v8f acc[kBlockKeys] = {};
  size_t c = 0;
  for (; c + 8 <= hd; c += 8) {
    const v8f qc = load8(q + c);
    for (size_t b = 0; b < kBlockKeys; ++b) acc[b] += qc * load8(k[b] + c);
  }
  for (size_t l = 0; c + l < hd; ++l)
    for (size_t b = 0; b < kBlockKeys; ++b) acc[b][l] += q[c + l] * k[b][c + l];
  const v8f s = reduce8(acc) * splat(scale);
  if (nb == kBlockKeys) return store8(e, s);
  for (size_t b = 0; b < nb; ++b) e[b] = s[b];
}

// o[d] += p[b]·v[b][d] for b < nb in order, d < hd.
ENDOR_AI void pv_block(const float* p, const float* const* v, size_t nb, size_t hd, float* o) {
  size_t c = 0;
  for (; c + 32 <= hd; c += 32) {
    v8f o0 = load8(o + c), o1 = load8(o + c + 8), o2 = load8(o + c + 16), o3 = load8(o + c + 24);
    for (size_t b = 0; b < nb; ++b) {
      const v8f pb = splat(p[b]);
      o0 += pb * load8(v[b] + c);
      o1 += pb * load8(v[b] + c + 8);
      o2 += pb * load8(v[b] + c + 16);
      o3 += pb * load8(v[b] + c + 24);
    }
    store8(o + c, o0), store8(o + c + 8, o1), store8(o + c + 16, o2), store8(o + c + 24, o3);
  }
  for (; c + 8 <= hd; c += 8) {
    v8f oc = load8(o + c);
    for (size_t b = 0; b < nb; ++b) oc += splat(p[b]) * load8(v[b] + c);
    store8(o + c, oc);
  }
  for (; c < hd; ++c)
    for (size_t b = 0; b < nb; ++b) o[c] += p[b] * v[b][c];
}

// e[j] = exp(e[j] - max) / Σ exp(e[i] - max) for j < n: the max over every key, exp8, the sum in
// 8 lanes (key j in lane j mod 8) and reduce1's tree, then one division per score.
ENDOR_AI void softmax_row(float* e, size_t n) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  v8f mv = splat(-kInf);
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const v8f x = load8(e + j);
    mv = x > mv ? x : mv;
  }
  float m = -kInf;
  for (size_t l = 0; l < 8; ++l) m = mv[l] > m ? mv[l] : m;
  for (size_t i = j; i < n; ++i) m = e[i] > m ? e[i] : m;
  const v8f mm = splat(m);
  v8f sum = splat(0.0f);
  for (j = 0; j + 8 <= n; j += 8) {
    const v8f x = exp8(load8(e + j) - mm);
    store8(e + j, x);
    sum += x;
  }
  if (j < n) {
    v8f tail = splat(-kInf);
    for (size_t l = 0; j + l < n; ++l) tail[l] = e[j + l];
    tail = exp8(tail - mm);
    for (size_t l = 0; j + l < n; ++l) e[j + l] = tail[l], sum[l] += tail[l];
  }
  const float total = reduce1(sum);
  const v8f tv = splat(total);
  for (j = 0; j + 8 <= n; j += 8) store8(e + j, load8(e + j) / tv);
  for (; j < n; ++j) e[j] = e[j] / total;
}

// Rows [j0, j0 + nb) of a cache, from column kv0 on (widened into a.row_buf for halves; the next
// rows' prefetch issued); r[b] for b in [nb, kBlockKeys) repeats r[0].
ENDOR_AI void block_rows(const AttendJob& a, const float* f32, const uint16_t* f16, size_t j0, size_t nb, size_t kv0,
                         size_t kv1, const float** r) {
  for (size_t b = 0; b < nb; ++b) {
    const size_t j = j0 + b, ahead = j + kAheadKeys;
    if (f32) {
      prefetch_row(f32 + ahead * a.kv_row + kv0, kv1 - kv0, ahead <= a.pos);
      r[b] = f32 + j * a.kv_row;
    } else {
      prefetch_row(reinterpret_cast<const float*>(f16 + ahead * a.kv_row + kv0), (kv1 - kv0) / 2, ahead <= a.pos);
      widen_half(f16 + j * a.kv_row + kv0, a.row_buf + b * a.kv_row + kv0, kv1 - kv0);
      r[b] = a.row_buf + b * a.kv_row;
    }
  }
  for (size_t b = nb; b < kBlockKeys; ++b) r[b] = r[0];
}

ENDOR_AI void attend_heads_body(const AttendJob& a) {
  const size_t n_keys = a.pos - a.lo + 1, nh = a.h1 - a.h0, hd = a.hd;
  // The kv heads these query heads read: one contiguous slice [kv0, kv1) of each cache row.
  const size_t kv0 = (a.h0 / a.group) * hd, kv1 = ((a.h1 - 1) / a.group + 1) * hd;
  const float* rows[kBlockKeys];
  const float* head_rows[kBlockKeys];
  for (size_t j0 = a.lo; j0 <= a.pos; j0 += kBlockKeys) {
    const size_t nb = std::min(kBlockKeys, a.pos + 1 - j0);
    block_rows(a, a.k_cache, a.k16, j0, nb, kv0, kv1, rows);
    for (size_t i = 0; i < nh; ++i) {
      const size_t off = ((a.h0 + i) / a.group) * hd;
      for (size_t b = 0; b < kBlockKeys; ++b) head_rows[b] = rows[b] + off;
      score_block(a.q + (a.h0 + i) * hd, head_rows, nb, hd, a.scale, a.e + i * n_keys + (j0 - a.lo));
    }
  }
  for (size_t i = 0; i < nh; ++i) softmax_row(a.e + i * n_keys, n_keys);
  for (size_t d = 0; d < nh * hd; ++d) a.o[d] = 0.0f;
  for (size_t j0 = a.lo; j0 <= a.pos; j0 += kBlockKeys) {
    const size_t nb = std::min(kBlockKeys, a.pos + 1 - j0);
    block_rows(a, a.v_cache, a.v16, j0, nb, kv0, kv1, rows);
    for (size_t i = 0; i < nh; ++i) {
      const size_t off = ((a.h0 + i) / a.group) * hd;
      for (size_t b = 0; b < nb; ++b) head_rows[b] = rows[b] + off;
      pv_block(a.e + i * n_keys + (j0 - a.lo), head_rows, nb, hd, a.o + i * hd);
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512vl,avx2,fma,f16c"))) void attend_heads_avx512(const AttendJob& a) {
  attend_heads_body(a);
}
__attribute__((target("avx2,fma,f16c"))) void attend_heads_avx2(const AttendJob& a) { attend_heads_body(a); }
#endif
void attend_heads_portable(const AttendJob& a) { attend_heads_body(a); }

using AttendFn = void (*)(const AttendJob&);
AttendFn attend_heads_for(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return attend_heads_avx512;
  if (isa == Isa::Avx2) return attend_heads_avx2;
#endif
  (void)isa;
  return attend_heads_portable;
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
  // kBlockKeys widened rows per thread
  float* rows = k16 ? ctx.kv_k_scratch.floats(size_t(ctx.n_threads) * kBlockKeys * kv_row) : nullptr;
  const AttendFn attend_heads = attend_heads_for(ctx.isa);
  ctx.pool.run(int64_t(n_tasks), threads, [&](int64_t task, int thread) {
    const size_t h0 = n_heads * size_t(task) / n_tasks, h1 = n_heads * size_t(task + 1) / n_tasks;
    if (h1 > h0)
      attend_heads({q, k_cache, v_cache, k16, v16, kv_row, group, lo, pos, hd, p.scale, h0, h1, scores + h0 * n_keys,
                    out + h0 * hd, rows ? rows + size_t(thread) * kBlockKeys * kv_row : nullptr});
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
  // kBlockKeys widened rows per thread
  float* rows = k16 ? ctx.kv_k_scratch.floats(size_t(ctx.n_threads) * kBlockKeys * kv_row) : nullptr;
  const AttendFn attend_heads = attend_heads_for(ctx.isa);
  const int threads = threads_for(uint64_t(n_tokens) * n_heads * n_ctx * hd, ctx.n_threads);
  ctx.pool.run(int64_t(n_tokens), threads, [&](int64_t t, int thread) {
    const size_t pos = n_past + size_t(t), lo = first_visible_key(pos, p.sliding_window);
    attend_heads({q + size_t(t) * n_heads * hd, k_cache, v_cache, k16, v16, kv_row, group, lo, pos, hd, p.scale, 0,
                  n_heads, scores + size_t(thread) * n_heads * n_ctx, out + size_t(t) * n_heads * hd,
                  rows ? rows + size_t(thread) * kBlockKeys * kv_row : nullptr});
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

// Every sequence's queries as tasks of one parallel region when each of them takes attend_heads
// alone (one token, or batch invariance: attention_queries): a batched decode step's attention is
// one region instead of one per sequence, most of them too small to wake a second thread. A task
// is a query, or a range of its heads when there are fewer than two queries per thread; a head's
// values do not depend on its task, so each sequence gets the bits its own call gives.
void attention_seqs(Context& ctx, const AttentionSeq* seqs, size_t n, const AttentionParams& p) {
  check_params(p);
  const size_t hd = p.head_dim, n_heads = p.n_heads, group = n_heads / p.n_kv_heads;
  const size_t kv_row = size_t(p.n_kv_heads) * hd;
  std::vector<uint64_t>& queries = ctx.attn_queries;  // (sequence << 32) | token
  queries.clear();
  size_t max_ctx = 0;
  uint64_t work = 0;
  bool fused = n >= 2, half = false;
  for (size_t i = 0; i < n && fused; ++i) {
    const AttentionSeq& s = seqs[i];
    fused = s.n_tokens <= 1 || ctx.options.batch_invariant;
    for (size_t t = 0; t < s.n_tokens; ++t) queries.push_back((uint64_t(i) << 32) | t);
    max_ctx = std::max(max_ctx, s.n_past + s.n_tokens);
    work += uint64_t(s.n_tokens) * n_heads * (s.n_past + s.n_tokens) * hd;
    half = half || s.k16;
  }
  if (!fused || queries.size() < 2) {
    for (size_t i = 0; i < n; ++i) {
      const AttentionSeq& s = seqs[i];
      if (s.k16) attention_f16(ctx, s.q, s.k16, s.v16, s.n_past, s.n_tokens, p, s.out);
      else attention(ctx, s.q, s.k_cache, s.v_cache, s.n_past, s.n_tokens, p, s.out);
    }
    return;
  }
  const int threads = threads_for(work, ctx.n_threads);
  const size_t n_q = queries.size();
  const size_t splits = n_q >= size_t(2 * threads) ? 1 : std::min(n_heads, (size_t(2 * threads) + n_q - 1) / n_q);
  float* scores = ctx.attn_scratch.floats(size_t(ctx.n_threads) * n_heads * max_ctx);
  float* rows = half ? ctx.kv_k_scratch.floats(size_t(ctx.n_threads) * kBlockKeys * kv_row) : nullptr;
  const AttendFn attend_heads = attend_heads_for(ctx.isa);
  ctx.pool.run(int64_t(n_q * splits), threads, [&](int64_t task, int thread) {
    const uint64_t qt = queries[size_t(task) / splits];
    const size_t part = size_t(task) % splits;
    const AttentionSeq& s = seqs[qt >> 32];
    const size_t t = size_t(qt & 0xFFFFFFFFu), pos = s.n_past + t, lo = first_visible_key(pos, p.sliding_window);
    const size_t h0 = n_heads * part / splits, h1 = n_heads * (part + 1) / splits;
    if (h1 > h0)
      attend_heads({s.q + t * n_heads * hd, s.k_cache, s.v_cache, s.k16, s.v16, kv_row, group, lo, pos, hd, p.scale,
                    h0, h1, scores + size_t(thread) * n_heads * max_ctx, s.out + (t * n_heads + h0) * hd,
                    rows ? rows + size_t(thread) * kBlockKeys * kv_row : nullptr});
  });
}

}  // namespace endor::cpu::detail
