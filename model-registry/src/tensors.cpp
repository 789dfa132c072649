// Every family's tensors: canonical names, shapes, groups and order, what is required and what is
// prunable, and llama.cpp's names. The only list of tensor names in Endor: the packer's checks and
// order, GGUF import and export, and the runtime's model loading all read it from here.
#include <algorithm>
#include <regex>

#include "endor/format.h"
#include "endor/model_registry.h"

namespace endor {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

using Group = TensorRole::Group;

// One module of a family's table: where it lives, its name relative to that place, its shapes.
struct ModuleRow {
  Module module;
  std::string name;              // relative to the model prefix (embed/head) or the block prefix
  std::vector<uint64_t> weight;  // shape of ".weight"; empty: the module has none
  bool weight_required;
  std::vector<uint64_t> bias;    // shape of ".bias"; empty: the family lists none
  bool bias_required;
  const char* gguf;              // llama.cpp's part name; nullptr: none
  bool gguf_bias;                // the bias has a llama.cpp name too
  int32_t expert = -1;           // an MoE expert's Gate/Up/Down: its index
};

struct FamilyTable {
  std::string model_prefix;      // "model." or "model.decoder."
  std::vector<ModuleRow> embed, block, head;
  std::vector<Module> linears;   // block Linears, in execution order (an MoE block: every expert's, expert by expert)
};

FamilyTable opt_table(const ModelConfig& c) {
  const uint64_t H = c.hidden, V = c.vocab, F = c.intermediate, Dw = c.word_embed_dim;
  const bool affine = c.layer_norm_affine, bias = c.opt_bias, proj = Dw != H;
  const bool final_norm = c.final_layer_norm && affine;
  FamilyTable t;
  t.model_prefix = "model.decoder.";
  t.embed = {{Module::TokenEmbed, "embed_tokens", {V, Dw}, true, {}, false, nullptr, false},
             {Module::PositionEmbed, "embed_positions", {uint64_t(c.max_positions) + 2, H}, true, {}, false, nullptr, false}};
  if (proj) t.embed.push_back({Module::ProjectIn, "project_in", {H, Dw}, true, {}, false, nullptr, false});
  t.block = {{Module::AttnNorm, "self_attn_layer_norm", {H}, affine, {H}, affine, nullptr, false},
             {Module::Q, "self_attn.q_proj", {H, H}, true, {H}, bias, nullptr, false},
             {Module::K, "self_attn.k_proj", {H, H}, true, {H}, bias, nullptr, false},
             {Module::V, "self_attn.v_proj", {H, H}, true, {H}, bias, nullptr, false},
             {Module::O, "self_attn.out_proj", {H, H}, true, {H}, bias, nullptr, false},
             {Module::MlpNorm, "final_layer_norm", {H}, affine, {H}, affine, nullptr, false},
             {Module::Fc1, "fc1", {F, H}, true, {F}, bias, nullptr, false},
             {Module::Fc2, "fc2", {H, F}, true, {H}, bias, nullptr, false}};
  t.head = {{Module::FinalNorm, "final_layer_norm", {H}, final_norm, {H}, final_norm, nullptr, false}};
  if (proj) t.head.push_back({Module::ProjectOut, "project_out", {Dw, H}, true, {}, false, nullptr, false});
  // The head is "lm_head.weight", outside the model prefix (make_table special-cases the name).
  t.head.push_back({Module::LmHead, "lm_head", {V, Dw}, !c.tie_word_embeddings, {}, false, nullptr, false});
  t.linears = {Module::Q, Module::K, Module::V, Module::O, Module::Fc1, Module::Fc2};
  return t;
}

// An MoE block's MLP: the router, then each expert's gate, up and down (transformers' names:
// Qwen3-MoE "mlp.gate" and "mlp.experts.E.{gate,up,down}_proj", Mixtral "block_sparse_moe.gate" and
// "block_sparse_moe.experts.E.{w1,w3,w2}"). llama.cpp names the router ffn_gate_inp and stacks the
// experts into one tensor per Linear, [n_experts, rows, cols] (ffn_{gate,up,down}_exps): every
// expert's spec carries that stacked name, and its expert index is its slice.
void add_experts(const ModelConfig& c, FamilyTable& t) {
  const uint64_t H = c.hidden, E = c.n_experts, I = c.moe_intermediate;
  const bool mixtral = c.model_type == "mixtral";
  const std::string base = mixtral ? "block_sparse_moe." : "mlp.";
  t.block.push_back({Module::Router, base + "gate", {E, H}, true, {}, false, "ffn_gate_inp", false});
  const char* gate = mixtral ? "w1" : "gate_proj";
  const char* up = mixtral ? "w3" : "up_proj";
  const char* down = mixtral ? "w2" : "down_proj";
  for (uint32_t e = 0; e < c.n_experts; ++e) {
    const std::string prefix = base + "experts." + std::to_string(e) + ".";
    const int32_t x = int32_t(e);
    t.block.push_back({Module::Gate, prefix + gate, {I, H}, true, {}, false, "ffn_gate_exps", false, x});
    t.block.push_back({Module::Up, prefix + up, {I, H}, true, {}, false, "ffn_up_exps", false, x});
    t.block.push_back({Module::Down, prefix + down, {H, I}, true, {}, false, "ffn_down_exps", false, x});
  }
}

// Llama, Mistral, Qwen2 and Qwen3. Biases the config does not promise are listed as optional
// (shape-checked when a checkpoint has them); only Qwen2's q/k/v biases have llama.cpp names.
FamilyTable llama_table(const ModelConfig& c) {
  const uint64_t H = c.hidden, V = c.vocab, I = c.intermediate, D = c.head_dim;
  const uint64_t q = uint64_t(c.n_heads) * D, kv = uint64_t(c.n_kv_heads) * D;
  const bool qwen2 = c.model_type == "qwen2";
  FamilyTable t;
  t.model_prefix = "model.";
  t.embed = {{Module::TokenEmbed, "embed_tokens", {V, H}, true, {}, false, "token_embd", false}};
  t.block = {{Module::AttnNorm, "input_layernorm", {H}, true, {}, false, "attn_norm", false},
             {Module::Q, "self_attn.q_proj", {q, H}, true, {q}, c.qkv_bias, "attn_q", qwen2},
             {Module::K, "self_attn.k_proj", {kv, H}, true, {kv}, c.qkv_bias, "attn_k", qwen2},
             {Module::V, "self_attn.v_proj", {kv, H}, true, {kv}, c.qkv_bias, "attn_v", qwen2}};
  if (c.qk_norm) {
    t.block.push_back({Module::QNorm, "self_attn.q_norm", {D}, true, {}, false, "attn_q_norm", false});
    t.block.push_back({Module::KNorm, "self_attn.k_norm", {D}, true, {}, false, "attn_k_norm", false});
  }
  t.block.push_back({Module::O, "self_attn.o_proj", {H, q}, true, {H}, c.o_bias, "attn_output", false});
  t.block.push_back({Module::MlpNorm, "post_attention_layernorm", {H}, true, {}, false, "ffn_norm", false});
  t.linears = {Module::Q, Module::K, Module::V, Module::O};
  if (c.moe()) {
    add_experts(c, t);
  } else {
    t.block.push_back({Module::Gate, "mlp.gate_proj", {I, H}, true, {I}, c.mlp_bias, "ffn_gate", false});
    t.block.push_back({Module::Up, "mlp.up_proj", {I, H}, true, {I}, c.mlp_bias, "ffn_up", false});
    t.block.push_back({Module::Down, "mlp.down_proj", {H, I}, true, {H}, c.mlp_bias, "ffn_down", false});
    t.linears.insert(t.linears.end(), {Module::Gate, Module::Up, Module::Down});
  }
  t.head = {{Module::FinalNorm, "norm", {H}, true, {}, false, "output_norm", false},
            {Module::LmHead, "lm_head", {V, H}, !c.tie_word_embeddings, {}, false, "output", false}};
  return t;
}

}  // namespace

TensorRole classify_tensor(const std::string& name, const std::vector<uint64_t>& shape) {
  static const std::regex kLayer(R"((^|\.)layers\.(\d+)\.)");
  TensorRole r;
  std::smatch m;
  if (std::regex_search(name, m, kLayer)) {
    r.group = Group::Layer;
    const std::string digits = m[2].str();
    r.layer = digits.size() > 9 ? UINT32_MAX : uint32_t(std::stoul(digits));
    const bool weight = name.size() >= 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    static const std::regex kRouter(R"(\.(mlp|block_sparse_moe)\.gate\.weight$)");
    r.router = weight && std::regex_search(name, kRouter);
    r.prunable = weight && shape.size() == 2 && !r.router;
    return r;
  }
  const bool tokens = name.find("embed_tokens.") != std::string::npos;
  r.embedding = tokens || name.find("embed_positions.") != std::string::npos;
  r.group = r.embedding || name.find("project_in.") != std::string::npos ? Group::Embed : Group::Head;
  const bool weight = name.size() >= 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
  r.head_matrix = shape.size() == 2 && ((tokens && weight) || name == "lm_head.weight");
  return r;
}

std::string canonical_tensor_name(Architecture family, const std::string& n) {
  if (starts_with(n, "model.") || n == "lm_head.weight" || n == "lm_head.bias") return n;
  if (family == Architecture::Opt) {
    if (starts_with(n, "decoder.")) return "model." + n;
  } else {
    if (starts_with(n, "embed_tokens.") || starts_with(n, "layers.") || starts_with(n, "norm.")) return "model." + n;
  }
  return n;
}

bool is_rotary_buffer(const std::string& name) {
  static const std::string kSuffix = "rotary_emb.inv_freq";
  return name.size() >= kSuffix.size() && name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

ModelTensors::ModelTensors(const ModelConfig& config) : config_(config) {
  const FamilyTable t = config.arch == Architecture::Opt ? opt_table(config) : llama_table(config);
  uint32_t rank = 0;
  std::map<std::pair<Module, int32_t>, uint32_t> rank_of;  // (module, expert)
  for (const auto* rows : {&t.embed, &t.block, &t.head})
    for (const ModuleRow& row : *rows) rank_of[{row.module, row.expert}] = rank++;
  // One module's bias, then its weight: the (group, layer, rank, name) order endor-pack writes.
  auto add_module = [&](const ModuleRow& row, Group group, uint32_t layer, const std::string& prefix,
                        const std::string& gguf_prefix) {
    const std::string base = row.module == Module::LmHead ? row.name : prefix + row.name;
    auto add = [&](bool bias, const std::vector<uint64_t>& shape, bool required, bool gguf) {
      TensorSpec s;
      s.name = base + (bias ? ".bias" : ".weight");
      s.shape = shape;
      s.module = row.module;
      s.bias = bias;
      s.group = group;
      s.layer = layer;
      s.expert = row.expert;
      s.rank = rank_of[{row.module, row.expert}];
      s.required = required;
      s.linear = !bias && group == Group::Layer && shape.size() == 2 && row.module != Module::Router;
      if (row.gguf && gguf) s.gguf_name = gguf_prefix + row.gguf + (bias ? ".bias" : ".weight");
      by_name_[s.name] = specs_.size();
      by_module_[{s.module, s.layer, s.expert, s.bias}] = specs_.size();
      if (!s.gguf_name.empty() && s.expert >= 0) by_gguf_stacked_[s.gguf_name].push_back(specs_.size());
      else if (!s.gguf_name.empty()) by_gguf_[s.gguf_name] = specs_.size();
      specs_.push_back(std::move(s));
    };
    if (!row.bias.empty()) add(true, row.bias, row.bias_required, row.gguf_bias);
    if (!row.weight.empty()) add(false, row.weight, row.weight_required, true);
  };
  for (const ModuleRow& row : t.embed) add_module(row, Group::Embed, 0, t.model_prefix, "");
  for (uint32_t l = 0; l < config.n_layers; ++l)
    for (const ModuleRow& row : t.block)
      add_module(row, Group::Layer, l, block_prefix(l), "blk." + std::to_string(l) + ".");
  for (const ModuleRow& row : t.head) add_module(row, Group::Head, 0, t.model_prefix, "");
  for (Module m : t.linears)
    for (const ModuleRow& row : t.block)
      if (row.module == m) linears_.push_back({row.name, m, -1, row.weight[0], row.weight[1]});
  for (const ModuleRow& row : t.block)  // an MoE block's experts, in execution order
    if (row.expert >= 0) linears_.push_back({row.name, row.module, row.expert, row.weight[0], row.weight[1]});
}

std::string ModelTensors::block_prefix(uint32_t layer) const {
  return (config_.arch == Architecture::Opt ? "model.decoder.layers." : "model.layers.") + std::to_string(layer) + ".";
}

const TensorSpec* ModelTensors::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &specs_[it->second];
}

const TensorSpec* ModelTensors::find_gguf(const std::string& name) const {
  const auto it = by_gguf_.find(name);
  return it == by_gguf_.end() ? nullptr : &specs_[it->second];
}

std::vector<const TensorSpec*> ModelTensors::find_gguf_stacked(const std::string& name) const {
  std::vector<const TensorSpec*> out;
  const auto it = by_gguf_stacked_.find(name);
  if (it != by_gguf_stacked_.end())
    for (size_t i : it->second) out.push_back(&specs_[i]);
  return out;
}

const TensorSpec& ModelTensors::get(Module module, uint32_t layer, bool bias, int32_t expert) const {
  const bool block = module >= Module::AttnNorm && module < Module::FinalNorm;
  const auto it = by_module_.find({module, block ? layer : 0, expert, bias});
  if (it != by_module_.end()) return specs_[it->second];
  throw Error("model registry: a " + config_.model_type + " model has no such tensor (module " +
              std::to_string(int(module)) + (bias ? " bias" : " weight") + ", block " + std::to_string(layer) +
              (expert >= 0 ? ", expert " + std::to_string(expert) : std::string()) + ")");
}

bool ModelTensors::has(Module module) const {
  for (const TensorSpec& s : specs_)
    if (s.module == module) return true;
  return false;
}

uint32_t ModelTensors::rank_in_group(const std::string& name) const {
  if (const TensorSpec* s = find(name)) return s->rank;
  // "<module>.<anything>": the module's rank (an adapter or buffer travels with its module).
  const size_t dot = name.rfind('.');
  uint32_t last = 0;
  for (const TensorSpec& s : specs_) {
    last = std::max(last, s.rank + 1);
    const size_t module_end = s.name.rfind('.');
    if (dot != std::string::npos && dot >= module_end && name.compare(0, module_end + 1, s.name, 0, module_end + 1) == 0)
      return s.rank;
  }
  return last;
}

namespace {
const GgufFamily kGgufFamilies[] = {
    {"llama", "LlamaForCausalLM", 10000.0, true},
    {"qwen2", "Qwen2ForCausalLM", 1000000.0, false},
    {"qwen3", "Qwen3ForCausalLM", 1000000.0, false},
    {"qwen3moe", "Qwen3MoeForCausalLM", 1000000.0, false},
};
}  // namespace

std::optional<GgufFamily> gguf_family(const ModelConfig& c) {
  if (c.arch == Architecture::Opt) return std::nullopt;
  // llama.cpp writes Mistral and Mixtral as llama (Mixtral with {arch}.expert_count).
  if (c.model_type == "mistral" || c.model_type == "mixtral") return gguf_family(std::string("llama"));
  return gguf_family(c.model_type == "qwen3_moe" ? std::string("qwen3moe") : c.model_type);
}

std::optional<GgufFamily> gguf_family(const std::string& arch) {
  for (const GgufFamily& f : kGgufFamilies)
    if (f.arch == arch) return f;
  return std::nullopt;
}

std::string gguf_family_names() {
  std::string out;
  for (const GgufFamily& f : kGgufFamilies) out += (out.empty() ? "" : ", ") + f.arch;
  return out;
}

}  // namespace endor
