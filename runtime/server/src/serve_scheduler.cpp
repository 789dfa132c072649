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
  u.ids.swap(pending_ids_);
  u.n_generated = n_generated_;
  u.finish = finish_;
  u.error = error_;
  return u;
}

void Job::publish(const std::string& text, const std::vector<int32_t>& ids, size_t n_generated,
                  const std::optional<std::string>& finish, const std::optional<ApiError>& error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finish_) return;  // already ended (e.g. by shutdown)
    pending_ += text;
    pending_ids_.insert(pending_ids_.end(), ids.begin(), ids.end());
    n_generated_ = n_generated;
    finish_ = finish;
    if (error) error_ = error;
  }
  changed_.notify_all();
}

// A request in a slot: its job and the text side of it. The engine holds its cache, sampler and
// how far its prompt is prefilled, under the same tag.
struct Scheduler::Slot {
  std::shared_ptr<Job> job;
  size_t tag = 0;
  size_t n_generated = 0;
  std::unique_ptr<StreamingDecoder> decoder;
  std::unique_ptr<StopStrings> stops;
};

namespace {

SchedulerOptions checked(SchedulerOptions o, const Model& model) {
  o.parallel = std::max<size_t>(o.parallel, 1);
  o.prefill_chunk = std::max<size_t>(o.prefill_chunk, 1);
  o.ctx = std::min<size_t>(std::max<size_t>(o.ctx, 2), model.config().max_positions);
  return o;
}

BatchEngineOptions engine_options(const SchedulerOptions& o) {
  BatchEngineOptions e;
  e.max_sequences = o.parallel;
  e.ctx = o.ctx;
  e.prefill_chunk = o.prefill_chunk;
  return e;
}

}  // namespace

Scheduler::Scheduler(Model& model, const Tokenizer& tokenizer, SchedulerOptions options)
    : model_(model), tokenizer_(tokenizer), options_(checked(options, model)), engine_(model, engine_options(options_)) {
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
        for (Slot& s : slots) s.job->publish("", {}, s.n_generated, std::string("abort"));
        for (auto& job : queue_) job->publish("", {}, 0, std::string("abort"));
        queue_.clear();
        metrics_.queue_length = metrics_.active_slots = 0;
        metrics_.kv_bytes = 0;
        return;
      }
      admit_queued(slots);
    }
    // Clients gone since the last step leave now.
    const size_t n_cancelled = drop_cancelled(slots);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      metrics_.requests_cancelled += n_cancelled;
      publish_gauges(slots);
    }
    if (!slots.empty()) step(slots);
  }
}

void Scheduler::admit_queued(std::vector<Slot>& slots) {
  while (!engine_.full() && !queue_.empty()) {
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    if (job->cancelled()) {
      metrics_.requests_cancelled += 1;
      continue;
    }
    const JobSpec& spec = job->spec();
    BatchSequence sequence;
    sequence.tag = next_tag_++;
    sequence.prompt = spec.prompt;
    sequence.max_new_tokens = spec.max_tokens;
    sequence.sampling = spec.sampling;
    sequence.stop_at_eos = !spec.ignore_eos;
    sequence.stop_ids = spec.stop_ids;
    try {
      engine_.admit(std::move(sequence));
    } catch (const std::bad_alloc&) {
      const size_t capacity = kv_capacity_for(spec.prompt.size(), spec.max_tokens, options_.ctx);
      job->publish("", {}, 0, std::string("error"),
                   ApiError(503, "no memory for a KV cache of " + std::to_string(capacity) + " tokens"));
      continue;
    } catch (const std::exception& e) {  // e.g. a device allocation refused: this request fails, not the server
      job->publish("", {}, 0, std::string("error"), ApiError(500, e.what(), "server_error"));
      continue;
    }
    Slot s;
    s.job = job;
    s.tag = next_tag_ - 1;
    // The decoder sees the prompt first, so the first new token decodes in context (as endor-infer).
    s.decoder = std::make_unique<StreamingDecoder>(tokenizer_, /*skip_special_tokens=*/true);
    s.decoder->follow(spec.prompt);
    s.stops = std::make_unique<StopStrings>(spec.stop);
    metrics_.prompt_tokens += spec.prompt.size();
    slots.push_back(std::move(s));
  }
  metrics_.queue_length = queue_.size();
}

size_t Scheduler::drop_cancelled(std::vector<Slot>& slots) {
  const auto gone = std::remove_if(slots.begin(), slots.end(), [&](const Slot& s) {
    if (!s.job->cancelled()) return false;
    engine_.release(s.tag);
    return true;
  });
  const size_t n = size_t(slots.end() - gone);
  slots.erase(gone, slots.end());
  return n;
}

void Scheduler::publish_gauges(const std::vector<Slot>& slots) {
  metrics_.active_slots = slots.size();
  metrics_.kv_bytes = engine_.kv_bytes();
}

// What a step tells one job; published once the step's gauges are updated, so a client that has
// its last token already sees its slot free in /metrics.
struct Scheduler::Publication {
  std::shared_ptr<Job> job;
  std::string text;
  std::vector<int32_t> ids;
  size_t n_generated = 0;
  std::optional<std::string> finish;
  std::optional<ApiError> error;
};

Scheduler::Publication Scheduler::deliver(Slot& s, const BatchToken& token) {
  s.n_generated = token.n_generated;
  Publication p{s.job, "", {token.id}, token.n_generated, std::nullopt, std::nullopt};
  if (token.finish == StopReason::Eos) {
    p.finish = "stop";  // an end token: not part of the text
  } else {
    p.text = s.stops->push(s.decoder->push(token.id));
    if (s.stops->stopped()) {
      p.finish = "stop";
      if (!token.finish) engine_.release(s.tag);  // the engine would have gone on
    } else if (token.finish) {
      p.finish = "length";  // max_tokens or the context's end
    }
  }
  if (p.finish) {
    if (!s.stops->stopped()) p.text += s.stops->push(s.decoder->flush());
    p.text += s.stops->finish();
  }
  return p;
}

void Scheduler::step(std::vector<Slot>& slots) {
  auto slot_of = [&](size_t tag) {
    return std::find_if(slots.begin(), slots.end(), [&](const Slot& s) { return s.tag == tag; });
  };
  const BatchStepResult r = engine_.step();
  std::vector<Publication> out;
  size_t n_finished = 0;
  if (r.error) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(r.error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    for (size_t tag : r.failed) {
      auto s = slot_of(tag);
      out.push_back({s->job, "", {}, s->n_generated, std::string("error"), ApiError(500, what, "server_error")});
      slots.erase(s);
    }
  }
  for (const BatchToken& token : r.tokens) {
    auto s = slot_of(token.tag);
    out.push_back(deliver(*s, token));
    if (!out.back().finish) continue;
    slots.erase(s);
    ++n_finished;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!r.error) {
      metrics_.generated_tokens += r.tokens.size();
      metrics_.steps += 1;
      metrics_.requests_finished += n_finished;
      const Clock::time_point now = Clock::now();
      recent_.emplace_back(now, r.tokens.size());
      while (!recent_.empty() && now - recent_.front().first > std::chrono::seconds(10)) recent_.pop_front();
    }
    publish_gauges(slots);
  }
  for (const Publication& p : out) p.job->publish(p.text, p.ids, p.n_generated, p.finish, p.error);
}

}  // namespace endor::serve
