// A GGUF of a family the model registry knows (gguf_family) as a Hugging Face checkpoint: config.json
// from `{arch}.*` metadata, tensor names (the registry's) and layouts as transformers' GGUF loader
// gives them, and the tokenizer files.
#include <cmath>
#include <regex>

#include "detail.h"
#include "endor/gguf.h"

namespace endor {

using packer_detail::fail;

namespace {

struct Meta {
  const GgufHeader& h;
  const std::string& where;

  const GgufValue* get(const std::string& key) const { return h.find(key); }
  uint64_t count(const std::string& key) const {
    const GgufValue* v = get(key);
    if (!v) fail(where, "metadata key '" + key + "' is missing");
    return count_value(*v, key);
  }
  uint64_t count_or(const std::string& key, uint64_t fallback) const {
    const GgufValue* v = get(key);
    return v ? count_value(*v, key) : fallback;
  }
  uint64_t count_value(const GgufValue& v, const std::string& key) const {
    uint64_t x = 0;
    if (!v.as_u64(&x) || x == 0 || x > (1u << 24))
      fail(where, "metadata '" + key + "' must be an integer in [1, 16777216]");
    return x;
  }
  double real_or(const std::string& key, double fallback) const {
    const GgufValue* v = get(key);
    if (!v) return fallback;
    if (v->type == GgufValueType::F32 || v->type == GgufValueType::F64) {
      if (!std::isfinite(v->f)) fail(where, "metadata '" + key + "' must be finite");
      return v->f;
    }
    uint64_t x = 0;
    if (v->as_u64(&x)) return double(x);
    fail(where, "metadata '" + key + "' must be a number");
  }
  std::string text(const std::string& key) const {
    const GgufValue* v = get(key);
    if (!v) fail(where, "metadata key '" + key + "' is missing");
    if (v->type != GgufValueType::String) fail(where, "metadata '" + key + "' must be a string");
    return v->str;
  }
};

// {arch}.expert_count > 0: the mixture-of-experts keys of config.json. llama.cpp writes Mixtral as
// "llama" with experts (feed_forward_length is then the experts' width) and Qwen3-MoE as "qwen3moe"
// (expert_feed_forward_length); both renormalize the top-k routing weights to sum 1.
void moe_config(const Meta& m, const std::string& arch, nlohmann::json& c) {
  const std::string a = arch + ".";
  const uint64_t experts = m.count(a + "expert_count"), used = m.count(a + "expert_used_count");
  if (arch == "llama") {
    c["architectures"] = {"MixtralForCausalLM"};
    c["model_type"] = "mixtral";
    c["num_local_experts"] = experts;
    c["intermediate_size"] = m.count_or(a + "expert_feed_forward_length", m.count(a + "feed_forward_length"));
  } else if (arch == "qwen3moe") {
    c["model_type"] = "qwen3_moe";
    c["num_experts"] = experts;
    c["moe_intermediate_size"] = m.count(a + "expert_feed_forward_length");
    c["norm_topk_prob"] = true;
  } else {
    fail(m.where, "a " + arch + " model with experts (" + a + "expert_count " + std::to_string(experts) +
                      ") is not supported (mixture-of-experts GGUFs: llama (Mixtral), qwen3moe)");
  }
  c["num_experts_per_tok"] = used;
  uint64_t shared = 0;
  if (const GgufValue* v = m.get(a + "expert_shared_count"); v && v->as_u64(&shared) && shared > 0)
    fail(m.where, "shared experts (" + a + "expert_shared_count " + std::to_string(shared) + ") are not supported");
}

// The experts of a stacked tensor [n_experts, rows, cols] as one tensor each: slice e is rows
// e·rows .. of the file's tensor, whole quantization blocks since a row is.
void add_expert_slices(const GgufTensorInfo& t, const std::vector<const TensorSpec*>& experts, const std::string& where,
                       std::vector<GgufModelTensor>& out) {
  const std::vector<uint64_t> shape = t.torch_shape();
  if (shape.size() != 3 || shape[0] != experts.size() || t.n_bytes % experts.size() != 0)
    fail(where, "tensor '" + t.name + "' is not [" + std::to_string(experts.size()) + " experts, rows, columns]");
  const uint64_t slice_bytes = t.n_bytes / experts.size();
  for (size_t e = 0; e < experts.size(); ++e) {
    auto slice = std::make_shared<GgufTensorInfo>(t);
    slice->name = t.name + "[" + std::to_string(e) + "]";
    slice->ne = {t.ne[0], t.ne[1]};
    slice->offset = t.offset + e * slice_bytes;
    slice->n_bytes = slice_bytes;
    GgufModelTensor mt;
    mt.hf_name = experts[e]->name;
    mt.shape = {shape[1], shape[2]};
    mt.slice = slice;
    mt.info = slice.get();
    mt.stacked = &t;
    out.push_back(std::move(mt));
  }
}

}  // namespace

uint64_t gguf_unpermuted_row(uint64_t r, uint64_t rows, uint32_t heads) {
  // HF row r = (head h, half s, i) with i < d = rows / heads / 2; llama.cpp stored it at (h, i, s).
  const uint64_t head_rows = rows / heads, d = head_rows / 2;
  const uint64_t h = r / head_rows, within = r % head_rows, s = within / d, i = within % d;
  return h * head_rows + i * 2 + s;
}

GgufModel gguf_to_model(const GgufHeader& h, const std::string& where) {
  Meta m{h, where};
  const std::string arch = m.text("general.architecture");
  const std::optional<GgufFamily> family = gguf_family(arch);
  if (!family)
    fail(where, "architecture '" + packer_detail::printable(arch) + "' is not supported (supported: " + gguf_family_names() +
                    "; Mistral files say llama)");
  const std::string a = arch + ".";
  GgufModel out;
  nlohmann::json& c = out.config;
  const uint64_t hidden = m.count(a + "embedding_length"), heads = m.count(a + "attention.head_count");
  const uint64_t kv_heads = m.count_or(a + "attention.head_count_kv", heads);
  const uint64_t layers = m.count(a + "block_count");
  if (heads % kv_heads != 0) fail(where, "attention.head_count must be a multiple of attention.head_count_kv");
  c["architectures"] = {family->hf_architecture};
  c["model_type"] = arch;
  c["hidden_size"] = hidden;
  c["intermediate_size"] = m.count(a + "feed_forward_length");
  c["num_hidden_layers"] = layers;
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = kv_heads;
  uint64_t head_dim = m.count_or(a + "attention.key_length", 0);
  if (!head_dim && arch == "llama") head_dim = m.count_or(a + "rope.dimension_count", 0);
  if (!head_dim) {
    if (hidden % heads != 0) fail(where, "embedding_length is not a multiple of attention.head_count and no key_length is given");
    head_dim = hidden / heads;
  }
  if (m.count_or(a + "attention.value_length", head_dim) != head_dim)
    fail(where, "attention.value_length differs from key_length (not supported)");
  if (m.count_or(a + "rope.dimension_count", head_dim) != head_dim)
    fail(where, "rope.dimension_count differs from the head size (partial rotary embeddings are not supported)");
  c["head_dim"] = head_dim;
  c["max_position_embeddings"] = m.count(a + "context_length");
  c["rms_norm_eps"] = m.real_or(a + "attention.layer_norm_rms_epsilon", 1e-6);
  c["rope_theta"] = m.real_or(a + "rope.freq_base", family->default_rope_theta);
  c["hidden_act"] = "silu";
  if (const GgufValue* st = m.get(a + "rope.scaling.type")) {
    const std::string type = st->type == GgufValueType::String ? st->str : "";
    if (type == "linear") {
      c["rope_scaling"] = {{"type", "linear"}, {"factor", m.real_or(a + "rope.scaling.factor", 1.0)}};
    } else if (type != "none") {
      fail(where, "rope scaling '" + packer_detail::printable(type) + "' is not supported (only linear)");
    }
  }
  if (h.tensor("rope_freqs.weight"))
    fail(where, "tensor 'rope_freqs.weight' (Llama-3.1-style rope scaling) is not supported");
  if (const GgufValue* e = m.get(a + "expert_count"); e && e->u > 0) moe_config(m, arch, c);

  // Tokenizer: vocab size from the token list unless given.
  const GgufValue* tokens = m.get("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufValueType::Array || tokens->element_type != GgufValueType::String)
    fail(where, "metadata 'tokenizer.ggml.tokens' (a string array) is missing: the file holds no tokenizer");
  c["vocab_size"] = m.count_or(a + "vocab_size", tokens->array.size());
  for (const auto& [key, hf] : {std::pair<const char*, const char*>{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                                {"tokenizer.ggml.eos_token_id", "eos_token_id"},
                                {"tokenizer.ggml.padding_token_id", "pad_token_id"}}) {
    uint64_t id = 0;
    if (const GgufValue* v = m.get(key)) {
      if (!v->as_u64(&id) || id >= tokens->array.size())
        fail(where, std::string("metadata '") + key + "' is not a token id of the vocabulary");
      c[hf] = id;
      if (std::string(hf) != "pad_token_id") out.generation_config[hf] = id;
    }
  }
  c["tie_word_embeddings"] = h.tensor("output.weight") == nullptr;

  // Tensors: llama.cpp's names -> the registry's canonical ones.
  const ModelTensors specs(parse_model_config(c, where, ""));
  static const std::regex block_re(R"(blk\.(\d+)\.([a-z_]+)\.(weight|bias))");
  for (const GgufTensorInfo& t : h.tensors) {
    if (!ggml_type_readable(t.type))
      fail(where, "tensor '" + t.name + "' has type " + ggml_type_name(t.type) +
                      "; only " + ggml_readable_types() + " tensors can be read");
    if (const std::vector<const TensorSpec*> experts = specs.find_gguf_stacked(t.name); !experts.empty()) {
      add_expert_slices(t, experts, where, out.tensors);
      continue;
    }
    GgufModelTensor mt;
    mt.info = &t;
    mt.shape = t.torch_shape();
    const TensorSpec* spec = specs.find_gguf(t.name);
    std::smatch sm;
    if (!spec && std::regex_match(t.name, sm, block_re)) {  // say why a block tensor has no counterpart
      const std::string part = sm[2], kind = sm[3];
      if (specs.find_gguf("blk.0." + part + ".weight")) {
        if (sm[1].length() > 6 || std::stoull(sm[1]) >= layers)
          fail(where, "tensor '" + t.name + "' belongs to a layer past block_count " + std::to_string(layers));
        if (kind == "bias") fail(where, "tensor '" + t.name + "': this bias is not supported for " + arch);
      }
    }
    if (!spec) fail(where, "tensor '" + t.name + "' has no counterpart in a " + arch + " model");
    mt.hf_name = spec->name;
    // llama.cpp's convert permutes llama's q/k rows for its rotary layout; transformers undoes it.
    if (family->permute_qk && !spec->bias && (spec->module == Module::Q || spec->module == Module::K)) {
      mt.permute_heads = uint32_t(spec->module == Module::Q ? heads : kv_heads);
      if (mt.shape.size() != 2 || mt.shape[0] % (2 * mt.permute_heads) != 0)
        fail(where, "tensor '" + t.name + "' has " + std::to_string(mt.shape[0]) + " rows, not 2 × a multiple of its " +
                        std::to_string(mt.permute_heads) + " heads");
    }
    out.tensors.push_back(std::move(mt));
  }

  try {  // every string was checked to be UTF-8; this keeps a missed one an Error, not a crash
    out.tokenizer_json = gguf_tokenizer_json(h, where).dump();
    out.tokenizer_config_json = gguf_tokenizer_config(h, where).dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    fail(where, std::string("the tokenizer metadata cannot be written as JSON: ") + e.what());
  }
  return out;
}

}  // namespace endor
