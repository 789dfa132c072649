// Private to endor_packer: a Hugging Face folder in compressed-tensors' `pack-quantized` format (what
// `endor-pack export --to compressed-tensors` and llm-compressor write) read as a checkpoint. Each
// quantized Linear's weight_packed / weight_scale / weight_zero_point / weight_shape become one
// "<module>.weight" that read_rows_f32 dequantizes: x = (q − zp)·scale in binary32, q and zp the
// signed codes (stored + 2^(bits−1)), scale widened exactly to f32. int4 and int8, strategies
// group, channel and tensor, symmetric or not.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "endor/safetensors.h"

namespace endor {

struct PackedLinear {
  std::string module;                        // "model.layers.0.self_attn.q_proj"
  int bits = 4;
  uint64_t group_size = 0;                   // columns per scale (group: G; channel/tensor: cols)
  bool per_tensor = false;                   // one scale for the whole matrix
  bool symmetric = true;
  uint64_t rows = 0, cols = 0;
  const SafetensorsEntry *packed = nullptr, *scale = nullptr, *zero_point = nullptr, *shape = nullptr;
  const SafetensorsFile *packed_file = nullptr, *scale_file = nullptr, *zero_point_file = nullptr;
  uint32_t shard = 0;                        // weight_packed's shard
  uint64_t stored_bytes() const;
  // Rows [r0, r1) as f32, row-major.
  void read_rows(uint64_t r0, uint64_t r1, float* out) const;
};

class CompressedTensorsSource {
 public:
  // nullptr when config.json has no compressed-tensors quantization_config; throws for one that
  // is not pack-quantized int4/int8.
  static std::unique_ptr<CompressedTensorsSource> from_config(const nlohmann::json& config, const std::string& where);
  // True (and kept) when `name` is a part of a packed Linear.
  bool take(const SafetensorsEntry& e, const SafetensorsFile& file, uint32_t shard);
  // Checks every module's parts (dtypes, shapes) and returns them.
  const std::vector<std::unique_ptr<PackedLinear>>& finish(const std::string& where);

 private:
  struct Scheme {
    std::vector<std::string> targets;
    int bits = 4;
    std::string strategy;
    uint64_t group_size = 0;
    bool symmetric = true;
  };
  std::vector<Scheme> schemes_;
  std::vector<std::string> ignore_;
  std::map<std::string, std::map<std::string, std::pair<const SafetensorsEntry*, const SafetensorsFile*>>> parts_;
  std::map<std::string, uint32_t> shard_of_;
  std::vector<std::unique_ptr<PackedLinear>> linears_;
};

}  // namespace endor
