// Llama-family forward pass (modeling_llama.py): Llama 1/2/3, Mistral and Qwen2 differ only by
// config (GQA, head_dim, RoPE scaling, sliding windows, q/k/v/o/MLP biases).
#include <cmath>

#include "block_model.h"

namespace endor {
namespace {

// One decoder block; every pointer refers to the WeightStore (backend memory). Biases are null
// when the config has none.
struct LlamaLayer {
  uint32_t group = 0;  // manifest group holding this block's tensors
  const Weight *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;  // [nH·hd, H], [nKV·hd, H] ×2, [H, nH·hd]
  const Weight *gate = nullptr, *up = nullptr, *down = nullptr;        // [I, H] ×2, [H, I]
  float *attn_norm = nullptr, *mlp_norm = nullptr;                     // [H]
  float *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr, *o_bias = nullptr;
  float *gate_bias = nullptr, *up_bias = nullptr, *down_bias = nullptr;
  AttentionParams attention;
};

class LlamaModel final : public BlockModel {
 public:
  LlamaModel(const ModelConfig& config, const ContainerReader& container, Backend& backend,
             WeightProvider* provider);

 private:
  enum Slot : size_t { kNormed = kFirstArchSlot, kQ, kAttn, kProj, kGate, kUp, kAct, kLogits };
  void run_embed(const int32_t* ids, size_t n, size_t n_past, float* x) override;
  void run_block(uint32_t l, float*& x, BlockRows& rows, const LinearInputHook* hook) override;
  const float* run_head(const float* x, size_t rows) override;
  std::vector<LinearSlot> linear_slots(uint32_t layer) override;
  size_t kv_dim() const override { return size_t(config_.n_kv_heads) * config_.head_dim; }
  const char* arch_name() const override { return "Llama"; }
  std::string block_prefix(uint32_t layer) const override { return "layers." + std::to_string(layer) + "."; }

  const Weight* embed_ = nullptr;    // [V, H]
  const Weight* lm_head_ = nullptr;  // [V, H] (the embedding when tied)
  float* final_norm_ = nullptr;      // [H]
  std::vector<LlamaLayer> layers_;
  RopeParams rope_;
};

LlamaModel::LlamaModel(const ModelConfig& c, const ContainerReader& container, Backend& backend,
                       WeightProvider* provider)
    : BlockModel(c, container, backend, provider) {
  const uint64_t H = c.hidden, I = c.intermediate, V = c.vocab;
  const uint64_t q_dim = uint64_t(c.n_heads) * c.head_dim, kv_dim = uint64_t(c.n_kv_heads) * c.head_dim;
  uint64_t bytes = 0;
  auto matrix = [&](const std::string& name, uint64_t rows, uint64_t cols) {
    bytes += store_.encoded_bytes(name);
    return &store_.matrix(name, rows, cols);
  };
  auto vec = [&](const std::string& name, uint64_t n) {
    bytes += store_.encoded_bytes(name);
    return store_.vector(name, n);
  };

  embed_ = &store_.matrix("embed_tokens.weight", V, H);
  bytes += store_.encoded_bytes("embed_tokens.weight") / V;  // one row per token
  layers_.resize(c.n_layers);
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    LlamaLayer& L = layers_[i];
    L.group = store_.group_of(p + "self_attn.q_proj.weight");
    L.attn_norm = vec(p + "input_layernorm.weight", H);
    L.q = matrix(p + "self_attn.q_proj.weight", q_dim, H);
    L.k = matrix(p + "self_attn.k_proj.weight", kv_dim, H);
    L.v = matrix(p + "self_attn.v_proj.weight", kv_dim, H);
    L.o = matrix(p + "self_attn.o_proj.weight", H, q_dim);
    if (c.qkv_bias) {
      L.q_bias = vec(p + "self_attn.q_proj.bias", q_dim);
      L.k_bias = vec(p + "self_attn.k_proj.bias", kv_dim);
      L.v_bias = vec(p + "self_attn.v_proj.bias", kv_dim);
    }
    if (c.o_bias) L.o_bias = vec(p + "self_attn.o_proj.bias", H);
    L.mlp_norm = vec(p + "post_attention_layernorm.weight", H);
    L.gate = matrix(p + "mlp.gate_proj.weight", I, H);
    L.up = matrix(p + "mlp.up_proj.weight", I, H);
    L.down = matrix(p + "mlp.down_proj.weight", H, I);
    if (c.mlp_bias) {
      L.gate_bias = vec(p + "mlp.gate_proj.bias", I);
      L.up_bias = vec(p + "mlp.up_proj.bias", I);
      L.down_bias = vec(p + "mlp.down_proj.bias", H);
    }
    L.attention.n_heads = c.n_heads;
    L.attention.n_kv_heads = c.n_kv_heads;
    L.attention.head_dim = c.head_dim;
    L.attention.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    L.attention.sliding_window = c.sliding_window.empty() ? 0 : c.sliding_window[i];
  }
  final_norm_ = vec("norm.weight", H);
  if (c.tie_word_embeddings || !store_.has("lm_head.weight")) {
    lm_head_ = embed_;
    bytes += store_.encoded_bytes("embed_tokens.weight");
  } else {
    lm_head_ = matrix("lm_head.weight", V, H);
  }
  decode_bytes_per_token_ = bytes;

  rope_.head_dim = rope_.rotary_dim = c.head_dim;
  rope_.inv_freq = config_.inv_freq.data();  // config_ owns the vector for the model's lifetime
  rope_.attention_factor = 1.0f;
}

void LlamaModel::run_embed(const int32_t* ids, size_t n, size_t /*n_past*/, float* x) {
  backend_.embed(*embed_, ids, n, x);
}

void LlamaModel::run_block(uint32_t l, float*& x, BlockRows& rows, const LinearInputHook* hook) {
  const ModelConfig& c = config_;
  const size_t n = rows.n, H = c.hidden, I = c.intermediate;
  const size_t q_dim = size_t(c.n_heads) * c.head_dim, kv_dim = size_t(c.n_kv_heads) * c.head_dim;
  float* h = scratch_.get(kNormed, n * H);
  float* q = scratch_.get(kQ, n * q_dim);
  float* attn = scratch_.get(kAttn, n * q_dim);
  float* proj = scratch_.get(kProj, n * H);
  float* gate = scratch_.get(kGate, n * I);
  float* up = scratch_.get(kUp, n * I);
  float* act = scratch_.get(kAct, n * I);
  const LlamaLayer& L = layers_[l];
  const BlockResidency resident(store_, L.group);  // streamed blocks: weights in place until scope end
  // New keys/values: the cache rows [n_past, n_past + n) (one sequence) or scratch.
  float* k_new = new_keys(rows, kv_dim);
  float* v_new = new_values(rows, kv_dim);
  if (!rows.next_input_normed) backend_.rms_norm(x, L.attn_norm, c.norm_eps, n, H, h);
  rows.next_input_normed = false;
  hook_caller_(hook, l, "self_attn.q_proj", h, n, H);
  hook_caller_(hook, l, "self_attn.k_proj", h, n, H);
  hook_caller_(hook, l, "self_attn.v_proj", h, n, H);
  const Backend::LinearTarget qkv[] = {{L.q, L.q_bias, q}, {L.k, L.k_bias, k_new}, {L.v, L.v_bias, v_new}};
  linear_group_rows(rows, qkv, 3, h);
  backend_.rope_qk(q, c.n_heads, k_new, c.n_kv_heads, n, rows.positions.data(), rope_);
  store_kv(rows, k_new, v_new, kv_dim);
  for (const SequenceRows& s : rows.seqs)
    attend(s, q + s.row * q_dim, L.attention, attn + s.row * q_dim);
  hook_caller_(hook, l, "self_attn.o_proj", attn, n, q_dim);
  linear_rows(rows, *L.o, attn, L.o_bias, proj);
  backend_.add_rms_norm(x, proj, L.mlp_norm, c.norm_eps, n, H, h);  // x += o_proj; h = mlp norm of x

  hook_caller_(hook, l, "mlp.gate_proj", h, n, H);
  hook_caller_(hook, l, "mlp.up_proj", h, n, H);
  const Backend::LinearTarget gate_up[] = {{L.gate, L.gate_bias, gate}, {L.up, L.up_bias, up}};
  linear_group_rows(rows, gate_up, 2, h);
  backend_.silu_mul(gate, up, n * I, act);
  hook_caller_(hook, l, "mlp.down_proj", act, n, I);
  linear_rows(rows, *L.down, act, L.down_bias, proj);
  // Inside the forward loop the next block's input norm joins this add (one launch less a block on
  // a device); its norm weights are always resident (WeightStore::vector), streamed blocks or not.
  if (!hook && l + 1 < c.n_layers) {
    backend_.add_rms_norm(x, proj, layers_[l + 1].attn_norm, c.norm_eps, n, H, h);
    rows.next_input_normed = true;
  } else {
    backend_.add(x, proj, n * H);
  }
}

const float* LlamaModel::run_head(const float* x, size_t rows) {
  const ModelConfig& c = config_;
  const size_t H = c.hidden, V = c.vocab;
  float* h = scratch_.get(kNormed, rows * H);
  float* out = scratch_.get(kLogits, rows * V);
  backend_.rms_norm(x, final_norm_, c.norm_eps, rows, H, h);
  backend_.linear(*lm_head_, h, rows, nullptr, out);
  return out;
}

std::vector<BlockModel::LinearSlot> LlamaModel::linear_slots(uint32_t layer) {
  const ModelConfig& c = config_;
  const uint64_t H = c.hidden, I = c.intermediate;
  const uint64_t q_dim = uint64_t(c.n_heads) * c.head_dim, kv_dim = uint64_t(c.n_kv_heads) * c.head_dim;
  LlamaLayer& L = layers_[layer];
  return {{"self_attn.q_proj", &L.q, q_dim, H},  {"self_attn.k_proj", &L.k, kv_dim, H},
          {"self_attn.v_proj", &L.v, kv_dim, H}, {"self_attn.o_proj", &L.o, H, q_dim},
          {"mlp.gate_proj", &L.gate, I, H},      {"mlp.up_proj", &L.up, I, H},
          {"mlp.down_proj", &L.down, H, I}};
}

}  // namespace

std::unique_ptr<Model> make_llama_model(const ModelConfig& config, const ContainerReader& container,
                                        Backend& backend, WeightProvider* provider) {
  return std::make_unique<LlamaModel>(config, container, backend, provider);
}

}  // namespace endor
