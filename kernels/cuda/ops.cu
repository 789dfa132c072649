// Norms, elementwise ops and RoPE on f32 activations, with the CPU backend's arithmetic (ops.cpp):
// every product and sum rounds as written (--fmad=false), norm statistics accumulate in double,
// so results match the CPU bit for bit except where a libm function (exp, sin, cos) differs by
// an ulp or a double sum taken in another order rounds to a neighbouring float.
#include <algorithm>
#include <cmath>

#include "cuda_check.h"
#include "device_common.cuh"

namespace endor::cuda::detail {
namespace {

constexpr int kNormThreads = 256;
constexpr int kElementwiseThreads = 256;

unsigned elementwise_blocks(size_t n) {
  return unsigned(std::max<size_t>(1, std::min<size_t>((n + kElementwiseThreads - 1) / kElementwiseThreads, 8192)));
}

// Sum of every thread's value; every thread gets the same result (the warp partials are added
// in one fixed order). `scratch` holds 32 doubles; the function leaves it reusable.
__device__ double block_sum(double value, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) value += __shfl_xor_sync(kFullMask, value, d);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  double total = 0.0;
  for (int i = 0; i < int(blockDim.x / 32); ++i) total += scratch[i];
  __syncthreads();
  return total;
}

// One block per token. Two-pass biased variance in double, as the CPU backend and torch do.
__global__ void __launch_bounds__(kNormThreads)
    layer_norm_kernel(const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ beta,
                      float eps, size_t dim, float* __restrict__ out) {
  __shared__ double scratch[32];
  const float* xt = x + size_t(blockIdx.x) * dim;
  float* ot = out + size_t(blockIdx.x) * dim;
  double sum = 0.0;
  for (size_t i = threadIdx.x; i < dim; i += blockDim.x) sum += double(xt[i]);
  const double mean = block_sum(sum, scratch) / double(dim);
  double sq = 0.0;
  for (size_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const double d = double(xt[i]) - mean;
    sq += d * d;
  }
  sq = block_sum(sq, scratch);
  const float mean_f = float(mean);
  const float rstd = 1.0f / sqrtf(float(sq / double(dim)) + eps);
  for (size_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = (xt[i] - mean_f) * rstd * gamma[i];
    ot[i] = beta ? v + beta[i] : v;
  }
}

// Hugging Face LlamaRMSNorm in f32: out = γ · (x · rsqrt(mean(x²) + eps)), given Σx² of the row
// (each thread's share; every thread takes the same strided elements in both passes).
__device__ __forceinline__ void rms_norm_row(const float* __restrict__ xt, double sq, const float* __restrict__ gamma,
                                             float eps, size_t dim, float* __restrict__ ot, double* scratch) {
  sq = block_sum(sq, scratch);
  const float r = 1.0f / sqrtf(float(sq / double(dim)) + eps);
  for (size_t i = threadIdx.x; i < dim; i += blockDim.x) ot[i] = gamma[i] * (xt[i] * r);
}

__global__ void __launch_bounds__(kNormThreads)
    rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ gamma, float eps, size_t dim,
                    float* __restrict__ out) {
  __shared__ double scratch[32];
  const float* xt = x + size_t(blockIdx.x) * dim;
  double sq = 0.0;
  for (size_t i = threadIdx.x; i < dim; i += blockDim.x) sq += double(xt[i]) * double(xt[i]);
  rms_norm_row(xt, sq, gamma, eps, dim, out + size_t(blockIdx.x) * dim, scratch);
}

// The residual add and the next RMSNorm in one pass: x += y, then out = rms_norm(x) — the values
// add_kernel then rms_norm_kernel give (each thread reads back only the elements it wrote).
__global__ void __launch_bounds__(kNormThreads)
    add_rms_norm_kernel(float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ gamma,
                        float eps, size_t dim, float* __restrict__ out) {
  __shared__ double scratch[32];
  float* xt = x + size_t(blockIdx.x) * dim;
  const float* yt = y + size_t(blockIdx.x) * dim;
  double sq = 0.0;
  for (size_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = xt[i] + yt[i];
    xt[i] = v;
    sq += double(v) * double(v);
  }
  rms_norm_row(xt, sq, gamma, eps, dim, out + size_t(blockIdx.x) * dim, scratch);
}

#define ENDOR_GRID_STRIDE(i, n) \
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

__global__ void add_kernel(float* x, const float* y, size_t n) { ENDOR_GRID_STRIDE(i, n) x[i] += y[i]; }
__global__ void scale_kernel(float* x, float s, size_t n) { ENDOR_GRID_STRIDE(i, n) x[i] *= s; }
__global__ void relu_kernel(float* x, size_t n) {
  ENDOR_GRID_STRIDE(i, n) x[i] = x[i] > 0.0f ? x[i] : 0.0f;  // NaN and -0 become +0, as on the CPU
}
__global__ void silu_mul_kernel(const float* gate, const float* up, size_t n, float* out) {
  ENDOR_GRID_STRIDE(i, n) {
    const float g = gate[i];
    out[i] = (g / (1.0f + expf(-g))) * up[i];  // silu(g)·up
  }
}
__global__ void add_bias_kernel(float* x, const float* bias, size_t n_tokens, size_t dim) {
  ENDOR_GRID_STRIDE(i, n_tokens * dim) x[i] += bias[i % dim];
}

// One thread per (token, head, rotary pair i < half): x[i], x[i + half] rotate together. Heads
// [0, n_heads) of a token are x's, [n_heads, n_heads + n_heads2) x2's (q and k in one launch;
// n_heads2 = 0 rotates x alone).
__global__ void rope_kernel(float* x, uint32_t n_heads, float* x2, uint32_t n_heads2, size_t n_tokens,
                            uint32_t head_dim, uint32_t half, const int32_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, float attention_factor) {
  const uint32_t heads = n_heads + n_heads2;
  ENDOR_GRID_STRIDE(i, n_tokens * heads * half) {
    const uint32_t d = uint32_t(i % half);
    const size_t token_head = i / half;
    const size_t t = token_head / heads;
    const uint32_t h = uint32_t(token_head % heads);
    const float freq = float(positions[t]) * inv_freq[d];  // HF: inv_freq @ position_ids in f32
    float s, c;
    sincosf(freq, &s, &c);
    c = c * attention_factor;
    s = s * attention_factor;
    float* v = h < n_heads ? x + (t * n_heads + h) * head_dim : x2 + (t * n_heads2 + (h - n_heads)) * head_dim;
    const float x1 = v[d], x2 = v[d + half];
    v[d] = x1 * c + (-x2) * s;  // q·cos + rotate_half(q)·sin
    v[d + half] = x2 * c + x1 * s;
  }
}

#undef ENDOR_GRID_STRIDE

}  // namespace

void launch_layer_norm(const float* x, const float* gamma, const float* beta, float eps, size_t n_tokens,
                       size_t dim, float* out, cudaStream_t stream) {
  if (n_tokens == 0) return;
  layer_norm_kernel<<<unsigned(n_tokens), kNormThreads, 0, stream>>>(x, gamma, beta, eps, dim, out);
  CUDA_CHECK_LAUNCH();
}

void launch_rms_norm(const float* x, const float* gamma, float eps, size_t n_tokens, size_t dim, float* out,
                     cudaStream_t stream) {
  if (n_tokens == 0) return;
  rms_norm_kernel<<<unsigned(n_tokens), kNormThreads, 0, stream>>>(x, gamma, eps, dim, out);
  CUDA_CHECK_LAUNCH();
}

void launch_add_rms_norm(float* x, const float* y, const float* gamma, float eps, size_t n_tokens, size_t dim,
                         float* out, cudaStream_t stream) {
  if (n_tokens == 0) return;
  add_rms_norm_kernel<<<unsigned(n_tokens), kNormThreads, 0, stream>>>(x, y, gamma, eps, dim, out);
  CUDA_CHECK_LAUNCH();
}

void launch_add(float* x, const float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(x, y, n);
  CUDA_CHECK_LAUNCH();
}

void launch_scale(float* x, float s, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(x, s, n);
  CUDA_CHECK_LAUNCH();
}

void launch_relu(float* x, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  relu_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(x, n);
  CUDA_CHECK_LAUNCH();
}

void launch_silu_mul(const float* gate, const float* up, size_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  silu_mul_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(gate, up, n, out);
  CUDA_CHECK_LAUNCH();
}

void launch_add_bias(float* x, const float* bias, size_t n_tokens, size_t dim, cudaStream_t stream) {
  if (n_tokens == 0 || dim == 0) return;
  add_bias_kernel<<<elementwise_blocks(n_tokens * dim), kElementwiseThreads, 0, stream>>>(x, bias, n_tokens, dim);
  CUDA_CHECK_LAUNCH();
}

void launch_rope(float* x, uint32_t n_heads, float* x2, uint32_t n_heads2, size_t n_tokens, uint32_t head_dim,
                 uint32_t rotary_dim, const int32_t* positions, const float* inv_freq, float attention_factor,
                 cudaStream_t stream) {
  const uint32_t half = rotary_dim / 2;
  const size_t n = n_tokens * (size_t(n_heads) + n_heads2) * half;
  if (n == 0) return;
  rope_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(x, n_heads, x2, n_heads2, n_tokens, head_dim,
                                                                         half, positions, inv_freq, attention_factor);
  CUDA_CHECK_LAUNCH();
}

}  // namespace endor::cuda::detail
