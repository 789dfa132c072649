// The Endor runtime (libendor): open a .endor container, place its weights on a Backend, run the
// OPT / Llama-family forward pass with a KV cache, sample, measure perplexity.
//
// Errors: everything here reports bad input (unknown architecture, missing tensor, shape that
// disagrees with config.json, prompt longer than the context, ...) by throwing endor::Error
// whose what() is one line naming the file and what is wrong. Nothing here calls exit().
// Thread safety: a Model, its KvCaches and its Backend are used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "endor/format.h"
#include "endor/kernels.h"
#include "endor/model_registry.h"

namespace endor {

// ---- model configuration (from the container's config.json) ----------------------------------
// ModelConfig and parse_model_config live in the model registry (endor/model_registry.h), which the
// packer shares: one parser of config.json, one list of every family's tensors.

// ---- backend choice ---------------------------------------------------------------------------
// device: "cpu", "cuda" or "auto" (auto = cuda when available, else cpu). n_threads (CPU only):
// 0 = omp_get_max_threads() (every core). exact (CPU only): f32 activations for every weight, instead
// of the default int8 activations (int8/int8g/int4 weights) and f16 activations (f16/bf16 weights;
// cpu::Options::exact). The CUDA backend ignores it: its fused kernels (up to 8 tokens) multiply f32
// activations, its decode-then-GEMM path rounds them to the weight's 16-bit type. Throws when
// the device is unknown or absent.
// batch_invariant (CPU; cpu::Options::batch_invariant): each row computed as it is alone, so a
// sequence's results do not depend on what is batched with it, on its prompt's chunking or on
// n_threads. endor-infer and endor-serve turn it on (their --no-batch-invariance off); off here, the
// fast path, for the packer's calibration and other library callers that run one sequence.
std::unique_ptr<Backend> make_backend(const std::string& device, int n_threads, bool exact = false,
                                      bool batch_invariant = false);
// Devices make_backend can open here: {"cpu"}, plus "cuda" when built with CUDA and a device exists.
std::vector<std::string> available_devices();

// ---- KV cache -----------------------------------------------------------------------------------
// How cached keys/values are stored: f32, or IEEE half (half the memory; the backend must
// report supports_f16_kv(), which only the CPU backend does; attention widens them back to f32).
enum class KvDtype : uint8_t { F32, F16 };
const char* to_string(KvDtype);
KvDtype parse_kv_dtype(const std::string& s);  // "f32" | "f16", else throws endor::Error
inline uint64_t kv_value_bytes(KvDtype d) { return d == KvDtype::F16 ? 2 : 4; }
// The KV-bytes formula, the one every budget and gauge uses (placement, endor-serve's kv_bytes):
// keys and values of `capacity` tokens in each of `n_layers` layers, kv_dim = n_kv_heads · head_dim
// values a token, 2 · n_layers · capacity · kv_dim · kv_value_bytes(dtype). Saturates at
// UINT64_MAX rather than wrapping, so an absurd request reads as too large for any budget.
inline uint64_t kv_cache_bytes(uint32_t n_layers, uint64_t capacity, uint64_t kv_dim, KvDtype dtype) {
  uint64_t bytes = 2 * uint64_t(n_layers);
  for (uint64_t factor : {capacity, kv_dim, kv_value_bytes(dtype)}) {
    if (factor != 0 && bytes > UINT64_MAX / factor) return UINT64_MAX;
    bytes *= factor;
  }
  return bytes;
}

// Per layer, keys and values [capacity, n_kv_heads, head_dim] in backend memory; rows [0, n_past)
// are valid. Memory: kv_cache_bytes(n_layers, capacity, n_kv_heads · head_dim, dtype), bytes().
// keys()/values() are the f32 arrays (null when dtype is F16); keys16()/values16() the half ones.
class KvCache {
 public:
  KvCache(Backend& backend, uint32_t n_layers, size_t capacity, uint32_t kv_dim, KvDtype dtype = KvDtype::F32);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  size_t capacity() const { return capacity_; }
  size_t n_past() const { return n_past_; }
  uint32_t kv_dim() const { return kv_dim_; }  // n_kv_heads · head_dim floats per row
  KvDtype dtype() const { return dtype_; }
  uint64_t bytes() const { return kv_cache_bytes(uint32_t(keys_.size()), capacity_, kv_dim_, dtype_); }
  float* keys(uint32_t layer) { return dtype_ == KvDtype::F32 ? keys_[layer] : nullptr; }
  float* values(uint32_t layer) { return dtype_ == KvDtype::F32 ? values_[layer] : nullptr; }
  uint16_t* keys16(uint32_t layer) { return dtype_ == KvDtype::F16 ? reinterpret_cast<uint16_t*>(keys_[layer]) : nullptr; }
  uint16_t* values16(uint32_t layer) {
    return dtype_ == KvDtype::F16 ? reinterpret_cast<uint16_t*>(values_[layer]) : nullptr;
  }
  void advance(size_t n_tokens) { n_past_ += n_tokens; }  // called by Model::forward
  void clear() { n_past_ = 0; }                            // rows need no zeroing
  // Keeps rows [0, n) and drops the rest (n <= n_past), e.g. where a chat's re-tokenized history
  // stops matching what the cache holds.
  void truncate(size_t n) { n_past_ = n < n_past_ ? n : n_past_; }

 private:
  Backend& backend_;
  size_t capacity_ = 0, n_past_ = 0;
  uint32_t kv_dim_ = 0;
  KvDtype dtype_ = KvDtype::F32;
  std::vector<float*> keys_, values_;  // backend allocations (holding halves when dtype_ is F16)
};

// ---- weight residency -----------------------------------------------------------------------------
// Where a decoder block's weights are when it runs. Without a provider every matrix is prepared
// once on the backend (CPU: a view into the mapping; CUDA: a device-resident compressed copy).
// runtime/offload's streaming provider keeps some blocks off the device and brings each one in
// ahead of use. The model calls prepare() once per matrix at load (group = the tensor's manifest
// group), and around every decoder block: acquire(group) before the block's first operation is
// queued on the backend and release(group) after its last one is queued. On an asynchronous
// backend (CUDA) the work may still be running after release(): the provider orders any reuse of
// the block's memory after it (events), not the model.
class WeightProvider {
 public:
  virtual ~WeightProvider() = default;
  virtual std::unique_ptr<Weight> prepare(Backend& backend, const TensorView& view, uint32_t group) = 0;
  virtual void acquire(uint32_t group) = 0;
  virtual void release(uint32_t group) = 0;
  // MoE experts in groups of their own ("layers.N.experts.E", SPEC.md §4.2), inside their block's
  // acquire/release. expect_experts: the expert groups a routed MLP is about to run, in the order it
  // runs them (the provider may start reading them). use_expert: before expert `group`'s Linears are
  // queued, with the Weights prepare() returned for its tensors; the provider may replace each by a
  // Weight reading the same tensor elsewhere (a cache slot), valid until the next use_expert or the
  // block's release. Defaults: nothing to read, the prepared Weights are used.
  virtual void expect_experts(const uint32_t* groups, size_t n) {
    (void)groups;
    (void)n;
  }
  virtual void use_expert(uint32_t group, const Weight** weights, size_t n) {
    (void)group;
    (void)weights;
    (void)n;
  }
  // Expert prefetch: whether the provider wants a guess at the experts of the block whose group is
  // `next_block` (its router must be usable now: the group resident), and the guess itself, made on
  // the current block's MLP input after its own expect_experts (the provider may read them ahead; a
  // wrong guess costs reads, never results). Defaults: no prefetch.
  virtual bool wants_expert_prefetch(uint32_t next_block) const {
    (void)next_block;
    return false;
  }
  virtual void prefetch_experts(const uint32_t* groups, size_t n) {
    (void)groups;
    (void)n;
  }
};

// ---- model --------------------------------------------------------------------------------------
class Sampler;

// Wall time and weight traffic of the forward passes since the last reset (profiling only:
// per-layer times need a backend synchronize per layer, so they are off by default).
struct ForwardProfile {
  std::vector<double> layer_ms;  // [n_layers] summed over calls
  double head_ms = 0;            // embedding + final norm + lm_head
  uint64_t n_calls = 0;
};

// One architecture's forward pass over Backend ops. Weights stay in the mapped container (CPU) and
// are grouped per transformer block by manifest group, so a streaming placement can swap a
// block's weights in before it runs.
class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }

  // A cache able to hold `capacity` tokens (clamped to the context length), of kv_dtype().
  std::unique_ptr<KvCache> make_cache(size_t capacity);
  // The storage of the caches make_cache returns from now on (default F32). Throws endor::Error
  // when the backend cannot attend over it.
  void set_kv_dtype(KvDtype dtype);
  KvDtype kv_dtype() const { return kv_dtype_; }

  // Runs tokens ids[0..n) at positions [cache.n_past(), +n) and appends their keys/values.
  // logits (host): all_logits ? [n, vocab] : [1, vocab] (the last token's). Throws when the
  // positions pass the context length or the cache capacity, or an id is outside the vocab.
  virtual void forward(const int32_t* ids, size_t n, KvCache& cache, bool all_logits,
                       std::vector<float>& logits) = 0;
  // forward() of ids[0..n), then the next token: sampler.sample_on() of the last token's logits
  // where the backend holds them (a CUDA device picks it; only the id comes back). The same id
  // and the same draws as sampler.sample() of forward()'s logits. Throws as forward() does.
  virtual int32_t forward_next(const int32_t* ids, size_t n, KvCache& cache, Sampler& sampler) = 0;

  // Several sequences' new tokens in one pass over the blocks (FlexGen's block-major order: each
  // block is acquired once and applied to every sequence before the next block). steps[s] runs
  // ids[0..n) at positions [cache.n_past(), +n) of its own cache and appends their keys/values;
  // sequences may have different lengths and mix prompts (n > 1) with decode steps (n = 1).
  // Single-token steps that follow each other share one Linear call (the kernel path for their
  // count); other steps join a call only while it stays within the fused kernels' 8 tokens (where a
  // row's result does not depend on the others), else run as their own call, so a prompt's results
  // equal forward() of that prompt alone. logits (host): [n_steps, vocab], each sequence's last token's. Throws as forward()
  // does (naming the first bad step), when no step is given, or when two steps share a cache.
  struct SequenceStep {
    const int32_t* ids = nullptr;
    size_t n = 0;
    KvCache* cache = nullptr;
  };
  virtual void forward_batch(const SequenceStep* steps, size_t n_steps, std::vector<float>& logits) = 0;

  // Weight bytes one decoded token reads: every block's weights and biases, the final norm, the
  // lm_head, and one embedding (and position) row; encoded bytes, or for a matrix the backend reads
  // from a copy of its own (the CPU's int4 codes, Weight::copy_bytes) that copy and its parameters.
  uint64_t decode_bytes_per_token() const { return decode_bytes_per_token_; }

  // ---- block-level access (the calibration driver of endor-pack runs the model with these) -----
  // The same block code as forward() (one implementation); positions are [0, n), no cache carried.
  // Linear names are canonical per block: Llama "self_attn.{q,k,v,o}_proj", "mlp.{gate,up,down}_proj";
  // OPT "self_attn.{q,k,v,out}_proj", "fc1", "fc2".
  // The hook sees every Linear's input x [n, in] (host memory) BEFORE the Linear runs; Linears
  // sharing one input (q/k/v, gate/up) are each reported with the same x.
  using LinearInputHook = std::function<void(uint32_t layer, const std::string& linear,
                                             const float* x, size_t n, size_t in)>;
  // ids[0..n) -> hidden [n, hidden] (host): token (+ position) embeddings, OPT project_in.
  virtual void embed(const int32_t* ids, size_t n, float* hidden_out) = 0;
  // Runs decoder block `layer` on hidden [n, hidden] (host) in place; hook may be empty.
  virtual void forward_block(uint32_t layer, float* hidden, size_t n, const LinearInputHook& hook) = 0;
  // Final norm (+ OPT project_out) and lm_head: hidden [n, hidden] (host) -> logits [n, vocab].
  virtual void head(const float* hidden, size_t n, std::vector<float>& logits) = 0;
  // Uses `view` (shape [out, in] of that Linear; must outlive the model) for Linear `linear` of
  // block `layer` from now on, in forward() and forward_block(). Throws on an unknown name/shape.
  virtual void replace_block_weight(uint32_t layer, const std::string& linear, const TensorView& view) = 0;
  // The canonical Linear names of one block, in execution order.
  virtual std::vector<std::string> block_linear_names() const = 0;

  void set_profiling(bool on);
  const ForwardProfile& profile() const { return profile_; }
  void reset_profile();

 protected:
  Model(ModelConfig config, Backend& backend) : config_(std::move(config)), backend_(backend) {}
  ModelConfig config_;
  Backend& backend_;
  uint64_t decode_bytes_per_token_ = 0;
  KvDtype kv_dtype_ = KvDtype::F32;
  bool profiling_ = false;
  ForwardProfile profile_;
};

// Reads config.json from the container, checks every tensor the architecture needs (present,
// shape agreeing with the config) and prepares them on `backend`. The reader and the backend
// must outlive the model.
std::unique_ptr<Model> load_model(const ContainerReader& container, Backend& backend);
// The same with block weights placed by `weights` (may be null: everything resident); the
// provider must outlive the model.
std::unique_ptr<Model> load_model(const ContainerReader& container, Backend& backend, WeightProvider* weights);

// ---- sampling ---------------------------------------------------------------------------------
struct SamplerOptions {
  float temperature = 0.0f;  // 0 = greedy argmax (ties -> lowest id)
  uint32_t top_k = 0;        // 0 = off
  float top_p = 1.0f;        // 1 = off; else keep the smallest prefix of the sorted distribution
                             // whose probability mass reaches top_p
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  // logits [vocab] (host) -> token id: sample_logits (endor/kernels.h) with the next draw of the
  // seeded generator (none when greedy). Candidates are ordered by (logit desc, id asc), so
  // top_k = 1 equals greedy. Deterministic for a given seed and call sequence.
  int32_t sample(const float* logits, size_t vocab);
  // The same pick from logits in `backend`'s memory (Backend::sample: on a CUDA device only the id
  // comes back): the same id as sample() of those logits, and the same draws.
  int32_t sample_on(Backend& backend, const float* backend_logits, size_t vocab);
  const SamplerOptions& options() const { return options_; }

 private:
  SamplingParams params() const;
  double draw();  // u in [0, 1), or 0 without consuming the generator when greedy

  SamplerOptions options_;
  std::mt19937_64 rng_;
  SamplingScratch scratch_;
};

// The sampler settings transformers' generate() would use for this generation_config.json
// (do_sample false or absent -> greedy); `seed` is passed through.
SamplerOptions default_sampler_options(const nlohmann::json& generation_config, uint64_t seed);

// ---- generation ---------------------------------------------------------------------------------
enum class StopReason { MaxTokens, Eos, Context };

// The cache-size rule of every generating path (generate, the batch engine both front ends drive,
// endor-infer's placement sizing): a sequence of `prompt_tokens` that may generate
// `max_new_tokens` (0 counts as 1: a step always samples) holds the prompt and every generated
// token but the last, which is never fed back, and never more than `ctx` tokens.
inline size_t kv_capacity_for(size_t prompt_tokens, size_t max_new_tokens, size_t ctx) {
  const size_t n_fed = max_new_tokens > 0 ? max_new_tokens - 1 : 0;  // generated tokens fed back
  return prompt_tokens < ctx && n_fed < ctx - prompt_tokens ? prompt_tokens + n_fed : ctx;
}

struct GenerationStats {
  StopReason stop = StopReason::MaxTokens;
  size_t n_prompt = 0, n_generated = 0;
  size_t n_decode_steps = 0;             // forward passes of one token (n_generated - 1 or fewer)
  double prefill_ms = 0, decode_ms = 0;  // prefill: forward + first sample; decode: the steps
  double prefill_tokens_per_s() const { return prefill_ms > 0 ? n_prompt * 1e3 / prefill_ms : 0; }
  double decode_tokens_per_s() const;    // over the decode steps (the first token comes from prefill)
};

struct GenerationOptions {
  size_t max_new_tokens = 64;
  bool stop_at_eos = true;  // stop after emitting one of config.eos_token_ids or stop_ids
  std::vector<int32_t> stop_ids;  // more end tokens, e.g. a chat template's end of turn (<|im_end|>)
  // Called with the prompt's logits [n_prompt, vocab] when set (prefill then computes all rows).
  std::function<void(const std::vector<float>&, size_t n_prompt)> on_prompt_logits;
};

// Prefills `prompt` into a fresh cache, then samples up to max_new_tokens, calling on_token with
// each new id as soon as it is chosen. Stops early at EOS (when asked) or at the context end.
// The model's profile is reset after prefill, so afterwards it covers the decode steps only.
// Throws when the prompt is empty or longer than the context.
std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, Sampler& sampler,
                              const GenerationOptions& options,
                              const std::function<void(int32_t)>& on_token,
                              GenerationStats* stats = nullptr);

// The same continuing in `cache`: `prompt` (new tokens, at least one) is prefilled at positions
// [cache.n_past(), +prompt.size()), then tokens are sampled as above. Afterwards the cache holds the
// prompt and every emitted token but the last (which was never fed back). Throws when the prompt is
// empty or does not fit in the cache (capacity and context length).
std::vector<int32_t> generate_in_cache(Model& model, KvCache& cache, const std::vector<int32_t>& prompt,
                                       Sampler& sampler, const GenerationOptions& options,
                                       const std::function<void(int32_t)>& on_token,
                                       GenerationStats* stats = nullptr);

// ---- batched generation (throughput mode) ----------------------------------------------------------
struct BatchGenerationOptions {
  size_t batch = 8;          // sequences run together (>= 1)
  size_t max_new_tokens = 64;
  bool stop_at_eos = true;
};

struct BatchGenerationStats {
  size_t n_prompts = 0, n_prompt_tokens = 0, n_generated = 0;
  size_t n_steps = 0;        // forward_batch calls (each one pass over the blocks)
  size_t max_active = 0;     // most sequences in one step
  double total_ms = 0;       // wall time of all steps and sampling
  size_t n_decode_steps = 0; // steps where no prompt joined (every sequence decoded one token)
  double decode_ms = 0;      // their wall time (forward + sampling)
  double generated_tokens_per_s() const { return total_ms > 0 ? n_generated * 1e3 / total_ms : 0; }
};

// Generates up to max_new_tokens for every prompt, running up to `batch` sequences together: each
// step is one Model::forward_batch over the active sequences (a prompt that joins is prefilled in
// the step it joins; the others decode one token). It is endor-infer --prompts' driver of
// BatchEngine (endor/batch_engine.h), the engine endor-serve drives too. A sequence leaves the
// batch when it is done (max_new_tokens, EOS when asked, or the context end) and the next prompt
// joins in the next step. Each sequence has its own KV cache (kv_capacity_for's rows, freed when
// it leaves) and its own Sampler (`sampling` with seed + prompt index), so with greedy sampling
// the ids equal generate() of each prompt alone. on_done (optional) is called with the prompt's
// index and its ids when it leaves; the result is in prompt order. Throws before any compute when
// a prompt is empty or longer than the context, or batch is 0.
std::vector<std::vector<int32_t>> generate_batch(
    Model& model, const std::vector<std::vector<int32_t>>& prompts, const SamplerOptions& sampling,
    const BatchGenerationOptions& options,
    const std::function<void(size_t index, const std::vector<int32_t>& ids)>& on_done = {},
    BatchGenerationStats* stats = nullptr);

// ---- perplexity (docs/algorithms.md "Perplexity", the Wanda/SparseGPT convention) ----------------
struct PerplexityResult {
  double perplexity = 0;
  double mean_nll = 0;       // mean over windows of each window's mean cross-entropy (nats)
  size_t n_windows = 0;
  size_t window = 0;
  std::vector<double> window_nll;  // [n_windows] each window's mean cross-entropy (nats)
};
// Cuts ids into non-overlapping windows of `window` tokens (tail dropped), no cache across
// windows; per window the mean cross-entropy of logits[:-1] vs ids[1:]; ppl = exp(mean over
// windows). Throws when fewer than `window` ids are given, window < 2, or window > the context.
// on_window (optional, for progress reports) is called after each window with (done, n_windows).
PerplexityResult perplexity(Model& model, const std::vector<int32_t>& ids, size_t window,
                            const std::function<void(size_t done, size_t n_windows)>& on_window = {});

// ---- files --------------------------------------------------------------------------------------
// Writes a float32 .npy of shape [rows, cols] to "<path>.tmp-<pid>" then renames it to path.
void write_npy_f32(const std::string& path, const float* data, size_t rows, size_t cols);

}  // namespace endor
