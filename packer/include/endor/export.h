// Export: a .endor container back out to the formats the ecosystem loads.
//   hf                  a Hugging Face folder: config.json, generation_config.json, the tokenizer
//                       files and chat template the container carries, model.safetensors (sharded
//                       past ExportOptions::max_shard_bytes, with model.safetensors.index.json),
//                       every weight decoded (SPEC.md §6.6); pruned entries are explicit zeros.
//   compressed-tensors  the same folder with int8/int4 decoder Linears as compressed-tensors'
//                       `pack-quantized` (weight_packed/weight_scale/weight_zero_point/weight_shape)
//                       on Endor's own grid, exactly, and a `quantization_config` in config.json.
//   gguf                one GGUF v3 file for llama.cpp (llama, mistral as llama, qwen2, qwen3): int4
//                       and int8g as Q4_1/Q4_K/Q8_0 blocks where they hold it exactly, the rest
//                       F16/BF16/F32 tensors, llama.cpp's metadata and byte-level BPE tokenizer keys, llama's q/k
//                       rows in llama.cpp's rotary order (the forward of the importer's permutation).
// docs/export.md states each mapping (code and zero point conventions, dtypes, what is lost).
//
// Value types (hf, gguf, and the unquantized tensors of compressed-tensors): a tensor stored as
// f16/bf16/f32 keeps its type; an int8/int4 tensor is written in its source dtype (the manifest's
// source_dtype; f16 for a GGUF block type) when every decoded value is exact in it, else in f32.
// ExportOptions::dtype forces one type (rounding to nearest even). GGUF 1-D tensors are always F32.
// So by default every written value equals the container's decoded value bit for bit.
//
// Errors: endor::Error, one line naming the file (and tensor) and what is wrong: an architecture or
// tokenizer the target cannot express, an int4 grid compressed-tensors cannot express exactly, an
// existing output. Output is written into "<out>.tmp-<pid>" beside it and renamed into place when
// complete; on error the temporary is removed, and the input is never modified.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "endor/format.h"
#include "endor/output_file.h"

namespace endor {

enum class ExportTarget : uint8_t { Hf, CompressedTensors, Gguf };
const char* to_string(ExportTarget);                       // "hf", "compressed-tensors", "gguf"
std::optional<ExportTarget> parse_export_target(std::string_view);

struct ExportOptions {
  ExportTarget target = ExportTarget::Hf;
  std::optional<Dtype> dtype;                   // F16/BF16/F32 forced; nullopt = the exact rule above
  uint64_t max_shard_bytes = 5ull << 30;         // safetensors shard limit (hf, compressed-tensors)
  std::string tool_version;                      // recorded in the output's metadata
};

struct ExportSummary {
  std::vector<std::string> files;                // names written inside the output (gguf: the file)
  uint64_t bytes = 0;                            // total bytes written
  uint64_t tensors = 0, quantized_tensors = 0;   // tensors written; of them int8/int4 kept packed
  std::vector<std::string> notes;                // one line each: what the target changed or dropped
};

// Reads `endor_path`, writes `out_path` (a folder for hf / compressed-tensors, a file for gguf),
// which must not exist. Temporary paths are reported to on_temp_file (PackCallbacks' contract),
// the folder before its files.
ExportSummary export_container(const std::string& endor_path, const std::string& out_path, const ExportOptions&,
                               const TempFileCallback& on_temp_file = {});

// ---- the pieces, exposed for tests ---------------------------------------------------------

// compressed-tensors' int4 parameters of one (row, group) from Endor's (S, M) f16 bits: the zero
// point z with M = −z·S exactly, z in [0, 15]; nullopt when M is not such a multiple. An Endor
// code q then is compressed-tensors' signed code q − 8, its zero point z − 8, stored as q and z in
// 4-bit fields, and (q − z)·S == q·S + M bit for bit in f16 and f32 arithmetic alike.
std::optional<uint8_t> int4_zero_code(uint16_t scale_f16, uint16_t min_f16);

// llama.cpp's row order of a llama q/k projection: the GGUF row that holds Hugging Face row r
// (gguf_unpermuted_row of gguf.h; this is the map the writer applies, named for its direction).
uint64_t gguf_row_of_hf_row(uint64_t r, uint64_t rows, uint32_t heads);

}  // namespace endor
