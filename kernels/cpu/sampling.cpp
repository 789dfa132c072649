// The reference token pick (endor/kernels.h sample_logits): greedy, temperature, top-k, top-p in
// the order transformers' warpers apply them. Backend::sample's default (download, then this) and
// the CPU backend's use it; the CUDA kernel (kernels/cuda/sampling.cu) reproduces it step by step.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "endor/kernels.h"

namespace endor {
namespace {

// An unsigned key whose ascending order is the candidates' order (logit descending; NaN as -inf,
// -0 equal to +0): the bits of the logit made monotone, then complemented.
inline uint32_t descending_key(float v) {
  if (std::isnan(v)) v = -INFINITY;
  if (v == 0.0f) v = 0.0f;
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return ~((b & 0x80000000u) ? ~b : (b | 0x80000000u));
}

// scratch.order = every id by (logit desc, id asc), the order std::sort with the comparison
// (logit desc, id asc) gives, by a stable least-significant-digit radix sort of (key, id) pairs
// (three passes over the key's 11, 11 and 10 bits) starting from ids in ascending order, so equal
// logits keep id order. Why not std::sort: over a 151936-token vocabulary (Qwen3) the comparison
// sort made a call take 28 ms on the 2-vCPU Xeon of bench/RESULTS.md, the radix sort 4 ms.
void order_all_candidates(const float* logits, size_t vocab, SamplingScratch& scratch) {
  std::vector<uint64_t>& items = scratch.items;  // key << 32 | id
  std::vector<uint64_t>& moved = scratch.moved;
  items.resize(vocab);
  moved.resize(vocab);
  for (size_t i = 0; i < vocab; ++i) items[i] = uint64_t(descending_key(logits[i])) << 32 | i;
  constexpr int kShift[3] = {32, 43, 54};
  constexpr uint64_t kMask[3] = {0x7ff, 0x7ff, 0x3ff};
  for (int pass = 0; pass < 3; ++pass) {
    size_t count[2049] = {};
    for (size_t i = 0; i < vocab; ++i) ++count[((items[i] >> kShift[pass]) & kMask[pass]) + 1];
    for (size_t d = 1; d <= 2048; ++d) count[d] += count[d - 1];
    for (size_t i = 0; i < vocab; ++i) moved[count[(items[i] >> kShift[pass]) & kMask[pass]]++] = items[i];
    items.swap(moved);
  }
  std::vector<uint32_t>& order = scratch.order;
  order.resize(vocab);
  for (size_t i = 0; i < vocab; ++i) order[i] = uint32_t(items[i]);
}

// Greedy: the first maximum, i.e. the lowest id among ties (-0 ties with +0); NaN never wins, and
// where every logit is NaN the pick is the last id. That is what the scalar loop
//   best = 0; for i in [1, vocab): if (l[i] > l[best] || isnan(l[best])) best = i;
// returns (leading NaNs move best on, a later one never does); tests/runtime/test_sampler.cpp holds
// it as the reference. Its isnan test and dependent branch per id cost ~2.6 % of a batched SmolLM2
// decode step (8 picks over 49152 logits). Here two passes in blocks of kLanes that GCC vectorises
// (maxps, cmpeqps; plain arrays rather than 32-byte vector types, which the baseline x86-64 build
// lowers lane by lane): the max of the non-NaN logits (`x > m ? x : m` drops a NaN x; a max is
// exact in any order), then the first id equal to it.
int32_t greedy_pick(const float* logits, size_t vocab) {
  constexpr size_t kLanes = 32;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float acc[kLanes];
  std::fill(acc, acc + kLanes, neg_inf);
  size_t i = 0;
  for (; i + kLanes <= vocab; i += kLanes)
    for (size_t k = 0; k < kLanes; ++k) acc[k] = logits[i + k] > acc[k] ? logits[i + k] : acc[k];
  float m = neg_inf;
  for (size_t k = 0; k < kLanes; ++k) m = acc[k] > m ? acc[k] : m;
  for (; i < vocab; ++i) m = logits[i] > m ? logits[i] : m;

  size_t j = 0;
  for (; j + kLanes <= vocab; j += kLanes) {  // to the first block that holds m
    int found = 0;
    for (size_t k = 0; k < kLanes; ++k) found |= logits[j + k] == m;
    if (found) break;
  }
  for (; j < vocab; ++j)
    if (logits[j] == m) return static_cast<int32_t>(j);
  return static_cast<int32_t>(vocab - 1);  // every logit NaN
}

}  // namespace

int32_t sample_logits(const float* logits, size_t vocab, const SamplingParams& params, double u01,
                      SamplingScratch& scratch) {
  if (vocab == 0) throw Error("sampler: empty vocabulary");
  if (!(params.temperature >= 0.0f) || !std::isfinite(params.temperature))
    throw Error("sampler: temperature must be >= 0, got " + std::to_string(params.temperature));
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f))
    throw Error("sampler: top-p must be in (0, 1], got " + std::to_string(params.top_p));
  if (params.temperature == 0.0f) {
    return greedy_pick(logits, vocab);
  }

  // Candidates ordered by (logit desc, id asc); only the first `keep` need ordering.
  std::vector<uint32_t>& order = scratch.order;
  size_t keep = vocab;
  if (params.top_k > 0 && params.top_k < vocab) {
    keep = params.top_k;
    order.resize(vocab);
    for (size_t i = 0; i < vocab; ++i) order[i] = static_cast<uint32_t>(i);
    auto before = [logits](uint32_t a, uint32_t b) {
      const float la = std::isnan(logits[a]) ? -INFINITY : logits[a];
      const float lb = std::isnan(logits[b]) ? -INFINITY : logits[b];
      return la > lb || (la == lb && a < b);
    };
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  } else {
    order_all_candidates(logits, vocab, scratch);
  }

  // Softmax of logits / temperature over the kept candidates (in double: no underflow issues).
  const double inv_t = 1.0 / params.temperature;
  const double top = logits[order[0]];
  std::vector<double>& probs = scratch.probs;
  probs.resize(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    const float l = logits[order[i]];
    probs[i] = std::isnan(l) ? 0.0 : std::exp((static_cast<double>(l) - top) * inv_t);
    total += probs[i];
  }
  if (params.top_p < 1.0f) {
    // The smallest prefix whose mass reaches top_p (at least one candidate).
    const double target = params.top_p * total;
    double mass = 0;
    size_t n = 0;
    while (n < keep) {
      mass += probs[n++];
      if (mass >= target) break;
    }
    keep = n;
    total = mass;
  }

  const double u = u01 * total;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (u < acc) return static_cast<int32_t>(order[i]);
  }
  return static_cast<int32_t>(order[keep - 1]);  // u within rounding of total
}

int32_t Backend::sample(const float* logits, size_t vocab, const SamplingParams& params, double u01) {
  std::vector<float> host(vocab);
  download(host.data(), logits, vocab);
  return sample_logits(host.data(), vocab, params, u01, sampling_scratch_);
}

}  // namespace endor
