// The model registry: the one place that knows a model family. config.json -> ModelConfig (family,
// dimensions, options, with the defaults transformers' config classes apply), and for that config
// every tensor the family has: its canonical Hugging Face name, shape, manifest group and order,
// whether it is required, whether endor-pack may prune it, and its llama.cpp (GGUF) name. The
// packer (checkpoint checks, tensor order, GGUF import and export), the runtime (model loading,
// calibration's Linear names) and endor-infer --plan all ask here, so a family is added in this
// module (model-registry/src) and in the runtime's forward pass, nowhere else.
//
// Errors: bad input throws endor::Error whose what() is one line naming the file and what is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

namespace endor {

// ---- configuration ------------------------------------------------------------------------------
// The forward pass a family runs: OPT, or the Llama block (Llama 1/2/3, Mistral, Qwen2, Qwen3, and
// with a mixture-of-experts MLP Qwen3-MoE and Mixtral).
enum class Architecture : uint8_t { Opt, Llama };
using ModelFamily = Architecture;  // the packer's older name for it

struct ModelConfig {
  Architecture arch = Architecture::Llama;
  std::string model_type;                  // "opt", "llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral"
  uint32_t hidden = 0;                     // hidden_size
  uint32_t n_layers = 0;
  uint32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  uint32_t intermediate = 0;               // Llama intermediate_size / OPT ffn_dim
  uint32_t vocab = 0;
  uint32_t max_positions = 0;              // max_position_embeddings: the context length
  float norm_eps = 1e-5f;
  bool tie_word_embeddings = false;
  std::vector<int32_t> eos_token_ids;      // empty when the config names none
  int32_t bos_token_id = -1;               // -1 when the config names none

  // OPT only.
  bool pre_layer_norm = true;              // do_layer_norm_before
  bool final_layer_norm = true;            // do_layer_norm_before && !_remove_final_layer_norm
  bool opt_bias = true;                    // enable_bias
  bool layer_norm_affine = true;           // layer_norm_elementwise_affine
  uint32_t word_embed_dim = 0;             // word_embed_proj_dim (== hidden: no projections)

  // Llama family only.
  bool qkv_bias = false;                   // attention_bias, or Qwen2's q/k/v biases
  bool o_bias = false;                     // attention_bias (Qwen2: none on o_proj)
  bool mlp_bias = false;
  bool qk_norm = false;                    // Qwen3: RMSNorm of each head of q and k (over head_dim) before RoPE
  std::vector<float> inv_freq;             // [head_dim/2], rope_scaling already applied
  double rope_theta = 10000.0;             // rope_theta, as written
  std::string rope_type = "default";       // "default", "linear", "llama3"
  double rope_factor = 1.0;                // the scaling factor (1 for "default")
  std::vector<uint32_t> sliding_window;    // [n_layers]; 0 = full attention in that layer

  // Mixture of experts (Qwen3-MoE, Mixtral): every block's MLP is n_experts SwiGLU experts of
  // moe_intermediate rows behind a router [n_experts, hidden]; each token runs the top_k experts of
  // softmax(router · h), weighted by their probabilities (renormalized to sum 1 when norm_topk_prob;
  // Mixtral always). n_experts 0: a dense MLP.
  uint32_t n_experts = 0;                  // num_experts (Qwen3-MoE) / num_local_experts
  uint32_t top_k = 0;                      // num_experts_per_tok
  uint32_t moe_intermediate = 0;           // moe_intermediate_size (Qwen3-MoE) / intermediate_size (Mixtral)
  bool norm_topk_prob = false;
  bool moe() const { return n_experts > 0; }
};

// Parses config.json. The family comes from architectures[0] and model_type; when both are given
// they must name the same family. Throws "<path>: <what>: <problem>" ("<path>: <problem>" when
// `what` is empty, e.g. when path is the config.json itself) on an unknown architecture, a missing
// or inconsistent field, or an option the runtime does not implement, so endor-pack refuses what
// endor-infer could not run.
ModelConfig parse_model_config(const nlohmann::json& config, const std::string& path_for_errors,
                               const std::string& what = "config.json");

// ---- tensor names -----------------------------------------------------------------------------
// Where a tensor belongs in a container: the embed group, one decoder block, or the head group.
struct TensorRole {
  enum class Group : uint8_t { Embed, Layer, Head } group = Group::Head;
  uint32_t layer = 0;       // Group::Layer only
  bool prunable = false;    // a 2-D ".weight" inside a decoder block (a Linear)
  bool embedding = false;   // a token or position embedding table (a lookup, not a Linear)
  bool head_matrix = false; // the 2-D token embedding or lm_head weight: what --quant-head quantizes
  bool router = false;      // an MoE block's router ("mlp.gate", "block_sparse_moe.gate"): never pruned or quantized
};
// From the canonical name alone (any family: "layers.N." marks a block; token/position
// embeddings and OPT's project_in are the embed group; everything else the head group). An MoE
// router's weight is not prunable (the routing decides which experts run; it stays as stored).
TensorRole classify_tensor(const std::string& canonical_name, const std::vector<uint64_t>& shape);
// A checkpoint's spelling -> the canonical name with the "model." prefix: "decoder.x" ->
// "model.decoder.x" (OPT), "layers.0.x" -> "model.layers.0.x" (Llama family); others unchanged.
std::string canonical_tensor_name(Architecture, const std::string& source_name);
// A tensor dropped when a checkpoint is read: rotary inv_freq buffers (the runtime recomputes them).
bool is_rotary_buffer(const std::string& canonical_name);

// One module of the model. A family uses a subset; OPT's out_proj is O, its self_attn_layer_norm
// AttnNorm and its block final_layer_norm MlpNorm.
enum class Module : uint8_t {
  TokenEmbed, PositionEmbed, ProjectIn,                 // embed group
  AttnNorm, Q, K, V, QNorm, KNorm, O, MlpNorm,          // a decoder block, in execution order
  Gate, Up, Down, Fc1, Fc2,
  Router,                                               // an MoE block's router; its experts are Gate/Up/Down
  FinalNorm, ProjectOut, LmHead,                        // head group
};

struct TensorSpec {
  std::string name;               // canonical: "model.layers.3.self_attn.q_proj.weight"
  std::vector<uint64_t> shape;    // what config.json implies
  Module module = Module::TokenEmbed;
  bool bias = false;              // the module's ".bias" (else its ".weight")
  TensorRole::Group group = TensorRole::Group::Head;
  uint32_t layer = 0;             // Group::Layer only
  int32_t expert = -1;            // an MoE expert's Gate/Up/Down: its index; else -1
  uint32_t rank = 0;              // the module's position in its group's execution order
  bool required = false;          // a checkpoint without it is refused
  bool linear = false;            // a decoder block's Linear weight: what endor-pack prunes
  std::string gguf_name;          // llama.cpp's name ("blk.3.attn_q.weight"); "" when it has none. An
                                  // MoE expert's is the stacked tensor's ("blk.3.ffn_up_exps.weight",
                                  // [n_experts, rows, cols]); `expert` is its slice

};

// A block Linear as the runtime's block API names it (Model::LinearInputHook, replace_block_weight).
struct BlockLinear {
  std::string name;               // "self_attn.q_proj", "mlp.down_proj", "fc1", "mlp.experts.3.gate_proj"
  Module module = Module::Q;
  int32_t expert = -1;            // an MoE expert's index (Gate/Up/Down), else -1
  uint64_t rows = 0, cols = 0;    // [out, in]
};

// Every tensor of one model, from its config.
class ModelTensors {
 public:
  explicit ModelTensors(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  // Embed group, blocks 0..L-1, head group; inside a group in execution order (weight after bias
  // within a module, the order endor-pack writes them in).
  const std::vector<TensorSpec>& all() const { return specs_; }
  // nullptr when the family has no tensor of that name.
  const TensorSpec* find(const std::string& canonical_name) const;
  const TensorSpec* find_gguf(const std::string& gguf_name) const;  // not a stacked expert tensor
  // The experts' specs (expert 0 first) of a stacked llama.cpp tensor ("blk.3.ffn_up_exps.weight");
  // empty when the name is no such tensor of this model.
  std::vector<const TensorSpec*> find_gguf_stacked(const std::string& gguf_name) const;
  // The tensor of `module` (in block `layer`; of expert `expert` for an MoE block's Gate/Up/Down);
  // throws when the family has none.
  const TensorSpec& get(Module module, uint32_t layer = 0, bool bias = false, int32_t expert = -1) const;
  bool has(Module module) const;
  // Order key inside a group: the spec's rank, and for a name the family does not list, the
  // rank of its module when the name is "<module>.<anything>", else after every known one.
  uint32_t rank_in_group(const std::string& canonical_name) const;
  // The Linears of one decoder block, in execution order (the same for every block). An MoE block
  // lists each expert's gate, up and down (expert 0 first); its router is not one of them.
  const std::vector<BlockLinear>& block_linears() const { return linears_; }
  // "model.layers.3." / "model.decoder.layers.3.": the prefix of block `layer`'s tensors.
  std::string block_prefix(uint32_t layer) const;

 private:
  ModelConfig config_;
  std::vector<TensorSpec> specs_;
  std::vector<BlockLinear> linears_;
  std::map<std::string, size_t> by_name_, by_gguf_;
  std::map<std::string, std::vector<size_t>> by_gguf_stacked_;  // stacked expert tensors, by expert
  std::map<std::tuple<Module, uint32_t, int32_t, bool>, size_t> by_module_;  // (module, layer, expert, bias)
};

// ---- llama.cpp (GGUF) ---------------------------------------------------------------------------
// What a family is called in a GGUF file and how its tensors differ there.
struct GgufFamily {
  std::string arch;               // general.architecture: "llama", "qwen2", "qwen3", "qwen3moe"
  std::string hf_architecture;    // config.json architectures[0] written for a GGUF of this arch
  double default_rope_theta = 10000.0;  // when {arch}.rope.freq_base is absent
  bool permute_qk = false;        // llama.cpp's convert reorders q/k rows for its rotary layout
};
// The GGUF family a config is written as (Mistral and Mixtral as llama); nullopt when llama.cpp has none that
// Endor writes (OPT).
std::optional<GgufFamily> gguf_family(const ModelConfig& config);
// The family of a GGUF general.architecture; nullopt when Endor reads none of that name.
std::optional<GgufFamily> gguf_family(const std::string& gguf_arch);
// "llama, qwen2, qwen3": the GGUF architectures Endor reads and writes (for error messages).
std::string gguf_family_names();

}  // namespace endor
