// Token sampling: the options, the seeded draw, and the pick of endor/kernels.h sample_logits
// (greedy, temperature, top-k, top-p: one definition for the host and every backend).
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

SamplingParams Sampler::params() const {
  SamplingParams p;
  p.temperature = options_.temperature;
  p.top_k = options_.top_k;
  p.top_p = options_.top_p;
  return p;
}

// u in [0, 1) from the top 53 bits: the same draw on every platform for a given seed. Greedy
// draws nothing, so a seed's sequence depends only on the sampled steps.
double Sampler::draw() {
  return options_.temperature == 0.0f ? 0.0 : static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

int32_t Sampler::sample(const float* logits, size_t vocab) {
  if (vocab == 0) throw Error("sampler: empty vocabulary");
  return sample_logits(logits, vocab, params(), draw(), scratch_);
}

int32_t Sampler::sample_on(Backend& backend, const float* backend_logits, size_t vocab) {
  if (vocab == 0) throw Error("sampler: empty vocabulary");
  return backend.sample(backend_logits, vocab, params(), draw());
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
