// A Hugging Face checkpoint folder: config.json, one or many safetensors shards (memory-mapped),
// generation_config.json and tokenizer files. Shapes are checked against config.json here, once.
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "compressed_tensors_source.h"
#include "detail.h"
#include "endor/gguf.h"
#include "endor/checkpoint.h"
#include "endor/safetensors.h"

namespace endor {

using packer_detail::fail;

namespace {

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

nlohmann::json read_json_file(const std::string& path, uint64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  in.seekg(0, std::ios::end);
  const std::streamoff n = in.tellg();
  if (n < 0) fail(path, "cannot read");
  if (uint64_t(n) > max_bytes) fail(path, "is " + std::to_string(n) + " bytes, larger than expected for this file");
  in.seekg(0);
  std::string text(size_t(n), '\0');
  if (!in.read(text.data(), n)) fail(path, "cannot read");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    std::string msg = e.what();
    if (msg.size() > 160) msg = msg.substr(0, 157) + "...";
    fail(path, "not valid JSON: " + msg);
  }
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_float(SafetensorsDType t) {
  return t == SafetensorsDType::F16 || t == SafetensorsDType::BF16 || t == SafetensorsDType::F32 ||
         t == SafetensorsDType::F64;
}

// Tokenizer and related files carried into the container verbatim when present.
const char* const kAuxFiles[] = {"tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json",
                                 "vocab.json",       "merges.txt",            "tokenizer.model",
                                 "added_tokens.json", "chat_template.jinja"};

// Shards: the index names them (sorted, and which tensor is in which); a lone model.safetensors
// otherwise.
void find_shards(const std::string& dir, std::vector<std::string>& shard_names, std::map<std::string, std::string>& weight_map) {
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (is_regular_file(index_path)) {
    const nlohmann::json index = read_json_file(index_path, 64u << 20);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail(index_path, "no \"weight_map\" object");
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail(index_path, "weight_map entry '" + it.key() + "' is not a file name");
      const std::string file = it.value().get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
        fail(index_path, "weight_map entry '" + it.key() + "' names '" + file + "', not a file in this folder");
      weight_map[it.key()] = file;
      if (std::find(shard_names.begin(), shard_names.end(), file) == shard_names.end()) shard_names.push_back(file);
    }
    if (shard_names.empty()) fail(index_path, "weight_map is empty");
    std::sort(shard_names.begin(), shard_names.end());
  } else if (is_regular_file(dir + "/model.safetensors")) {
    shard_names.push_back("model.safetensors");
  } else {
    fail(dir, "no model.safetensors or model.safetensors.index.json (only safetensors checkpoints are supported)");
  }
}

}  // namespace

uint64_t CheckpointTensor::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}
uint64_t CheckpointTensor::rows() const { return shape.size() >= 2 ? shape[0] : 1; }
uint64_t CheckpointTensor::cols() const {
  const uint64_t r = rows();
  return r == 0 ? 0 : numel() / r;
}

Checkpoint::~Checkpoint() = default;

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir_in) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) fail(dir, "no such checkpoint folder or GGUF file");
  const bool gguf_name = dir.size() > 5 && dir.compare(dir.size() - 5, 5, ".gguf") == 0;
  if (S_ISREG(st.st_mode) && (gguf_name || is_gguf_file(dir))) return open_gguf(dir);
  if (!S_ISDIR(st.st_mode))
    fail(dir, "not a folder or a GGUF file (expected a Hugging Face checkpoint with config.json and *.safetensors, or a .gguf)");

  std::unique_ptr<Checkpoint> ck(new Checkpoint());
  ck->dir_ = dir;
  const std::string config_path = dir + "/config.json";
  if (!is_regular_file(config_path)) fail(dir, "no config.json in this folder (not a Hugging Face checkpoint?)");
  ck->config_ = read_json_file(config_path, 16u << 20);
  ck->model_config_ = parse_model_config(ck->config_, config_path, "");
  ck->shape_ = shape_of(ck->model_config_);
  // compressed-tensors (pack-quantized): its Linears are read dequantized, so the config that
  // goes into the container no longer describes a quantization.
  ck->compressed_ = CompressedTensorsSource::from_config(ck->config_, config_path);
  if (ck->compressed_) ck->config_.erase("quantization_config");
  const std::string gen_path = dir + "/generation_config.json";
  if (is_regular_file(gen_path)) {
    ck->generation_config_ = read_json_file(gen_path, 16u << 20);
    if (!ck->generation_config_.is_object()) fail(gen_path, "not a JSON object");
  }

  std::vector<std::string> shard_names;
  std::map<std::string, std::string> weight_map;  // tensor -> shard file (sharded only)
  find_shards(dir, shard_names, weight_map);

  // Every tensor of every shard, under its canonical name.
  const ModelShape& ms = ck->shape_;
  const std::string lm_head = ModelTensors(ck->model_config_).get(Module::LmHead).name;
  std::map<std::string, size_t> by_name;  // canonical name -> index in tensors_
  for (uint32_t s = 0; s < shard_names.size(); ++s) {
    const std::string path = dir + "/" + shard_names[s];
    if (!is_regular_file(path)) fail(path, "shard named by model.safetensors.index.json is missing");
    ck->shards_.push_back(SafetensorsFile::open(path));
    for (const SafetensorsEntry& e : ck->shards_.back()->header().tensors) {
      if (!weight_map.empty()) {
        const auto w = weight_map.find(e.name);
        if (w == weight_map.end() || w->second != shard_names[s]) continue;  // the index decides
      }
      if (ck->compressed_ && ck->compressed_->take(e, *ck->shards_.back(), s)) continue;
      const std::string name = canonical_tensor_name(ms.family, e.name);
      if (is_rotary_buffer(name)) {
        ck->dropped_.push_back(e.name + " (rotary buffer; the runtime recomputes it)");
        continue;
      }
      if (name == lm_head && ms.tied_head) {
        ck->dropped_.push_back(e.name + " (tie_word_embeddings: the head is the embedding matrix)");
        continue;
      }
      if (by_name.count(name)) fail(path, "tensor '" + e.name + "' appears twice in the checkpoint (as '" +
                                              ck->tensors_[by_name[name]].source_name + "' too)");
      if (!is_float(e.dtype))
        fail(path, "tensor '" + e.name + "' has dtype " + to_string(e.dtype) +
                       "; only F16, BF16, F32 (and F64) tensors can be packed");
      for (uint64_t d : e.shape)
        if (d == 0) fail(path, "tensor '" + e.name + "' has an empty shape " + shape_string(e.shape));
      CheckpointTensor t;
      t.name = name;
      t.source_name = e.name;
      t.dtype = e.dtype;
      t.shape = e.shape.empty() ? std::vector<uint64_t>{1} : e.shape;  // a scalar is stored as [1]
      t.source_type = to_string(e.dtype);
      t.shard = s;
      t.entry = &e;
      t.stored_bytes = e.end - e.begin;
      t.role = classify_tensor(name, t.shape);
      by_name[name] = ck->tensors_.size();
      ck->tensors_.push_back(std::move(t));
    }
  }
  if (ck->compressed_)
    for (const std::unique_ptr<PackedLinear>& L : ck->compressed_->finish(dir)) {
      CheckpointTensor t;
      t.name = canonical_tensor_name(ms.family, L->module + ".weight");
      t.source_name = L->module + ".weight_packed";
      t.dtype = SafetensorsDType::F32;  // (q − zp)·scale is exact in f32
      t.source_type = "I32";
      t.shape = {L->rows, L->cols};
      t.shard = L->shard;
      t.packed = L.get();
      t.direct = false;
      t.stored_bytes = L->stored_bytes();
      t.role = classify_tensor(t.name, t.shape);
      if (by_name.count(t.name)) fail(dir, "tensor '" + t.name + "' is both packed and stored as floats");
      by_name[t.name] = ck->tensors_.size();
      ck->tensors_.push_back(std::move(t));
    }
  for (const auto& [tensor, file] : weight_map) {
    if (ck->compressed_ && (tensor.find(".weight_packed") != std::string::npos || tensor.find(".weight_scale") != std::string::npos ||
                            tensor.find(".weight_zero_point") != std::string::npos || tensor.find(".weight_shape") != std::string::npos))
      continue;  // checked by the compressed-tensors reader
    const std::string name = canonical_tensor_name(ms.family, tensor);
    bool found = by_name.count(name) > 0;
    for (uint32_t s = 0; s < shard_names.size() && !found; ++s)
      found = shard_names[s] == file && ck->shards_[s]->header().find(tensor) != nullptr;
    if (!found) fail(dir + "/" + file, "tensor '" + tensor + "' listed in model.safetensors.index.json is not in this shard");
  }

  ck->check_and_order();
  for (const char* name : kAuxFiles) {
    const std::string path = dir + "/" + name;
    if (is_regular_file(path)) ck->files_.push_back({name, path, ""});
  }
  return ck;
}

// Shapes against config.json, then execution order.
void Checkpoint::check_and_order() {
  Checkpoint* ck = this;
  const ModelShape& ms = shape_;
  const std::string& dir = dir_;
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < tensors_.size(); ++i) by_name[tensors_[i].name] = i;
  const ModelTensors specs(model_config_);
  const std::string cfg = gguf_ ? "the GGUF metadata" : "config.json";
  const std::string dims = "model_type " + ms.model_type + ", hidden_size " + std::to_string(ms.hidden) +
                           ", vocab_size " + std::to_string(ms.vocab) + ", " + std::to_string(ms.layers) + " layers";
  for (const CheckpointTensor& t : ck->tensors_) {
    const std::string where = gguf_ ? dir : shards_[t.shard]->path();
    if (t.role.group == TensorRole::Group::Layer && t.role.layer >= ms.layers)
      fail(where, "tensor '" + t.source_name + "' belongs to layer " + std::to_string(t.role.layer) +
                      " but " + cfg + " has num_hidden_layers " + std::to_string(ms.layers));
    const TensorSpec* spec = specs.find(t.name);
    std::vector<uint64_t> expected;
    if (spec) {
      expected = spec->shape;
    } else if (t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0) {
      // A Linear's bias has one entry per output row.
      const auto w = by_name.find(t.name.substr(0, t.name.size() - 5) + ".weight");
      if (w != by_name.end() && ck->tensors_[w->second].shape.size() == 2) expected = {ck->tensors_[w->second].shape[0]};
    }
    if (!expected.empty() && t.shape != expected)
      fail(where, "tensor '" + t.source_name + "' has shape " + shape_string(t.shape) + " but " + cfg + " (" + dims +
                      ") implies " + shape_string(expected));
  }
  for (const TensorSpec& r : specs.all())
    if (r.required && !by_name.count(r.name)) {
      std::string hint;
      if (r.module == Module::LmHead) hint = " (" + cfg + " says tie_word_embeddings is false)";
      fail(dir, "tensor '" + r.name + "' is missing; " + cfg + " (" + dims + ") requires it" + hint);
    }

  // Execution order: embed group, layers 0..L-1, head group; inside a group attention before MLP.
  std::stable_sort(ck->tensors_.begin(), ck->tensors_.end(), [&specs](const CheckpointTensor& a, const CheckpointTensor& b) {
    auto key = [&specs](const CheckpointTensor& t) {
      const int g = t.role.group == TensorRole::Group::Embed ? 0 : t.role.group == TensorRole::Group::Layer ? 1 : 2;
      return std::make_tuple(g, t.role.layer, specs.rank_in_group(t.name), t.name);
    };
    return key(a) < key(b);
  });
}

std::unique_ptr<Checkpoint> Checkpoint::open_gguf(const std::string& path) {
  std::unique_ptr<Checkpoint> ck(new Checkpoint());
  ck->dir_ = path;
  ck->gguf_ = GgufFile::open(path);
  GgufModel model = gguf_to_model(ck->gguf_->header(), path);
  ck->config_ = std::move(model.config);
  ck->generation_config_ = model.generation_config.empty() ? nlohmann::json() : std::move(model.generation_config);
  ck->model_config_ = parse_model_config(ck->config_, path, "");
  ck->shape_ = shape_of(ck->model_config_);
  ck->gguf_tensors_ = std::make_unique<std::vector<GgufModelTensor>>(std::move(model.tensors));
  for (const std::string& d : model.ignored) ck->dropped_.push_back(d);
  std::map<std::string, std::string> seen;
  for (const GgufModelTensor& g : *ck->gguf_tensors_) {
    const GgufTensorInfo& info = *g.info;
    if (seen.count(g.hf_name))
      fail(path, "tensors '" + seen[g.hf_name] + "' and '" + info.name + "' both map to '" + g.hf_name + "'");
    seen[g.hf_name] = info.name;
    CheckpointTensor t;
    t.name = g.hf_name;
    t.source_name = info.name;
    t.source_type = ggml_type_name(info.type);
    switch (info.type) {
      case GgmlType::F32: t.dtype = SafetensorsDType::F32; break;
      case GgmlType::BF16: t.dtype = SafetensorsDType::BF16; break;
      default: t.dtype = SafetensorsDType::F16; break;  // F16, and the default store of quantized types
    }
    t.direct = (info.type == GgmlType::F32 || info.type == GgmlType::F16 || info.type == GgmlType::BF16) &&
               g.permute_heads == 0;
    t.shape = g.shape;
    t.gguf = &g;
    t.stored_bytes = info.n_bytes;
    t.role = classify_tensor(t.name, t.shape);
    ck->tensors_.push_back(std::move(t));
  }
  ck->check_and_order();
  ck->files_.push_back({"tokenizer.json", "", std::move(model.tokenizer_json)});
  ck->files_.push_back({"tokenizer_config.json", "", std::move(model.tokenizer_config_json)});
  return ck;
}

uint64_t Checkpoint::source_bytes() const {  // (GGUF: the tensors' bytes in the file)
  uint64_t n = 0;
  for (const CheckpointTensor& t : tensors_) n += t.source_bytes();
  return n;
}

std::vector<std::string> Checkpoint::input_paths() const {
  if (gguf_) return {dir_};
  std::vector<std::string> paths = {dir_ + "/config.json"};
  for (const char* name : {"/generation_config.json", "/model.safetensors.index.json"})
    if (is_regular_file(dir_ + name)) paths.push_back(dir_ + name);
  for (const auto& s : shards_) paths.push_back(s->path());
  for (const AuxFile& f : files_) paths.push_back(f.path);
  return paths;
}

const uint8_t* Checkpoint::bytes(const CheckpointTensor& t) const {
  if (t.packed) return t.packed->packed_file->data(*t.packed->packed);
  if (t.gguf) return gguf_->data(*t.gguf->info);
  return shards_.at(t.shard)->data(*t.entry);
}

void Checkpoint::read_rows_f32(const CheckpointTensor& t, uint64_t row_begin, uint64_t row_end, float* out) const {
  if (row_begin > row_end || row_end > t.rows()) throw Error("read_rows_f32: rows out of range for " + t.name);
  const uint64_t cols = t.cols();
  if (t.packed) {
    t.packed->read_rows(row_begin, row_end, out);
    return;
  }
  if (!t.gguf) {
    convert_to_f32(t.dtype, bytes(t) + row_begin * cols * dtype_bytes(t.dtype), (row_end - row_begin) * cols, out);
    return;
  }
  // GGUF rows are contiguous blocks of the type (ne[0] = cols is a multiple of the block).
  const GgufTensorInfo& info = *t.gguf->info;
  const uint64_t row_bytes = cols / ggml_block_elements(info.type) * ggml_block_bytes(info.type);
  const uint8_t* base = bytes(t);
  if (t.gguf->permute_heads == 0) {
    ggml_dequantize(info.type, base + row_begin * row_bytes, (row_end - row_begin) * cols, out);
    return;
  }
  for (uint64_t r = row_begin; r < row_end; ++r) {
    const uint64_t src = gguf_unpermuted_row(r, t.rows(), t.gguf->permute_heads);
    ggml_dequantize(info.type, base + src * row_bytes, cols, out + (r - row_begin) * cols);
  }
}

void Checkpoint::release(const CheckpointTensor& t) const {
  if (t.packed) return;  // its parts are small beside a float copy; the mapping stays
  if (t.gguf) {
    gguf_->release(*t.gguf->info);
    return;
  }
  shards_.at(t.shard)->release(*t.entry);
}

}  // namespace endor
