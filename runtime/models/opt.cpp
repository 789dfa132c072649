// OPT forward pass (modeling_opt.py): learned positions (row p + 2), pre-LN (125m, 1.3b, ...) or
// post-LN (350m) blocks, ReLU MLP, q pre-scaled by head_dim^-0.5, optional project_in/project_out
// when word_embed_proj_dim differs from hidden_size, lm_head tied to the embedding.
#include <cmath>
#include <utility>

#include "block_model.h"

namespace endor {
namespace {

// OPTLearnedPositionalEmbedding: token position p reads row p + 2 of embed_positions.
constexpr int32_t kPositionOffset = 2;

struct OptLayer {
  uint32_t group = 0;  // manifest group holding this block's tensors
  const Weight *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr;  // [H, H] each
  const Weight *fc1 = nullptr, *fc2 = nullptr;                           // [F, H], [H, F]
  float *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr, *out_bias = nullptr;  // [H]
  float *fc1_bias = nullptr, *fc2_bias = nullptr;                                     // [F], [H]
  float *attn_ln_gamma = nullptr, *attn_ln_beta = nullptr;  // self_attn_layer_norm [H]
  float *ffn_ln_gamma = nullptr, *ffn_ln_beta = nullptr;    // final_layer_norm [H]
};

class OptModel final : public BlockModel {
 public:
  OptModel(const ModelConfig& config, const ContainerReader& container, Backend& backend,
           WeightProvider* provider);

 private:
  // kAlt: the residual stream's second buffer (post-LN blocks alternate between kX and kAlt).
  enum Slot : size_t { kAlt = kFirstArchSlot, kQ, kAttn, kProj, kFfn, kWordEmbed, kLogits };
  void run_embed(const int32_t* ids, size_t n, size_t n_past, float* x) override;
  void run_block(uint32_t l, float*& x, BlockRows& rows, const LinearInputHook* hook) override;
  const float* run_head(const float* cur, size_t rows) override;
  const Weight** linear_slot(uint32_t layer, Module module, int32_t expert) override;
  size_t kv_dim() const override { return config_.hidden; }
  const char* arch_name() const override { return "OPT"; }

  const Weight* embed_ = nullptr;        // [V, Dw]
  const Weight* positions_table_ = nullptr;  // [max_pos + 2, H]
  const Weight* project_in_ = nullptr;   // [H, Dw] or null
  const Weight* project_out_ = nullptr;  // [Dw, H] or null
  const Weight* lm_head_ = nullptr;      // [V, Dw] (the embedding when tied)
  float *final_gamma_ = nullptr, *final_beta_ = nullptr;  // [H] or null (post-LN models)
  std::vector<OptLayer> layers_;
  AttentionParams attention_;
  std::vector<int32_t> position_rows_;  // host, [n]
};

OptModel::OptModel(const ModelConfig& c, const ContainerReader& container, Backend& backend,
                   WeightProvider* provider)
    : BlockModel(c, container, backend, provider) {
  const uint64_t H = c.hidden, V = c.vocab;
  uint64_t bytes = 0;
  auto matrix = [&](Module m, uint32_t layer) {
    const Weight* w = &store_.matrix(spec(m, layer));
    bytes += store_.read_bytes(spec(m, layer).name);
    return w;
  };
  auto vec = [&](Module m, uint32_t layer, bool bias) {
    bytes += store_.encoded_bytes(spec(m, layer, bias).name);
    return store_.vector(spec(m, layer, bias));
  };
  float* ones = store_.constant(1.0f, H);
  float* zeros = store_.constant(0.0f, H);
  auto layer_norm = [&](Module m, uint32_t layer, float*& gamma, float*& beta) {
    if (c.layer_norm_affine) {
      gamma = vec(m, layer, false);
      beta = vec(m, layer, true);
    } else {
      gamma = ones;
      beta = zeros;
    }
  };
  auto bias = [&](Module m, uint32_t layer) { return c.opt_bias ? vec(m, layer, true) : nullptr; };

  const TensorSpec& embed = spec(Module::TokenEmbed), &positions = spec(Module::PositionEmbed);
  embed_ = &store_.matrix(embed);
  bytes += store_.encoded_bytes(embed.name) / V;
  const uint64_t n_position_rows = uint64_t(c.max_positions) + kPositionOffset;  // the spec's rows
  positions_table_ = &store_.matrix(positions);
  bytes += store_.encoded_bytes(positions.name) / n_position_rows;
  if (c.word_embed_dim != H) {
    project_in_ = matrix(Module::ProjectIn, 0);
    project_out_ = matrix(Module::ProjectOut, 0);
  }
  layers_.resize(c.n_layers);
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    OptLayer& L = layers_[i];
    L.group = store_.group_of(spec(Module::Q, i).name);
    L.q = matrix(Module::Q, i);
    L.k = matrix(Module::K, i);
    L.v = matrix(Module::V, i);
    L.out = matrix(Module::O, i);
    L.q_bias = bias(Module::Q, i);
    L.k_bias = bias(Module::K, i);
    L.v_bias = bias(Module::V, i);
    L.out_bias = bias(Module::O, i);
    layer_norm(Module::AttnNorm, i, L.attn_ln_gamma, L.attn_ln_beta);
    L.fc1 = matrix(Module::Fc1, i);
    L.fc2 = matrix(Module::Fc2, i);
    L.fc1_bias = bias(Module::Fc1, i);
    L.fc2_bias = bias(Module::Fc2, i);
    layer_norm(Module::MlpNorm, i, L.ffn_ln_gamma, L.ffn_ln_beta);
  }
  if (c.final_layer_norm) layer_norm(Module::FinalNorm, 0, final_gamma_, final_beta_);
  if (c.tie_word_embeddings || !store_.has(spec(Module::LmHead).name)) {
    lm_head_ = embed_;
    bytes += store_.read_bytes(embed.name);
  } else {
    lm_head_ = matrix(Module::LmHead, 0);
  }
  decode_bytes_per_token_ = bytes;

  attention_.n_heads = attention_.n_kv_heads = c.n_heads;
  attention_.head_dim = c.head_dim;
  attention_.scale = 1.0f;  // q is pre-scaled, as transformers does
}

void OptModel::run_embed(const int32_t* ids, size_t n, size_t n_past, float* x) {
  const size_t H = config_.hidden, Dw = config_.word_embed_dim;
  float* proj = scratch_.get(kProj, n * H);
  position_rows_.resize(n);
  for (size_t t = 0; t < n; ++t) position_rows_[t] = static_cast<int32_t>(n_past + t) + kPositionOffset;
  if (project_in_) {
    float* word = scratch_.get(kWordEmbed, n * Dw);
    backend_.embed(*embed_, ids, n, word);
    backend_.linear(*project_in_, word, n, nullptr, x);
  } else {
    backend_.embed(*embed_, ids, n, x);
  }
  backend_.embed(*positions_table_, position_rows_.data(), n, proj);
  backend_.add(x, proj, n * H);
}

void OptModel::run_block(uint32_t l, float*& x, BlockRows& rows, const LinearInputHook* hook) {
  const ModelConfig& c = config_;
  const size_t n = rows.n, H = c.hidden, F = c.intermediate;
  // h: whichever of the two residual buffers x is not (post-LN swaps them).
  float* const x_buf = scratch_.get(kX, n * H);
  float* h = x == x_buf ? scratch_.get(kAlt, n * H) : x_buf;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  float* q = scratch_.get(kQ, n * H);
  float* attn = scratch_.get(kAttn, n * H);
  float* proj = scratch_.get(kProj, n * H);
  float* ffn = scratch_.get(kFfn, n * F);
  const OptLayer& L = layers_[l];
  const BlockResidency resident(store_, L.group);  // streamed blocks: weights in place until scope end
  float* k_new = new_keys(rows, H);
  float* v_new = new_values(rows, H);
  const float* in = x;
  if (c.pre_layer_norm) {
    backend_.layer_norm(x, L.attn_ln_gamma, L.attn_ln_beta, c.norm_eps, n, H, h);
    in = h;
  }
  for (Module m : {Module::Q, Module::K, Module::V}) hook_caller_(hook, l, linear_name(m), in, n, H);
  const Backend::LinearTarget qkv[] = {{L.q, L.q_bias, q}, {L.k, L.k_bias, k_new}, {L.v, L.v_bias, v_new}};
  linear_group_rows(rows, qkv, 3, in);
  backend_.scale(q, q_scale, n * H);
  store_kv(rows, k_new, v_new, H);
  attend(rows, q, H, attention_, attn);
  hook_caller_(hook, l, linear_name(Module::O), attn, n, H);
  linear_rows(rows, *L.out, attn, L.out_bias, proj);
  backend_.add(x, proj, n * H);
  if (!c.pre_layer_norm) {
    backend_.layer_norm(x, L.attn_ln_gamma, L.attn_ln_beta, c.norm_eps, n, H, h);
    std::swap(x, h);
  }

  in = x;
  if (c.pre_layer_norm) {
    backend_.layer_norm(x, L.ffn_ln_gamma, L.ffn_ln_beta, c.norm_eps, n, H, h);
    in = h;
  }
  hook_caller_(hook, l, linear_name(Module::Fc1), in, n, H);
  linear_rows(rows, *L.fc1, in, L.fc1_bias, ffn);
  backend_.relu(ffn, n * F);
  hook_caller_(hook, l, linear_name(Module::Fc2), ffn, n, F);
  linear_rows(rows, *L.fc2, ffn, L.fc2_bias, proj);
  backend_.add(x, proj, n * H);
  if (!c.pre_layer_norm) {
    backend_.layer_norm(x, L.ffn_ln_gamma, L.ffn_ln_beta, c.norm_eps, n, H, h);
    std::swap(x, h);
  }
}

const float* OptModel::run_head(const float* cur, size_t rows) {
  const ModelConfig& c = config_;
  const size_t H = c.hidden, V = c.vocab, Dw = c.word_embed_dim;
  // The head's buffers must not alias `cur`: x/h may be either slot after post-LN swaps, so
  // the normed copy goes to kAttn (free after the blocks) and the projection to kWordEmbed.
  if (final_gamma_) {
    float* normed = scratch_.get(kAttn, rows * H);
    backend_.layer_norm(cur, final_gamma_, final_beta_, c.norm_eps, rows, H, normed);
    cur = normed;
  }
  if (project_out_) {
    float* word = scratch_.get(kWordEmbed, rows * Dw);
    backend_.linear(*project_out_, cur, rows, nullptr, word);
    cur = word;
  }
  float* out = scratch_.get(kLogits, rows * V);
  backend_.linear(*lm_head_, cur, rows, nullptr, out);
  return out;
}

const Weight** OptModel::linear_slot(uint32_t layer, Module module, int32_t /*expert: OPT has none*/) {
  OptLayer& L = layers_[layer];
  switch (module) {
    case Module::Q: return &L.q;
    case Module::K: return &L.k;
    case Module::V: return &L.v;
    case Module::O: return &L.out;
    case Module::Fc1: return &L.fc1;
    case Module::Fc2: return &L.fc2;
    default: throw Error(store_.path() + ": an OPT block has no such Linear");
  }
}

}  // namespace

std::unique_ptr<Model> make_opt_model(const ModelConfig& config, const ContainerReader& container,
                                      Backend& backend, WeightProvider* provider) {
  return std::make_unique<OptModel>(config, container, backend, provider);
}

}  // namespace endor
