// What config.json promises about a model (architecture, dimensions) and the naming rules of the
// supported families: canonical tensor names, layer groups, prunable Linears, expected shapes.
#include <regex>

#include "detail.h"
#include "endor/packer.h"
#include "model_rules.h"

namespace endor {

using packer_detail::fail;

namespace {

// An optional non-negative integer of config.json; `fallback` when absent or null.
uint64_t config_u64(const nlohmann::json& c, const char* key, uint64_t fallback, const std::string& where) {
  const auto it = c.find(key);
  if (it == c.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0)
    fail(where, std::string("\"") + key + "\" must be a non-negative integer, got " + it->dump());
  return it->get<uint64_t>();
}

uint64_t required_u64(const nlohmann::json& c, const char* key, const std::string& where) {
  if (!c.contains(key) || c[key].is_null()) fail(where, std::string("missing \"") + key + "\"");
  const uint64_t v = config_u64(c, key, 0, where);
  if (v == 0) fail(where, std::string("\"") + key + "\" must be positive");
  return v;
}

bool config_bool(const nlohmann::json& c, const char* key, bool fallback, const std::string& where) {
  const auto it = c.find(key);
  if (it == c.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(where, std::string("\"") + key + "\" must be true or false, got " + it->dump());
  return it->get<bool>();
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

ModelShape read_model_shape(const nlohmann::json& config, const std::string& where) {
  if (!config.is_object()) fail(where, "config.json is not a JSON object");
  std::string type;
  if (config.contains("model_type") && config["model_type"].is_string()) type = config["model_type"].get<std::string>();
  if (type.empty() && config.contains("architectures") && config["architectures"].is_array() &&
      !config["architectures"].empty() && config["architectures"][0].is_string()) {
    const std::string arch = config["architectures"][0].get<std::string>();
    if (arch == "OPTForCausalLM") type = "opt";
    if (arch == "LlamaForCausalLM") type = "llama";
    if (arch == "MistralForCausalLM") type = "mistral";
    if (arch == "Qwen2ForCausalLM") type = "qwen2";
  }
  ModelShape s;
  s.model_type = type;
  if (type == "opt") {
    s.family = ModelFamily::Opt;
  } else if (type == "llama" || type == "mistral" || type == "qwen2") {
    s.family = ModelFamily::Llama;
  } else {
    fail(where, "unsupported architecture '" + (type.empty() ? std::string("(no model_type)") : type) +
                    "' (supported: opt, llama, mistral, qwen2)");
  }
  s.vocab = required_u64(config, "vocab_size", where);
  s.hidden = required_u64(config, "hidden_size", where);
  s.layers = required_u64(config, "num_hidden_layers", where);
  s.heads = required_u64(config, "num_attention_heads", where);
  if (s.family == ModelFamily::Opt) {
    s.intermediate = required_u64(config, "ffn_dim", where);
    s.word_embed_dim = config_u64(config, "word_embed_proj_dim", s.hidden, where);
    s.max_positions = required_u64(config, "max_position_embeddings", where);
    s.kv_heads = s.heads;
    if (s.hidden % s.heads != 0) fail(where, "hidden_size is not a multiple of num_attention_heads");
    s.head_dim = s.hidden / s.heads;
    s.tied_head = config_bool(config, "tie_word_embeddings", true, where);  // OPTConfig default
  } else {
    s.intermediate = required_u64(config, "intermediate_size", where);
    s.word_embed_dim = s.hidden;
    s.max_positions = config_u64(config, "max_position_embeddings", 0, where);
    s.kv_heads = config_u64(config, "num_key_value_heads", s.heads, where);
    if (s.kv_heads == 0 || s.heads % s.kv_heads != 0)
      fail(where, "num_attention_heads must be a multiple of num_key_value_heads");
    if (!config.contains("head_dim") || config["head_dim"].is_null()) {
      if (s.hidden % s.heads != 0) fail(where, "hidden_size is not a multiple of num_attention_heads");
      s.head_dim = s.hidden / s.heads;
    } else {
      s.head_dim = required_u64(config, "head_dim", where);
    }
    s.tied_head = config_bool(config, "tie_word_embeddings", false, where);
  }
  return s;
}

std::string canonical_tensor_name(ModelFamily family, const std::string& n) {
  if (starts_with(n, "model.") || n == "lm_head.weight" || n == "lm_head.bias") return n;
  if (family == ModelFamily::Opt) {
    if (starts_with(n, "decoder.")) return "model." + n;
  } else {
    if (starts_with(n, "embed_tokens.") || starts_with(n, "layers.") || starts_with(n, "norm.")) return "model." + n;
  }
  return n;
}

TensorRole classify_tensor(const std::string& name, const std::vector<uint64_t>& shape) {
  static const std::regex kLayer(R"((^|\.)layers\.(\d+)\.)");
  TensorRole r;
  std::smatch m;
  if (std::regex_search(name, m, kLayer)) {
    r.group = TensorRole::Group::Layer;
    const std::string digits = m[2].str();
    r.layer = digits.size() > 9 ? UINT32_MAX : uint32_t(std::stoul(digits));
    const bool weight = name.size() >= 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    r.prunable = weight && shape.size() == 2;
    return r;
  }
  if (name.find("embed_tokens.") != std::string::npos || name.find("embed_positions.") != std::string::npos ||
      name.find("project_in.") != std::string::npos)
    r.group = TensorRole::Group::Embed;
  else
    r.group = TensorRole::Group::Head;
  return r;
}

namespace model_rules {

std::vector<TensorRule> rules(const ModelShape& s, const nlohmann::json& config, const std::string& where) {
  std::vector<TensorRule> out;
  auto add = [&](std::string name, std::vector<uint64_t> shape, bool required) {
    out.push_back({std::move(name), std::move(shape), required});
  };
  const uint64_t H = s.hidden, V = s.vocab, I = s.intermediate;
  if (s.family == ModelFamily::Opt) {
    const bool affine = config_bool(config, "layer_norm_elementwise_affine", true, where);
    const bool bias = config_bool(config, "enable_bias", true, where);
    const bool final_norm = config_bool(config, "do_layer_norm_before", true, where) &&
                            !config_bool(config, "_remove_final_layer_norm", false, where);
    const uint64_t Dw = s.word_embed_dim;
    const std::string d = "model.decoder.";
    add(d + "embed_tokens.weight", {V, Dw}, true);
    add(d + "embed_positions.weight", {s.max_positions + 2, H}, true);
    if (Dw != H) {
      add(d + "project_in.weight", {H, Dw}, true);
      add(d + "project_out.weight", {Dw, H}, true);
    }
    add(d + "final_layer_norm.weight", {H}, final_norm && affine);
    add(d + "final_layer_norm.bias", {H}, final_norm && affine);
    for (uint64_t i = 0; i < s.layers; ++i) {
      const std::string p = d + "layers." + std::to_string(i) + ".";
      for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
        add(p + "self_attn." + proj + ".weight", {H, H}, true);
        add(p + "self_attn." + proj + ".bias", {H}, bias);
      }
      add(p + "fc1.weight", {I, H}, true);
      add(p + "fc1.bias", {I}, bias);
      add(p + "fc2.weight", {H, I}, true);
      add(p + "fc2.bias", {H}, bias);
      for (const char* norm : {"self_attn_layer_norm", "final_layer_norm"}) {
        add(p + norm + ".weight", {H}, affine);
        add(p + norm + ".bias", {H}, affine);
      }
    }
    add("lm_head.weight", {V, Dw}, !s.tied_head);
  } else {
    const uint64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
    add("model.embed_tokens.weight", {V, H}, true);
    add("model.norm.weight", {H}, true);
    for (uint64_t i = 0; i < s.layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      add(p + "self_attn.q_proj.weight", {q, H}, true);
      add(p + "self_attn.k_proj.weight", {kv, H}, true);
      add(p + "self_attn.v_proj.weight", {kv, H}, true);
      add(p + "self_attn.o_proj.weight", {H, q}, true);
      add(p + "mlp.gate_proj.weight", {I, H}, true);
      add(p + "mlp.up_proj.weight", {I, H}, true);
      add(p + "mlp.down_proj.weight", {H, I}, true);
      add(p + "input_layernorm.weight", {H}, true);
      add(p + "post_attention_layernorm.weight", {H}, true);
      // Optional biases (Qwen2 q/k/v; Llama attention_bias / mlp_bias): checked when present.
      add(p + "self_attn.q_proj.bias", {q}, false);
      add(p + "self_attn.k_proj.bias", {kv}, false);
      add(p + "self_attn.v_proj.bias", {kv}, false);
      add(p + "self_attn.o_proj.bias", {H}, false);
      add(p + "mlp.gate_proj.bias", {I}, false);
      add(p + "mlp.up_proj.bias", {I}, false);
      add(p + "mlp.down_proj.bias", {H}, false);
    }
    add("lm_head.weight", {V, H}, !s.tied_head);
  }
  return out;
}

int rank_in_group(ModelFamily family, const std::string& name) {
  static const char* kOpt[] = {"embed_tokens.", "embed_positions.", "project_in.", "self_attn_layer_norm.",
                               "q_proj.", "k_proj.", "v_proj.", "out_proj.", "final_layer_norm.", "fc1.",
                               "fc2.", "project_out.", "lm_head."};
  static const char* kLlama[] = {"embed_tokens.", "input_layernorm.", "q_proj.", "k_proj.", "v_proj.", "o_proj.",
                                 "post_attention_layernorm.", "gate_proj.", "up_proj.", "down_proj.", "norm.",
                                 "lm_head."};
  int rank = 0;
  if (family == ModelFamily::Opt) {
    for (const char* k : kOpt) {
      if (name.find(k) != std::string::npos) return rank;
      ++rank;
    }
  } else {
    for (const char* k : kLlama) {
      if (name.find(k) != std::string::npos) return rank;
      ++rank;
    }
  }
  return rank;
}

}  // namespace model_rules

}  // namespace endor
