// Continuous batching over Model::forward_batch (endor/batch_engine.h).
#include "endor/batch_engine.h"

#include <algorithm>
#include <string>

#include "weights.h"  // Clock, ms_since

namespace endor {

BatchEngine::BatchEngine(Model& model, BatchEngineOptions options) : model_(model), options_(options) {
  if (options_.max_sequences == 0) throw Error("batch engine: the batch must hold at least one sequence");
  if (options_.prefill_chunk == 0) throw Error("batch engine: the prefill chunk must hold at least one token");
  const size_t context = model.config().max_positions;
  options_.ctx = options_.ctx == 0 ? context : std::min(options_.ctx, context);
}

void BatchEngine::admit(BatchSequence sequence) {
  if (full())
    throw Error("batch engine: all " + std::to_string(options_.max_sequences) + " sequences are admitted");
  for (const Sequence& s : active_)
    if (s.spec.tag == sequence.tag) throw Error("batch engine: sequence " + std::to_string(sequence.tag) + " is already admitted");
  if (sequence.prompt.empty()) throw Error("batch engine: the prompt of sequence " + std::to_string(sequence.tag) + " has no tokens");
  if (sequence.prompt.size() > options_.ctx)
    throw Error("batch engine: the prompt of sequence " + std::to_string(sequence.tag) + " has " +
                std::to_string(sequence.prompt.size()) + " tokens, more than the " + std::to_string(options_.ctx) +
                " a sequence may hold");
  Sequence s;
  s.cache = model_.make_cache(kv_capacity_for(sequence.prompt.size(), sequence.max_new_tokens, options_.ctx));
  s.sampler = std::make_unique<Sampler>(sequence.sampling);
  s.spec = std::move(sequence);
  active_.push_back(std::move(s));
}

bool BatchEngine::release(size_t tag) {
  auto it = std::find_if(active_.begin(), active_.end(), [&](const Sequence& s) { return s.spec.tag == tag; });
  if (it == active_.end()) return false;
  active_.erase(it);
  return true;
}

uint64_t BatchEngine::kv_bytes() const {
  uint64_t bytes = 0;
  for (const Sequence& s : active_) bytes += s.cache->bytes();
  return bytes;
}

bool BatchEngine::plan_step() {
  // Decoding sequences first, so their single tokens sit next to each other and share one Linear
  // call (Model::forward_batch); stable, so each group keeps its admission order.
  std::stable_partition(active_.begin(), active_.end(), [](const Sequence& s) { return s.decoding(); });
  steps_.clear();
  in_step_.clear();
  size_t budget = options_.prefill_chunk;
  bool prefill = false;
  for (size_t i = 0; i < active_.size(); ++i) {
    Sequence& s = active_[i];
    s.step_tokens = 0;
    if (s.decoding()) {
      s.step_tokens = 1;
      steps_.push_back({&s.last, 1, s.cache.get()});
    } else if (budget > 0) {
      s.step_tokens = std::min(budget, s.spec.prompt.size() - s.prefilled);
      budget -= s.step_tokens;
      steps_.push_back({s.spec.prompt.data() + s.prefilled, s.step_tokens, s.cache.get()});
      prefill = true;
    } else {
      continue;  // no budget left this step
    }
    in_step_.push_back(i);
  }
  return prefill;
}

std::optional<StopReason> BatchEngine::finish_after(const Sequence& s) const {
  const ModelConfig& c = model_.config();
  const std::vector<int32_t>& eos = c.eos_token_ids;
  const std::vector<int32_t>& stop = s.spec.stop_ids;
  if (s.spec.stop_at_eos && (std::find(eos.begin(), eos.end(), s.last) != eos.end() ||
                             std::find(stop.begin(), stop.end(), s.last) != stop.end()))
    return StopReason::Eos;
  if (s.n_generated >= s.spec.max_new_tokens) return StopReason::MaxTokens;
  // The next step would feed `last` back at position n_past: it must fit in the cache.
  if (s.cache->n_past() + 1 > std::min<size_t>(s.cache->capacity(), c.max_positions)) return StopReason::Context;
  return std::nullopt;
}

BatchStepResult BatchEngine::step() {
  BatchStepResult r;
  if (active_.empty()) return r;
  const bool prefill = plan_step();
  stats_.max_active = std::max(stats_.max_active, active_.size());
  const Clock::time_point t_step = Clock::now();
  try {
    model_.forward_batch(steps_.data(), steps_.size(), logits_);
  } catch (...) {
    r.error = std::current_exception();
    for (size_t i : in_step_) {
      r.failed.push_back(active_[i].spec.tag);
      active_[i].done = true;
    }
    active_.erase(std::remove_if(active_.begin(), active_.end(), [](const Sequence& s) { return s.done; }),
                  active_.end());
    return r;
  }
  stats_.n_steps += 1;
  const size_t vocab = model_.config().vocab;
  for (size_t k = 0; k < in_step_.size(); ++k) {
    Sequence& s = active_[in_step_[k]];
    if (!s.decoding()) {
      s.prefilled += s.step_tokens;
      if (!s.decoding()) continue;  // more of the prompt to prefill: no token yet
    }
    s.last = s.sampler->sample(logits_.data() + k * vocab, vocab);
    s.n_generated += 1;
    stats_.n_generated += 1;
    const std::optional<StopReason> finish = finish_after(s);
    s.done = finish.has_value();
    r.tokens.push_back({s.spec.tag, s.last, s.n_generated, finish});
  }
  active_.erase(std::remove_if(active_.begin(), active_.end(), [](const Sequence& s) { return s.done; }),
                active_.end());
  r.decode_only = !prefill;
  if (r.decode_only) {
    stats_.n_decode_steps += 1;
    stats_.decode_ms += ms_since(t_step);
  }
  return r;
}

}  // namespace endor
