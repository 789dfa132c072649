// Export driver (temporary output, rename into place, cleanup on error), the value-type rule, and
// the pieces the Hugging Face targets share: output files, the safetensors writer, side files.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "detail.h"
#include "endor/gguf.h"
#include "export_detail.h"

namespace endor {

using packer_detail::fail;

const char* to_string(ExportTarget t) {
  switch (t) {
    case ExportTarget::Hf: return "hf";
    case ExportTarget::CompressedTensors: return "compressed-tensors";
    case ExportTarget::Gguf: return "gguf";
  }
  return "?";
}

std::optional<ExportTarget> parse_export_target(std::string_view s) {
  if (s == "hf") return ExportTarget::Hf;
  if (s == "compressed-tensors") return ExportTarget::CompressedTensors;
  if (s == "gguf") return ExportTarget::Gguf;
  return std::nullopt;
}

namespace export_detail {

void ExportJob::will_create(const std::string& path) {
  if (on_temp_file) on_temp_file(path, true);
  created.push_back(path);
}

std::vector<float> decode_tensor(const ContainerReader& r, const TensorInfo& t) {
  const TensorView v = r.tensor(t);
  std::vector<float> out(size_t(v.layout.rows * v.layout.cols));
  validate_bitmap(v, r.path() + ": tensor '" + t.name + "'");
  decode_rows_f32(v, 0, v.layout.rows, out.data());
  return out;
}

bool exact_in(ValueType vt, const float* values, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const float x = values[i];
    float back = x;
    if (vt == ValueType::F16) back = f16_to_f32(f32_to_f16(x));
    else if (vt == ValueType::BF16) back = bf16_to_f32(f32_to_bf16(x));
    if (std::memcmp(&back, &x, 4) != 0) return false;
  }
  return true;
}

void encode_floats(ValueType vt, const float* values, uint64_t n, uint8_t* out) {
  if (vt == ValueType::F32) {
    std::memcpy(out, values, n * 4);
    return;
  }
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t h = vt == ValueType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

const char* safetensors_dtype(ValueType vt) {
  switch (vt) {
    case ValueType::F16: return "F16";
    case ValueType::BF16: return "BF16";
    case ValueType::F32: return "F32";
    default: throw Error(std::string("no safetensors float dtype for ") + to_string(vt));
  }
}

ValueType float_type_for(const TensorInfo& t, const std::vector<float>* decoded, std::optional<ValueType> forced) {
  if (forced) return *forced;
  if (t.value_type == ValueType::F16 || t.value_type == ValueType::BF16 || t.value_type == ValueType::F32)
    return t.value_type;
  ValueType source = ValueType::F16;  // a GGUF block type (Q4_1, ...) was read as f16
  if (t.source_dtype == "BF16") source = ValueType::BF16;
  else if (t.source_dtype == "F32" || t.source_dtype == "F64") source = ValueType::F32;
  if (source == ValueType::F32) return source;
  if (!decoded) throw Error("float_type_for: the decoded values of '" + t.name + "' are needed");
  return exact_in(source, decoded->data(), decoded->size()) ? source : ValueType::F32;
}

ValueType export_float_type(ExportJob& job, const TensorInfo& t) {
  if (job.options.dtype || t.value_type == ValueType::F16 || t.value_type == ValueType::BF16 || t.value_type == ValueType::F32)
    return float_type_for(t, nullptr, job.options.dtype ? std::optional<ValueType>(value_type_of(*job.options.dtype)) : std::nullopt);
  const std::vector<float> w = decode_tensor(job.reader, t);
  const ValueType vt = float_type_for(t, &w, std::nullopt);
  job.widened += vt == ValueType::F32 && t.source_dtype != "F32" && t.source_dtype != "F64";
  return vt;
}

SafetensorsItem decoded_item(ExportJob& job, const TensorInfo& t, ValueType type) {
  const TensorInfo* tp = &t;
  return {t.name, safetensors_dtype(type), t.shape, t.numel() * (value_bits(type) / 8), [&job, tp, type] {
            const std::vector<float> w = decode_tensor(job.reader, *tp);
            std::vector<uint8_t> out(w.size() * (value_bits(type) / 8));
            encode_floats(type, w.data(), w.size(), out.data());
            return out;
          }};
}

OutputFile::OutputFile(ExportJob& job, const std::string& path) : path_(path) {
  job.will_create(path);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(path, std::string("cannot create: ") + std::strerror(errno));
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::write(const void* bytes, uint64_t n) {
  const char* p = static_cast<const char*>(bytes);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n > (1u << 30) ? (1u << 30) : size_t(n));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(path_, std::string("cannot write: ") + std::strerror(errno));
    p += w;
    n -= uint64_t(w);
    written_ += uint64_t(w);
  }
}

void OutputFile::zeros(uint64_t n) {
  static const char kZeros[64] = {};
  while (n > 0) {
    const uint64_t k = n < sizeof kZeros ? n : sizeof kZeros;
    write(kZeros, k);
    n -= k;
  }
}

void OutputFile::close() {
  if (::fsync(fd_) != 0) fail(path_, std::string("cannot sync: ") + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(path_, std::string("cannot close: ") + std::strerror(errno));
}

void write_text_file(ExportJob& job, const std::string& name, const std::string& content) {
  OutputFile f(job, job.work + "/" + name);
  f.write(content.data(), content.size());
  f.close();
  job.summary.files.push_back(name);
  job.summary.bytes += content.size();
}

namespace {

// The safetensors header of `items` (data offsets in order), padded with spaces to 8 bytes.
std::string safetensors_header(const std::vector<const SafetensorsItem*>& items, const std::string& tool) {
  nlohmann::ordered_json h;
  h["__metadata__"] = {{"format", "pt"}, {"producer", "endor-pack export " + tool}};
  uint64_t offset = 0;
  for (const SafetensorsItem* it : items) {
    h[it->name] = {{"dtype", it->dtype}, {"shape", it->shape}, {"data_offsets", {offset, offset + it->n_bytes}}};
    offset += it->n_bytes;
  }
  std::string text = h.dump();
  while (text.size() % 8 != 0) text += ' ';
  return text;
}

void write_shard(ExportJob& job, const std::string& name, const std::vector<const SafetensorsItem*>& items) {
  const std::string header = safetensors_header(items, job.options.tool_version);
  OutputFile f(job, job.work + "/" + name);
  const uint64_t len = header.size();
  uint8_t len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = uint8_t(len >> (8 * i));
  f.write(len_le, 8);
  f.write(header.data(), header.size());
  for (const SafetensorsItem* it : items) {
    const std::vector<uint8_t> bytes = it->bytes();
    if (bytes.size() != it->n_bytes)
      throw Error("export: tensor '" + it->name + "' produced " + std::to_string(bytes.size()) + " bytes, planned " +
                  std::to_string(it->n_bytes));
    f.write(bytes.data(), bytes.size());
  }
  f.close();
  job.summary.files.push_back(name);
  job.summary.bytes += f.bytes_written();
}

}  // namespace

void write_safetensors_model(ExportJob& job, std::vector<SafetensorsItem>& items) {
  std::vector<std::vector<const SafetensorsItem*>> shards(1);
  uint64_t in_shard = 0;
  for (const SafetensorsItem& it : items) {
    if (!shards.back().empty() && in_shard + it.n_bytes > job.options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&it);
    in_shard += it.n_bytes;
  }
  if (shards.size() == 1) {
    write_shard(job, "model.safetensors", shards[0]);
    return;
  }
  nlohmann::ordered_json index;
  uint64_t total = 0;
  for (const SafetensorsItem& it : items) total += it.n_bytes;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = nlohmann::ordered_json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    for (const SafetensorsItem* it : shards[s]) index["weight_map"][it->name] = name;
    write_shard(job, name, shards[s]);
  }
  write_text_file(job, "model.safetensors.index.json", index.dump(2) + "\n");
}

void write_hf_side_files(ExportJob& job, const nlohmann::json& config) {
  write_text_file(job, "config.json", config.dump(2) + "\n");
  const nlohmann::json& gen = job.reader.manifest().generation_config;
  if (!gen.is_null()) write_text_file(job, "generation_config.json", gen.dump(2) + "\n");
  // The container's auxiliary files, verbatim: only plain names, never one this export writes.
  static const std::set<std::string> kOurs = {"config.json", "generation_config.json", "model.safetensors",
                                              "model.safetensors.index.json"};
  for (const FileInfo& f : job.reader.manifest().files) {
    const std::string& n = f.name;
    if (n.empty() || n[0] == '.' || n.find('/') != std::string::npos || n.find('\0') != std::string::npos ||
        kOurs.count(n) || n.find(".safetensors") != std::string::npos) {
      job.summary.notes.push_back("container file '" + packer_detail::printable(n) + "' not written (not a plain file name of its own)");
      continue;
    }
    const std::optional<std::string_view> bytes = job.reader.file(n);
    write_text_file(job, n, std::string(*bytes));
  }
}

// hf: every tensor decoded, in its export float type.
void export_hf(ExportJob& job) {
  nlohmann::json config = job.reader.manifest().config;
  config.erase("quantization_config");  // the weights written here are plain floats
  std::vector<SafetensorsItem> items;
  for (const TensorInfo& t : job.reader.manifest().tensors) items.push_back(decoded_item(job, t, export_float_type(job, t)));
  job.summary.tensors = items.size();
  write_hf_side_files(job, config);
  write_safetensors_model(job, items);
}

namespace {

bool path_exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

void remove_created(ExportJob& job, bool folder) {
  // Files first (newest first), then the folder.
  for (auto it = job.created.rbegin(); it != job.created.rend(); ++it) {
    if (folder && *it == job.work) continue;
    ::unlink(it->c_str());
    if (job.on_temp_file) job.on_temp_file(*it, false);
  }
  if (folder) {
    ::rmdir(job.work.c_str());
    if (job.on_temp_file) job.on_temp_file(job.work, false);
  }
  job.created.clear();
}

}  // namespace

}  // namespace export_detail

std::optional<uint8_t> int4_zero_code(uint16_t scale_f16, uint16_t min_f16) {
  const float s = f16_to_f32(scale_f16), m = f16_to_f32(min_f16);
  if (!std::isfinite(s) || !std::isfinite(m) || std::signbit(s)) return std::nullopt;
  if (m == 0.0f) return uint8_t(0);
  if (s == 0.0f) return std::nullopt;
  const float z = -m / s;
  if (!(z >= 0.0f && z <= 15.0f) || z != float(int(z))) return std::nullopt;
  if (-z * s != m) return std::nullopt;  // exact: 4 bits × 11 bits
  return uint8_t(z);
}

uint64_t gguf_row_of_hf_row(uint64_t r, uint64_t rows, uint32_t heads) { return gguf_unpermuted_row(r, rows, heads); }

ExportSummary export_container(const std::string& endor_path, const std::string& out_in, const ExportOptions& o,
                               const TempFileCallback& on_temp_file) {
  using namespace export_detail;
  std::string out = out_in;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  if (out.empty()) throw Error("export: the output path is empty");
  if (o.dtype && !is_float(*o.dtype))
    throw Error("export: --dtype must be f16, bf16 or f32");
  if (o.max_shard_bytes == 0) throw Error("export: the shard size must be positive");
  const std::unique_ptr<ContainerReader> reader = ContainerReader::open(endor_path);
  reader->verify_all();  // every checksum and bitmap index, before anything is written
  if (path_exists(out)) fail(out, "already exists; export writes a new " + std::string(o.target == ExportTarget::Gguf ? "file" : "folder") +
                                      " and never replaces one (remove it or choose another -o)");
  ExportJob job{*reader, parse_model_config(reader->manifest().config, endor_path), o,
                out + ".tmp-" + std::to_string(::getpid()), on_temp_file, {}, {}};
  const bool folder = o.target != ExportTarget::Gguf;
  try {
    if (folder) {
      job.will_create(job.work);
      if (::mkdir(job.work.c_str(), 0755) != 0) fail(job.work, std::string("cannot create the temporary folder: ") + std::strerror(errno));
    }
    switch (o.target) {
      case ExportTarget::Hf: export_hf(job); break;
      case ExportTarget::CompressedTensors: export_compressed_tensors(job); break;
      case ExportTarget::Gguf: export_gguf(job); break;
    }
    if (job.widened)
      job.summary.notes.push_back(std::to_string(job.widened) + " int8/int4 tensors written as F32: their decoded values are not exact in "
                                  "the source dtype (--dtype f16|bf16 rounds them)");
    // RENAME_NOREPLACE: an output that appeared meanwhile is never replaced.
    if (::renameat2(AT_FDCWD, job.work.c_str(), AT_FDCWD, out.c_str(), RENAME_NOREPLACE) != 0)
      fail(out, std::string("cannot move the finished export into place: ") + std::strerror(errno));
  } catch (...) {
    remove_created(job, folder);
    throw;
  }
  if (on_temp_file)
    for (const std::string& p : job.created) on_temp_file(p, false);
  return job.summary;
}

}  // namespace endor
