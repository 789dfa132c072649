// Llama-family forward pass (modeling_llama.py): Llama 1/2/3, Mistral, Qwen2 and Qwen3 differ only by
// config (GQA, head_dim, RoPE scaling, sliding windows, q/k/v/o/MLP biases, Qwen3's per-head q/k
// RMSNorm); Qwen3-MoE and Mixtral replace the MLP by routed SwiGLU experts (moe_mlp). Tensor names
// and shapes come from the model registry.
#include <algorithm>
#include <cmath>
#include <numeric>

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
  // MoE blocks (gate/up/down above stay null): the router [E, H] and each expert's SwiGLU.
  const Weight* router = nullptr;
  std::vector<const Weight*> expert_gate, expert_up, expert_down;  // [E] of [I, H], [I, H], [H, I]
  std::vector<uint32_t> expert_group;  // [E] each expert's manifest group (the block's in files packed whole)
};

// One token's share of an expert: its row in the call and its routing weight.
struct ExpertToken {
  uint32_t row = 0;
  float weight = 0.0f;
};

// Routing of n tokens from their router logits [n, E] (host), as transformers' TopKRouter does:
// probabilities softmax(logits) in f32, the top_k largest (the lower expert first on a tie), divided
// by their sum when `normalize`. Returns per expert its tokens in row order.
std::vector<std::vector<ExpertToken>> route_tokens(const float* logits, size_t n, uint32_t n_experts,
                                                   uint32_t top_k, bool normalize) {
  std::vector<std::vector<ExpertToken>> by_expert(n_experts);
  std::vector<float> p(n_experts);
  std::vector<uint32_t> order(n_experts);
  for (size_t t = 0; t < n; ++t) {
    const float* x = logits + t * n_experts;
    const float mx = *std::max_element(x, x + n_experts);
    float sum = 0.0f;
    for (uint32_t e = 0; e < n_experts; ++e) sum += p[e] = std::exp(x[e] - mx);
    for (uint32_t e = 0; e < n_experts; ++e) p[e] /= sum;
    std::iota(order.begin(), order.end(), 0u);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](uint32_t a, uint32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float kept = 0.0f;
    for (uint32_t j = 0; j < top_k; ++j) kept += p[order[j]];
    for (uint32_t j = 0; j < top_k; ++j)
      by_expert[order[j]].push_back({uint32_t(t), normalize ? p[order[j]] / kept : p[order[j]]});
  }
  return by_expert;
}

class LlamaModel final : public BlockModel {
 public:
  LlamaModel(const ModelConfig& config, const ContainerReader& container, Backend& backend,
             WeightProvider* provider);

 private:
  // kKRaw: k before its per-head norm (Qwen3), [n, kv_dim].
  // kRouter, kExpertIn, kExpertOut: an MoE block's router logits [n, E], an expert's gathered input
  // rows [m, H] and its output rows [m, H].
  enum Slot : size_t {
    kNormed = kFirstArchSlot, kQ, kAttn, kProj, kGate, kUp, kAct, kLogits, kKRaw, kRouter, kExpertIn, kExpertOut
  };
  void run_embed(const int32_t* ids, size_t n, size_t n_past, float* x) override;
  void run_block(uint32_t l, float*& x, BlockRows& rows, const LinearInputHook* hook) override;
  void attention_qkv(const LlamaLayer& L, BlockRows& rows, const float* h, float* q, float* attn, float* k_new,
                     float* v_new);
  void dense_mlp(uint32_t l, const LlamaLayer& L, const BlockRows& rows, const float* h, float* out,
                 const LinearInputHook* hook);
  void moe_mlp(uint32_t l, const LlamaLayer& L, const float* h, size_t n, float* out, const LinearInputHook* hook);
  void run_expert(uint32_t l, const LlamaLayer& L, uint32_t e, const float* h, const std::vector<ExpertToken>& tokens,
                  float* out, std::vector<uint8_t>& written, const LinearInputHook* hook);
  void prefetch_next_experts(uint32_t l, const float* h, size_t n);
  std::vector<std::vector<ExpertToken>> route(const LlamaLayer& L, const float* h, size_t n);
  void expert_groups(const LlamaLayer& L, const std::vector<std::vector<ExpertToken>>& routed,
                     std::vector<uint32_t>& groups) const;
  void load_experts(LlamaLayer& L, uint32_t layer, uint64_t& bytes);
  const float* run_head(const float* x, size_t rows) override;
  const Weight** linear_slot(uint32_t layer, Module module, int32_t expert) override;
  size_t kv_dim() const override { return size_t(config_.n_kv_heads) * config_.head_dim; }
  const char* arch_name() const override { return "Llama"; }

  const Weight* embed_ = nullptr;    // [V, H]
  const Weight* lm_head_ = nullptr;  // [V, H] (the embedding when tied)
  float* final_norm_ = nullptr;      // [H]
  std::vector<LlamaLayer> layers_;
  RopeParams rope_;
  std::vector<float> router_host_;  // an MoE block's router logits, downloaded for routing
  std::vector<uint32_t> expected_groups_;  // the expert groups a routed MLP call runs (expect_experts)
  std::vector<uint32_t> prefetch_groups_;  // the next block's guessed expert groups (prefetch_experts)
};

LlamaModel::LlamaModel(const ModelConfig& c, const ContainerReader& container, Backend& backend,
                       WeightProvider* provider)
    : BlockModel(c, container, backend, provider) {
  uint64_t bytes = 0;
  auto matrix = [&](Module m, uint32_t layer) {
    const Weight* w = &store_.matrix(spec(m, layer));
    bytes += store_.read_bytes(spec(m, layer).name);
    return w;
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
    if (c.moe()) {
      load_experts(L, i, bytes);
    } else {
      L.gate = matrix(Module::Gate, i);
      L.up = matrix(Module::Up, i);
      L.down = matrix(Module::Down, i);
    }
    if (c.mlp_bias && !c.moe()) {
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
    bytes += store_.read_bytes(embed.name);
  } else {
    lm_head_ = matrix(Module::LmHead, 0);
  }
  decode_bytes_per_token_ = bytes;

  rope_.head_dim = rope_.rotary_dim = c.head_dim;
  rope_.inv_freq = config_.inv_freq.data();  // config_ owns the vector for the model's lifetime
  rope_.attention_factor = 1.0f;
}

// An MoE block's router and experts. A token reads the router and top_k of the n_experts experts:
// decode_bytes_per_token_ counts that share of the experts' bytes.
void LlamaModel::load_experts(LlamaLayer& L, uint32_t layer, uint64_t& bytes) {
  const ModelConfig& c = config_;
  const TensorSpec& router = spec(Module::Router, layer);
  L.router = &store_.matrix(router);
  bytes += store_.read_bytes(router.name);
  uint64_t expert_bytes = 0;
  for (uint32_t e = 0; e < c.n_experts; ++e) {
    const int32_t x = int32_t(e);
    for (auto [m, into] : {std::pair{Module::Gate, &L.expert_gate}, {Module::Up, &L.expert_up}, {Module::Down, &L.expert_down}}) {
      const TensorSpec& s = tensors_.get(m, layer, false, x);
      into->push_back(&store_.matrix(s));
      expert_bytes += store_.read_bytes(s.name);
    }
    L.expert_group.push_back(store_.group_of(tensors_.get(Module::Gate, layer, false, x).name));
  }
  bytes += expert_bytes * c.top_k / c.n_experts;
}

void LlamaModel::run_embed(const int32_t* ids, size_t n, size_t /*n_past*/, float* x) {
  backend_.embed(*embed_, ids, n, x);
}

void LlamaModel::run_block(uint32_t l, float*& x, BlockRows& rows, const LinearInputHook* hook) {
  const ModelConfig& c = config_;
  const size_t n = rows.n, H = c.hidden;
  const size_t q_dim = size_t(c.n_heads) * c.head_dim, kv_dim = size_t(c.n_kv_heads) * c.head_dim;
  float* h = scratch_.get(kNormed, n * H);
  float* q = scratch_.get(kQ, n * q_dim);
  float* attn = scratch_.get(kAttn, n * q_dim);
  float* proj = scratch_.get(kProj, n * H);
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
  attend(rows, q, q_dim, L.attention, attn);
  hook_caller_(hook, l, linear_name(Module::O), attn, n, q_dim);
  linear_rows(rows, *L.o, attn, L.o_bias, proj);
  backend_.add_rms_norm(x, proj, L.mlp_norm, c.norm_eps, n, H, h);  // x += o_proj; h = mlp norm of x

  if (c.moe()) {
    // Each range of rows that shares a Linear call routes on its own: a prompt's tokens meet the
    // same expert calls as when it runs alone.
    for (const RowRange& r : rows.linear_calls) moe_mlp(l, L, h + r.row * H, r.n, proj + r.row * H, hook);
  } else {
    dense_mlp(l, L, rows, h, proj, hook);
  }
  // Inside the forward loop the next block's input norm joins this add (one launch less a block on
  // a device); its norm weights are always resident (WeightStore::vector), streamed blocks or not.
  if (!hook && l + 1 < c.n_layers) {
    backend_.add_rms_norm(x, proj, layers_[l + 1].attn_norm, c.norm_eps, n, H, h);
    rows.next_input_normed = true;
  } else {
    backend_.add(x, proj, n * H);
  }
}

// The SwiGLU MLP of block l on its normed input h [rows.n, H] -> out [rows.n, H].
void LlamaModel::dense_mlp(uint32_t l, const LlamaLayer& L, const BlockRows& rows, const float* h, float* out,
                           const LinearInputHook* hook) {
  const size_t n = rows.n, H = config_.hidden, I = config_.intermediate;
  float* gate = scratch_.get(kGate, n * I);
  float* up = scratch_.get(kUp, n * I);
  float* act = scratch_.get(kAct, n * I);
  hook_caller_(hook, l, linear_name(Module::Gate), h, n, H);
  hook_caller_(hook, l, linear_name(Module::Up), h, n, H);
  const Backend::LinearTarget gate_up[] = {{L.gate, L.gate_bias, gate}, {L.up, L.up_bias, up}};
  linear_group_rows(rows, gate_up, 2, h);
  backend_.silu_mul(gate, up, n * I, act);
  hook_caller_(hook, l, linear_name(Module::Down), act, n, I);
  linear_rows(rows, *L.down, act, L.down_bias, out);
}

// Block L's router on the n rows of h: its logits to the host, then each expert's tokens
// (route_tokens: top-k, renormalized where the config says so).
std::vector<std::vector<ExpertToken>> LlamaModel::route(const LlamaLayer& L, const float* h, size_t n) {
  const ModelConfig& c = config_;
  float* logits = scratch_.get(kRouter, n * c.n_experts);
  backend_.linear(*L.router, h, n, nullptr, logits);
  router_host_.resize(n * c.n_experts);
  backend_.download(router_host_.data(), logits, n * c.n_experts);
  return route_tokens(router_host_.data(), n, c.n_experts, c.top_k, c.norm_topk_prob);
}

// groups = the placement groups of the experts that have tokens in `routed`, those not in the
// block's own group (which is in memory whenever the block runs), in expert order.
void LlamaModel::expert_groups(const LlamaLayer& L, const std::vector<std::vector<ExpertToken>>& routed,
                               std::vector<uint32_t>& groups) const {
  groups.clear();
  for (uint32_t e = 0; e < config_.n_experts; ++e)
    if (!routed[e].empty() && L.expert_group[e] != L.group) groups.push_back(L.expert_group[e]);
}

// The MoE MLP of block l on n normed rows h [n, H] -> out [n, H]: the router's logits come to the
// host, which picks each token's experts (route_tokens); then every expert that has tokens runs once
// on its tokens' rows (decode: only the chosen experts run; prefill: the tokens grouped by expert),
// and each token's output row is the sum of its experts' outputs times their weights, added expert by
// expert in expert order as transformers' index_add_. Only Backend ops (linear, copy, scale, add,
// silu_mul), so every backend runs it as is.
void LlamaModel::moe_mlp(uint32_t l, const LlamaLayer& L, const float* h, size_t n, float* out,
                         const LinearInputHook* hook) {
  const ModelConfig& c = config_;
  const std::vector<std::vector<ExpertToken>> routed = route(L, h, n);
  std::vector<uint8_t> written(n, 0);  // a row's first expert output is copied, later ones added
  expert_groups(L, routed, expected_groups_);  // the streaming provider may read the routed experts ahead
  if (!expected_groups_.empty()) store_.expect_experts(expected_groups_.data(), expected_groups_.size());
  if (!hook && l + 1 < c.n_layers) prefetch_next_experts(l + 1, h, n);
  for (uint32_t e = 0; e < c.n_experts; ++e)
    if (!routed[e].empty()) run_expert(l, L, e, h, routed[e], out, written, hook);
}

// Expert prefetch (docs/moe.md): block l's router applied to this block's MLP input h guesses the
// experts block l's own input will pick (the residual stream changes little from one block to the
// next); the provider reads the guesses behind this block's own reads, so they arrive while this
// block's experts and the next block's attention compute. Only a guess: block l routes again on its
// own input, and an expert guessed wrong is a read too many, never another result.
void LlamaModel::prefetch_next_experts(uint32_t l, const float* h, size_t n) {
  const LlamaLayer& N = layers_[l];
  if (!store_.wants_expert_prefetch(N.group)) return;
  const std::vector<std::vector<ExpertToken>> routed = route(N, h, n);
  expert_groups(N, routed, prefetch_groups_);
  if (!prefetch_groups_.empty()) store_.prefetch_experts(prefetch_groups_.data(), prefetch_groups_.size());
}

// Expert e on its tokens' rows of h: gathered (a run of consecutive rows in one copy), gate/up,
// SiLU·up, down, then each output row scaled by the token's weight into out. The calibration hook
// sees exactly the rows routed to this expert.
void LlamaModel::run_expert(uint32_t l, const LlamaLayer& L, uint32_t e, const float* h,
                            const std::vector<ExpertToken>& tokens, float* out, std::vector<uint8_t>& written,
                            const LinearInputHook* hook) {
  const size_t H = config_.hidden, I = config_.moe_intermediate, m = tokens.size();
  float* x = scratch_.get(kExpertIn, m * H);
  float* gate = scratch_.get(kGate, m * I);
  float* up = scratch_.get(kUp, m * I);
  float* act = scratch_.get(kAct, m * I);
  float* y = scratch_.get(kExpertOut, m * H);
  for (size_t j = 0; j < m;) {
    size_t run = 1;
    while (j + run < m && tokens[j + run].row == tokens[j].row + run) ++run;
    backend_.copy(x + j * H, h + size_t(tokens[j].row) * H, run * H);
    j += run;
  }
  const int32_t x_id = int32_t(e);
  if (hook) {
    hook_caller_(hook, l, linear_name(Module::Gate, x_id), x, m, H);
    hook_caller_(hook, l, linear_name(Module::Up, x_id), x, m, H);
  }
  // An expert in a group of its own: the provider brings its bytes in (a cache slot) and may hand
  // back Weights that read them there.
  const Weight* w[3] = {L.expert_gate[e], L.expert_up[e], L.expert_down[e]};
  if (L.expert_group[e] != L.group) store_.use_expert(L.expert_group[e], w, 3);
  const Backend::LinearTarget gate_up[] = {{w[0], nullptr, gate}, {w[1], nullptr, up}};
  backend_.linear_group(gate_up, 2, x, m);
  backend_.silu_mul(gate, up, m * I, act);
  if (hook) hook_caller_(hook, l, linear_name(Module::Down, x_id), act, m, I);
  backend_.linear(*w[2], act, m, nullptr, y);
  for (size_t j = 0; j < m; ++j) {
    float* row = y + j * H;
    float* dst = out + size_t(tokens[j].row) * H;
    backend_.scale(row, tokens[j].weight, H);
    if (written[tokens[j].row]) {
      backend_.add(dst, row, H);
    } else {
      backend_.copy(dst, row, H);
      written[tokens[j].row] = 1;
    }
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

const Weight** LlamaModel::linear_slot(uint32_t layer, Module module, int32_t expert) {
  LlamaLayer& L = layers_[layer];
  if (expert >= 0 && uint32_t(expert) < L.expert_gate.size()) {
    if (module == Module::Gate) return &L.expert_gate[size_t(expert)];
    if (module == Module::Up) return &L.expert_up[size_t(expert)];
    if (module == Module::Down) return &L.expert_down[size_t(expert)];
  }
  if (expert >= 0) throw Error(store_.path() + ": a Llama block has no such expert Linear");
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
