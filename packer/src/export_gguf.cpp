// GGUF v3 for llama.cpp: each family the model registry names a llama.cpp architecture for
// (gguf_family; Mistral and Mixtral as llama), F16/BF16/F32 tensors and int4/int8g as Q4_1/Q4_K/Q8_0 blocks (where
// those hold the decoded values exactly) under llama.cpp's names (the registry's), `{arch}.*`
// hyperparameters from config.json (as the registry parses it; an MoE's experts stacked per Linear as
// ffn_{gate,up,down}_exps [n_experts, rows, cols]) and `tokenizer.ggml.*` from the
// container's byte-level BPE tokenizer.json. The inverse of gguf_model.cpp / gguf_tokenizer.cpp: what
// this writes, `endor-pack convert` reads back to the same weights (tests/cli/test_export.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "detail.h"
#include "endor/gguf.h"
#include "export_detail.h"

namespace endor::export_detail {

using packer_detail::fail;
using nlohmann::json;

namespace {

constexpr uint64_t kAlignment = 32;  // GGUF's default general.alignment

GgufValue gv_string(const std::string& s) {
  GgufValue v;
  v.type = GgufValueType::String;
  v.str = s;
  return v;
}
GgufValue gv_u32(uint64_t x) {
  GgufValue v;
  v.type = GgufValueType::U32;
  v.u = x;
  return v;
}
GgufValue gv_f32(double x) {
  GgufValue v;
  v.type = GgufValueType::F32;
  v.f = double(float(x));
  return v;
}
GgufValue gv_bool(bool b) {
  GgufValue v;
  v.type = GgufValueType::Bool;
  v.u = b;
  return v;
}
GgufValue gv_array(GgufValueType element, std::vector<GgufValue> items) {
  GgufValue v;
  v.type = GgufValueType::Array;
  v.element_type = element;
  v.array = std::move(items);
  return v;
}

// Little-endian serialization of GGUF values.
struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  void pod(T x) {
    const size_t at = b.size();
    b.resize(at + sizeof x);
    std::memcpy(&b[at], &x, sizeof x);
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void value(const GgufValue& v, GgufValueType type) {
    switch (type) {
      case GgufValueType::U32: pod<uint32_t>(uint32_t(v.u)); break;
      case GgufValueType::I32: pod<int32_t>(int32_t(v.i)); break;
      case GgufValueType::F32: pod<float>(float(v.f)); break;
      case GgufValueType::Bool: pod<uint8_t>(v.u ? 1 : 0); break;
      case GgufValueType::String: str(v.str); break;
      case GgufValueType::Array:
        pod<uint32_t>(uint32_t(v.element_type));
        pod<uint64_t>(v.array.size());
        for (const GgufValue& e : v.array) value(e, v.element_type);
        break;
      default: throw Error("gguf writer: value type not written by the exporter");
    }
  }
};

// One tensor of the GGUF: one container tensor, or an MoE block's experts of one Linear stacked
// [n_experts, rows, cols] (parts in expert order, each written after the other).
struct GgufTensor {
  std::vector<const TensorInfo*> parts;
  std::vector<uint64_t> shape;  // torch order (ne reversed)
  std::string name;
  GgmlType type = GgmlType::F32;
  ValueType value_type = ValueType::F32;
  uint32_t permute_heads = 0;  // llama q/k: rows to llama.cpp's rotary order
  uint64_t n_bytes = 0, offset = 0;
};

// An int4/int4k/int8g tensor as Q4_1/Q4_K/Q8_0 blocks holding its decoded values exactly
// (gguf_blocks_exact: every row dequantized as gguf-py does and compared bit for bit), rows in
// llama.cpp's order; nullopt when none does or --dtype forces floats.
bool block_candidate(const ExportJob& job, const TensorInfo& t) {
  return (t.value_type == ValueType::I4 || t.value_type == ValueType::I8G) && t.shape.size() == 2 && !job.options.dtype;
}
std::optional<GgufBlocks> exact_blocks(const ExportJob& job, const TensorInfo& t, uint32_t permute_heads) {
  if (!block_candidate(job, t)) return std::nullopt;
  const std::vector<float> w = decode_tensor(job.reader, t);
  const uint64_t rows = t.shape[0];
  return gguf_blocks_exact(job.reader.tensor(t), w.data(), [&](uint64_t r) {
    return permute_heads ? gguf_row_of_hf_row(r, rows, permute_heads) : r;
  });
}

// general.file_type (llama_ftype) for the type most matrices are written in, a block type before a
// float type on a tie: MOSTLY_Q8_0 7, MOSTLY_Q4_K_S 14, MOSTLY_Q4_1 3, MOSTLY_F16 1, MOSTLY_BF16 32,
// ALL_F32 0.
uint32_t gguf_file_type(const std::map<GgmlType, int>& matrices) {
  static const std::pair<GgmlType, uint32_t> kOrder[] = {{GgmlType::Q8_0, 7}, {GgmlType::Q4_K, 14}, {GgmlType::Q4_1, 3},
                                                         {GgmlType::F16, 1},  {GgmlType::BF16, 32}, {GgmlType::F32, 0}};
  uint32_t ftype = 0;
  int most = 0;
  for (const auto& [type, code] : kOrder) {
    const auto it = matrices.find(type);
    if (it != matrices.end() && it->second > most) {
      most = it->second;
      ftype = code;
    }
  }
  return ftype;
}

// The tensor's llama.cpp name (the registry's); a tensor without one is refused.
const TensorSpec& gguf_spec(const ExportJob& job, const ModelTensors& specs, const TensorInfo& t, const std::string& arch) {
  const TensorSpec* spec = specs.find(t.name);
  if (!spec || spec->gguf_name.empty()) fail(job.where(t), "has no llama.cpp counterpart in a " + arch + " GGUF (not exported)");
  return *spec;
}

uint64_t config_id(const json& c, const char* key) {
  const auto it = c.find(key);
  if (it == c.end()) return UINT64_MAX;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_array() && !it->empty() && (*it)[0].is_number_unsigned()) return (*it)[0].get<uint64_t>();
  return UINT64_MAX;
}

json parse_container_json(const ExportJob& job, const std::string& name) {
  const std::optional<std::string_view> bytes = job.reader.file(name);
  if (!bytes) return nullptr;
  try {
    return json::parse(*bytes);
  } catch (const json::exception&) {
    fail(job.where(), "the container's " + name + " is not valid JSON");
  }
}

// tokenizer.ggml.* from tokenizer.json (+ tokenizer_config.json, chat_template.jinja).
std::vector<std::pair<std::string, GgufValue>> tokenizer_metadata(const ExportJob& job, const json& config) {
  const std::string where = job.where();
  const json tok = parse_container_json(job, "tokenizer.json");
  if (tok.is_null()) fail(where, "holds no tokenizer.json; a GGUF needs its tokenizer");
  const json tcfg = parse_container_json(job, "tokenizer_config.json");
  const json& model = tok.contains("model") ? tok["model"] : json();
  const bool byte_level = tok.contains("decoder") && tok["decoder"].is_object() && tok["decoder"].value("type", "") == "ByteLevel";
  if (!model.is_object() || model.value("type", "") != "BPE" || !byte_level || !model.contains("vocab") || !model["vocab"].is_object())
    fail(where, "tokenizer.json is not a byte-level BPE tokenizer; only those are exported to GGUF (tokenizer.ggml.model gpt2)");

  const uint64_t n = job.model.vocab;
  std::vector<std::string> tokens(n);
  std::vector<int32_t> types(n, 0);
  auto place = [&](uint64_t id, const std::string& text, int32_t type) {
    if (id >= n) fail(where, "tokenizer.json has token id " + std::to_string(id) + " past vocab_size " + std::to_string(n));
    tokens[id] = text;
    types[id] = type;
  };
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_unsigned()) fail(where, "tokenizer.json vocab entry '" + packer_detail::printable(it.key()) + "' has no id");
    place(it.value().get<uint64_t>(), it.key(), 1);
  }
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
    for (const json& a : tok["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() || !a.contains("content") || !a["content"].is_string())
        fail(where, "tokenizer.json has a malformed added_tokens entry");
      place(a["id"].get<uint64_t>(), a["content"].get<std::string>(), a.value("special", false) ? 3 : 4);
    }
  for (uint64_t i = 0; i < n; ++i)
    if (types[i] == 0) {  // ids the tokenizer leaves unused (an embedding padded past the vocabulary)
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = 5;
    }
  std::vector<GgufValue> merges;
  if (model.contains("merges") && model["merges"].is_array())
    for (const json& mg : model["merges"]) {
      if (mg.is_string()) merges.push_back(gv_string(mg.get<std::string>()));
      else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string())
        merges.push_back(gv_string(mg[0].get<std::string>() + " " + mg[1].get<std::string>()));
      else fail(where, "tokenizer.json has a malformed merge");
    }

  // BOS/EOS added around a sequence: the TemplateProcessing post-processor, or tokenizer_config.
  bool add_bos = false, add_eos = false;
  const json& post = tok.contains("post_processor") ? tok["post_processor"] : json();
  if (post.is_object() && post.value("type", "") == "TemplateProcessing" && post.contains("single") && post["single"].is_array() &&
      !post["single"].empty()) {
    add_bos = post["single"].front().contains("SpecialToken");
    add_eos = post["single"].back().contains("SpecialToken");
  }
  if (tcfg.is_object() && tcfg.contains("add_bos_token") && tcfg["add_bos_token"].is_boolean()) add_bos = tcfg["add_bos_token"].get<bool>();
  if (tcfg.is_object() && tcfg.contains("add_eos_token") && tcfg["add_eos_token"].is_boolean()) add_eos = tcfg["add_eos_token"].get<bool>();

  std::vector<std::pair<std::string, GgufValue>> kv;
  kv.push_back({"tokenizer.ggml.model", gv_string("gpt2")});
  kv.push_back({"tokenizer.ggml.pre", gv_string("")});  // chosen below
  std::vector<GgufValue> tv, ty;
  for (uint64_t i = 0; i < n; ++i) {
    tv.push_back(gv_string(tokens[i]));
    GgufValue t;
    t.type = GgufValueType::I32;
    t.i = types[i];
    ty.push_back(t);
  }
  kv.push_back({"tokenizer.ggml.tokens", gv_array(GgufValueType::String, std::move(tv))});
  kv.push_back({"tokenizer.ggml.token_type", gv_array(GgufValueType::I32, std::move(ty))});
  kv.push_back({"tokenizer.ggml.merges", gv_array(GgufValueType::String, std::move(merges))});
  const json& gen = job.reader.manifest().generation_config;
  for (const auto& [key, hf] : {std::pair<const char*, const char*>{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                                {"tokenizer.ggml.eos_token_id", "eos_token_id"},
                                {"tokenizer.ggml.padding_token_id", "pad_token_id"}}) {
    uint64_t id = config_id(config, hf);
    if (id == UINT64_MAX && gen.is_object()) id = config_id(gen, hf);
    if (id != UINT64_MAX && id < n) kv.push_back({key, gv_u32(id)});
  }
  kv.push_back({"tokenizer.ggml.add_bos_token", gv_bool(add_bos)});
  kv.push_back({"tokenizer.ggml.add_eos_token", gv_bool(add_eos)});
  std::string chat;
  if (tcfg.is_object() && tcfg.contains("chat_template") && tcfg["chat_template"].is_string()) chat = tcfg["chat_template"].get<std::string>();
  if (chat.empty())
    if (const auto jinja = job.reader.file("chat_template.jinja")) chat = std::string(*jinja);
  if (!chat.empty()) kv.push_back({"tokenizer.chat_template", gv_string(chat)});

  // tokenizer.ggml.pre: the llama.cpp pre-tokenizer whose tokenizer.json (as the importer builds
  // it from that name) has this pre-tokenizer and normalizer, so GGUF and container split alike.
  GgufHeader h;
  for (const auto& [k, v] : kv) h.metadata[k] = v;
  const json want_pre = tok.value("pre_tokenizer", json()), want_norm = tok.value("normalizer", json());
  for (const char* pre : {"smollm", "gpt-2", "llama-bpe", "qwen2"}) {
    h.metadata["tokenizer.ggml.pre"] = gv_string(pre);
    const json got = gguf_tokenizer_json(h, where);
    if (got["pre_tokenizer"] == want_pre && got["normalizer"] == want_norm) {
      kv[1].second = gv_string(pre);
      return kv;
    }
  }
  fail(where, "tokenizer.json's pre-tokenizer is none of those llama.cpp names that Endor knows (smollm, gpt-2, llama-bpe, qwen2): " +
                  packer_detail::printable(want_pre.dump()));
}

// general.* and {arch}.* metadata: the hyperparameters as the registry parsed them from config.json.
std::vector<std::pair<std::string, GgufValue>> model_metadata(ExportJob& job, const std::string& arch) {
  const Manifest& m = job.reader.manifest();
  const ModelConfig& s = job.model;
  const std::string a = arch + ".";
  std::vector<std::pair<std::string, GgufValue>> kv;
  kv.push_back({"general.architecture", gv_string(arch)});
  std::string name = "model";
  if (m.provenance.is_object() && m.provenance.contains("source") && m.provenance["source"].is_string())
    name = m.provenance["source"].get<std::string>();
  kv.push_back({"general.name", gv_string(name)});
  kv.push_back({a + "context_length", gv_u32(s.max_positions ? s.max_positions : 4096)});
  kv.push_back({a + "embedding_length", gv_u32(s.hidden)});
  kv.push_back({a + "block_count", gv_u32(s.n_layers)});
  // Mixtral (as llama): feed_forward_length is the experts' width; Qwen3-MoE has a key of its own.
  kv.push_back({a + "feed_forward_length", gv_u32(s.model_type == "mixtral" || !s.intermediate ? s.moe_intermediate : s.intermediate)});
  if (s.moe()) {
    // llama.cpp renormalizes the top-k weights of both families; a model that does not would
    // compute something else there.
    if (!s.norm_topk_prob)
      fail(job.where(), "norm_topk_prob is false, and llama.cpp's " + arch + " always renormalizes the top-k routing weights "
                        "(the GGUF would compute another model); export --to hf or compressed-tensors instead");
    kv.push_back({a + "expert_count", gv_u32(s.n_experts)});
    kv.push_back({a + "expert_used_count", gv_u32(s.top_k)});
    if (s.model_type != "mixtral") kv.push_back({a + "expert_feed_forward_length", gv_u32(s.moe_intermediate)});
  }
  kv.push_back({a + "attention.head_count", gv_u32(s.n_heads)});
  kv.push_back({a + "attention.head_count_kv", gv_u32(s.n_kv_heads)});
  kv.push_back({a + "rope.dimension_count", gv_u32(s.head_dim)});
  if (uint64_t(s.head_dim) * s.n_heads != s.hidden) {
    kv.push_back({a + "attention.key_length", gv_u32(s.head_dim)});
    kv.push_back({a + "attention.value_length", gv_u32(s.head_dim)});
  }
  kv.push_back({a + "rope.freq_base", gv_f32(s.rope_theta)});
  kv.push_back({a + "attention.layer_norm_rms_epsilon", gv_f32(s.norm_eps)});
  kv.push_back({a + "vocab_size", gv_u32(s.vocab)});
  if (s.rope_type == "linear") {
    kv.push_back({a + "rope.scaling.type", gv_string("linear")});
    kv.push_back({a + "rope.scaling.factor", gv_f32(s.rope_factor)});
  } else if (s.rope_type != "default") {
    fail(job.where(), "rope_scaling '" + packer_detail::printable(s.rope_type) + "' is not exported to GGUF (only linear)");
  }
  const uint32_t window = s.sliding_window.empty() ? 0 : *std::max_element(s.sliding_window.begin(), s.sliding_window.end());
  if (window > 0)
    job.summary.notes.push_back("sliding_window " + std::to_string(window) + " is not carried: llama.cpp's " + arch +
                                " attends to the whole context");
  return kv;
}

// The GGUF's tensors in container order, each expert tensor of an MoE block joined to the stacked
// tensor of its Linear (placed where expert 0 is, parts in expert order); names from the registry.
std::vector<GgufTensor> gguf_tensors(const ExportJob& job, const ModelTensors& specs, const GgufFamily& family) {
  const ModelConfig& s = job.model;
  std::vector<GgufTensor> tensors;
  std::map<std::string, size_t> stacked;  // gguf name -> index in tensors
  for (const TensorInfo& t : job.reader.manifest().tensors) {
    const TensorSpec& spec = gguf_spec(job, specs, t, family.arch);
    if (t.shape.size() > 4) fail(job.where(t), "has more than 4 dimensions");
    if (spec.expert >= 0) {
      if (t.shape.size() != 2) fail(job.where(t), "an expert's weight is not a matrix");
      auto [it, fresh] = stacked.emplace(spec.gguf_name, tensors.size());
      if (fresh) {
        tensors.emplace_back();
        tensors.back().name = spec.gguf_name;
        tensors.back().shape = {s.n_experts, t.shape[0], t.shape[1]};
        tensors.back().parts.assign(s.n_experts, nullptr);
      }
      GgufTensor& g = tensors[it->second];
      if (uint32_t(spec.expert) >= s.n_experts || g.parts[spec.expert] || t.shape[0] != g.shape[1] || t.shape[1] != g.shape[2])
        fail(job.where(t), "does not fit the stacked tensor '" + spec.gguf_name + "'");
      g.parts[spec.expert] = &t;
      continue;
    }
    GgufTensor g;
    g.parts = {&t};
    g.shape = t.shape;
    g.name = spec.gguf_name;
    if (family.permute_qk && !spec.bias && (spec.module == Module::Q || spec.module == Module::K)) {
      g.permute_heads = spec.module == Module::Q ? s.n_heads : s.n_kv_heads;
      if (t.shape.size() != 2 || t.shape[0] % (2 * g.permute_heads) != 0)
        fail(job.where(t), "rows are not 2 x a multiple of its heads; llama.cpp's rotary order cannot be applied");
    }
    tensors.push_back(std::move(g));
  }
  for (const GgufTensor& g : tensors)
    for (const TensorInfo* part : g.parts)
      if (!part) fail(job.where(), "an expert of '" + g.name + "' is missing from the container");
  return tensors;
}

// int4/int8g parts in llama.cpp's own blocks where every part is held exactly by the same block
// type (decided here, rebuilt when written: one tensor in memory at a time); otherwise floats by
// the exact rule, the widest any part needs (f32 when f16 and bf16 parts meet).
void choose_gguf_type(ExportJob& job, GgufTensor& g, std::map<GgmlType, int>& as_blocks, std::vector<std::string>& as_floats) {
  std::optional<GgmlType> block_type;
  uint64_t block_bytes = 0;
  bool all_blocks = true;
  for (const TensorInfo* part : g.parts) {
    const std::optional<GgufBlocks> blocks = exact_blocks(job, *part, g.permute_heads);
    if (!blocks || (block_type && *block_type != blocks->type)) {
      all_blocks = false;
      break;
    }
    block_type = blocks->type;
    block_bytes += blocks->bytes.size();
  }
  if (all_blocks && block_type) {
    g.type = *block_type;
    g.n_bytes = block_bytes;
    ++as_blocks[g.type];
    return;
  }
  bool candidate = false;
  std::optional<ValueType> vt;
  for (const TensorInfo* part : g.parts) {
    candidate = candidate || block_candidate(job, *part);
    // llama.cpp keeps norms and biases in f32
    const ValueType p = part->shape.size() == 1 ? ValueType::F32 : export_float_type(job, *part);
    vt = !vt || *vt == p ? p : ValueType::F32;
  }
  if (candidate) as_floats.push_back(g.parts[0]->name);
  g.value_type = *vt;
  g.type = g.value_type == ValueType::F16 ? GgmlType::F16 : g.value_type == ValueType::BF16 ? GgmlType::BF16 : GgmlType::F32;
  g.n_bytes = 0;
  for (const TensorInfo* part : g.parts) g.n_bytes += part->numel() * (value_bits(g.value_type) / 8);
}

// One part of g (the whole tensor, or one expert of a stacked one) in g's type.
void write_gguf_part(ExportJob& job, const GgufTensor& g, const TensorInfo& t, OutputFile& f) {
  if (ggml_block_elements(g.type) > 1) {
    const std::optional<GgufBlocks> blocks = exact_blocks(job, t, g.permute_heads);
    if (!blocks || blocks->type != g.type) fail(job.where(t), std::string(ggml_type_name(g.type)) + " blocks changed while exporting");
    f.write(blocks->bytes.data(), blocks->bytes.size());
    return;
  }
  const std::vector<float> w = decode_tensor(job.reader, t);
  const uint64_t rows = t.shape.size() >= 2 ? t.shape[0] : 1, cols = t.numel() / rows;
  const uint64_t row_bytes = cols * (value_bits(g.value_type) / 8);
  std::vector<uint8_t> out(rows * row_bytes);
  for (uint64_t r = 0; r < rows; ++r) {
    const uint64_t dst = g.permute_heads ? gguf_row_of_hf_row(r, rows, g.permute_heads) : r;
    encode_floats(g.value_type, w.data() + r * cols, cols, out.data() + dst * row_bytes);
  }
  f.write(out.data(), out.size());
}

}  // namespace

void export_gguf(ExportJob& job) {
  const Manifest& m = job.reader.manifest();
  const json& c = m.config;
  const ModelConfig& s = job.model;
  const std::optional<GgufFamily> family = gguf_family(s);
  if (!family)
    fail(job.where(), "architecture '" + s.model_type + "' has no llama.cpp counterpart that Endor writes (gguf: " + gguf_family_names() +
                      ", Mistral and Mixtral as llama; export --to hf or compressed-tensors instead)");
  const std::string arch = family->arch;
  const ModelTensors specs(s);
  if (s.moe() && s.model_type != "mixtral" && s.model_type != "qwen3_moe")
    fail(job.where(), "a " + s.model_type + " mixture of experts has no llama.cpp architecture that Endor writes");
  std::vector<std::pair<std::string, GgufValue>> kv = model_metadata(job, arch);

  // Tensors, in container order (experts stacked at their first expert), with llama.cpp's names and types.
  std::vector<GgufTensor> tensors = gguf_tensors(job, specs, *family);
  uint64_t offset = 0;
  std::map<GgmlType, int> matrices;   // 2-D and stacked tensors per written type
  std::map<GgmlType, int> as_blocks;  // int4/int4k/int8g tensors written as blocks, per block type
  std::vector<std::string> as_floats; // int4/int4k/int8g tensors no block type holds exactly
  for (GgufTensor& g : tensors) {
    choose_gguf_type(job, g, as_blocks, as_floats);
    if (g.shape.size() >= 2) ++matrices[g.type];
    g.offset = offset;
    offset += (g.n_bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  kv.push_back({"general.file_type", gv_u32(gguf_file_type(matrices))});
  int n_blocks = 0;
  std::string kinds;
  for (const auto& [type, n] : as_blocks) {
    n_blocks += n;
    kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + ggml_type_name(type);
  }
  if (n_blocks)
    job.summary.notes.push_back(std::to_string(n_blocks) + " int4/int8g tensors written as llama.cpp's own blocks, exactly (" + kinds + ")");
  if (!as_floats.empty())
    job.summary.notes.push_back(std::to_string(as_floats.size()) + " int4/int8g tensors written as floats: no block type holds their " +
                                "values exactly (Q4_1/Q8_0 need groups of a multiple of 32 columns, Q4_K whole 256-column " +
                                "super-blocks), e.g. '" + as_floats.front() + "'");
  job.summary.quantized_tensors += uint64_t(n_blocks);
  for (auto& e : tokenizer_metadata(job, c)) kv.push_back(std::move(e));

  Bytes head;
  head.b = {'G', 'G', 'U', 'F'};
  head.pod<uint32_t>(3);
  head.pod<uint64_t>(tensors.size());
  head.pod<uint64_t>(kv.size());
  for (const auto& [k, v] : kv) {
    head.str(k);
    head.pod<uint32_t>(uint32_t(v.type));
    head.value(v, v.type);
  }
  for (const GgufTensor& g : tensors) {
    head.str(g.name);
    head.pod<uint32_t>(uint32_t(g.shape.size()));
    for (auto d = g.shape.rbegin(); d != g.shape.rend(); ++d) head.pod<uint64_t>(*d);  // ne[0] = columns
    head.pod<uint32_t>(uint32_t(g.type));
    head.pod<uint64_t>(g.offset);
  }
  while (head.b.size() % kAlignment) head.b.push_back(0);

  OutputFile f(job, job.work);
  f.write(head.b.data(), head.b.size());
  uint64_t at = 0;
  for (const GgufTensor& g : tensors) {
    f.zeros(g.offset - at);
    const uint64_t start = f.bytes_written();
    for (const TensorInfo* part : g.parts) write_gguf_part(job, g, *part, f);
    if (f.bytes_written() - start != g.n_bytes) fail(job.where(), "tensor '" + g.name + "' changed size while exporting");
    at = g.offset + g.n_bytes;
  }
  f.close();
  job.summary.bytes = f.bytes_written();
  job.summary.tensors = tensors.size();
}

}  // namespace endor::export_detail
