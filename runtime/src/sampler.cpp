// Token sampling: greedy, temperature, top-k, top-p (the order transformers' warpers apply them).
#include <algorithm>
#include <cmath>
#include <string>

#include "endor/runtime.h"

namespace endor {

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature))
    throw Error("sampler: temperature must be >= 0, got " + std::to_string(options.temperature));
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f))
    throw Error("sampler: top-p must be in (0, 1], got " + std::to_string(options.top_p));
}

int32_t Sampler::sample(const float* logits, size_t vocab) {
  if (vocab == 0) throw Error("sampler: empty vocabulary");
  if (options_.temperature == 0.0f) {
    // Greedy: the first maximum, i.e. the lowest id among ties. NaN never wins.
    size_t best = 0;
    for (size_t i = 1; i < vocab; ++i)
      if (logits[i] > logits[best] || std::isnan(logits[best])) best = i;
    return static_cast<int32_t>(best);
  }

  // Candidates ordered by (logit desc, id asc); only the first `keep` need ordering.
  order_.resize(vocab);
  for (size_t i = 0; i < vocab; ++i) order_[i] = static_cast<uint32_t>(i);
  auto before = [logits](uint32_t a, uint32_t b) {
    const float la = std::isnan(logits[a]) ? -INFINITY : logits[a];
    const float lb = std::isnan(logits[b]) ? -INFINITY : logits[b];
    return la > lb || (la == lb && a < b);
  };
  size_t keep = vocab;
  if (options_.top_k > 0 && options_.top_k < vocab) {
    keep = options_.top_k;
    std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), before);
  } else {
    std::sort(order_.begin(), order_.end(), before);
  }

  // Softmax of logits / temperature over the kept candidates (in double: no underflow issues).
  const double inv_t = 1.0 / options_.temperature;
  const double top = logits[order_[0]];
  probs_.resize(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    const float l = logits[order_[i]];
    probs_[i] = std::isnan(l) ? 0.0 : std::exp((static_cast<double>(l) - top) * inv_t);
    total += probs_[i];
  }
  if (options_.top_p < 1.0f) {
    // The smallest prefix whose mass reaches top_p (at least one candidate).
    const double target = options_.top_p * total;
    double mass = 0;
    size_t n = 0;
    while (n < keep) {
      mass += probs_[n++];
      if (mass >= target) break;
    }
    keep = n;
    total = mass;
  }

  // u in [0, 1) from the top 53 bits: the same draw on every platform for a given seed.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs_[i];
    if (u < acc) return static_cast<int32_t>(order_[i]);
  }
  return static_cast<int32_t>(order_[keep - 1]);  // u within rounding of total
}

SamplerOptions default_sampler_options(const nlohmann::json& generation_config, uint64_t seed) {
  SamplerOptions o;
  o.seed = seed;
  const nlohmann::json& g = generation_config;
  const bool do_sample = g.is_object() && g.contains("do_sample") && g["do_sample"].is_boolean() &&
                         g["do_sample"].get<bool>();
  if (!do_sample) return o;  // greedy, like generate()
  auto number = [&](const char* key, double fallback) {
    return g.contains(key) && g[key].is_number() ? g[key].get<double>() : fallback;
  };
  o.temperature = static_cast<float>(number("temperature", 1.0));
  const double k = number("top_k", 50.0);  // transformers' GenerationConfig default
  o.top_k = k > 0 ? static_cast<uint32_t>(std::min(k, 4.0e9)) : 0;
  const double p = number("top_p", 1.0);
  o.top_p = (p > 0 && p <= 1) ? static_cast<float>(p) : 1.0f;
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) o.temperature = 1.0f;
  return o;
}

}  // namespace endor
