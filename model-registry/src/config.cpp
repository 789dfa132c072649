// config.json -> ModelConfig for OPT and the Llama family (Llama 1/2/3, Mistral, Qwen2, Qwen3, Qwen3-MoE,
// Mixtral), with
// the defaults transformers' config classes apply when a key is absent. The one config.json parser:
// endor-pack and the runtime both call parse_model_config.
#include <cmath>
#include <string>

#include "endor/format.h"
#include "endor/model_registry.h"

namespace endor {
namespace {

using nlohmann::json;

struct ConfigReader {
  const json& cfg;
  const std::string& path;
  const std::string& source;  // "config.json", "the GGUF metadata"

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(path + (source.empty() ? "" : ": " + source) + ": " + what);
  }
  bool has(const char* key) const { return cfg.contains(key) && !cfg[key].is_null(); }

  uint32_t count(const char* key) const {
    if (!has(key)) fail(std::string("missing \"") + key + "\"");
    return count_value(cfg[key], key);
  }
  uint32_t count_or(const char* key, uint32_t fallback) const {
    return has(key) ? count_value(cfg[key], key) : fallback;
  }
  uint32_t count_value(const json& v, const char* key) const {
    // Limits keep every later size product (e.g. vocab · hidden) well inside 64 bits.
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (1 << 24))
      fail(std::string("\"") + key + "\" must be an integer in [1, 16777216], got " + v.dump());
    return static_cast<uint32_t>(v.get<int64_t>());
  }
  double real_or(const char* key, double fallback) const { return real_or(cfg, key, fallback); }
  double real_or(const json& obj, const char* key, double fallback) const {
    if (!obj.contains(key) || obj[key].is_null()) return fallback;
    if (!obj[key].is_number()) fail(std::string("\"") + key + "\" must be a number");
    double v = obj[key].get<double>();
    if (!std::isfinite(v)) fail(std::string("\"") + key + "\" must be finite");
    return v;
  }
  bool flag_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!cfg[key].is_boolean()) fail(std::string("\"") + key + "\" must be true or false");
    return cfg[key].get<bool>();
  }
  std::string text_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!cfg[key].is_string()) fail(std::string("\"") + key + "\" must be a string");
    return cfg[key].get<std::string>();
  }
  // eos_token_id / bos_token_id: int, list of ints, or null.
  std::vector<int32_t> token_ids(const char* key) const {
    std::vector<int32_t> ids;
    if (!has(key)) return ids;
    const json& v = cfg[key];
    auto add = [&](const json& x) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
        fail(std::string("\"") + key + "\" must be a token id or a list of them");
      ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    };
    if (v.is_array()) {
      for (const json& x : v) add(x);
    } else {
      add(v);
    }
    return ids;
  }
};

// The families this registry knows: model_type, and the transformers classes naming it.
struct KnownFamily {
  const char* model_type;
  const char* causal_lm;  // architectures[0] of a checkpoint
  const char* base;       // the bare model class, also accepted
};
constexpr KnownFamily kFamilies[] = {
    {"opt", "OPTForCausalLM", "OPTModel"},
    {"llama", "LlamaForCausalLM", "LlamaModel"},
    {"mistral", "MistralForCausalLM", "MistralModel"},
    {"qwen2", "Qwen2ForCausalLM", "Qwen2Model"},
    {"qwen3", "Qwen3ForCausalLM", "Qwen3Model"},
    {"qwen3_moe", "Qwen3MoeForCausalLM", "Qwen3MoeModel"},
    {"mixtral", "MixtralForCausalLM", "MixtralModel"},
};

std::string family_list(bool classes) {
  std::string out;
  for (const KnownFamily& f : kFamilies) out += std::string(out.empty() ? "" : ", ") + (classes ? f.causal_lm : f.model_type);
  return out;
}

// The family's model_type from architectures[0] and model_type. Each one given must name a known
// family, and both the same one: the packer once took model_type first and the runtime
// architectures[0], so a file where they disagreed packed as one family and ran as another.
std::string model_family(const json& cfg, const ConfigReader& r) {
  std::string by_class;
  if (cfg.contains("architectures") && cfg["architectures"].is_array() && !cfg["architectures"].empty()) {
    const json& a = cfg["architectures"][0];
    if (!a.is_string()) r.fail("\"architectures\" must be a list of strings");
    const std::string name = a.get<std::string>();
    for (const KnownFamily& f : kFamilies)
      if (name == f.causal_lm || name == f.base) by_class = f.model_type;
    if (by_class.empty()) r.fail("unsupported architecture \"" + name + "\" (supported: " + family_list(true) + ")");
  }
  const std::string type = r.text_or("model_type", "");
  if (!type.empty()) {
    bool known = false;
    for (const KnownFamily& f : kFamilies) known = known || type == f.model_type;
    if (!known) r.fail("unsupported architecture '" + type + "' (model_type; supported: " + family_list(false) + ")");
    if (!by_class.empty() && by_class != type)
      r.fail("architectures[0] names a " + by_class + " model but model_type is '" + type + "'");
    return type;
  }
  if (by_class.empty()) r.fail("names no architecture (no \"architectures\" and no \"model_type\")");
  return by_class;
}

// inv_freq_i = theta^(-2i/d) in float32 as transformers computes it, then the rope_scaling rule.
std::vector<float> rope_inv_freq(const ConfigReader& r, uint32_t head_dim, ModelConfig& c) {
  const json& cfg = r.cfg;
  // transformers 5 writes "rope_parameters" {rope_theta, rope_type, ...}; older files write
  // "rope_theta" and "rope_scaling" {type|rope_type, factor, ...}.
  json params = json::object();
  if (cfg.contains("rope_parameters") && cfg["rope_parameters"].is_object()) {
    params = cfg["rope_parameters"];
  } else if (cfg.contains("rope_scaling") && cfg["rope_scaling"].is_object()) {
    params = cfg["rope_scaling"];
  }
  const double theta = r.real_or(params, "rope_theta", r.real_or("rope_theta", 10000.0));
  if (!(theta > 1.0)) r.fail("rope_theta must be > 1");
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (params.contains(key) && params[key].is_string()) {
      type = params[key].get<std::string>();
      break;
    }
  }
  c.rope_theta = theta;
  c.rope_type = type;
  c.rope_factor = type == "default" ? 1.0 : r.real_or(params, "factor", 0.0);
  if (r.real_or(params, "partial_rotary_factor", 1.0) != 1.0)
    r.fail("partial_rotary_factor other than 1 is not supported");

  std::vector<float> inv(head_dim / 2);
  for (uint32_t i = 0; i < inv.size(); ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  if (type == "default") return inv;
  const double factor = r.real_or(params, "factor", 0.0);
  if (!(factor >= 1.0)) r.fail("rope_scaling \"" + type + "\" needs a factor >= 1");
  if (type == "linear") {
    for (float& f : inv) f = static_cast<float>(f / factor);
    return inv;
  }
  if (type == "llama3") {
    const double low = r.real_or(params, "low_freq_factor", 1.0);
    const double high = r.real_or(params, "high_freq_factor", 4.0);
    const double orig = r.real_or(params, "original_max_position_embeddings", 8192.0);
    if (!(high > low) || !(low > 0) || !(orig > 0)) r.fail("rope_scaling llama3: need high_freq_factor > low_freq_factor > 0");
    const double low_wavelen = orig / low, high_wavelen = orig / high;
    const double two_pi = 6.283185307179586;
    for (float& f : inv) {
      const double wavelen = two_pi / f;
      if (wavelen < high_wavelen) continue;  // high frequencies stay
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / factor);  // low frequencies are interpolated
      } else {
        const double s = (orig / wavelen - low) / (high - low);
        f = static_cast<float>((1 - s) * f / factor + s * f);
      }
    }
    return inv;
  }
  r.fail("unsupported rope type \"" + type + "\" (supported: default, linear, llama3)");
}

void parse_opt(const ConfigReader& r, ModelConfig& c) {
  c.arch = Architecture::Opt;
  c.hidden = r.count("hidden_size");
  c.intermediate = r.count("ffn_dim");
  c.n_layers = r.count("num_hidden_layers");
  c.n_heads = r.count("num_attention_heads");
  c.n_kv_heads = c.n_heads;
  if (c.hidden % c.n_heads != 0) r.fail("hidden_size must be a multiple of num_attention_heads");
  c.head_dim = c.hidden / c.n_heads;
  c.vocab = r.count("vocab_size");
  c.max_positions = r.count("max_position_embeddings");
  c.norm_eps = 1e-5f;  // nn.LayerNorm default; OPT's config has no eps key
  c.pre_layer_norm = r.flag_or("do_layer_norm_before", true);
  c.final_layer_norm = c.pre_layer_norm && !r.flag_or("_remove_final_layer_norm", false);
  c.opt_bias = r.flag_or("enable_bias", true);
  c.layer_norm_affine = r.flag_or("layer_norm_elementwise_affine", true);
  c.word_embed_dim = r.count_or("word_embed_proj_dim", c.hidden);
  c.tie_word_embeddings = r.flag_or("tie_word_embeddings", true);
  const std::string act = r.text_or("activation_function", "relu");
  if (act != "relu") r.fail("activation_function \"" + act + "\" is not supported (only relu)");
}

// Qwen3-MoE and Mixtral: the experts of every block. A Qwen3-MoE config whose blocks are not all
// MoE (decoder_sparse_step > 1, or mlp_only_layers) is refused: Endor's blocks share one layout.
void parse_moe(const ConfigReader& r, ModelConfig& c) {
  const bool qwen3_moe = c.model_type == "qwen3_moe";
  if (!qwen3_moe && c.model_type != "mixtral") return;
  const char* experts_key = qwen3_moe && r.has("num_experts") ? "num_experts" : "num_local_experts";
  c.n_experts = r.count(experts_key);
  c.top_k = r.count("num_experts_per_tok");
  if (c.top_k > c.n_experts)
    r.fail("num_experts_per_tok " + std::to_string(c.top_k) + " is more than " + experts_key + " " +
           std::to_string(c.n_experts));
  if (qwen3_moe) {
    c.moe_intermediate = r.count("moe_intermediate_size");
    c.norm_topk_prob = r.flag_or("norm_topk_prob", false);  // Qwen3MoeConfig's default
    if (r.count_or("decoder_sparse_step", 1) != 1)
      r.fail("decoder_sparse_step " + std::to_string(r.count("decoder_sparse_step")) +
             " mixes dense and MoE blocks, which is not supported (only 1: every block MoE)");
    if (r.has("mlp_only_layers")) {
      const nlohmann::json& dense = r.cfg["mlp_only_layers"];
      if (!dense.is_array()) r.fail("\"mlp_only_layers\" must be a list of layer indices");
      if (!dense.empty())
        r.fail("mlp_only_layers " + dense.dump() + " mixes dense and MoE blocks, which is not supported (only [])");
    }
  } else {
    c.moe_intermediate = c.intermediate;  // Mixtral's experts are intermediate_size wide
    c.norm_topk_prob = true;              // MixtralTopKRouter always renormalizes
  }
}

void parse_llama(const ConfigReader& r, ModelConfig& c) {
  c.arch = Architecture::Llama;
  c.hidden = r.count("hidden_size");
  c.intermediate = r.count("intermediate_size");
  c.n_layers = r.count("num_hidden_layers");
  c.n_heads = r.count("num_attention_heads");
  c.n_kv_heads = r.count_or("num_key_value_heads", c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    r.fail("num_attention_heads must be a multiple of num_key_value_heads");
  const bool qwen3 = c.model_type == "qwen3" || c.model_type == "qwen3_moe";
  if (c.model_type == "qwen3") {
    c.head_dim = r.count_or("head_dim", 128);  // Qwen3Config's default, not hidden / heads
  } else {
    if (!r.has("head_dim") && c.hidden % c.n_heads != 0)
      r.fail("hidden_size must be a multiple of num_attention_heads (or head_dim given)");
    c.head_dim = r.count_or("head_dim", c.hidden / c.n_heads);
  }
  if (c.head_dim % 2 != 0) r.fail("head_dim must be even for RoPE");
  c.vocab = r.count("vocab_size");
  c.max_positions = r.count("max_position_embeddings");
  const double eps = r.real_or("rms_norm_eps", 1e-6);
  if (!(eps > 0)) r.fail("rms_norm_eps must be > 0");
  c.norm_eps = static_cast<float>(eps);
  c.tie_word_embeddings = r.flag_or("tie_word_embeddings", false);
  const std::string act = r.text_or("hidden_act", "silu");
  if (act != "silu") r.fail("hidden_act \"" + act + "\" is not supported (only silu)");

  if (c.model_type == "qwen2") {
    c.qkv_bias = true;  // Qwen2Attention: q/k/v with bias, o_proj without
    c.o_bias = false;
  } else {
    c.qkv_bias = c.o_bias = r.flag_or("attention_bias", false);
  }
  c.qk_norm = qwen3;  // Qwen3(Moe)Attention: q_norm/k_norm over each head's head_dim
  c.mlp_bias = r.flag_or("mlp_bias", false);
  c.inv_freq = rope_inv_freq(r, c.head_dim, c);

  // Sliding windows: Mistral applies sliding_window to every layer; Qwen2 and Qwen3 per layer_types
  // (or, in older files, use_sliding_window and layers >= max_window_layers).
  c.sliding_window.assign(c.n_layers, 0);
  if (c.model_type == "qwen3_moe" && r.flag_or("use_sliding_window", false))
    r.fail("use_sliding_window true is not supported for qwen3_moe");
  if (c.model_type == "mistral" || c.model_type == "mixtral") {
    const uint32_t w = r.count_or("sliding_window", 0);
    c.sliding_window.assign(c.n_layers, w);
  } else if (c.model_type == "qwen2" || c.model_type == "qwen3") {
    const uint32_t w = r.flag_or("use_sliding_window", false) ? r.count_or("sliding_window", 0) : 0;
    if (r.has("layer_types")) {
      const json& types = r.cfg["layer_types"];
      if (!types.is_array() || types.size() != c.n_layers)
        r.fail("\"layer_types\" must list one type per layer");
      for (uint32_t i = 0; i < c.n_layers; ++i) {
        if (!types[i].is_string()) r.fail("\"layer_types\" must be strings");
        const std::string t = types[i].get<std::string>();
        if (t == "sliding_attention") {
          c.sliding_window[i] = w;  // Qwen2Config drops sliding_window unless use_sliding_window
        } else if (t != "full_attention") {
          r.fail("unknown layer type \"" + t + "\"");
        }
      }
    } else if (w > 0) {
      const uint32_t first = r.count_or("max_window_layers", 0);
      for (uint32_t i = first; i < c.n_layers; ++i) c.sliding_window[i] = w;
    }
  }
  parse_moe(r, c);
}

}  // namespace

ModelConfig parse_model_config(const nlohmann::json& cfg, const std::string& path, const std::string& what) {
  ConfigReader r{cfg, path, what};
  if (!cfg.is_object()) r.fail("is not a JSON object");
  ModelConfig c;
  c.model_type = model_family(cfg, r);
  if (c.model_type == "opt") {
    parse_opt(r, c);
  } else {
    parse_llama(r, c);
  }
  c.eos_token_ids = r.token_ids("eos_token_id");
  const std::vector<int32_t> bos = r.token_ids("bos_token_id");
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  return c;
}

}  // namespace endor
