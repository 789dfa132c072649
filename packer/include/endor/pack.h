// endor_packer: packing a checkpoint into one .endor container: the options, what each tensor
// becomes (plan_treatment, prepare_tensor) and pack_checkpoint, which validates the options,
// reads the source and writes the output atomically. The `endor-pack` CLI is a thin shell over
// this and the other packer headers.
// Errors: bad input throws endor::Error (format.h) whose what() is one line naming the file and
// what is wrong; nothing here prints or exits. Temporary files are reported through
// PackCallbacks::on_temp_file (the CLI's signal handler removes them).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "endor/checkpoint.h"
#include "endor/dtype.h"
#include "endor/format.h"
#include "endor/output_file.h"
#include "endor/prune.h"
#include "endor/tier_plan.h"

namespace endor {

// --quant and --quant-head are a Quantization (endor/dtype.h): none, or the container dtype the
// tensors are stored in: Int8, Int8g (int8 codes with one f16 scale per group, SPEC.md §6.8: at
// groups of 32, 8.5 bits a weight, llama.cpp's Q8_0 grid), Int4 or Int4k (int4 whose group
// parameters are six-bit codes under f16 super-block scales, SPEC.md §6.7: at groups of 32, 4.5 bits
// a weight with a float minimum).
// The quantizations whose tensors take PackOptions::group_size.
inline bool grouped(const Quantization& q) { return q && is_grouped(*q); }

struct PackOptions {
  // The endor-pack subcommand, recorded as provenance "command" only: what is done follows from
  // prune and quant, never from this name.
  std::string command = "convert";     // "convert" | "prune" | "compare"
  std::optional<Dtype> dtype;          // F16/BF16/F32; nullopt = each tensor's source dtype
  PruneSpec prune;                     // inactive = no pruning
  Quantization quant;                  // nullopt: none
  // The token embedding and the lm_head (tied: the one matrix) quantized too, never pruned; int4
  // takes group_size. They are the largest tensors of a small model, read whole every token as the
  // head (llama.cpp's Q4_0 files quantize them as well).
  Quantization quant_head;
  uint32_t group_size = kDefaultGroupSize;
  std::string skip_regex;              // ECMAScript; matching names are neither pruned nor quantized
  // Mixed precision: Linears whose names match (ECMAScript) are quantized int8 instead of `quant`
  // (as llama.cpp's Q4_K_M keeps some attn_v / ffn_down tensors at more bits). Empty: none.
  std::string int8_regex;
  // Calibrated quantization (sparsegpt, gptq): GPTQ's act-order, and a range search per int4 group
  // (squared error weighted by the Hessian's diagonal) instead of [min, max].
  bool act_order = false;
  bool mse_clip = true;
  TierBudget budget;
  std::string tool_version;            // for provenance
};

struct PackProgress {
  std::string stage;                   // "pack", "compare", ...
  std::string tensor;                  // current tensor name
  const char* unit = "tensors";        // what tensors_done/_total count ("blocks", "sequences")
  uint64_t tensors_done = 0, tensors_total = 0;
  uint64_t bytes_done = 0, bytes_total = 0;  // source bytes
};

struct PackCallbacks {
  std::function<void(const PackProgress&)> on_progress;
  TempFileCallback on_temp_file;
  // A choice made where the options were silent, as one line (e.g. the self-generated
  // calibration's size), reported before the work it concerns.
  std::function<void(const std::string&)> on_note;
};

struct PackSummary {
  uint64_t tensors = 0, pruned_tensors = 0;
  uint64_t source_grid_tensors = 0;  // tensors that kept a GGUF's Q4_0/Q4_1/Q4_K/Q8_0 grid (gguf_exact_int4/int8g)
  uint64_t source_bytes = 0, file_bytes = 0;
  std::vector<std::string> dropped;
  // Calibrated packs of an MoE model: the experts (block x expert) the method calibrated, and those
  // that received under min_expert_tokens calibration tokens and were pruned by magnitude instead.
  uint64_t experts = 0, experts_under = 0, min_expert_tokens = 0;
  uint64_t fallback_tensors = 0;  // of pruned_tensors, the Linears of those experts (pruned by the fallback)
};

// What the packer does to one tensor under the options.
struct TensorTreatment {
  bool prune = false, quantize = false;
  Dtype dtype = Dtype::F16;  // how it is stored: a float dtype, or the quantization's
};
// The group size a tensor of dtype d is stored with: o.group_size for the grouped dtypes, else 0.
inline uint32_t stored_group_size(Dtype d, const PackOptions& o) { return is_grouped(d) ? o.group_size : 0; }
TensorTreatment plan_treatment(const CheckpointTensor&, const PackOptions&);
ValueType default_value_type(SafetensorsDType);   // F16/BF16/F32 as the source; F64 -> F32

// One tensor encoded as pack writes it: the smaller of bitmap and dense for its value type
// (ties -> dense), except int4: bitmap when at least 1 % of the tensor is zero (the asymmetric
// int4 grid has no exact zero, and pruned zeros must decode as exactly 0), dense below that (not
// pruned: the zeros are the checkpoint's own, quantized like every other weight; smaller, and
// faster to multiply).
// Memory: dense tensors that need no pruning/quantization are converted in row chunks (or
// borrowed straight from the source mapping when the dtype already matches); the others are
// materialised once as f32 [rows, cols].
struct PreparedTensor {
  TensorInfo info;                     // name, shape, encoding, value type, group_size, nnz, dtype
  std::vector<uint8_t> owned;
  const uint8_t* data = nullptr;       // the blob: owned.data() or inside the source mapping
  uint64_t n_bytes = 0;
  bool kept_source_grid = false;       // a GGUF's own int4 codes and parameters (gguf_exact_int4)
};
PreparedTensor prepare_tensor(const Checkpoint&, const CheckpointTensor&, const TensorTreatment&,
                              Pruner* pruner, const PackOptions&);
// The encoding rule above, given the element count, stored values and dtype.
Encoding choose_encoding(const std::vector<uint64_t>& shape, Dtype, uint32_t group_size, uint64_t nnz);
// A pruned/quantized f32 tensor w (row-major, `shape`) encoded as pack writes it: choose_encoding
// over its nonzeros, then encode_tensor (parameters chosen by SPEC.md §7.1 int8, §7.5 int8g, §7.2 int4,
// §7.4 int4k). group_size: the grouped dtypes (stored_group_size).
EncodedTensor encode_for_pack(const float* w, const std::vector<uint64_t>& shape, Dtype, uint32_t group_size);

// Validates options, reads `source_dir`, writes `output_path` atomically (temp + rename).
PackSummary pack_checkpoint(const std::string& source_dir, const std::string& output_path,
                            const PackOptions&, const PackCallbacks& = {});

// pack_checkpoint with a caller-supplied pruner (e.g. the calibration driver's, which hands out
// precomputed weights); `calibration` (when not null) is recorded as provenance "calibration".
PackSummary pack_checkpoint_with_pruner(const std::string& source_dir, const std::string& output_path,
                                        const PackOptions&, Pruner* pruner, const PackCallbacks& = {},
                                        const nlohmann::json& calibration = nullptr);

// Provenance object written into the manifest.
nlohmann::json make_provenance(const std::string& source_dir, const PackOptions&);

}  // namespace endor
