// Llama-family forward pass (modeling_llama.py): Llama 1/2/3, Mistral, Qwen2 and Qwen3 differ only by
// config (GQA, head_dim, RoPE scaling, sliding windows, q/k/v/o/MLP biases, Qwen3's per-head q/k
// RMSNorm). Tensor names and shapes come from the model registry.
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
  float *q_norm = nullptr, *k_norm = nullptr;  // [head_dim] (Qwen3), else null
  AttentionParams attention;
};

class LlamaModel final : public BlockModel {
 public:
  LlamaModel(const ModelConfig& config, const ContainerReader& container, Backend& backend,
             WeightProvider* provider);

 private:
  // kKRaw: k before its per-head norm (Qwen3), [n, kv_dim].
  enum Slot : size_t { kNormed = kFirstArchSlot, kQ, kAttn, kProj, kGate, kUp, kAct, kLogits, kKRaw };
  void run_embed(const int32_t* ids, size_t n, size_t n_past, float* x) override;
  void run_block(uint32_t l, float*& x, BlockRows& rows, const LinearInputHook* hook) override;
  void attention_qkv(const LlamaLayer& L, BlockRows& rows, const float* h, float* q, float* attn, float* k_new,
                     float* v_new);
  const float* run_head(const float* x, size_t rows) override;
  const Weight** linear_slot(uint32_t layer, Module module) override;
  size_t kv_dim() const override { return size_t(config_.n_kv_heads) * config_.head_dim; }
  const char* arch_name() const override { return "Llama"; }

  const Weight* embed_ = nullptr;    // [V, H]
  const Weight* lm_head_ = nullptr;  // [V, H] (the embedding when tied)
  float* final_norm_ = nullptr;      // [H]
  std::vector<LlamaLayer> layers_;
  RopeParams rope_;
};

LlamaModel::LlamaModel(const ModelConfig& c, const ContainerReader& container, Backend& backend,
                       WeightProvider* provider)
    : BlockModel(c, container, backend, provider) {
  uint64_t bytes = 0;
  auto matrix = [&](Module m, uint32_t layer) {
    bytes += store_.encoded_bytes(spec(m, layer).name);
    return &store_.matrix(spec(m, layer));
  };
  auto vec = [&](Module m, uint32_t layer, bool bias = false) {
    bytes += store_.encoded_bytes(spec(m, layer, bias).name);
    return store_.vector(spec(m, layer, bias));
  };

  const TensorSpec& embed = spec(Module::TokenEmbed);
  embed_ = &store_.matrix(embed);
  bytes += store_.encoded_bytes(embed.name) / c.vocab;  // one row per token
  layers_.resize(c.n_layers);
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    LlamaLayer& L = layers_[i];
    L.group = store_.group_of(spec(Module::Q, i).name);
    L.attn_norm = vec(Module::AttnNorm, i);
    L.q = matrix(Module::Q, i);
    L.k = matrix(Module::K, i);
    L.v = matrix(Module::V, i);
    L.o = matrix(Module::O, i);
    if (c.qkv_bias) {
      L.q_bias = vec(Module::Q, i, true);
      L.k_bias = vec(Module::K, i, true);
      L.v_bias = vec(Module::V, i, true);
    }
    if (c.qk_norm) {
      L.q_norm = vec(Module::QNorm, i);
      L.k_norm = vec(Module::KNorm, i);
    }
    if (c.o_bias) L.o_bias = vec(Module::O, i, true);
    L.mlp_norm = vec(Module::MlpNorm, i);
    L.gate = matrix(Module::Gate, i);
    L.up = matrix(Module::Up, i);
    L.down = matrix(Module::Down, i);
    if (c.mlp_bias) {
      L.gate_bias = vec(Module::Gate, i, true);
      L.up_bias = vec(Module::Up, i, true);
      L.down_bias = vec(Module::Down, i, true);
    }
    L.attention.n_heads = c.n_heads;
    L.attention.n_kv_heads = c.n_kv_heads;
    L.attention.head_dim = c.head_dim;
    L.attention.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    L.attention.sliding_window = c.sliding_window.empty() ? 0 : c.sliding_window[i];
  }
  final_norm_ = vec(Module::FinalNorm, 0);
  if (c.tie_word_embeddings || !store_.has(spec(Module::LmHead).name)) {
    lm_head_ = embed_;
    bytes += store_.encoded_bytes(embed.name);
  } else {
    lm_head_ = matrix(Module::LmHead, 0);
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
  for (Module m : {Module::Q, Module::K, Module::V}) hook_caller_(hook, l, linear_name(m), h, n, H);
  attention_qkv(L, rows, h, q, attn, k_new, v_new);
  backend_.rope_qk(q, c.n_heads, k_new, c.n_kv_heads, n, rows.positions.data(), rope_);
  store_kv(rows, k_new, v_new, kv_dim);
  for (const SequenceRows& s : rows.seqs)
    attend(s, q + s.row * q_dim, L.attention, attn + s.row * q_dim);
  hook_caller_(hook, l, linear_name(Module::O), attn, n, q_dim);
  linear_rows(rows, *L.o, attn, L.o_bias, proj);
  backend_.add_rms_norm(x, proj, L.mlp_norm, c.norm_eps, n, H, h);  // x += o_proj; h = mlp norm of x

  hook_caller_(hook, l, linear_name(Module::Gate), h, n, H);
  hook_caller_(hook, l, linear_name(Module::Up), h, n, H);
  const Backend::LinearTarget gate_up[] = {{L.gate, L.gate_bias, gate}, {L.up, L.up_bias, up}};
  linear_group_rows(rows, gate_up, 2, h);
  backend_.silu_mul(gate, up, n * I, act);
  hook_caller_(hook, l, linear_name(Module::Down), act, n, I);
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

// q, k and v of the block's normed input h [n, H]: q into `q`, k and v into the new cache rows.
// With Qwen3's q/k norms the projections land in scratch first (q in `attn`, free until attention
// writes it; k in kKRaw) and each head's head_dim values are RMS-normalized from there: out of
// place, as every backend's rms_norm expects.
void LlamaModel::attention_qkv(const LlamaLayer& L, BlockRows& rows, const float* h, float* q, float* attn,
                               float* k_new, float* v_new) {
  const ModelConfig& c = config_;
  const size_t n = rows.n;
  float* q_out = L.q_norm ? attn : q;
  float* k_out = L.k_norm ? scratch_.get(kKRaw, n * kv_dim()) : k_new;
  const Backend::LinearTarget qkv[] = {{L.q, L.q_bias, q_out}, {L.k, L.k_bias, k_out}, {L.v, L.v_bias, v_new}};
  linear_group_rows(rows, qkv, 3, h);
  if (L.q_norm) backend_.rms_norm(q_out, L.q_norm, c.norm_eps, n * c.n_heads, c.head_dim, q);
  if (L.k_norm) backend_.rms_norm(k_out, L.k_norm, c.norm_eps, n * c.n_kv_heads, c.head_dim, k_new);
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

const Weight** LlamaModel::linear_slot(uint32_t layer, Module module) {
  LlamaLayer& L = layers_[layer];
  switch (module) {
    case Module::Q: return &L.q;
    case Module::K: return &L.k;
    case Module::V: return &L.v;
    case Module::O: return &L.o;
    case Module::Gate: return &L.gate;
    case Module::Up: return &L.up;
    case Module::Down: return &L.down;
    default: throw Error(store_.path() + ": a Llama block has no such Linear");
  }
}

}  // namespace

std::unique_ptr<Model> make_llama_model(const ModelConfig& config, const ContainerReader& container,
                                        Backend& backend, WeightProvider* provider) {
  return std::make_unique<LlamaModel>(config, container, backend, provider);
}

}  // namespace endor
