// y = x·Wᵀ + b on an encoded weight, three ways (see cpu::LinearPath): fused decode-multiply for
// decode-time token counts, per-thread row decode + dense dots, and panel decode + GEMM.
#include <algorithm>
#include <string_view>
#include <type_traits>
#include <vector>

#include "context.h"
#include "half.h"

namespace endor::cpu::detail {
namespace {

// Auto's thresholds. Prefill token counts T > 8 go through the fused kernels in blocks of 8 (or
// row-decode, fused_blocks_pay) until PanelGemm's one f32 decode of the weight is cheaper than
// decoding it in registers once per block. bench/bench_prefill on the EPYC VM (AMD EPYC, Zen 4,
// AVX-512, 2 threads, 2026-11-27, load ~8), CPU ms per token of one linear call, fused / row-decode
// / panel:
//   1536x576 bitmap int4 @ 50 %: T=16 .036/.038/.045, T=24 .036/.034/.035, T=32 .035/.031/.030,
//     T=64 .036/.029/.026; bitmap int8 T=32 .027/.027/.028, T=48 .027/.048/.025; 576x1536 int4
//     T=32 .032/.033/.034, T=48 .032/.031/.030.
//   5632x2048 bitmap int4 @ 50 %: T=16 .31/.46/2.49, T=64 .30/.38/.77, T=128 .30/.39/.50
//     (panel ≈ 35 ms a call to decode + .22 ms a token: even with fused at T ≈ 470); int8 T=128
//     .37/.39/.50 (even ≈ 230); dense f16 T=128 .63/.39/.50 (row-decode even ≈ 210; 2048x5632 ≈ 120).
// Decoding a weight to f32 is ~0.5 ns a weight while the panel stays in cache (SmolLM2's 3.5 MiB)
// and ~3 ns once it does not (the 1 B shape's 16 MiB panels): hence two regimes, split at
// kCachedPanelBytes of f32. One linear call on a warm weight favours the panel earlier than the
// model does (there the weights stream and each new GEMM shape is compiled on first use), so the
// int4/int8 crossovers are set from whole prefills (bench/prefill/run.sh, endor-infer, 2 threads,
// prefill tok/s of fused blocks up to T vs the panel from 32 or 96): SmolLM2 int4 @ 50 % T=32
// 217 vs 170, T=80 235 vs 220, T=96 239 vs 249, T=128 253 vs 271 (panel ahead from ~96); int8 @ 50 %
// T=48 282 vs 170, T=128 306 vs 278, T=192 289 vs 283, T=256 289 vs 288 (even by ~192-256); 1 B
// int4 @ 50 %: T=128 11.0 s fused blocks vs 16.6 s panel. f16/bf16 (row-decode) from the per-call
// figures only.
constexpr size_t kFusedMaxTokens = kMaxFusedTokens;
constexpr uint64_t kCachedPanelBytes = uint64_t(8) << 20;
constexpr size_t kInt4GemmMinTokens = 96;          // int4 weights whose f32 copy fits kCachedPanelBytes
constexpr size_t kInt4LargeGemmMinTokens = 384;    // larger int4 weights
constexpr size_t kInt8GemmMinTokens = 256;         // int8 and int8g weights
constexpr size_t kFloatGemmMinTokens = 64;         // f16/bf16/f32 weights that fit (row-decode below)
constexpr size_t kFloatLargeGemmMinTokens = 128;   // larger f16/bf16/f32 weights
constexpr size_t kDenseF32GemmMinTokens = 16;      // dense f32: the GEMM reads the mapping, no decode
constexpr size_t kRowDecodeRows = 4;              // rows each thread decodes at a time
constexpr size_t kPanelBytes = size_t(16) << 20;  // decoded f32 panel size for PanelGemm

// Whether this weight multiplies int8 activations under ctx's options.
bool int8_activations(const Context& ctx, const TensorView& w) {
  return !ctx.options.exact && int8_activation_weight(w.layout.value_type);
}

// Whether this weight multiplies f16 activations under ctx's options (weight_kernels.h).
bool half_activations(const Context& ctx, const TensorView& w) {
  const ValueType vt = w.layout.value_type;
  return !ctx.options.exact && (vt == ValueType::F16 || vt == ValueType::BF16) &&
         (w.layout.encoding == Encoding::Dense || w.layout.cols >= kHalfXMinCols);
}

// x[T, cols] rounded to f16 into ctx.half_x_scratch, and ctx.half_ok[t] = whether token t's values
// are all finite as f16 (|x| <= 65504, no inf, no NaN): a token that is not keeps f32 x, which
// carries such values as they are. Null when no token fits, and off batch invariance when any
// token does not fit (the whole call keeps f32 x then, as it did before per-token fallbacks).
const uint16_t* round_into_scratch(Context& ctx, const float* x, size_t n_tokens, uint64_t cols) {
  const size_t n = n_tokens * cols;
  uint16_t* h = reinterpret_cast<uint16_t*>(ctx.half_x_scratch.floats((n + 1) / 2));
  narrow_to_half(x, h, n);
  ctx.half_ok.assign(n_tokens, 1);
  bool all = true, any = false;
  for (size_t t = 0; t < n_tokens; ++t) {
    uint16_t top = 0;  // bit 15 set iff some exponent field is all ones (inf or NaN)
    for (size_t i = t * cols; i < (t + 1) * cols; ++i) top |= uint16_t((h[i] & 0x7C00) + 0x0400);
    ctx.half_ok[t] = !(top & 0x8000);
    all = all && ctx.half_ok[t];
    any = any || ctx.half_ok[t];
  }
  if (all) return h;
  return ctx.options.batch_invariant && any ? h : nullptr;
}

// Tokens per fused kernel call: up to kMaxFusedTokens share each decoded weight row. Under batch
// invariance a call takes only as many tokens as its kernel computes each of them with the
// arithmetic of a one-token call: the kernels' per-token arithmetic depends on the call's token
// count in places (weight_kernels_*.cpp: AVX2's f32/f16-x accumulators are 4 per token up to 2
// tokens, then 2, then 1; AVX-512's 4 up to 4 tokens, then 1; the int8-activation kernels have
// one-token kernels of their own for a dense int4 row). The
// counts below are those kernel structures, checked for every weight form, ISA and T by
// tests/kernels/test_batch_invariance.cpp. The rows of a task stay in cache from block to block.
size_t fused_block(const Context& ctx, const TensorLayout& L, bool q8) {
  if (!ctx.options.batch_invariant) return kMaxFusedTokens;
  const std::string_view set = ctx.kernels->name;
  if (set == "portable") return kMaxFusedTokens;  // one accumulator per token at any count
  const bool dense_int4 = L.encoding == Encoding::Dense && L.value_type == ValueType::I4;
  const bool avx512 = set == "avx512-vbmi2";
  if (q8) {
    if (dense_int4) return 1;  // both sets: a one-token kernel of its own
    return kMaxFusedTokens;  // one chain per token (AVX2, AVX-512's int4) or two at every count (int8, int8g)
  }
  // f32/f16 x: int4 in groups that are not a multiple of 64 goes to AVX2's loop on AVX-512.
  const bool to_avx2 = L.value_type == ValueType::I4 && L.group_size % 64 != 0;
  return avx512 && !to_avx2 ? 4 : 2;
}

// x quantized into ctx.act_scratch.
QuantizedX quantize_into_scratch(Context& ctx, const float* x, size_t n_tokens, uint64_t cols) {
  const size_t floats = quantized_bytes(n_tokens, cols) / 4;
  return quantize_activations(x, cols, n_tokens, cols, ctx.act_scratch.floats(floats));
}

// Prefill through the fused kernels: each task multiplies its rows by every block of <=
// fused_block() tokens in turn, so the rows are read from memory once and the later blocks find
// them in L1/L2. Each (rows, token block) is the same kernel call as a separate linear() of that
// block makes: y is bit-identical to running the blocks one by one.
void linear_fused_q8(Context& ctx, const TensorView& w, const QuantizedX& qx, size_t n_tokens, float* y) {
  const uint64_t rows = w.layout.rows, cols = w.layout.cols;
  const size_t chunk = rows_per_task(rows, ctx.n_threads);
  const int64_t n_chunks = int64_t((rows + chunk - 1) / chunk);
  const WeightKernels& k = *ctx.kernels;
  const size_t block = fused_block(ctx, w.layout, true);
  ctx.pool.run(n_chunks, threads_for(rows * cols * n_tokens, ctx.n_threads), [&](int64_t b, int) {
    const uint64_t r0 = uint64_t(b) * chunk, r1 = std::min<uint64_t>(rows, r0 + chunk);
    for (size_t t0 = 0; t0 < n_tokens; t0 += block)
      k.dot_rows_q8(w, r0, r1, qx.token(t0), std::min(block, n_tokens - t0), y + t0 * rows, rows);
  });
}

// Widened copies of f16 x for blocks of several tokens: x's f16 values as f32 (exact), so the
// kernel's FMAs read x from memory instead of converting each token's x again for every row
// (dot_rows_hx widens 16 values per 16 weights: at 4 tokens a word, 16 conversions beside 16 FMAs;
// the head of a batch-8 step spent half its time there). dot_rows on the widened values is
// dot_rows_hx's function (weight_kernels.h), so a row's result is the one-token call's. Only while
// a block's x stays small in L1 (the one-token reason for f16 x); null otherwise.
constexpr uint64_t kWideXMaxCols = 1024;
const float* widen_for_blocks(Context& ctx, const uint16_t* xh, size_t n_tokens, uint64_t cols) {
  if (!xh || n_tokens < 2 || cols > kWideXMaxCols) return nullptr;
  float* xw = ctx.half_x_wide_scratch.floats(n_tokens * cols);
  widen_half(xh, xw, n_tokens * cols);  // tokens beyond f16 (half_ok 0) are never read from it
  return xw;
}

// Rows a kernel call takes while later token blocks follow: as many as keep ~16 KiB of f16 weights
// (a dense f16 row of 576 columns: 14 rows) in L1 for the next block, instead of a task's whole
// range (the head's 3072 rows, 3.5 MiB, read from memory once per block). Rows are independent:
// the same results at any split.
uint64_t rows_between_blocks(uint64_t cols) { return std::max<uint64_t>(8, 8192 / std::max<uint64_t>(cols, 1)); }

// Rows [r0, r1) of w times tokens [0, n_tokens) of x (f32) or of xh (x rounded to f16; null: f32
// for every token; xw: xh widened, widen_for_blocks, or null), in blocks of fused_block() tokens.
// half_ok[t] false: token t keeps f32 x, alone in its call (only under batch invariance does xh
// hold such tokens).
void dot_rows_blocks(const Context& ctx, const TensorView& w, uint64_t r0, uint64_t r1, const float* x,
                     const uint16_t* xh, const float* xw, size_t n_tokens, float* y) {
  const uint64_t rows = w.layout.rows, cols = w.layout.cols;
  const WeightKernels& k = *ctx.kernels;
  const size_t block = fused_block(ctx, w.layout, false);
  const uint64_t step = n_tokens > block ? rows_between_blocks(cols) : r1 - r0;
  for (uint64_t a = r0; a < r1; a += step) {
    const uint64_t b = std::min(r1, a + step);
    for (size_t t0 = 0; t0 < n_tokens;) {
      size_t nt = std::min(block, n_tokens - t0);
      if (xh) {  // a run of tokens that all fit f16, or one that does not
        size_t run = 1;
        while (run < nt && ctx.half_ok[t0 + run] == ctx.half_ok[t0]) ++run;
        nt = ctx.half_ok[t0] ? run : 1;
      }
      if (xh && ctx.half_ok[t0] && xw) k.dot_rows(w, a, b, xw + t0 * cols, cols, nt, y + t0 * rows, rows);
      else if (xh && ctx.half_ok[t0]) k.dot_rows_hx(w, a, b, xh + t0 * cols, cols, nt, y + t0 * rows, rows);
      else k.dot_rows(w, a, b, x + t0 * cols, cols, nt, y + t0 * rows, rows);
      t0 += nt;
    }
  }
}

// xh: x rounded to f16 (half_activations), or null.
void linear_fused(Context& ctx, const TensorView& w, const float* x, const uint16_t* xh, size_t n_tokens, float* y) {
  const uint64_t rows = w.layout.rows, cols = w.layout.cols;
  const size_t chunk = rows_per_task(rows, ctx.n_threads);
  const int64_t n_chunks = int64_t((rows + chunk - 1) / chunk);
  const float* xw = widen_for_blocks(ctx, xh, n_tokens, cols);
  // Token blocks as linear_fused_q8's: a task's rows stay in cache from one block to the next.
  ctx.pool.run(n_chunks, threads_for(rows * cols * n_tokens, ctx.n_threads), [&](int64_t b, int) {
    const uint64_t r0 = uint64_t(b) * chunk, r1 = std::min<uint64_t>(rows, r0 + chunk);
    dot_rows_blocks(ctx, w, r0, r1, x, xh, xw, n_tokens, y);
  });
}

void linear_row_decode(Context& ctx, const TensorView& w, const float* x, size_t n_tokens, float* y) {
  const uint64_t rows = w.layout.rows, cols = w.layout.cols;
  float* scratch = ctx.thread_scratch.floats(size_t(ctx.n_threads) * kRowDecodeRows * cols);
  const size_t chunk = rows_per_task(rows, ctx.n_threads, kRowDecodeRows);
  const int64_t n_chunks = int64_t((rows + chunk - 1) / chunk);
  const WeightKernels& k = *ctx.kernels;
  ctx.pool.run(n_chunks, threads_for(rows * cols * n_tokens, ctx.n_threads), [&](int64_t b, int thread) {
    float* mine = scratch + size_t(thread) * kRowDecodeRows * cols;
    const uint64_t r_end = std::min<uint64_t>(rows, uint64_t(b) * chunk + chunk);
    for (uint64_t r = uint64_t(b) * chunk; r < r_end; r += kRowDecodeRows) {
      const uint64_t nr = std::min<uint64_t>(kRowDecodeRows, r_end - r);
      k.decode_rows(w, r, r + nr, mine);
      k.dense_dot(mine, cols, nr, cols, x, cols, n_tokens, y + r, rows);
    }
  });
}

void linear_panel_gemm(Context& ctx, const TensorView& w, const float* x, size_t n_tokens, float* y) {
  const uint64_t rows = w.layout.rows, cols = w.layout.cols;
  if (w.layout.encoding == Encoding::Dense && w.layout.value_type == ValueType::F32) {
    // Already f32 [out, in]: multiply straight from the mapped bytes.
    gemm_xat(ctx, x, n_tokens, cols, reinterpret_cast<const float*>(w.values()), rows, y, rows);
    return;
  }
  const uint64_t panel_rows = std::clamp<uint64_t>(kPanelBytes / (4 * cols) / 16 * 16, 16, rows);
  float* panel = ctx.panel_scratch.floats(panel_rows * cols);
  const WeightKernels& k = *ctx.kernels;
  for (uint64_t p0 = 0; p0 < rows; p0 += panel_rows) {
    const uint64_t np = std::min(panel_rows, rows - p0);
    const size_t chunk = rows_per_task(np, ctx.n_threads);
    const int64_t n_chunks = int64_t((np + chunk - 1) / chunk);
    ctx.pool.run(n_chunks, threads_for(np * cols, ctx.n_threads), [&](int64_t b, int) {
      const uint64_t r0 = uint64_t(b) * chunk, r1 = std::min<uint64_t>(np, r0 + chunk);
      k.decode_rows(w, p0 + r0, p0 + r1, panel + r0 * cols);
    });
    gemm_xat(ctx, x, n_tokens, cols, panel, np, y + p0, rows);
  }
}

void add_bias_rows(Context& ctx, float* y, const float* bias, size_t n_tokens, size_t dim) {
  ctx.pool.run(int64_t(n_tokens), threads_for(n_tokens * dim, ctx.n_threads), [&](int64_t t, int) {
    for (size_t i = 0; i < dim; ++i) y[size_t(t) * dim + i] += bias[i];
  });
}

// Whether prefill below the GEMM crossover goes through the fused kernels in blocks of 8 tokens
// (else row-decode). int8-activation weights have integer fused kernels that beat decoding rows to
// f32, except bitmap int4 in groups that are not a multiple of 64 (int4k's 32), which the AVX-512
// kernels hand to the AVX2 one, and int8g in groups that are not a multiple of 32 (the scalar
// portable kernel's); f16/bf16/f32 rows pay their conversions once per block of 8 where row-decode
// pays them once.
bool fused_blocks_pay(const Context& ctx, const TensorLayout& L) {
  if (ctx.options.exact || !int8_activation_weight(L.value_type)) return false;
  if (L.value_type == ValueType::I8G) return L.group_size % kActBlock == 0;
  return !(L.value_type == ValueType::I4 && L.encoding == Encoding::Bitmap && L.group_size % 64 != 0);
}

// The T from which Auto takes PanelGemm (see the thresholds above).
size_t default_gemm_min_tokens(const TensorLayout& L) {
  if (L.encoding == Encoding::Dense && L.value_type == ValueType::F32) return kDenseF32GemmMinTokens;
  const bool cached = L.rows * L.cols * 4 <= kCachedPanelBytes;
  if (L.value_type == ValueType::I4) return cached ? kInt4GemmMinTokens : kInt4LargeGemmMinTokens;
  if (L.value_type == ValueType::I8 || L.value_type == ValueType::I8G) return kInt8GemmMinTokens;  // int8g: int8's, not measured apart
  return cached ? kFloatGemmMinTokens : kFloatLargeGemmMinTokens;
}

}  // namespace

LinearPath choose_linear_path(const Context& ctx, const TensorLayout& layout, size_t n_tokens) {
  if (ctx.options.linear_path != LinearPath::Auto) return ctx.options.linear_path;
  // Batch invariance: every row through the fused kernels, one token a call (fused_block).
  if (n_tokens <= kFusedMaxTokens || ctx.options.batch_invariant) return LinearPath::Fused;
  const size_t gemm_min = ctx.options.gemm_min_tokens ? ctx.options.gemm_min_tokens : default_gemm_min_tokens(layout);
  if (n_tokens >= gemm_min) return LinearPath::PanelGemm;
  return fused_blocks_pay(ctx, layout) ? LinearPath::Fused : LinearPath::RowDecode;
}

void linear(Context& ctx, const TensorView& w, const float* x, size_t n_tokens, const float* bias, float* y) {
  if (n_tokens == 0) return;
  const LinearPath path = choose_linear_path(ctx, w.layout, n_tokens);
  if (int8_activations(ctx, w)) {
    const uint64_t cols = w.layout.cols;
    const QuantizedX qx = quantize_into_scratch(ctx, x, n_tokens, cols);
    if (path == LinearPath::Fused || path == LinearPath::Auto) {
      linear_fused_q8(ctx, w, qx, n_tokens, y);
    } else {
      // The other paths multiply x̂ = d·q in f32: the same function up to the f32 rounding of x̂.
      float* xhat = ctx.xhat_scratch.floats(n_tokens * cols);
      dequantize_activations(qx, n_tokens, cols, xhat, cols);
      if (path == LinearPath::RowDecode) linear_row_decode(ctx, w, xhat, n_tokens, y);
      else linear_panel_gemm(ctx, w, xhat, n_tokens, y);
    }
    if (bias) add_bias_rows(ctx, y, bias, n_tokens, w.layout.rows);
    return;
  }
  // f16 activations: the fused path reads the rounded x itself, the others multiply it widened back
  // (the same function).
  const uint16_t* xh = half_activations(ctx, w) ? round_into_scratch(ctx, x, n_tokens, w.layout.cols) : nullptr;
  if (xh && path != LinearPath::Fused && path != LinearPath::Auto) {
    const size_t cols = w.layout.cols;
    float* xr = ctx.xhat_scratch.floats(n_tokens * cols);
    for (size_t t = 0; t < n_tokens; ++t) {  // a token beyond f16 keeps its f32 x
      if (ctx.half_ok[t]) widen_half(xh + t * cols, xr + t * cols, cols);
      else std::copy(x + t * cols, x + (t + 1) * cols, xr + t * cols);
    }
    x = xr;
  }
  switch (path) {
    case LinearPath::Auto:
    case LinearPath::Fused: linear_fused(ctx, w, x, xh, n_tokens, y); break;
    case LinearPath::RowDecode: linear_row_decode(ctx, w, x, n_tokens, y); break;
    case LinearPath::PanelGemm: linear_panel_gemm(ctx, w, x, n_tokens, y); break;
  }
  if (bias) add_bias_rows(ctx, y, bias, n_tokens, w.layout.rows);
}

void linear_group(Context& ctx, const LinearJob* jobs, size_t n_jobs, const float* x, size_t n_tokens) {
  if (n_tokens == 0 || n_jobs == 0) return;
  uint64_t total_rows = 0, work = 0;
  bool fused = true;
  for (size_t i = 0; i < n_jobs; ++i) {
    const TensorLayout& L = jobs[i].w->layout;
    const LinearPath path = choose_linear_path(ctx, L, n_tokens);
    fused = fused && (path == LinearPath::Fused || path == LinearPath::Auto) && L.cols == jobs[0].w->layout.cols;
    total_rows += L.rows;
    work += L.rows * L.cols * n_tokens;
  }
  if (!fused || n_jobs == 1) {
    for (size_t i = 0; i < n_jobs; ++i) linear(ctx, *jobs[i].w, x, n_tokens, jobs[i].bias, jobs[i].y);
    return;
  }
  // Row chunks of every job, sized from the group's rows so each thread still gets ~8 tasks; the
  // bias of a chunk's rows is added by the task that computed them (the same y += b as linear()).
  const size_t chunk = rows_per_task(total_rows, ctx.n_threads);
  std::vector<LinearGroupTask>& tasks = ctx.group_tasks;
  tasks.clear();
  for (size_t i = 0; i < n_jobs; ++i)
    for (uint64_t r0 = 0; r0 < jobs[i].w->layout.rows; r0 += chunk)
      tasks.push_back({&jobs[i], r0, std::min<uint64_t>(jobs[i].w->layout.rows, r0 + chunk)});
  const WeightKernels& k = *ctx.kernels;
  const int64_t n_tasks = int64_t(tasks.size());
  // x quantized once for every int8/int4/int8g job of the group (they share it, as they share x).
  bool any_q8 = false;
  for (size_t i = 0; i < n_jobs; ++i) any_q8 = any_q8 || int8_activations(ctx, *jobs[i].w);
  const QuantizedX qx = any_q8 ? quantize_into_scratch(ctx, x, n_tokens, jobs[0].w->layout.cols) : QuantizedX{};
  // And rounded to f16 once for every job that takes f16 activations (null: all keep f32 x).
  bool any_half = false;
  for (size_t i = 0; i < n_jobs; ++i) any_half = any_half || half_activations(ctx, *jobs[i].w);
  const uint16_t* xh = any_half ? round_into_scratch(ctx, x, n_tokens, jobs[0].w->layout.cols) : nullptr;
  const float* xw = widen_for_blocks(ctx, xh, n_tokens, jobs[0].w->layout.cols);
  // Token blocks of fused_block() as in linear_fused: a task's rows stay in cache between them.
  ctx.pool.run(n_tasks, threads_for(work, ctx.n_threads), [&](int64_t i, int) {
    const LinearGroupTask& t = tasks[size_t(i)];
    const uint64_t rows = t.job->w->layout.rows;
    if (int8_activations(ctx, *t.job->w)) {
      const size_t block = fused_block(ctx, t.job->w->layout, true);
      for (size_t t0 = 0; t0 < n_tokens; t0 += block)
        k.dot_rows_q8(*t.job->w, t.r0, t.r1, qx.token(t0), std::min(block, n_tokens - t0), t.job->y + t0 * rows, rows);
    } else {
      const bool half = half_activations(ctx, *t.job->w);
      dot_rows_blocks(ctx, *t.job->w, t.r0, t.r1, x, half ? xh : nullptr, half ? xw : nullptr, n_tokens, t.job->y);
    }
    if (const float* b = t.job->bias)
      for (size_t tok = 0; tok < n_tokens; ++tok)
        for (uint64_t r = t.r0; r < t.r1; ++r) t.job->y[tok * rows + r] += b[r];
  });
}

}  // namespace endor::cpu::detail
