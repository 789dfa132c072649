// Continuous batching over Model::forward_batch (serve_scheduler.h).
#include "endor/serve_scheduler.h"

#include <algorithm>
#include <new>

namespace endor::serve {

using Clock = std::chrono::steady_clock;

Job::Update Job::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return !pending_.empty() || finish_.has_value(); });
  Update u;
  u.text.swap(pending_);
  u.n_generated = n_generated_;
  u.finish = finish_;
  u.error = error_;
  return u;
}

void Job::publish(const std::string& text, size_t n_generated, const std::optional<std::string>& finish,
                  const std::optional<ApiError>& error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finish_) return;  // already ended (e.g. by shutdown)
    pending_ += text;
    n_generated_ = n_generated;
    finish_ = finish;
    if (error) error_ = error;
  }
  changed_.notify_all();
}

// A request in a slot: its cache, sampler, decoded text and how far its prompt is prefilled.
struct Scheduler::Slot {
  std::shared_ptr<Job> job;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StreamingDecoder> decoder;
  std::unique_ptr<StopStrings> stops;
  size_t prefilled = 0;             // prompt tokens in the cache
  std::vector<int32_t> generated;
  size_t step_tokens = 0;           // tokens this slot runs in the current step
  bool done = false;
  uint64_t kv_bytes = 0;
  bool decoding() const { return prefilled == job->spec().prompt.size(); }
};

Scheduler::Scheduler(Model& model, const Tokenizer& tokenizer, SchedulerOptions options)
    : model_(model), tokenizer_(tokenizer), options_(options) {
  options_.parallel = std::max<size_t>(options_.parallel, 1);
  options_.prefill_chunk = std::max<size_t>(options_.prefill_chunk, 1);
  options_.ctx = std::min<size_t>(std::max<size_t>(options_.ctx, 2), model.config().max_positions);
  metrics_.parallel = options_.parallel;
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() {
  shutdown();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Job> Scheduler::submit(JobSpec spec) {
  auto job = std::make_shared<Job>(std::move(spec));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw ApiError(503, "the server is shutting down");
    if (queue_.size() >= options_.queue)
      throw ApiError(429, "all " + std::to_string(options_.parallel) + " slots are busy and " +
                              std::to_string(options_.queue) + " requests wait; retry later");
    queue_.push_back(job);
    metrics_.queue_length = queue_.size();
  }
  wake_.notify_all();
  return job;
}

void Scheduler::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
}

SchedulerMetrics Scheduler::metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  SchedulerMetrics m = metrics_;
  const Clock::time_point now = Clock::now();
  size_t tokens = 0;
  for (const auto& r : recent_)
    if (now - r.first <= std::chrono::seconds(10)) tokens += r.second;
  m.generated_tokens_per_s = tokens / 10.0;
  return m;
}

void Scheduler::run() {
  std::vector<Slot> slots;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !slots.empty(); });
      if (stopping_) {
        // In-flight requests end with what they have; their streams get a final chunk.
        for (Slot& s : slots) s.job->publish("", s.generated.size(), std::string("abort"));
        for (auto& job : queue_) job->publish("", 0, std::string("abort"));
        queue_.clear();
        metrics_.queue_length = metrics_.active_slots = 0;
        metrics_.kv_bytes = 0;
        return;
      }
      while (slots.size() < options_.parallel && !queue_.empty()) {
        std::shared_ptr<Job> job = std::move(queue_.front());
        queue_.pop_front();
        if (job->cancelled()) {
          metrics_.requests_cancelled += 1;
          continue;
        }
        const JobSpec& spec = job->spec();
        Slot s;
        s.job = job;
        // The last sampled token is never fed back, hence the - 1.
        const size_t capacity = std::min(options_.ctx, spec.prompt.size() + std::max<size_t>(spec.max_tokens, 1) - 1);
        try {
          s.cache = model_.make_cache(capacity);
        } catch (const std::bad_alloc&) {
          job->publish("", 0, std::string("error"),
                       ApiError(503, "no memory for a KV cache of " + std::to_string(capacity) + " tokens"));
          continue;
        }
        const ModelConfig& c = model_.config();
        s.kv_bytes = uint64_t(2) * c.n_layers * s.cache->capacity() * s.cache->kv_dim() * kv_value_bytes(s.cache->dtype());
        s.sampler = std::make_unique<Sampler>(spec.sampling);
        // The decoder sees the prompt first, so the first new token decodes in context (as endor-infer).
        s.decoder = std::make_unique<StreamingDecoder>(tokenizer_, /*skip_special_tokens=*/true);
        for (int32_t id : spec.prompt) s.decoder->push(id);
        s.decoder->flush();
        s.stops = std::make_unique<StopStrings>(spec.stop);
        metrics_.prompt_tokens += spec.prompt.size();
        slots.push_back(std::move(s));
      }
      metrics_.queue_length = queue_.size();
    }
    // Clients gone since the last step leave now.
    size_t n_cancelled = 0;
    for (Slot& s : slots)
      if (s.job->cancelled()) {
        s.done = true;
        ++n_cancelled;
      }
    slots.erase(std::remove_if(slots.begin(), slots.end(), [](const Slot& s) { return s.done; }), slots.end());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      metrics_.requests_cancelled += n_cancelled;
      metrics_.active_slots = slots.size();
      metrics_.kv_bytes = 0;
      for (const Slot& s : slots) metrics_.kv_bytes += s.kv_bytes;
    }
    if (!slots.empty()) step(slots);
  }
}

void Scheduler::step(std::vector<Slot>& slots) {
  const ModelConfig& c = model_.config();
  // Decoding slots first (their single tokens share one Linear call), then prompt chunks within
  // the step's prefill budget; a prompt past the budget waits for the next step.
  std::stable_partition(slots.begin(), slots.end(), [](const Slot& s) { return s.decoding(); });
  std::vector<Model::SequenceStep> steps;
  std::vector<Slot*> in_step;
  size_t budget = options_.prefill_chunk;
  for (Slot& s : slots) {
    s.step_tokens = 0;
    const std::vector<int32_t>& prompt = s.job->spec().prompt;
    if (s.decoding()) {
      s.step_tokens = 1;
      steps.push_back({&s.generated.back(), 1, s.cache.get()});
    } else if (budget > 0) {
      s.step_tokens = std::min(budget, prompt.size() - s.prefilled);
      budget -= s.step_tokens;
      steps.push_back({prompt.data() + s.prefilled, s.step_tokens, s.cache.get()});
    } else {
      continue;
    }
    in_step.push_back(&s);
  }
  std::vector<float> logits;
  try {
    model_.forward_batch(steps.data(), steps.size(), logits);
  } catch (const std::exception& e) {
    for (Slot* s : in_step) {
      s->job->publish("", s->generated.size(), std::string("error"), ApiError(500, e.what(), "server_error"));
      s->done = true;
    }
    slots.erase(std::remove_if(slots.begin(), slots.end(), [](const Slot& s) { return s.done; }), slots.end());
    return;
  }
  size_t n_new = 0, n_finished = 0;
  for (size_t i = 0; i < in_step.size(); ++i) {
    Slot& s = *in_step[i];
    const JobSpec& spec = s.job->spec();
    if (!s.decoding()) {
      s.prefilled += s.step_tokens;
      if (!s.decoding()) continue;  // more of the prompt to prefill
    }
    const int32_t id = s.sampler->sample(logits.data() + i * c.vocab, c.vocab);
    s.generated.push_back(id);
    ++n_new;
    const bool is_stop_id =
        !spec.ignore_eos && (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) != c.eos_token_ids.end() ||
        std::find(spec.stop_ids.begin(), spec.stop_ids.end(), id) != spec.stop_ids.end());
    std::string text;
    std::optional<std::string> finish;
    if (is_stop_id) {
      finish = "stop";
    } else {
      text = s.stops->push(s.decoder->push(id));
      if (s.stops->stopped()) finish = "stop";
    }
    if (!finish && (s.generated.size() >= spec.max_tokens ||
                    s.cache->n_past() + 1 > std::min<size_t>(s.cache->capacity(), c.max_positions)))
      finish = "length";
    if (finish) {
      if (!s.stops->stopped()) text += s.stops->push(s.decoder->flush());
      text += s.stops->finish();
      s.done = true;
      ++n_finished;
    }
    s.job->publish(text, s.generated.size(), finish);
  }
  slots.erase(std::remove_if(slots.begin(), slots.end(), [](const Slot& s) { return s.done; }), slots.end());
  std::lock_guard<std::mutex> lock(mutex_);
  metrics_.generated_tokens += n_new;
  metrics_.steps += 1;
  metrics_.requests_finished += n_finished;
  const Clock::time_point now = Clock::now();
  recent_.emplace_back(now, n_new);
  while (!recent_.empty() && now - recent_.front().first > std::chrono::seconds(10)) recent_.pop_front();
  metrics_.active_slots = slots.size();
  metrics_.kv_bytes = 0;
  for (const Slot& s : slots) metrics_.kv_bytes += s.kv_bytes;
}

}  // namespace endor::serve
