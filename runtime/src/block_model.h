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
  int32_t forward_next(const int32_t* ids, size_t n, KvCache& cache, Sampler& sampler) final;
  void forward_batch(const SequenceStep* steps, size_t n_steps, std::vector<float>& logits) final;
  void embed(const int32_t* ids, size_t n, float* hidden_out) final;
  void forward_block(uint32_t layer, float* hidden, size_t n, const LinearInputHook& hook) final;
  void head(const float* hidden, size_t n, std::vector<float>& logits) final;
  void replace_block_weight(uint32_t layer, const std::string& linear, const TensorView& view) final;
  std::vector<std::string> block_linear_names() const final;

 protected:
  BlockModel(const ModelConfig& config, const ContainerReader& container, Backend& backend,
             WeightProvider* provider);


  // The rows of one call of the blocks. Each sequence owns a contiguous range of rows of the
  // activations [n, hidden] and its own KV cache (attention, positions and cache rows are per
  // sequence); Linears run once per entry of linear_calls, a range of rows that shares one kernel
  // call (a batch's single-token rows together; each prompt alone, so its rows take the kernel
  // path they take when the prompt runs alone, and its results are the same).
  struct SequenceRows {
    size_t row = 0, n = 0, n_past = 0;
    float* k_cache = nullptr;  // [capacity, kv_dim] of this block (set per block), f32 caches
    float* v_cache = nullptr;
    uint16_t* k_cache16 = nullptr;  // the same for f16 caches (then k_cache/v_cache are null)
    uint16_t* v_cache16 = nullptr;
  };
  struct RowRange {
    size_t row = 0, n = 0;
  };
  struct BlockRows {
    size_t n = 0;                       // rows in all
    std::vector<SequenceRows> seqs;
    std::vector<RowRange> linear_calls;
    std::vector<int32_t> positions;     // [n] host: each row's position in its sequence
    // Set by a block of run_blocks' loop that fused its last residual add with the next block's
    // input norm (Backend::add_rms_norm): the architecture's norm scratch already holds the next
    // block's normalized input. Read and cleared by that next block; never set with a hook.
    bool next_input_normed = false;
  };

  // Linear(s) over every range of rows.linear_calls (x: [rows.n, in], y: [rows.n, out]).
  void linear_rows(const BlockRows& rows, const Weight& w, const float* x, const float* bias, float* y);
  void linear_group_rows(const BlockRows& rows, const Backend::LinearTarget* targets, size_t n_targets,
                         const float* x);
  // Where a block writes its new key/value rows [rows.n, kv_dim]: straight into the cache when
  // the call has one sequence with an f32 cache, else the scratch slots kBlockK/kBlockV (then
  // store_kv copies, or rounds to half, each sequence's rows into its cache).
  float* new_keys(const BlockRows& rows, size_t kv_dim);
  float* new_values(const BlockRows& rows, size_t kv_dim);
  void store_kv(const BlockRows& rows, const float* k, const float* v, size_t kv_dim);
  // Backend::attention (or attention_f16) of every sequence's queries (rows s.row.. of q [rows.n,
  // q_dim]) over its cache into the same rows of out, as one Backend::attention_seqs call.
  void attend(const BlockRows& rows, const float* q, size_t q_dim, const AttentionParams& p, float* out);

  // ---- what an architecture implements ----
  // ids[0..n) at positions [n_past, n_past + n) -> the residual stream x [n, hidden] (backend).
  virtual void run_embed(const int32_t* ids, size_t n, size_t n_past, float* x) = 0;
  // Block l on the residual stream x [rows.n, hidden] (backend), writing each sequence's key/value
  // rows [n_past, n_past + n) of its k_cache/v_cache [.., kv_dim()]. May leave the result in another
  // buffer and repoint x (OPT's post-LN blocks alternate two buffers). The hook is only given
  // with one sequence (calibration). x is always the complete residual stream on return;
  // rows.next_input_normed may carry a normalization done ahead (see BlockRows).
  virtual void run_block(uint32_t l, float*& x, BlockRows& rows, const LinearInputHook* hook) = 0;
  // x [rows, hidden] (backend) -> logits [rows, vocab] (backend memory, a scratch slot valid until
  // the next call). x may be any scratch buffer.
  virtual const float* run_head(const float* x, size_t rows) = 0;
  // Where the model keeps Linear `module` of block `layer` (one of tensors_.block_linears(); of
  // expert `expert` for an MoE block's experts, else -1).
  virtual const Weight** linear_slot(uint32_t layer, Module module, int32_t expert) = 0;
  virtual size_t kv_dim() const = 0;          // width of one key/value row
  virtual const char* arch_name() const = 0;  // "Llama", "OPT" (error messages)

  // The registry's name of a block Linear ("self_attn.q_proj", "mlp.experts.3.up_proj"): what the
  // calibration hook reports.
  const char* linear_name(Module module, int32_t expert = -1) const;
  // The registry's spec of a tensor (block `layer` for block tensors): its canonical name and shape.
  const TensorSpec& spec(Module module, uint32_t layer = 0, bool bias = false) const {
    return tensors_.get(module, layer, bias);
  }

  // Scratch slots below kFirstArchSlot belong to this class; architectures number theirs from it.
  enum BaseSlot : size_t { kX, kBlockK, kBlockV, kLastRows, kFirstArchSlot };
  const ModelTensors tensors_;  // every tensor of this config (the model registry)
  WeightStore store_;
  ScratchBuffers scratch_;
  BlockHookCaller hook_caller_{backend_};

 private:
  // Embedding, every block, cache advance; x ends as the residual stream [rows.n, hidden].
  // Returns the blocks' profiled time (ms; 0 unless profiling).
  double run_blocks(const int32_t* const* ids, KvCache* const* caches, BlockRows& rows, float*& x);
  // One sequence's ids through the blocks and the head -> logits (backend memory) of every row
  // or of the last one.
  const float* run_sequence(const int32_t* ids, size_t n, KvCache& cache, bool all_logits);
  void download_logits(const float* backend_logits, size_t rows, std::vector<float>& logits);
  std::vector<std::unique_ptr<Weight>> replaced_;  // weights given by replace_block_weight
  std::vector<AttentionSeq> attn_seqs_;            // attend's list, reused between blocks
};

}  // namespace endor
