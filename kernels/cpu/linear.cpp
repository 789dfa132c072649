// y = x·Wᵀ + b on an encoded weight, three ways (see cpu::LinearPath): fused decode-multiply for
// decode-time token counts, per-thread row decode + dense dots, and panel decode + GEMM.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "context.h"
#include "half.h"

namespace endor::cpu::detail {
namespace {

// Auto thresholds (bench/RESULTS.md "CPU kernels" has the measurements behind them).
constexpr size_t kFusedMaxTokens = kMaxFusedTokens;
constexpr size_t kDefaultGemmMinTokens = 16;
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

// x[T, cols] rounded to f16 into ctx.half_x_scratch, or null when a value is not finite as an f16
// (|x| > 65504, inf, NaN): that call keeps f32 x, which carries such values as they are.
const uint16_t* round_into_scratch(Context& ctx, const float* x, size_t n_tokens, uint64_t cols) {
  const size_t n = n_tokens * cols;
  uint16_t* h = reinterpret_cast<uint16_t*>(ctx.half_x_scratch.floats((n + 1) / 2));
  narrow_to_half(x, h, n);
  uint16_t top = 0;  // bit 15 set iff some exponent field is all ones (inf or NaN)
  for (size_t i = 0; i < n; ++i) top |= uint16_t((h[i] & 0x7C00) + 0x0400);
  return (top & 0x8000) ? nullptr : h;
}

// x quantized into ctx.act_scratch.
QuantizedX quantize_into_scratch(Context& ctx, const float* x, size_t n_tokens, uint64_t cols) {
  const size_t floats = quantized_bytes(n_tokens, cols) / 4;
  return quantize_activations(x, cols, n_tokens, cols, ctx.act_scratch.floats(floats));
}

void linear_fused_q8(Context& ctx, const TensorView& w, const QuantizedX& qx, size_t n_tokens, float* y) {
  const uint64_t rows = w.layout.rows, cols = w.layout.cols;
  const size_t chunk = rows_per_task(rows, ctx.n_threads);
  const int64_t n_chunks = int64_t((rows + chunk - 1) / chunk);
  const WeightKernels& k = *ctx.kernels;
  for (size_t t0 = 0; t0 < n_tokens; t0 += kMaxFusedTokens) {
    const size_t nt = std::min(kMaxFusedTokens, n_tokens - t0);
    const QuantizedX q0 = qx.token(t0);
    ctx.pool.run(n_chunks, threads_for(rows * cols * nt, ctx.n_threads), [&](int64_t b, int) {
      const uint64_t r0 = uint64_t(b) * chunk, r1 = std::min<uint64_t>(rows, r0 + chunk);
      k.dot_rows_q8(w, r0, r1, q0, nt, y + t0 * rows, rows);
    });
  }
}

// XT: float, or uint16_t for x rounded to f16 (half_activations).
template <typename XT>
void linear_fused(Context& ctx, const TensorView& w, const XT* x, size_t n_tokens, float* y) {
  const uint64_t rows = w.layout.rows, cols = w.layout.cols;
  const size_t chunk = rows_per_task(rows, ctx.n_threads);
  const int64_t n_chunks = int64_t((rows + chunk - 1) / chunk);
  const WeightKernels& k = *ctx.kernels;
  // Token blocks beyond kMaxFusedTokens re-read the weight; Auto never asks for that.
  for (size_t t0 = 0; t0 < n_tokens; t0 += kMaxFusedTokens) {
    const size_t nt = std::min(kMaxFusedTokens, n_tokens - t0);
    ctx.pool.run(n_chunks, threads_for(rows * cols * nt, ctx.n_threads), [&](int64_t b, int) {
      const uint64_t r0 = uint64_t(b) * chunk, r1 = std::min<uint64_t>(rows, r0 + chunk);
      if constexpr (std::is_same_v<XT, uint16_t>) k.dot_rows_hx(w, r0, r1, x + t0 * cols, cols, nt, y + t0 * rows, rows);
      else k.dot_rows(w, r0, r1, x + t0 * cols, cols, nt, y + t0 * rows, rows);
    });
  }
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

}  // namespace

LinearPath choose_linear_path(const Context& ctx, const TensorLayout& layout, size_t n_tokens) {
  if (ctx.options.linear_path != LinearPath::Auto) return ctx.options.linear_path;
  (void)layout;
  const size_t gemm_min = ctx.options.gemm_min_tokens ? ctx.options.gemm_min_tokens : kDefaultGemmMinTokens;
  if (n_tokens >= gemm_min) return LinearPath::PanelGemm;
  if (n_tokens <= kFusedMaxTokens) return LinearPath::Fused;
  return LinearPath::RowDecode;
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
    const size_t n = n_tokens * w.layout.cols;
    float* xr = ctx.xhat_scratch.floats(n);
    widen_half(xh, xr, n);
    x = xr;
  }
  switch (path) {
    case LinearPath::Auto:
    case LinearPath::Fused:
      if (xh) linear_fused(ctx, w, xh, n_tokens, y);
      else linear_fused(ctx, w, x, n_tokens, y);
      break;
    case LinearPath::RowDecode: linear_row_decode(ctx, w, x, n_tokens, y); break;
    case LinearPath::PanelGemm: linear_panel_gemm(ctx, w, x, n_tokens, y); break;
  }
  if (bias) add_bias_rows(ctx, y, bias, n_tokens, w.layout.rows);
}

void linear_group(Context& ctx, const LinearJob* jobs, size_t n_jobs, const float* x, size_t n_tokens) {
  if (n_tokens == 0 || n_jobs == 0) return;
  uint64_t total_rows = 0, work = 0;
  bool fused = n_tokens <= kFusedMaxTokens;
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
  // x quantized once for every int8/int4 job of the group (they share it, as they share x).
  bool any_q8 = false;
  for (size_t i = 0; i < n_jobs; ++i) any_q8 = any_q8 || int8_activations(ctx, *jobs[i].w);
  const QuantizedX qx = any_q8 ? quantize_into_scratch(ctx, x, n_tokens, jobs[0].w->layout.cols) : QuantizedX{};
  // And rounded to f16 once for every job that takes f16 activations (null: all keep f32 x).
  bool any_half = false;
  for (size_t i = 0; i < n_jobs; ++i) any_half = any_half || half_activations(ctx, *jobs[i].w);
  const uint16_t* xh = any_half ? round_into_scratch(ctx, x, n_tokens, jobs[0].w->layout.cols) : nullptr;
  ctx.pool.run(n_tasks, threads_for(work, ctx.n_threads), [&](int64_t i, int) {
    const LinearGroupTask& t = tasks[size_t(i)];
    const uint64_t rows = t.job->w->layout.rows, cols = t.job->w->layout.cols;
    if (int8_activations(ctx, *t.job->w)) k.dot_rows_q8(*t.job->w, t.r0, t.r1, qx, n_tokens, t.job->y, rows);
    else if (xh && half_activations(ctx, *t.job->w)) k.dot_rows_hx(*t.job->w, t.r0, t.r1, xh, cols, n_tokens, t.job->y, rows);
    else k.dot_rows(*t.job->w, t.r0, t.r1, x, cols, n_tokens, t.job->y, rows);
    if (const float* b = t.job->bias)
      for (size_t tok = 0; tok < n_tokens; ++tok)
        for (uint64_t r = t.r0; r < t.r1; ++r) t.job->y[tok * rows + r] += b[r];
  });
}

}  // namespace endor::cpu::detail
