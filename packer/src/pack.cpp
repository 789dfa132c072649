// The pack pipeline: checkpoint tensor -> (f32 -> prune -> quantize) -> encode -> container,
// one tensor at a time so memory stays bounded by the largest tensor.
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <regex>

#include "detail.h"
#include "endor/expert_groups.h"
#include "endor/gguf.h"
#include "endor/checkpoint.h"
#include "endor/pack.h"
#include "endor/prune.h"
#include "endor/safetensors.h"
#include "endor/tier_plan.h"
#include "endor/tokenizer.h"

namespace endor {

using packer_detail::fail;

namespace {

// Below this many elements a thread team costs more than it saves.
constexpr uint64_t kParallelMin = 1 << 16;

// Rows per conversion chunk (the unit of parallel work): about 1 Mi elements.
uint64_t chunk_rows(uint64_t cols) { return std::max<uint64_t>(1, (uint64_t(1) << 20) / std::max<uint64_t>(1, cols)); }

// Stored values of a source tensor as encode_tensor counts them (f32 value != ±0), from the raw bits.
uint64_t count_nonzero(const Checkpoint& ck, const CheckpointTensor& t) {
  const uint8_t* p = ck.bytes(t);
  const uint64_t n = t.numel();
  uint64_t nnz = 0;
  if (!t.direct) {  // dequantized / un-permuted: count the f32 values, a chunk of rows at a time
    const uint64_t rows = t.rows(), cols = t.cols(), step = chunk_rows(cols);
    const int64_t n_chunks = int64_t((rows + step - 1) / step);
#pragma omp parallel for reduction(+ : nnz) schedule(dynamic, 1) if (n_chunks > 1)
    for (int64_t ci = 0; ci < n_chunks; ++ci) {
      const uint64_t r0 = uint64_t(ci) * step, r1 = std::min(rows, r0 + step);
      std::vector<float> f((r1 - r0) * cols);
      ck.read_rows_f32(t, r0, r1, f.data());
      for (float x : f) nnz += x != 0.0f;
    }
    return nnz;
  }
  switch (t.dtype) {
    case SafetensorsDType::F16:
    case SafetensorsDType::BF16:
#pragma omp parallel for reduction(+ : nnz) schedule(static) if (n >= kParallelMin)
      for (int64_t i = 0; i < int64_t(n); ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        nnz += (h & 0x7FFF) != 0;
      }
      return nnz;
    case SafetensorsDType::F32:
#pragma omp parallel for reduction(+ : nnz) schedule(static) if (n >= kParallelMin)
      for (int64_t i = 0; i < int64_t(n); ++i) {
        uint32_t b;
        std::memcpy(&b, p + 4 * i, 4);
        nnz += (b & 0x7FFFFFFFu) != 0;
      }
      return nnz;
    default: {
      std::vector<float> buf(n);
      convert_to_f32(t.dtype, p, n, buf.data());
      for (float x : buf) nnz += x != 0.0f;
      return nnz;
    }
  }
}

// Whether the source bytes of t are already the stored blob of value type v.
bool same_bits(const CheckpointTensor& t, ValueType v) {
  const SafetensorsDType s = t.dtype;
  return t.direct && ((s == SafetensorsDType::F16 && v == ValueType::F16) ||
                      (s == SafetensorsDType::BF16 && v == ValueType::BF16) ||
                      (s == SafetensorsDType::F32 && v == ValueType::F32));
}

// Dense f16/bf16/f32 blob of a source tensor, converted in row chunks (bit-identical to
// encode_tensor(Dense) of the f32 values).
std::vector<uint8_t> convert_dense(const Checkpoint& ck, const CheckpointTensor& t, ValueType vt) {
  const uint64_t rows = t.rows(), cols = t.cols(), step = chunk_rows(cols);
  const uint32_t out_size = value_bits(vt) / 8;
  std::vector<uint8_t> out(t.numel() * out_size);
  const int64_t n_chunks = int64_t((rows + step - 1) / step);
#pragma omp parallel if (n_chunks > 1)
  {
    std::vector<float> f;
#pragma omp for schedule(dynamic, 1)
    for (int64_t ci = 0; ci < n_chunks; ++ci) {
      const uint64_t r0 = uint64_t(ci) * step, r1 = std::min(rows, r0 + step), n = (r1 - r0) * cols;
      uint8_t* dst = out.data() + r0 * cols * out_size;
      if (same_bits(t, vt)) {
        std::memcpy(dst, ck.bytes(t) + r0 * cols * out_size, n * out_size);
        continue;
      }
      f.resize(n);
      ck.read_rows_f32(t, r0, r1, f.data());
      for (uint64_t i = 0; i < n; ++i) {
        if (vt == ValueType::F32) {
          std::memcpy(dst + 4 * i, &f[i], 4);
        } else {
          const uint16_t h = vt == ValueType::F16 ? f32_to_f16(f[i]) : f32_to_bf16(f[i]);
          std::memcpy(dst + 2 * i, &h, 2);
        }
      }
    }
  }
  return out;
}

std::vector<float> load_f32(const Checkpoint& ck, const CheckpointTensor& t) {
  const uint64_t rows = t.rows(), cols = t.cols(), step = chunk_rows(cols);
  std::vector<float> f(t.numel());
  const int64_t n_chunks = int64_t((rows + step - 1) / step);
#pragma omp parallel for schedule(dynamic, 1) if (n_chunks > 1)
  for (int64_t ci = 0; ci < n_chunks; ++ci) {
    const uint64_t r0 = uint64_t(ci) * step, r1 = std::min(rows, r0 + step);
    ck.read_rows_f32(t, r0, r1, f.data() + r0 * cols);
  }
  return f;
}

std::string iso_utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The source's own name (folder or file), not where it sat on the packer's machine: a shared
// container must not carry the packer's file system layout.
std::string source_base_name(const std::string& p) {
  char buf[PATH_MAX];
  return packer_detail::base_name(::realpath(p.c_str(), buf) ? std::string(buf) : p);
}

// A tokenizer the runtime cannot load must stop the pack here, not when the file is first run:
// load it with the runtime's own tokenizer, and check that its ids fit the model's vocab.
void check_tokenizer(const Checkpoint& ck) {
  for (const AuxFile& f : ck.files()) {
    if (f.name != "tokenizer.json") continue;
    std::string bytes = f.content;  // made from a GGUF's metadata when f.path is empty
    const std::string where = f.path.empty() ? ck.dir() + ": the tokenizer made from tokenizer.ggml.*" : f.path;
    if (!f.path.empty()) {
      std::ifstream in(f.path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      if (!in.good() && !in.eof()) fail(f.path, "cannot read");
    }
    const Tokenizer tok = Tokenizer::from_json(bytes, where);
    const uint64_t vocab = ck.shape().vocab;
    if (vocab != 0 && tok.vocab_size() > vocab)
      fail(where, "has token ids up to " + std::to_string(tok.vocab_size() - 1) + " but the model's vocab is " +
                       std::to_string(vocab) + " (tokenizer of another model?)");
  }
}

// tokenizer.json as the same JSON value without its indentation (keys in their order, strings
// and numbers as parsed): Hugging Face writes it pretty-printed, and SmolLM2's 3.5 MB become
// 1.6 MB, the size of a GGUF's tokenizer metadata. Kept as it is when it does not parse
// (check_tokenizer has refused such a file before anything is written).
std::string compact_json(const std::string& text) {
  try {
    return nlohmann::ordered_json::parse(text).dump();
  } catch (const nlohmann::json::exception&) {
    return text;
  }
}

// An MoE expert's gate, up and down form a group of their own, after the block's group (attention,
// norms, router), so a runtime places and reads each expert alone (SPEC.md §4.2).
std::string group_name(const TensorRole& r, const std::string& canonical_name) {
  switch (r.group) {
    case TensorRole::Group::Embed: return "embed";
    case TensorRole::Group::Layer: {
      const int64_t expert = expert_of_tensor(canonical_name);
      return expert >= 0 ? expert_group_name(r.layer, uint32_t(expert)) : block_group_name(r.layer);
    }
    case TensorRole::Group::Head: return "head";
  }
  return "head";
}

}  // namespace

namespace packer_detail {

void validate_options(const PackOptions& o) {
  if (o.dtype && !is_float(*o.dtype))
    throw Error(std::string("--dtype must be f16, bf16 or f32, got ") + to_string(*o.dtype));
  if ((grouped(o.quant) || grouped(o.quant_head)) && o.group_size == 0) throw Error("--group-size must be at least 1");
  if (!o.int8_regex.empty()) {
    try {
      std::regex re(o.int8_regex);
    } catch (const std::regex_error& e) {
      throw Error("invalid --int8 regex '" + o.int8_regex + "': " + e.what());
    }
  }
  if (!o.skip_regex.empty()) {
    try {
      std::regex re(o.skip_regex);
    } catch (const std::regex_error& e) {
      throw Error("invalid --skip regex '" + o.skip_regex + "': " + e.what());
    }
  }
}

void check_output_is_not_input(const std::string& output, const Checkpoint& ck) {
  struct stat out {};
  if (::stat(output.c_str(), &out) != 0) return;
  if (S_ISDIR(out.st_mode)) fail(output, "is a folder; give the output file name (e.g. model.endor)");
  struct stat in {};
  for (const std::string& p : ck.input_paths())
    if (::stat(p.c_str(), &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino)
      fail(output, "is an input file of the checkpoint; choose another output path");
  if (output.size() >= 12 && output.compare(output.size() - 12, 12, ".safetensors") == 0)
    fail(output, "refusing to overwrite a .safetensors file; the output is an .endor container");
}

}  // namespace packer_detail

using packer_detail::check_output_is_not_input;
using packer_detail::validate_options;

namespace {
// --method's spellings: the one table both directions read.
constexpr std::pair<PruneMethod, const char*> kPruneMethodNames[] = {
    {PruneMethod::Magnitude, "magnitude"}, {PruneMethod::Wanda, "wanda"}, {PruneMethod::SparseGpt, "sparsegpt"},
    {PruneMethod::Gptq, "gptq"}};
}  // namespace

const char* to_string(PruneMethod m) {
  for (const auto& [method, name] : kPruneMethodNames)
    if (method == m) return name;
  return "?";
}

std::optional<PruneMethod> parse_prune_method(std::string_view s) {
  for (const auto& [method, name] : kPruneMethodNames)
    if (s == name) return method;
  return std::nullopt;
}

ValueType default_value_type(SafetensorsDType t) {
  switch (t) {
    case SafetensorsDType::F16: return ValueType::F16;
    case SafetensorsDType::BF16: return ValueType::BF16;
    case SafetensorsDType::F32:
    case SafetensorsDType::F64: return ValueType::F32;
    default: throw Error(std::string("dtype ") + to_string(t) + " has no Endor value type");
  }
}

TensorTreatment plan_treatment(const CheckpointTensor& t, const PackOptions& o) {
  TensorTreatment tr;
  // An MoE router keeps the source's dtype whatever --dtype says: its logits pick the experts, and
  // a rounded router can send a token to other experts (docs/moe.md).
  tr.dtype = o.dtype && !t.role.router ? *o.dtype : dtype_of(default_value_type(t.dtype));
  bool in_scope = t.role.prunable;
  if (in_scope && !o.skip_regex.empty()) in_scope = !std::regex_search(t.name, std::regex(o.skip_regex));
  tr.prune = in_scope && o.prune.active();
  tr.quantize = in_scope && o.quant.has_value();
  if (tr.quantize) {
    const bool to_int8 = !o.int8_regex.empty() && std::regex_search(t.name, std::regex(o.int8_regex));
    tr.dtype = to_int8 ? Dtype::Int8 : *o.quant;
  }
  // The token embedding or the lm_head (not OPT's position embedding): TensorRole::head_matrix.
  if (o.quant_head && t.role.head_matrix) {
    tr.prune = false;
    tr.quantize = true;
    tr.dtype = *o.quant_head;
  }
  return tr;
}

Encoding choose_encoding(const std::vector<uint64_t>& shape, Dtype dt, uint32_t group_size, uint64_t nnz) {
  const uint32_t gs = is_grouped(dt) ? group_size : 0;
  const ValueType vt = value_type_of(dt);
  const TensorLayout dense = compute_layout(shape, Encoding::Dense, vt, gs, [&] {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    return n;
  }());
  if (nnz == dense.nnz) return Encoding::Dense;
  if (nnz > UINT32_MAX) return Encoding::Dense;  // the bitmap index holds u32 counts
  // int4: a pruned tensor keeps its zeros in a bitmap (smaller at any sparsity above ~25 %, and
  // exact even in int4_grid's fallback near ±65504, the one grid without a zero code). One with
  // < 1 % zeros was not pruned (a checkpoint's own zeros: 0.06 % in SmolLM2's decoder): stored
  // dense it is smaller (4 bits a weight against 5) and multiplies faster (no expand), its zeros
  // quantized like every other weight (to the zero code: exactly 0).
  if (is_int4(dt)) return 100 * (dense.nnz - nnz) < dense.nnz ? Encoding::Dense : Encoding::Bitmap;
  const TensorLayout bitmap = compute_layout(shape, Encoding::Bitmap, vt, gs, nnz);
  return bitmap.total_bytes < dense.total_bytes ? Encoding::Bitmap : Encoding::Dense;
}

EncodedTensor encode_for_pack(const float* w, const std::vector<uint64_t>& shape, Dtype dt, uint32_t group_size) {
  uint64_t numel = 1;
  for (uint64_t d : shape) numel *= d;
  uint64_t nnz = 0;
#pragma omp parallel for reduction(+ : nnz) schedule(static) if (numel >= kParallelMin)
  for (int64_t i = 0; i < int64_t(numel); ++i) nnz += w[size_t(i)] != 0.0f;
  return encode_tensor(w, shape, EncodeOptions::of(dt, choose_encoding(shape, dt, group_size, nnz), group_size));
}

PreparedTensor prepare_tensor(const Checkpoint& ck, const CheckpointTensor& t, const TensorTreatment& tr,
                              Pruner* pruner, const PackOptions& o) {
  PreparedTensor p;
  p.info.name = t.name;
  p.info.shape = t.shape;
  p.info.value_type = value_type_of(tr.dtype);
  p.info.group_size = stored_group_size(tr.dtype, o);
  p.info.int4_params = int4_params_of(tr.dtype);
  p.info.source_dtype = t.source_type;
  const std::string where = ck.dir() + ": tensor '" + t.source_name + "'";
  try {
    if (!tr.prune && !tr.quantize) {
      const uint64_t nnz = count_nonzero(ck, t);
      if (choose_encoding(t.shape, tr.dtype, 0, nnz) == Encoding::Dense) {
        p.info.encoding = Encoding::Dense;
        p.info.nnz = t.numel();
        if (same_bits(t, p.info.value_type)) {
          p.data = ck.bytes(t);  // borrowed from the mapping: no copy
        } else {
          p.owned = convert_dense(ck, t, p.info.value_type);
          p.data = p.owned.data();
        }
        p.n_bytes = t.numel() * (value_bits(tr.dtype) / 8);
        return p;
      }
    }
    std::optional<EncodedTensor> encoded;
    if (tr.prune && pruner) encoded = pruner->take_encoded(t.name);
    if (encoded) {
      const TensorLayout& L = encoded->layout;
      // A float tensor may come back in another float type (the calibration driver stores
      // SparseGPT's updated weights f16 rather than bf16: calibrate.cpp, updated_dtype).
      if (is_float(L.dtype()) && is_float(tr.dtype)) p.info.value_type = L.value_type;
      if (L.rows * L.cols != t.numel() || L.rows != t.rows() || L.value_type != p.info.value_type ||
          L.group_size != p.info.group_size || L.int4_params != p.info.int4_params ||
          encoded->bytes.size() != L.total_bytes)
        throw Error(std::string("the precomputed encoding does not match the tensor (") + to_string(L.value_type) +
                    " " + std::to_string(L.rows) + "x" + std::to_string(L.cols) + ", expected " +
                    to_string(value_type_of(tr.dtype)) + " " + std::to_string(t.rows()) + "x" + std::to_string(t.cols()) + ")");
    } else if (!tr.prune && is_int4(tr.dtype) && t.gguf &&
               (encoded = gguf_exact_int4(t.gguf->info->type, ck.bytes(t), t.rows(), t.cols(), t.gguf->permute_heads,
                                          p.info.int4_params, p.info.group_size))) {
      p.kept_source_grid = true;  // the GGUF's own Q4_0/Q4_1/Q4_K codes: nothing rounded twice
    } else if (!tr.prune && tr.dtype == Dtype::Int8g && t.gguf &&
               (encoded = gguf_exact_int8g(t.gguf->info->type, ck.bytes(t), t.rows(), t.cols(), t.gguf->permute_heads,
                                           p.info.group_size))) {
      p.kept_source_grid = true;  // the GGUF's own Q8_0 codes
    } else {
      std::vector<float> w = load_f32(ck, t);
      ck.release(t);
      if (tr.prune) {
        if (!pruner) throw Error("no pruner given");
        pruner->prune(t.name, w.data(), t.rows(), t.cols());
      }
      encoded = encode_for_pack(w.data(), t.shape, tr.dtype, p.info.group_size);
    }
    EncodedTensor& enc = *encoded;
    p.info.encoding = enc.layout.encoding;
    p.info.nnz = enc.layout.nnz;
    p.owned = std::move(enc.bytes);
    p.data = p.owned.data();
    p.n_bytes = p.owned.size();
    return p;
  } catch (const Error& e) {
    // An error that already names a file of the checkpoint (its reader's) goes as it is; the
    // others (encoding, pruning) are told which tensor of which checkpoint they are about.
    const auto* file_error = dynamic_cast<const FileError*>(&e);
    if (file_error && file_error->names(ck.dir())) throw;
    throw FileError(where, e.what());
  }
}

nlohmann::json make_provenance(const std::string& source_dir, const PackOptions& o) {
  nlohmann::json p;
  p["source"] = source_base_name(source_dir);
  p["tool"] = {{"name", "endor-pack"}, {"version", o.tool_version}};
  p["created_utc"] = iso_utc_now();
  p["command"] = o.command;
  const bool pruned = o.prune.active();
  p["method"] = pruned ? to_string(o.prune.method) : "none";
  p["sparsity"] = o.prune.structured() ? double(o.prune.n) / double(o.prune.m) : o.prune.sparsity;
  p["pattern"] = o.prune.pattern();
  p["sparsity_ramp"] = o.prune.sparsity_ramp;
  p["scope"] = o.prune.structured() ? "n:m" : (o.prune.scope == PruneScope::Row ? "row" : "matrix");
  p["quant"] = to_string(o.quant);
  p["quant_head"] = to_string(o.quant_head);
  p["group_size"] = grouped(o.quant) || grouped(o.quant_head) ? nlohmann::json(o.group_size) : nlohmann::json(nullptr);
  if (!o.int8_regex.empty()) p["int8_tensors"] = o.int8_regex;
  if (o.prune.method == PruneMethod::SparseGpt || o.prune.method == PruneMethod::Gptq) {
    p["act_order"] = o.act_order;
    p["mse_clip"] = o.mse_clip;
  }
  p["dtype"] = o.dtype ? to_string(*o.dtype) : "source";
  p["skip"] = o.skip_regex.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.skip_regex);
  p["calibration"] = nullptr;
  return p;
}

PackSummary pack_checkpoint(const std::string& source_dir, const std::string& output_path, const PackOptions& o,
                            const PackCallbacks& cb) {
  validate_options(o);
  // The pruning options are checked whatever the subcommand (a convert's default spec passes); a
  // pruner exists only when the spec prunes.
  check_prune_spec(o.prune);
  std::unique_ptr<Pruner> pruner;
  if (o.prune.active()) pruner = make_pruner(o.prune);
  return pack_checkpoint_with_pruner(source_dir, output_path, o, pruner.get(), cb, nullptr);
}

PackSummary pack_checkpoint_with_pruner(const std::string& source_dir, const std::string& output_path,
                                        const PackOptions& o, Pruner* pruner, const PackCallbacks& cb,
                                        const nlohmann::json& calibration) {
  validate_options(o);
  const std::unique_ptr<Checkpoint> ck = Checkpoint::open(source_dir);
  check_output_is_not_input(output_path, *ck);
  check_tokenizer(*ck);

  PackSummary summary;
  summary.source_bytes = ck->source_bytes();
  summary.dropped = ck->dropped();
  PackProgress progress;
  progress.stage = "pack";
  progress.tensors_total = ck->tensors().size();
  progress.bytes_total = summary.source_bytes;

  // Registered before the file exists, so a signal arriving meanwhile cannot leave it behind;
  // released on every way out (the writer renames or removes the file).
  struct TempPathGuard {
    const PackCallbacks& cb;
    std::string path;
    void set(const std::string& p) {
      if (p == path || !cb.on_temp_file) return;
      cb.on_temp_file(p, true);
      if (!path.empty()) cb.on_temp_file(path, false);
      path = p;
    }
    ~TempPathGuard() {
      if (cb.on_temp_file && !path.empty()) cb.on_temp_file(path, false);
    }
  };
  TempPathGuard guard{cb, ""};
  guard.set(output_path + ".tmp-" + std::to_string(::getpid()));
  ContainerWriter writer(output_path);
  guard.set(writer.temp_path());  // the same path, unless the writer's naming changes
  if (cb.on_progress) cb.on_progress(progress);

  std::string open_group;
  for (const CheckpointTensor& t : ck->tensors()) {
    const std::string g = group_name(t.role, t.name);
    if (g != open_group) {
      if (!open_group.empty()) writer.end_group();
      writer.begin_group(g, Tier::Gpu);  // tiers are planned once sizes are known
      open_group = g;
    }
    progress.tensor = t.name;
    const TensorTreatment tr = plan_treatment(t, o);
    PreparedTensor p = prepare_tensor(*ck, t, tr, pruner, o);
    writer.add_tensor(p.info, p.data, p.n_bytes);
    ck->release(t);
    summary.tensors += 1;
    summary.pruned_tensors += tr.prune;
    summary.source_grid_tensors += p.kept_source_grid;
    progress.tensors_done += 1;
    progress.bytes_done += t.source_bytes();
    if (cb.on_progress) cb.on_progress(progress);
  }
  if (!open_group.empty()) writer.end_group();

  writer.begin_group("files", Tier::Cpu);
  for (const AuxFile& f : ck->files()) {
    if (f.path.empty()) {  // made from a GGUF's metadata
      writer.add_file(f.name, f.content.data(), f.content.size());
      continue;
    }
    std::ifstream in(f.path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) fail(f.path, "cannot read");
    if (f.name == "tokenizer.json") bytes = compact_json(bytes);
    writer.add_file(f.name, bytes.data(), bytes.size());
  }
  writer.end_group();

  std::vector<std::string> names;
  std::vector<uint64_t> sizes;
  for (const GroupInfo& g : writer.groups()) {
    names.push_back(g.name);
    sizes.push_back(g.size);
  }
  const std::vector<Tier> tiers = plan_tiers(names, sizes, o.budget);
  for (size_t i = 0; i < writer.groups().size(); ++i)
    if (writer.groups()[i].name != "files") writer.groups()[i].tier = tiers[i];

  nlohmann::json provenance = make_provenance(source_dir, o);
  if (!summary.dropped.empty()) provenance["dropped"] = summary.dropped;
  if (!calibration.is_null()) provenance["calibration"] = calibration;
  writer.commit(ck->config(), ck->generation_config(), provenance);
  struct stat st {};
  if (::stat(output_path.c_str(), &st) == 0) summary.file_bytes = uint64_t(st.st_size);
  return summary;
}

}  // namespace endor
