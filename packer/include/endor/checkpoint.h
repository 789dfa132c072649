// endor_packer: a Hugging Face checkpoint folder (config.json + safetensors shards) or a GGUF file,
// opened, checked against its config and listed in execution order.
// Errors: bad input throws endor::Error (format.h) whose what() is one line naming the file and
// what is wrong; nothing here prints or exits.
//
// Tensor names are the canonical Hugging Face names WITH the `model.` prefix, whatever the source
// used: OPT "model.decoder.layers.3.fc1.weight", Llama family "model.layers.3.mlp.up_proj.weight",
// "lm_head.weight" (only when the head is untied).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "endor/model_registry.h"
#include "endor/safetensors.h"

namespace endor {

// ModelFamily (= Architecture), TensorRole, classify_tensor and canonical_tensor_name come from the
// model registry (endor/model_registry.h), as does every family's list of tensors.

// The dimensions config.json promises; used to check every tensor's shape.
struct ModelShape {
  ModelFamily family = ModelFamily::Llama;
  std::string model_type;                           // config.json "model_type"
  uint64_t vocab = 0, hidden = 0, intermediate = 0, layers = 0;
  uint64_t heads = 0, kv_heads = 0, head_dim = 0;
  uint64_t word_embed_dim = 0;                      // OPT word_embed_proj_dim (== hidden otherwise)
  uint64_t max_positions = 0;
  bool tied_head = false;                           // tie_word_embeddings
};
// The dimensions of a parsed config (parse_model_config, the registry's one parser).
ModelShape shape_of(const ModelConfig& config);
// parse_model_config + shape_of; errors name `path_for_errors` (the config.json or GGUF file).
ModelShape read_model_shape(const nlohmann::json& config, const std::string& path_for_errors);

class GgufFile;
struct GgufModelTensor;
class CompressedTensorsSource;
struct PackedLinear;

struct CheckpointTensor {
  std::string name;                                 // canonical name
  std::string source_name;                          // as spelled in the file
  // The float type the values are read as and stored in by default: the source dtype, or F16
  // for a quantized GGUF tensor (which read_rows_f32 dequantizes).
  SafetensorsDType dtype = SafetensorsDType::F32;
  std::string source_type;                          // as the file names it: "BF16", "Q4_1", ...
  std::vector<uint64_t> shape;
  uint32_t shard = 0;                               // index into Checkpoint's shard files
  const SafetensorsEntry* entry = nullptr;          // safetensors source
  const GgufModelTensor* gguf = nullptr;            // GGUF source
  const PackedLinear* packed = nullptr;             // a compressed-tensors pack-quantized Linear (F32, dequantized)
  // Checkpoint::bytes() holds the values in `dtype`, row-major in Hugging Face layout (false
  // for a quantized or row-permuted GGUF tensor: read it with read_rows_f32).
  bool direct = true;
  uint64_t stored_bytes = 0;                        // bytes it takes in the source file
  TensorRole role;
  uint64_t numel() const;
  uint64_t rows() const;                            // shape[0] (1 for 0-/1-D)
  uint64_t cols() const;                            // numel / rows
  uint64_t source_bytes() const { return stored_bytes; }
};

struct AuxFile {                                    // tokenizer files, carried verbatim
  std::string name;                                 // file name inside the container
  std::string path;                                 // on disk (empty: made from a GGUF's metadata)
  std::string content;                              // the bytes when path is empty
};

// A Hugging Face checkpoint folder or a GGUF file (gguf.h: config, tensors and tokenizer files
// translated from its metadata), memory-mapped. Tensors are in execution order: embed group,
// layers 0..L-1, head group. Shapes are checked against config.json at open().
class Checkpoint {
 public:
  static std::unique_ptr<Checkpoint> open(const std::string& dir_or_gguf);
  ~Checkpoint();

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }                 // verbatim
  const nlohmann::json& generation_config() const { return generation_config_; }  // or null
  const ModelShape& shape() const { return shape_; }
  const ModelConfig& model_config() const { return model_config_; }  // config() as the registry parsed it
  const std::vector<CheckpointTensor>& tensors() const { return tensors_; }
  const std::vector<AuxFile>& files() const { return files_; }
  // Tensors present in the source but deliberately not packed (e.g. a tied lm_head copy,
  // rotary inv_freq buffers), with the reason.
  const std::vector<std::string>& dropped() const { return dropped_; }
  uint64_t source_bytes() const;                    // sum over tensors()
  // Every file this checkpoint reads (config, index, shards, generation config, aux files).
  std::vector<std::string> input_paths() const;

  bool is_gguf() const { return gguf_ != nullptr; }
  // The tensor's bytes in the source file; only meaningful as values when t.direct.
  const uint8_t* bytes(const CheckpointTensor&) const;
  // Rows [row_begin, row_end) of the tensor viewed as [rows, cols], as f32 (row-major).
  void read_rows_f32(const CheckpointTensor&, uint64_t row_begin, uint64_t row_end, float* out) const;
  void release(const CheckpointTensor&) const;      // see SafetensorsFile::release

 private:
  Checkpoint() = default;
  static std::unique_ptr<Checkpoint> open_gguf(const std::string& path);
  void check_and_order();
  std::string dir_;
  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<CompressedTensorsSource> compressed_;  // a compressed-tensors folder's packed Linears
  std::unique_ptr<std::vector<GgufModelTensor>> gguf_tensors_;
  nlohmann::json config_, generation_config_;
  ModelConfig model_config_;
  ModelShape shape_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<CheckpointTensor> tensors_;
  std::vector<AuxFile> files_;
  std::vector<std::string> dropped_;
};

}  // namespace endor
