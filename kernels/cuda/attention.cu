// Causal GQA attention (optionally sliding-window) over a [capacity, n_kv_heads, head_dim] f32
// cache: one block per (query, head). Each of the block's 8 warps takes every 8th key, computes
// the score with the lanes splitting head_dim (lane l owns dims l, l+32, ...), and keeps an online
// softmax in f32 (running max m, running sum l, running weighted sum of values). The warps' partial
// results are then rescaled to the common max and combined. Simple and exact in form; a split-key
// (flash-decoding) variant would keep more SMs busy for batch-1 decode over long contexts.
#include <cmath>

#include "cuda_check.h"
#include "device_common.cuh"

namespace endor::cuda::detail {
namespace {

constexpr int kAttentionWarps = 8;
constexpr int kDimsPerLane = kMaxHeadDim / 32;

// Grid: n_tokens · n_heads blocks, block b is query t = b / n_heads, head h = b % n_heads.
__global__ void __launch_bounds__(kAttentionWarps * 32)
    attention_kernel(const float* __restrict__ q, const float* __restrict__ k_cache,
                     const float* __restrict__ v_cache, uint64_t n_past, AttentionShape a, float* __restrict__ out) {
  __shared__ float max_s[kAttentionWarps], sum_s[kAttentionWarps];
  __shared__ float acc_s[kAttentionWarps][kMaxHeadDim];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t pair = blockIdx.x;  // t · n_heads + h: also the row of q and out
  const uint32_t t = pair / a.n_heads, h = pair % a.n_heads;
  const uint32_t hd = a.head_dim;
  const uint64_t pos = n_past + t;  // this query's position; it sees keys [lo, pos]
  const uint64_t lo = (a.sliding_window && pos + 1 > a.sliding_window) ? pos + 1 - a.sliding_window : 0;
  const uint64_t kv_row = uint64_t(a.n_kv_heads) * hd;             // floats per cache position
  const uint64_t kv_off = uint64_t(h / (a.n_heads / a.n_kv_heads)) * hd;  // GQA: this head's kv head

  float qr[kDimsPerLane], acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const uint32_t d = lane + 32 * i;
    qr[i] = d < hd ? q[uint64_t(pair) * hd + d] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (uint64_t j = lo + warp; j <= pos; j += kAttentionWarps) {
    const float* kj = k_cache + j * kv_row + kv_off;
    const float* vj = v_cache + j * kv_row + kv_off;
    float partial = 0.0f;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const uint32_t d = lane + 32 * i;
      if (d < hd) partial = __fmaf_rn(qr[i], kj[d], partial);
    }
    const float s = warp_sum(partial) * a.scale;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);  // 0 for the first key (m = -inf)
    const float p = expf(s - m_new);
    l = l * correction + p;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const uint32_t d = lane + 32 * i;
      if (d < hd) acc[i] = acc[i] * correction + p * vj[d];
    }
    m = m_new;
  }
  if (lane == 0) {
    max_s[warp] = m;  // -inf and 0 for a warp that saw no key
    sum_s[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const uint32_t d = lane + 32 * i;
    if (d < hd) acc_s[warp][d] = acc[i];
  }
  __syncthreads();

  // Every query sees at least its own key, so the common max is finite.
  float m_all = -INFINITY;
  for (int w = 0; w < kAttentionWarps; ++w) m_all = fmaxf(m_all, max_s[w]);
  float l_all = 0.0f;
  for (int w = 0; w < kAttentionWarps; ++w) l_all = l_all + sum_s[w] * expf(max_s[w] - m_all);
  for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kAttentionWarps; ++w) o = o + acc_s[w][d] * expf(max_s[w] - m_all);
    out[uint64_t(pair) * hd + d] = o / l_all;
  }
}

}  // namespace

void launch_attention(const float* q, const float* k_cache, const float* v_cache, size_t n_past, size_t n_tokens,
                      const AttentionShape& shape, float* out, cudaStream_t stream) {
  const size_t n_blocks = n_tokens * shape.n_heads;  // the caller checked it fits a grid
  if (n_blocks == 0) return;
  attention_kernel<<<unsigned(n_blocks), kAttentionWarps * 32, 0, stream>>>(q, k_cache, v_cache, uint64_t(n_past),
                                                                           shape, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace endor::cuda::detail
