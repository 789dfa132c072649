// endor-serve's continuous batching: one thread drives the runtime's BatchEngine
// (endor/batch_engine.h, the engine endor-infer --prompts drives too) over up to `parallel` slots.
// A request joins at the next step and leaves when done; long prompts are prefilled in chunks of at
// most `prefill_chunk` tokens a step (all prompts together), so decoding slots keep getting a token
// every step; beyond the slots requests wait in a bounded queue (then 429). Each step is one pass
// over the blocks for every active slot, so a block streamed from disk or host memory is read once
// a step whatever the number of slots. What the engine does not know stays here: the queue, the
// text (streaming decoder, stop strings), finish reasons as OpenAI names them, metrics.
//
// Thread safety: submit(), cancel through a Job, metrics() and shutdown() may be called from any
// thread; the Model, its backend and the tokenizer's decoding are used by the scheduler's thread
// only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "endor/batch_engine.h"
#include "endor/runtime.h"
#include "endor/serve_request.h"
#include "endor/tokenizer.h"

namespace endor::serve {

struct SchedulerOptions {
  size_t parallel = 4;        // slots: sequences run in one step
  size_t queue = 64;          // requests waiting for a slot; one more is refused with 429
  size_t ctx = 4096;          // tokens a sequence may hold (prompt + generated); <= the model's context
  size_t prefill_chunk = 256; // prompt tokens prefilled in one step, over all joining prompts
};

// What a request asks the scheduler to generate (the HTTP layer has tokenized and checked it).
struct JobSpec {
  std::vector<int32_t> prompt;       // 1 <= size <= ctx
  size_t max_tokens = 16;            // generated tokens at most (clamped at the context end)
  SamplerOptions sampling;
  std::vector<int32_t> stop_ids;     // besides the model's EOS ids; not part of the text
  std::vector<std::string> stop;     // stop strings (the text is cut before them)
  bool ignore_eos = false;           // EOS and stop_ids do not end it (benchmarks)
};

// A request's progress, shared by the scheduler (writer) and the HTTP thread answering it.
class Job {
 public:
  explicit Job(JobSpec spec) : spec_(std::move(spec)) {}
  const JobSpec& spec() const { return spec_; }

  struct Update {
    std::string text;                        // new text since the last take()
    std::vector<int32_t> ids;                // new token ids since the last take() (stop ids included)
    size_t n_generated = 0;                  // tokens generated so far
    std::optional<std::string> finish;       // "stop", "length", "abort" once done
    std::optional<ApiError> error;           // set when the request failed (then finish is set too)
  };
  // Waits up to `timeout` for new text or the end, then takes what came.
  Update take(std::chrono::milliseconds timeout);
  // The client is gone (or timed out): the scheduler frees the slot at its next step.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  // Time of the first generated token, for the TTFT the HTTP layer may report.
  size_t n_prompt() const { return spec_.prompt.size(); }

 private:
  friend class Scheduler;
  void publish(const std::string& text, const std::vector<int32_t>& ids, size_t n_generated,
               const std::optional<std::string>& finish, const std::optional<ApiError>& error = std::nullopt);

  JobSpec spec_;
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string pending_;
  std::vector<int32_t> pending_ids_;
  size_t n_generated_ = 0;
  std::optional<std::string> finish_;
  std::optional<ApiError> error_;
};

// Gauges and counters for /metrics.
struct SchedulerMetrics {
  size_t queue_length = 0, active_slots = 0, parallel = 0;
  uint64_t kv_bytes = 0;                 // KV caches of the active slots
  uint64_t prompt_tokens = 0, generated_tokens = 0, steps = 0;
  uint64_t requests_finished = 0, requests_cancelled = 0;
  double generated_tokens_per_s = 0;     // over the last 10 s
};

class Scheduler {
 public:
  // model and tokenizer must outlive the scheduler. The thread starts here.
  Scheduler(Model& model, const Tokenizer& tokenizer, SchedulerOptions options);
  ~Scheduler();  // shutdown() and join
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job. Throws ApiError 429 when the queue is full, 503 after shutdown().
  std::shared_ptr<Job> submit(JobSpec spec);
  // Ends every active and queued job with finish "abort" (their streams get a final chunk), refuses
  // new ones, and stops the thread after the step in flight.
  void shutdown();
  SchedulerMetrics metrics() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Slot;
  void run();
  // Moves queued jobs into free slots (engine admissions); under mutex_.
  void admit_queued(std::vector<Slot>& slots);
  // Releases the slots whose clients are gone; returns how many.
  size_t drop_cancelled(std::vector<Slot>& slots);
  // One engine step; the jobs hear of it after the gauges are updated.
  void step(std::vector<Slot>& slots);
  struct Publication;
  // A sampled token's text and finish reason (a finish set: the slot is done).
  Publication deliver(Slot& slot, const BatchToken& token);
  void publish_gauges(const std::vector<Slot>& slots);  // under mutex_

  Model& model_;
  const Tokenizer& tokenizer_;
  SchedulerOptions options_;
  BatchEngine engine_;        // used by the scheduler's thread only
  size_t next_tag_ = 0;       // the engine's name of the next admitted job
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  SchedulerMetrics metrics_;  // under mutex_
  std::deque<std::pair<std::chrono::steady_clock::time_point, size_t>> recent_;  // (step end, tokens)
  std::thread thread_;
};

}  // namespace endor::serve
