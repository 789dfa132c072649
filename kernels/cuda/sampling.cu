// The next token on the device (Backend::sample): the logits stay in device memory and only the
// chosen id is copied back. Step for step the reference sample_logits (kernels/cpu/sampling.cpp):
//   greedy         — the first maximum over the non-NaN logits (vocab-1 when all are NaN, as the
//                    reference's scan ends there);
//   temperature>0  — the `keep` best candidates by (logit desc, id asc), NaN as -inf: a radix
//                    select finds the keep-th key, an ordered compaction takes every larger key
//                    and the lowest ids of the equal ones, a rank sort orders them; then one thread
//                    adds the double-precision softmax terms in that order (top-p cut, u·mass scan)
//                    exactly as the reference does.
// One block per call: a row of 128256 logits is 0.5 MB, read six times from L2, a few µs.
// Every result is independent of thread order (atomics only count; writes go to ranked slots).
#include "cuda_check.h"
#include "device_common.cuh"

namespace endor::cuda::detail {
namespace {

constexpr int kSampleThreads = 512;
constexpr int kSampleWarps = kSampleThreads / 32;

// Unsigned key ordered as the reference's comparison of logits: NaN counts as -inf and -0 ties +0.
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v != v) v = -INFINITY;
  if (v == 0.0f) v = 0.0f;
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

constexpr uint32_t kNoLogit = 0xffffffffu;  // greedy: no non-NaN logit seen

// Greedy's merge of two partial results: the larger value, on a tie the lower id; kNoLogit loses.
__device__ __forceinline__ void merge_best(float& v, uint32_t& idx, float ov, uint32_t oi) {
  if (oi == kNoLogit) return;
  if (idx == kNoLogit || ov > v || (ov == v && oi < idx)) {
    v = ov;
    idx = oi;
  }
}

__global__ void __launch_bounds__(kSampleThreads)
    sample_greedy_kernel(const float* __restrict__ logits, uint32_t vocab, int32_t* __restrict__ out) {
  __shared__ float best_v[kSampleWarps];
  __shared__ uint32_t best_i[kSampleWarps];
  float v = 0.0f;
  uint32_t idx = kNoLogit;
  for (uint32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float l = logits[i];
    if (l == l && (idx == kNoLogit || l > v)) {  // strided ascending: a tie keeps the lower id
      v = l;
      idx = i;
    }
  }
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, d);
    const uint32_t oi = __shfl_xor_sync(kFullMask, idx, d);
    merge_best(v, idx, ov, oi);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    best_v[warp] = v;
    best_i[warp] = idx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kSampleWarps; ++w) merge_best(v, idx, best_v[w], best_i[w]);
    *out = int32_t(idx == kNoLogit ? vocab - 1 : idx);
  }
}

__global__ void __launch_bounds__(kSampleThreads)
    sample_top_k_kernel(const float* __restrict__ logits, uint32_t vocab, uint32_t keep, float temperature,
                        float top_p, double u01, int32_t* __restrict__ out) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_prefix, s_need;
  __shared__ uint32_t warp_gt[kSampleWarps], warp_eq[kSampleWarps];
  __shared__ uint32_t cand_key[kMaxSampleCandidates], cand_id[kMaxSampleCandidates];
  __shared__ uint32_t sorted_id[kMaxSampleCandidates];
  __shared__ double probs[kMaxSampleCandidates];
  const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // 1. Radix select, 8 bits a pass from the top: `prefix` becomes the key of the keep-th best
  //    candidate, `need` how many candidates with exactly that key belong to the kept set.
  if (tid == 0) s_need = keep;
  uint32_t prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (uint32_t i = tid; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (uint32_t i = tid; i < vocab; i += blockDim.x) {
      const uint32_t k = order_key(logits[i]);
      if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      uint32_t need = s_need;
      int d = 255;
      for (; d > 0 && hist[d] < need; --d) need -= hist[d];
      s_prefix = prefix | (uint32_t(d) << shift);
      s_need = need;
    }
    __syncthreads();
    prefix = s_prefix;
    mask |= 255u << shift;
  }
  const uint32_t threshold = prefix, need = s_need, n_above = keep - need;

  // 2. Ordered compaction: warp w owns ids [lo, hi); slots are assigned in id order, keys above
  //    the threshold to [0, n_above), the first `need` ids with the threshold key after them.
  const uint32_t seg = ((vocab + kSampleWarps - 1) / kSampleWarps + 31) / 32 * 32;
  const uint32_t lo = warp * seg, hi = lo + seg < vocab ? lo + seg : vocab;
  uint32_t n_gt = 0, n_eq = 0;
  for (uint32_t base = lo; base < hi; base += 32) {
    const uint32_t i = base + lane;
    const uint32_t k = i < hi ? order_key(logits[i]) : 0;
    n_gt += __popc(__ballot_sync(kFullMask, i < hi && k > threshold));
    n_eq += __popc(__ballot_sync(kFullMask, i < hi && k == threshold));
  }
  if (lane == 0) {
    warp_gt[warp] = n_gt;
    warp_eq[warp] = n_eq;
  }
  __syncthreads();
  uint32_t gt_slot = 0, eq_rank = 0;
  for (uint32_t w = 0; w < warp; ++w) {
    gt_slot += warp_gt[w];
    eq_rank += warp_eq[w];
  }
  const uint32_t below_lane = (1u << lane) - 1;
  for (uint32_t base = lo; base < hi; base += 32) {
    const uint32_t i = base + lane;
    const uint32_t k = i < hi ? order_key(logits[i]) : 0;
    const bool gt = i < hi && k > threshold, eq = i < hi && k == threshold;
    const uint32_t gt_bits = __ballot_sync(kFullMask, gt), eq_bits = __ballot_sync(kFullMask, eq);
    if (gt) {
      const uint32_t s = gt_slot + __popc(gt_bits & below_lane);
      cand_key[s] = k;
      cand_id[s] = i;
    }
    if (eq) {
      const uint32_t r = eq_rank + __popc(eq_bits & below_lane);
      if (r < need) {
        cand_key[n_above + r] = k;
        cand_id[n_above + r] = i;
      }
    }
    gt_slot += __popc(gt_bits);
    eq_rank += __popc(eq_bits);
  }
  __syncthreads();

  // 3. Rank sort by (key desc, id asc): keys and ids are distinct pairs, so ranks are a permutation.
  for (uint32_t j = tid; j < keep; j += blockDim.x) {
    const uint32_t kj = cand_key[j], ij = cand_id[j];
    uint32_t rank = 0;
    for (uint32_t i = 0; i < keep; ++i) {
      const uint32_t ki = cand_key[i];
      rank += (ki > kj) || (ki == kj && cand_id[i] < ij);
    }
    sorted_id[rank] = ij;
  }
  __syncthreads();

  // 4. The reference's softmax terms (each term alone, so in parallel), then its sums in order.
  const double inv_t = 1.0 / double(temperature);
  const double top = double(logits[sorted_id[0]]);
  for (uint32_t j = tid; j < keep; j += blockDim.x) {
    const float l = logits[sorted_id[j]];
    probs[j] = l != l ? 0.0 : exp((double(l) - top) * inv_t);
  }
  __syncthreads();
  if (tid != 0) return;
  double total = 0;
  for (uint32_t j = 0; j < keep; ++j) total += probs[j];
  uint32_t n = keep;
  if (top_p < 1.0f) {
    const double target = double(top_p) * total;
    double mass = 0;
    n = 0;
    while (n < keep) {
      mass += probs[n++];
      if (mass >= target) break;
    }
    total = mass;
  }
  const double u = u01 * total;
  double acc = 0;
  for (uint32_t j = 0; j < n; ++j) {
    acc += probs[j];
    if (u < acc) {
      *out = int32_t(sorted_id[j]);
      return;
    }
  }
  *out = int32_t(sorted_id[n - 1]);
}

}  // namespace

void launch_sample(const float* logits, uint32_t vocab, float temperature, uint32_t keep, float top_p, double u01,
                   int32_t* out, cudaStream_t stream) {
  if (temperature == 0.0f)
    sample_greedy_kernel<<<1, kSampleThreads, 0, stream>>>(logits, vocab, out);
  else
    sample_top_k_kernel<<<1, kSampleThreads, 0, stream>>>(logits, vocab, keep, temperature, top_p, u01, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace endor::cuda::detail
