// What every architecture's Model shares, written once: the forward loop over decoder blocks
// (with the per-layer profile of --stats), the block-level calls of the calibration driver
// (embed / forward_block / head), and Linear replacement. An architecture (runtime/models/*.cpp)
// supplies its embedding, one decoder block, its head and the table of its block's Linears.
#pragma once

#include <string>
#include <vector>

#include "weights.h"

namespace endor {

class BlockModel : public Model {
 public:
  void forward(const int32_t* ids, size_t n, KvCache& cache, bool all_logits,
               std::vector<float>& logits) final;
  void embed(const int32_t* ids, size_t n, float* hidden_out) final;
  void forward_block(uint32_t layer, float* hidden, size_t n, const LinearInputHook& hook) final;
  void head(const float* hidden, size_t n, std::vector<float>& logits) final;
  void replace_block_weight(uint32_t layer, const std::string& linear, const TensorView& view) final;
  std::vector<std::string> block_linear_names() const final;

 protected:
  BlockModel(const ModelConfig& config, const ContainerReader& container, Backend& backend,
             WeightProvider* provider);

  // One Linear of a block: its canonical name, where the model keeps it, and its [rows, cols].
  struct LinearSlot {
    const char* name;
    const Weight** weight;
    uint64_t rows, cols;
  };

  // ---- what an architecture implements ----
  // ids[0..n) at positions [n_past, n_past + n) -> the residual stream x [n, hidden] (backend).
  virtual void run_embed(const int32_t* ids, size_t n, size_t n_past, float* x) = 0;
  // Block l on the residual stream x [n, hidden] (backend), writing key/value rows
  // [n_past, n_past + n) of k_cache/v_cache [.., kv_dim()]. May leave the result in another
  // buffer and repoint x (OPT's post-LN blocks alternate two buffers).
  virtual void run_block(uint32_t l, float*& x, size_t n, size_t n_past, float* k_cache, float* v_cache,
                         const LinearInputHook* hook) = 0;
  // x [rows, hidden] (backend) -> logits [rows, vocab] (host). x may be any scratch buffer.
  virtual void run_head(const float* x, size_t rows, std::vector<float>& logits) = 0;
  // The Linears of block `layer`, in execution order.
  virtual std::vector<LinearSlot> linear_slots(uint32_t layer) = 0;
  virtual size_t kv_dim() const = 0;          // width of one key/value row
  virtual const char* arch_name() const = 0;  // "Llama", "OPT" (error messages)
  // Checkpoint name prefix of block `layer`'s tensors ("layers.3.", "decoder.layers.3.").
  virtual std::string block_prefix(uint32_t layer) const = 0;

  // Scratch slots below kFirstArchSlot belong to this class; architectures number theirs from it.
  enum BaseSlot : size_t { kX, kBlockK, kBlockV, kFirstArchSlot };
  WeightStore store_;
  ScratchBuffers scratch_;
  BlockHookCaller hook_caller_{backend_};

 private:
  std::vector<std::unique_ptr<Weight>> replaced_;  // weights given by replace_block_weight
};

}  // namespace endor
