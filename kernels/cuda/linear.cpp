// linear() on a device-resident encoded weight: the path choice, the fused launches in chunks of
// up to 8 tokens, and the DecodeGemm path (decode row panels to a dense 16-bit/f32 buffer, then
// cublasGemmEx with f32 accumulation).
//
// DecodeGemm numerics: a weight stored as f16 or bf16 is multiplied in its own type, f32 in f32
// (pedantic: no TF32); int8/int8g/int4 weights decode to f16 (their decoded value rounded once:
// relative error ≤ 2^-11). Activations are rounded to the weight's 16-bit type (≤ 2^-11 for f16, 2^-8 for
// bf16; |x| > 65504 overflows f16). Products of 16-bit values are exact in f32; sums follow
// cuBLAS's order. tests/cuda/test_cuda_linear.cpp derives its error bound from exactly this.
#include <algorithm>
#include <string>

#include "context.h"
#include "cuda_check.h"
#include "endor/format.h"

namespace endor::cuda::detail {
namespace {

static_assert(kBlockCols == kIndexBlockCols, "decode kernels assume the format's index block width");

constexpr size_t kDefaultPanelBytes = size_t(256) << 20;

// The dense type a weight is multiplied in on the DecodeGemm path.
Dense gemm_type(Values v) {
  switch (v) {
    case Values::F32: return Dense::F32;
    case Values::BF16: return Dense::BF16;
    default: return Dense::F16;  // f16 as stored; int8/int8g/int4 decoded values rounded to f16
  }
}

size_t dense_bytes(Dense d) { return d == Dense::F32 ? 4 : 2; }

cudaDataType cuda_type(Dense d) {
  switch (d) {
    case Dense::F32: return CUDA_R_32F;
    case Dense::F16: return CUDA_R_16F;
    case Dense::BF16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

// y[t·ldy + n] = Σ_k a[n·k_dim + k]·x[t·k_dim + k] for n < n_rows, t < n_tokens, with a, x dense
// row-major of type `type`. In cuBLAS's column-major terms: Y(n_rows × T) = Aᵀ · X, where A is
// the k_dim × n_rows column-major view of a and X the k_dim × T view of x.
void gemm_xat(Context& ctx, Dense type, const void* a, uint32_t n_rows, uint32_t k_dim, const void* x,
              uint32_t n_tokens, float* y, uint32_t ldy) {
  const float alpha = 1.0f, beta = 0.0f;
  const cublasComputeType_t compute = type == Dense::F32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(n_rows), int(n_tokens), int(k_dim), &alpha, a,
                            cuda_type(type), int(k_dim), x, cuda_type(type), int(k_dim), &beta, y, CUDA_R_32F,
                            int(ldy), compute, CUBLAS_GEMM_DEFAULT));
}

void linear_fused(Context& ctx, const DeviceWeight& w, const float* x, size_t n_tokens, const float* bias,
                  float* y) {
  // Chunks beyond kMaxFusedTokens re-read the weight; Auto sends such token counts to DecodeGemm
  // unless batch invariance is on.
  for (size_t t0 = 0; t0 < n_tokens; t0 += kMaxFusedTokens) {
    const uint32_t nt = uint32_t(std::min(kMaxFusedTokens, n_tokens - t0));
    if (ctx.options.fused_kernel == FusedKernel::WarpPerRow)
      launch_fused_linear(w, x + t0 * w.cols, nt, bias, y + t0 * w.rows, ctx.compute);
    else
      launch_fused_linear16(w, x + t0 * w.cols, nt, bias, y + t0 * w.rows, ctx.compute);
  }
}

void linear_decode_gemm(Context& ctx, const DeviceWeight& w, const float* x, size_t n_tokens, const float* bias,
                        float* y) {
  const Dense type = gemm_type(w.values_type);
  const uint32_t nt = uint32_t(n_tokens);
  const void* xg = x;
  if (type != Dense::F32) {
    void* converted = ctx.activations.ensure(n_tokens * w.cols * dense_bytes(type), ctx.compute);
    launch_convert_f32(x, n_tokens * w.cols, type, converted, ctx.compute);
    xg = converted;
  }
  const bool stored_dense = !w.bitmap && (w.values_type == Values::F16 || w.values_type == Values::BF16 ||
                                          w.values_type == Values::F32);
  if (stored_dense) {
    // The stored values already are the dense [out, in] matrix in the GEMM's type.
    gemm_xat(ctx, type, w.values, w.rows, w.cols, xg, nt, y, w.rows);
  } else {
    const size_t cap = ctx.options.gemm_panel_bytes ? ctx.options.gemm_panel_bytes : kDefaultPanelBytes;
    const size_t row_bytes = size_t(w.cols) * dense_bytes(type);
    uint32_t panel_rows = uint32_t(std::clamp<size_t>(cap / row_bytes, 1, w.rows));
    if (panel_rows >= 128 && panel_rows < w.rows) panel_rows = panel_rows / 128 * 128;
    void* panel = ctx.panel.ensure(size_t(panel_rows) * row_bytes, ctx.compute);
    for (uint32_t p0 = 0; p0 < w.rows; p0 += panel_rows) {
      const uint32_t np = std::min(panel_rows, w.rows - p0);
      launch_decode_rows(w, p0, np, nullptr, type, panel, ctx.compute);
      gemm_xat(ctx, type, panel, np, w.cols, xg, nt, y + p0, w.rows);
    }
  }
  if (bias) launch_add_bias(y, bias, n_tokens, w.rows, ctx.compute);
}

}  // namespace

void linear(Context& ctx, const DeviceWeight& w, const float* x, size_t n_tokens, const float* bias, float* y) {
  if (n_tokens == 0) return;
  if (n_tokens > size_t(INT32_MAX) || n_tokens * w.cols > (size_t(1) << 40))
    throw Error("cuda linear: " + std::to_string(n_tokens) + " tokens is more than one call takes");
  LinearPath path = ctx.options.linear_path;
  if (path == LinearPath::Auto)  // batch invariance: every T fused (cuda_backend.h)
    path = n_tokens <= ctx.options.fused_max_tokens || ctx.options.batch_invariant ? LinearPath::Fused
                                                                                    : LinearPath::DecodeGemm;
  if (path == LinearPath::Fused)
    linear_fused(ctx, w, x, n_tokens, bias, y);
  else
    linear_decode_gemm(ctx, w, x, n_tokens, bias, y);
}

}  // namespace endor::cuda::detail
