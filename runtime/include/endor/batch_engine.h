// Continuous batching over Model::forward_batch: the one engine that endor-infer's throughput mode
// (generate_batch, --prompts/--batch) and endor-serve's scheduler (runtime/server) drive.
//
// A front end admits sequences while a slot is free and calls step(). A step is one pass over the
// blocks for every sequence it runs (so a block streamed from disk or host memory is read once a
// step whatever the number of sequences): the decoding sequences first, each feeding back its last
// token (their single tokens share one Linear call), then the prompts that are still being
// prefilled, in the order they were admitted, in chunks that together take at most
// `prefill_chunk` tokens; a prompt past that budget waits for the next step. A sequence whose
// prompt is complete samples one token per step and leaves the engine when it is done: at
// max_new_tokens, at an end token (when asked), or when its cache is full.
//
// The engine owns each sequence's KV cache (kv_capacity_for's rows, freed when it leaves) and its
// Sampler; it knows nothing of text, clients or output order, which stay the front ends'.
// With a prefill budget larger than the prompts of one admission round (generate_batch's
// default), every prompt is prefilled whole in the step it joins.
//
// Thread safety: one thread at a time (the Model's, runtime.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "endor/runtime.h"

namespace endor {

struct BatchEngineOptions {
  size_t max_sequences = 8;  // slots: sequences admitted at once (>= 1)
  size_t ctx = 0;            // tokens one sequence may hold, prompt and generated (0 = the model's context;
                             // larger values are clamped to it)
  size_t prefill_chunk = std::numeric_limits<size_t>::max();  // prompt tokens per step, all prompts together (>= 1)
};

// What a front end asks of one sequence.
struct BatchSequence {
  size_t tag = 0;                  // the front end's name for it, unique among the admitted sequences
  std::vector<int32_t> prompt;     // 1 <= size <= ctx
  size_t max_new_tokens = 16;      // 0 counts as 1: a sequence whose prompt is complete samples a token
  SamplerOptions sampling;
  bool stop_at_eos = true;         // the model's EOS ids and stop_ids end the sequence
  std::vector<int32_t> stop_ids;   // more end tokens (a chat template's end of turn, a request's stop ids)
};

// One token a step sampled.
struct BatchToken {
  size_t tag = 0;
  int32_t id = 0;
  size_t n_generated = 0;             // the sequence's tokens so far, this one included
  std::optional<StopReason> finish;   // set when the sequence ended with this token (and has left the engine)
};

struct BatchStepResult {
  std::vector<BatchToken> tokens;  // in the order the step ran the sequences
  bool decode_only = false;        // no prompt was prefilled in this step
  // When forward_batch threw: the tags of the sequences the step ran (removed from the engine; the
  // sequences that waited for prefill budget stay) and the exception. tokens is then empty.
  std::vector<size_t> failed;
  std::exception_ptr error;
};

struct BatchEngineStats {
  size_t n_steps = 0;         // forward_batch calls that returned
  size_t n_generated = 0;     // tokens sampled
  size_t max_active = 0;      // most sequences admitted at one step
  size_t n_decode_steps = 0;  // steps in which no prompt was prefilled
  double decode_ms = 0;       // their wall time (forward_batch and sampling)
};

class BatchEngine {
 public:
  // The model must outlive the engine. Throws Error when max_sequences or prefill_chunk is 0.
  BatchEngine(Model& model, BatchEngineOptions options);
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  const BatchEngineOptions& options() const { return options_; }  // ctx resolved
  size_t size() const { return active_.size(); }
  bool empty() const { return active_.empty(); }
  bool full() const { return active_.size() >= options_.max_sequences; }

  // Admits a sequence; it runs from the next step. Throws Error (nothing admitted) when the engine is
  // full, the tag is already admitted, or the prompt is empty or longer than ctx; std::bad_alloc (or
  // the backend's allocation error) when its KV cache cannot be allocated.
  void admit(BatchSequence sequence);
  // Removes a sequence (a client gone, a stop string the front end found); false when it is not here.
  bool release(size_t tag);
  // KV cache bytes of the admitted sequences (kv_cache_bytes of each cache).
  uint64_t kv_bytes() const;

  // One forward_batch over the sequences as described above, and a token for every sequence whose
  // prompt is complete. With no sequence admitted it does nothing. An exception of forward_batch is
  // returned in the result (see BatchStepResult), not thrown: the front end decides who hears of it.
  BatchStepResult step();
  const BatchEngineStats& stats() const { return stats_; }

 private:
  struct Sequence {
    BatchSequence spec;
    std::unique_ptr<KvCache> cache;
    std::unique_ptr<Sampler> sampler;
    size_t prefilled = 0;     // prompt tokens in the cache
    size_t n_generated = 0;
    int32_t last = 0;         // the last sampled token, fed back by the next step
    size_t step_tokens = 0;   // tokens it runs in the current step
    bool done = false;
    bool decoding() const { return prefilled == spec.prompt.size(); }
  };
  // Fills steps_/in_step_ for this step; returns whether a prompt chunk is among them.
  bool plan_step();
  std::optional<StopReason> finish_after(const Sequence& s) const;

  Model& model_;
  BatchEngineOptions options_;
  std::vector<Sequence> active_;  // in admission order, decoding ones moved first at each step
  std::vector<Model::SequenceStep> steps_;
  std::vector<size_t> in_step_;   // active_ indices of steps_
  std::vector<float> logits_;
  BatchEngineStats stats_;
};

}  // namespace endor
