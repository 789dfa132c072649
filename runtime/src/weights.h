// Private to the runtime: placement of a container's tensors on a Backend, and reusable
// activation buffers. The model files (runtime/models/*.cpp) build their layers from these.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "endor/runtime.h"

namespace endor {

// Tensors looked up by their canonical name (the model registry's TensorSpec), stored with or
// without the "model." prefix. Matrices stay
// encoded (Backend::prepare_weight: on the CPU a view into the mapping); 1-D tensors (norms,
// biases) are decoded to f32 and uploaded. Placed tensors are kept per manifest group (the unit a
// streaming placement moves), and their encoded sizes are recorded.
class WeightStore {
 public:
  // `provider` (may be null) prepares the matrices and is told when each block runs.
  WeightStore(const ContainerReader& container, Backend& backend, WeightProvider* provider = nullptr);
  ~WeightStore();
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  const ContainerReader& container() const { return container_; }
  const std::string& path() const { return container_.path(); }

  // The stored tensor of canonical `name` (as named, else without its "model." prefix); nullptr
  // when neither exists.
  const TensorInfo* find(const std::string& name) const;
  bool has(const std::string& name) const { return find(name) != nullptr; }

  // The matrix of `spec` ([rows, cols] as spec.shape); throws when absent or shaped otherwise.
  const Weight& matrix(const TensorSpec& spec);
  // The [n] vector of `spec` as f32 in backend memory; throws when absent or shaped otherwise.
  float* vector(const TensorSpec& spec);
  // `value` repeated n times in backend memory (e.g. the gamma of a LayerNorm without affine).
  float* constant(float value, uint64_t n);

  // Encoded bytes of the stored tensor (0 when absent) and the manifest group it lives in.
  uint64_t encoded_bytes(const std::string& name) const;
  // What a one-token step reads of a matrix prepared here: its encoded bytes, or where the backend
  // reads a copy of its own instead (Weight::copy_bytes) that copy and the tensor's parameters.
  uint64_t read_bytes(const std::string& name) const;
  uint32_t group_of(const std::string& name) const;

  // Around a decoder block's compute (WeightProvider::acquire/release); no-ops without a provider.
  void acquire(uint32_t group) {
    if (provider_) provider_->acquire(group);
  }
  void release(uint32_t group) {
    if (provider_) provider_->release(group);
  }
  // Around an MoE expert's compute (WeightProvider::expect_experts/use_expert); no-ops without a provider.
  void expect_experts(const uint32_t* groups, size_t n) {
    if (provider_) provider_->expect_experts(groups, n);
  }
  void use_expert(uint32_t group, const Weight** weights, size_t n) {
    if (provider_) provider_->use_expert(group, weights, n);
  }
  bool wants_expert_prefetch(uint32_t next_block) const {
    return provider_ && provider_->wants_expert_prefetch(next_block);
  }
  void prefetch_experts(const uint32_t* groups, size_t n) {
    if (provider_) provider_->prefetch_experts(groups, n);
  }

 private:
  const TensorInfo& require(const std::string& name, const std::vector<uint64_t>& shape) const;
  const ContainerReader& container_;
  Backend& backend_;
  WeightProvider* provider_ = nullptr;
  std::deque<TensorView> views_;  // stable addresses, one per placed matrix
  std::map<uint32_t, std::vector<std::unique_ptr<Weight>>> weights_by_group_;
  std::map<std::string, const Weight*> matrices_;  // by stored name: tied uses share one Weight
  std::vector<float*> buffers_;                    // backend allocations owned here
};

// Holds a decoder block's weights for the scope of its compute (acquire ... release), so the
// forward loops of every architecture bracket a block the same way.
class BlockResidency {
 public:
  BlockResidency(WeightStore& store, uint32_t group) : store_(store), group_(group) { store_.acquire(group_); }
  ~BlockResidency() { store_.release(group_); }
  BlockResidency(const BlockResidency&) = delete;
  BlockResidency& operator=(const BlockResidency&) = delete;

 private:
  WeightStore& store_;
  uint32_t group_;
};

// Activation buffers reused across forward calls; slot i grows to the largest size asked.
class ScratchBuffers {
 public:
  explicit ScratchBuffers(Backend& backend) : backend_(backend) {}
  ~ScratchBuffers();
  ScratchBuffers(const ScratchBuffers&) = delete;
  ScratchBuffers& operator=(const ScratchBuffers&) = delete;
  float* get(size_t slot, size_t n_floats);

 private:
  Backend& backend_;
  std::vector<std::pair<float*, size_t>> slots_;
};

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Shared checks of a forward call: ids inside the vocab, positions inside context and cache.
void check_forward_inputs(const ModelConfig& config, const std::string& path, const int32_t* ids,
                          size_t n, const KvCache& cache);

// Checks of the block-level calls: 0 < n <= context, ids (when given) inside the vocab, and
// layer < n_layers.
void check_block_inputs(const ModelConfig& config, const std::string& path, const int32_t* ids,
                        size_t n, uint32_t layer = 0);

// Block-level plumbing shared by the models (Model::forward_block and friends).
class BlockHookCaller {
 public:
  explicit BlockHookCaller(Backend& backend) : backend_(backend) {}
  // Calls hook(layer, linear, x, n, in) with x [n, in] copied to host memory; no-op without a hook.
  void operator()(const Model::LinearInputHook* hook, uint32_t layer, const char* linear,
                  const float* x, size_t n, size_t in);

 private:
  Backend& backend_;
  std::vector<float> host_;
};

// Checks `view` against the [rows, cols] a Linear needs and prepares it; throws naming `what`.
std::unique_ptr<Weight> prepare_replacement(Backend& backend, const TensorView& view, uint64_t rows,
                                            uint64_t cols, const std::string& what);

std::unique_ptr<Model> make_opt_model(const ModelConfig& config, const ContainerReader& container,
                                      Backend& backend, WeightProvider* provider);
std::unique_ptr<Model> make_llama_model(const ModelConfig& config, const ContainerReader& container,
                                        Backend& backend, WeightProvider* provider);

}  // namespace endor
