// Private to the export module (export*.cpp): the container being exported, the value-type rule,
// output files inside the temporary folder, and the safetensors writer the hf and
// compressed-tensors targets share.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "endor/export.h"

namespace endor::export_detail {

// One export in progress. `work` is the temporary output (a folder, or the GGUF file's temporary
// name); files created inside it are reported to on_temp_file before they exist.
struct ExportJob {
  const ContainerReader& reader;
  ModelConfig model;                  // the container's config.json, as the registry parses it
  ExportOptions options;
  std::string work;
  TempFileCallback on_temp_file;
  ExportSummary summary;
  std::vector<std::string> created;   // temporary paths reported so far (removed on error)
  uint64_t widened = 0;               // int8/int4 tensors written as F32 by the exact rule (a note)

  std::string where() const { return reader.path(); }
  std::string where(const TensorInfo& t) const { return reader.path() + ": tensor '" + t.name + "'"; }
  // Registers `path` as temporary before the caller creates it.
  void will_create(const std::string& path);
};

// The tensor decoded to f32 (SPEC.md §6.6), row-major over its [rows, cols] view.
std::vector<float> decode_tensor(const ContainerReader&, const TensorInfo&);

// The float type a tensor is written in (export.h, "Value types"): forced, else its stored float
// type, else its source dtype when every decoded value is exact there, else F32. `decoded` is
// needed (and read) only for an int8/int4 tensor.
ValueType float_type_for(const TensorInfo&, const std::vector<float>* decoded, std::optional<ValueType> forced);
// float_type_for with the job's --dtype, decoding an int8/int4 tensor to decide; counts job.widened.
ValueType export_float_type(ExportJob&, const TensorInfo&);
// True when every value converts to `vt` and back unchanged (bit for bit, -0 included).
bool exact_in(ValueType vt, const float* values, uint64_t n);
// n f32 values to `vt` (F16/BF16: round to nearest even; F32: copied) at `out`.
void encode_floats(ValueType vt, const float* values, uint64_t n, uint8_t* out);
const char* safetensors_dtype(ValueType vt);   // "F16", "BF16", "F32"

// A file written at once: fd open with O_EXCL, all bytes written, fsync'ed. Throws Error naming it.
class OutputFile {
 public:
  OutputFile(ExportJob&, const std::string& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  void write(const void* bytes, uint64_t n);
  void zeros(uint64_t n);
  void close();
  uint64_t bytes_written() const { return written_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
};
void write_text_file(ExportJob&, const std::string& name, const std::string& content);

// One safetensors entry: name, dtype spelling, shape, byte count and the bytes, made on demand
// (one tensor in memory at a time).
struct SafetensorsItem {
  std::string name;
  std::string dtype;                       // "F16", "BF16", "F32", "I32", "I64"
  std::vector<uint64_t> shape;
  uint64_t n_bytes = 0;
  std::function<std::vector<uint8_t>()> bytes;
};
// Writes model.safetensors, or model-0000k-of-0000n.safetensors + model.safetensors.index.json
// when the items pass max_shard_bytes (whole tensors per shard, in order), into job.work.
void write_safetensors_model(ExportJob&, std::vector<SafetensorsItem>& items);

// `t` written decoded in `type`, as a safetensors item (decoded when the shard is written).
SafetensorsItem decoded_item(ExportJob&, const TensorInfo& t, ValueType type);

// The folder files every Hugging Face target writes: config.json (`config`), generation_config.json
// (when the container has one) and the container's tokenizer files and chat template, verbatim.
void write_hf_side_files(ExportJob&, const nlohmann::json& config);

// Targets.
void export_hf(ExportJob&);
void export_compressed_tensors(ExportJob&);
void export_gguf(ExportJob&);

}  // namespace endor::export_detail
