// Text generation (prefill + sampled decode) and perplexity over token ids.
#include <algorithm>
#include <cmath>

#include "endor/batch_engine.h"
#include "weights.h"

namespace endor {

double GenerationStats::decode_tokens_per_s() const {
  return decode_ms > 0 ? n_decode_steps * 1e3 / decode_ms : 0;
}

std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, Sampler& sampler,
                              const GenerationOptions& options,
                              const std::function<void(int32_t)>& on_token,
                              GenerationStats* stats) {
  const ModelConfig& c = model.config();
  if (prompt.empty()) throw Error("generate: the prompt has no tokens");
  if (prompt.size() > c.max_positions)
    throw Error("generate: the prompt has " + std::to_string(prompt.size()) +
                " tokens, more than the context length " + std::to_string(c.max_positions) +
                " (max_position_embeddings)");
  std::unique_ptr<KvCache> cache =
      model.make_cache(kv_capacity_for(prompt.size(), options.max_new_tokens, c.max_positions));
  return generate_in_cache(model, *cache, prompt, sampler, options, on_token, stats);
}

std::vector<int32_t> generate_in_cache(Model& model, KvCache& cache_ref, const std::vector<int32_t>& prompt,
                                       Sampler& sampler, const GenerationOptions& options,
                                       const std::function<void(int32_t)>& on_token,
                                       GenerationStats* stats) {
  const ModelConfig& c = model.config();
  if (prompt.empty()) throw Error("generate: the prompt has no tokens");
  const size_t room = std::min<size_t>(cache_ref.capacity(), c.max_positions);
  if (cache_ref.n_past() + prompt.size() > room)
    throw Error("generate: " + std::to_string(cache_ref.n_past() + prompt.size()) +
                " tokens do not fit in the context of " + std::to_string(room) + " tokens");
  GenerationStats local;
  GenerationStats& st = stats ? *stats : local;
  st = GenerationStats{};
  st.n_prompt = prompt.size();
  KvCache* cache = &cache_ref;
  std::vector<float> logits;
  std::vector<int32_t> out;
  if (options.max_new_tokens == 0 && !options.on_prompt_logits) return out;

  // Without prompt logits to report, every step samples where the backend keeps the logits
  // (Model::forward_next: on a device only the id comes back).
  const bool all = static_cast<bool>(options.on_prompt_logits);
  int32_t token = -1;
  const Clock::time_point t0 = Clock::now();
  if (all) {
    model.forward(prompt.data(), prompt.size(), *cache, true, logits);
    const double forward_ms = ms_since(t0);
    options.on_prompt_logits(logits, prompt.size());  // not timed
    if (options.max_new_tokens == 0) {
      st.prefill_ms = forward_ms;
      return out;
    }
    const Clock::time_point t1 = Clock::now();
    token = sampler.sample(logits.data() + (prompt.size() - 1) * c.vocab, c.vocab);
    st.prefill_ms = forward_ms + ms_since(t1);
  } else {
    token = model.forward_next(prompt.data(), prompt.size(), *cache, sampler);
    st.prefill_ms = ms_since(t0);
  }
  model.reset_profile();  // per-layer times below are decode-only

  auto is_eos = [&](int32_t id) {
    return std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) != c.eos_token_ids.end() ||
           std::find(options.stop_ids.begin(), options.stop_ids.end(), id) != options.stop_ids.end();
  };
  const Clock::time_point t_decode = Clock::now();
  for (;;) {
    out.push_back(token);
    if (on_token) on_token(token);
    if (out.size() >= options.max_new_tokens) break;
    if (options.stop_at_eos && is_eos(token)) {
      st.stop = StopReason::Eos;
      break;
    }
    if (cache->n_past() + 1 > std::min<size_t>(cache->capacity(), c.max_positions)) {
      st.stop = StopReason::Context;
      break;
    }
    token = model.forward_next(&token, 1, *cache, sampler);
    st.n_decode_steps += 1;
  }
  st.decode_ms = ms_since(t_decode);
  st.n_generated = out.size();
  return out;
}

std::vector<std::vector<int32_t>> generate_batch(
    Model& model, const std::vector<std::vector<int32_t>>& prompts, const SamplerOptions& sampling,
    const BatchGenerationOptions& options,
    const std::function<void(size_t index, const std::vector<int32_t>& ids)>& on_done,
    BatchGenerationStats* stats) {
  const ModelConfig& c = model.config();
  if (options.batch == 0) throw Error("generate_batch: the batch must hold at least one sequence");
  BatchGenerationStats local;
  BatchGenerationStats& st = stats ? *stats : local;
  st = BatchGenerationStats{};
  st.n_prompts = prompts.size();
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw Error("generate_batch: prompt " + std::to_string(i + 1) + " has no tokens");
    if (prompts[i].size() > c.max_positions)
      throw Error("generate_batch: prompt " + std::to_string(i + 1) + " has " + std::to_string(prompts[i].size()) +
                  " tokens, more than the context length " + std::to_string(c.max_positions) +
                  " (max_position_embeddings)");
    st.n_prompt_tokens += prompts[i].size();
  }
  std::vector<std::vector<int32_t>> out(prompts.size());
  if (options.max_new_tokens == 0) {
    if (on_done)
      for (size_t i = 0; i < prompts.size(); ++i) on_done(i, out[i]);
    return out;
  }
  // The engine's defaults are this mode's: a sequence may fill the model's context, and a prompt
  // that joins is prefilled whole in the step it joins (no prefill budget).
  BatchEngineOptions engine_options;
  engine_options.max_sequences = options.batch;
  BatchEngine engine(model, engine_options);
  size_t next = 0;
  const Clock::time_point t0 = Clock::now();
  while (next < prompts.size() || !engine.empty()) {
    for (; !engine.full() && next < prompts.size(); ++next) {
      BatchSequence s;
      s.tag = next;
      s.prompt = prompts[next];
      s.max_new_tokens = options.max_new_tokens;
      s.sampling = sampling;
      s.sampling.seed = sampling.seed + next;  // prompt i samples with seed + i
      s.stop_at_eos = options.stop_at_eos;
      engine.admit(std::move(s));
    }
    const BatchStepResult step = engine.step();
    if (step.error) std::rethrow_exception(step.error);
    for (const BatchToken& t : step.tokens) {
      out[t.tag].push_back(t.id);
      if (t.finish && on_done) on_done(t.tag, out[t.tag]);
    }
  }
  st.total_ms = ms_since(t0);
  const BatchEngineStats& es = engine.stats();
  st.n_generated = es.n_generated;
  st.n_steps = es.n_steps;
  st.max_active = es.max_active;
  st.n_decode_steps = es.n_decode_steps;
  st.decode_ms = es.decode_ms;
  return out;
}

PerplexityResult perplexity(Model& model, const std::vector<int32_t>& ids, size_t window,
                            const std::function<void(size_t done, size_t n_windows)>& on_window) {
  const ModelConfig& c = model.config();
  if (window < 2) throw Error("perplexity: the window must hold at least 2 tokens");
  if (window > c.max_positions)
    throw Error("perplexity: window " + std::to_string(window) + " exceeds the context length " +
                std::to_string(c.max_positions));
  if (ids.size() < window)
    throw Error("perplexity: " + std::to_string(ids.size()) + " tokens are fewer than one window of " +
                std::to_string(window));
  PerplexityResult r;
  r.window = window;
  r.n_windows = ids.size() / window;  // the tail is dropped
  std::unique_ptr<KvCache> cache = model.make_cache(window);
  std::vector<float> logits;
  double sum_window_means = 0;
  for (size_t w = 0; w < r.n_windows; ++w) {
    const int32_t* chunk = ids.data() + w * window;
    cache->clear();
    model.forward(chunk, window, *cache, true, logits);
    double nll = 0;
    for (size_t t = 0; t + 1 < window; ++t) {
      const float* row = logits.data() + t * c.vocab;
      double top = row[0];
      for (size_t v = 1; v < c.vocab; ++v) top = std::max<double>(top, row[v]);
      double z = 0;
      for (size_t v = 0; v < c.vocab; ++v) z += std::exp(row[v] - top);
      nll += top + std::log(z) - row[chunk[t + 1]];
    }
    r.window_nll.push_back(nll / static_cast<double>(window - 1));
    sum_window_means += r.window_nll.back();
    if (on_window) on_window(w + 1, r.n_windows);
  }
  r.mean_nll = sum_window_means / static_cast<double>(r.n_windows);
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace endor
