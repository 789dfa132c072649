// GGUF import (llama.cpp's model file, versions 2 and 3): a parser that distrusts the file, the
// dequantization of the float, simple block, K-quant and IQ4 types exactly as gguf-py computes it,
// and the translation of a llama / qwen2 GGUF into what a Hugging Face folder holds (config.json,
// tensor names and layouts, tokenizer.json + tokenizer_config.json). Checkpoint::open (checkpoint.h)
// uses it when given a GGUF file instead of a folder.
//
// Errors: endor::Error whose what() is one line "<file>: <what is wrong>".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "endor/format.h"

namespace endor {

// ==== the file ===============================================================================

// Metadata value types of the GGUF spec.
enum class GgufValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9,
  U64 = 10, I64 = 11, F64 = 12
};
const char* to_string(GgufValueType);

struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  uint64_t u = 0;                 // unsigned integers and bool
  int64_t i = 0;                  // signed integers
  double f = 0;                   // F32 (exactly as stored) and F64
  std::string str;                // String
  GgufValueType element_type = GgufValueType::U8;  // Array
  std::vector<GgufValue> array;   // Array
  bool is_integer() const;
  // The value as a non-negative integer; false when it is not an integer or is negative.
  bool as_u64(uint64_t* out) const;
};

// ggml tensor types (ggml.h numbering). Readable (dequantized to f32): F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS; the others are known by size so
// that a file holding them still parses (and then names the tensor and its type in one line).
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9, Q2_K = 10, Q3_K = 11,
  Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19,
  IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28,
  IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39
};
const char* ggml_type_name(GgmlType);             // "Q4_1", ...; "?" for an unknown number
bool ggml_type_known(uint32_t type);
bool ggml_type_readable(GgmlType);                // the types ggml_dequantize reads
const char* ggml_readable_types();                // "F32, F16, ... and IQ4_XS", for messages
uint32_t ggml_block_elements(GgmlType);           // 1 for F32/F16/..., 32 for Q4_0, 256 for K quants
uint32_t ggml_block_bytes(GgmlType);

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> ne;        // GGUF order: ne[0] is the fastest (column) dimension
  uint64_t offset = 0;             // relative to the data section
  uint64_t n_bytes = 0;            // checked: inside the data section, no overlap
  uint64_t numel() const;
  std::vector<uint64_t> torch_shape() const;  // ne reversed (row-major, as transformers)
};

struct GgufHeader {
  uint32_t version = 0;
  uint64_t alignment = 32;         // general.alignment (a power of two), default 32
  uint64_t data_offset = 0;        // start of the data section in the file
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensorInfo> tensors;  // in file order
  const GgufValue* find(const std::string& key) const;         // nullptr when absent
  const GgufTensorInfo* tensor(const std::string& name) const;  // nullptr when absent
};

// Limits on what a header may declare (each is also bounded by the bytes left in the file).
constexpr uint64_t kGgufMaxTensors = 1u << 20;
constexpr uint64_t kGgufMaxKeys = 1u << 20;
constexpr uint64_t kGgufMaxArrayDepth = 4;

// Parses and validates the header of a whole GGUF file image of n_bytes without reading tensor
// data: magic "GGUF", version 2 or 3, counts capped, every string and array inside the file
// (element counts × sizes overflow-checked), known value types, no duplicate key or tensor,
// general.alignment a power of two, n_dims in [1, 4], known tensor types with ne[0] a multiple of
// the block, every tensor aligned, inside the data section and overlapping no other.
GgufHeader parse_gguf(const uint8_t* file, uint64_t n_bytes, const std::string& path_for_errors);

// True when `path` is a regular file starting with the GGUF magic.
bool is_gguf_file(const std::string& path);

// A read-only memory-mapped GGUF file.
class GgufFile {
 public:
  static std::unique_ptr<GgufFile> open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  const GgufHeader& header() const { return header_; }
  const uint8_t* data(const GgufTensorInfo& t) const { return base_ + header_.data_offset + t.offset; }
  void release(const GgufTensorInfo&) const;  // madvise(MADV_DONTNEED) its pages

 private:
  GgufFile() = default;
  std::string path_;
  GgufHeader header_;
  const uint8_t* base_ = nullptr;
  uint64_t mapped_bytes_ = 0;
};

// n values (a multiple of the type's block) of a readable type to f32, bit for bit as gguf-py's
// gguf.quants.dequantize: f16 fields widened to f32, f32 arithmetic in gguf-py's order without
// fused multiply-add (the block layouts and formulas are listed in gguf_dequant.cpp). Any other
// type throws Error naming it.
void ggml_dequantize(GgmlType, const uint8_t* src, uint64_t n, float* out);

// A quantized GGUF tensor's own codes and parameters, for the types an Endor int4 encoding holds
// exactly (SPEC.md §7.3, codes chosen by another procedure), so that packing it to that encoding
// keeps the source's grid instead of rounding its decoded values onto a new one:
//   Q4_0, Q4_1 -> int4 (f16 parameters), groups of 32: S = d, M = −8·d or m;
//   Q4_K       -> int4k, groups of 32: one 256-column Q4_K block is one int4k super-block
//                 (d, dmin and the eight 6-bit scale/min codes as they are), S = d·sc, M = −dmin·m.
// Decoding the result gives gguf-py's values bit for bit (same f32 operations), except that
// Q4_0's −0 (d < 0, q = 8) decodes as +0. `data` is the
// tensor's bytes, [rows, cols] with cols along ne[0]; row r of the result is GGUF row
// gguf_unpermuted_row(r, rows, permute_heads) when permute_heads > 0. nullopt when this type
// cannot be held by (params, group_size) exactly (another type or group size, −8·d outside f16).
std::optional<EncodedTensor> gguf_exact_int4(GgmlType, const uint8_t* data, uint64_t rows, uint64_t cols,
                                             uint32_t permute_heads, Int4Params, uint32_t group_size);
// The same for Q8_0 -> int8g at groups of 32 (SPEC.md §6.8): S = d, the 32 codes as they are; the
// decoded values are gguf-py's bit for bit (q·d is exact in f32). nullopt for another type or
// group size, or a block with code −128 or a d that is not finite.
std::optional<EncodedTensor> gguf_exact_int8g(GgmlType, const uint8_t* data, uint64_t rows, uint64_t cols,
                                              uint32_t permute_heads, uint32_t group_size);

// The inverse, for `endor-pack export --to gguf`: an int4 / int4k tensor as GGUF blocks whose
// gguf-py values are its decoded values (SPEC.md §6.6) bit for bit, when a block type holds them:
//   int4 (f16 parameters), groups a multiple of 32   -> Q4_1 (each 32 columns repeat their group's S, M);
//   int4k, groups a multiple of 32, cols a multiple of 256 and of 8 groups (no super-block spans
//   two rows)                                        -> Q4_K (a block's d, dmin from its super-block);
//   int8g, groups a multiple of 32                   -> Q8_0 (each 32 columns repeat their group's S).
// `decoded` is the tensor's values [rows, cols]; an absent (bitmap) element takes the group's
// code whose value is exactly 0. Row r is written at GGUF row gguf_row(r). Every block is checked
// by dequantizing it: nullopt when any value would differ (or no block type fits).
struct GgufBlocks {
  GgmlType type = GgmlType::F32;
  std::vector<uint8_t> bytes;   // rows · cols / block elements · block bytes, GGUF row order
};
std::optional<GgufBlocks> gguf_blocks_exact(const TensorView&, const float* decoded,
                                            const std::function<uint64_t(uint64_t)>& gguf_row);

// ==== the model it holds =====================================================================

// One tensor of the GGUF under its Hugging Face name, with how to read it in HF layout.
struct GgufModelTensor {
  std::string hf_name;             // e.g. "model.layers.0.self_attn.q_proj.weight"
  const GgufTensorInfo* info = nullptr;
  std::vector<uint64_t> shape;     // torch order
  // llama.cpp's convert permutes the rows of llama's q/k weights (per head, halves interleaved);
  // when > 0, HF row r is GGUF row gguf_unpermuted_row(r, rows, heads).
  uint32_t permute_heads = 0;
  // One expert of a stacked MoE tensor (ffn_*_exps, [n_experts, rows, cols]): `info` then points
  // here, at that expert's rows (name "<stacked>[e]", its offset and bytes), and `stacked` names
  // the file's tensor.
  std::shared_ptr<const GgufTensorInfo> slice;
  const GgufTensorInfo* stacked = nullptr;
};
// The GGUF row holding HF row r of a q/k projection with `rows` rows and `heads` heads
// (transformers' reverse permutation: reshape(heads, d, 2, ...).swapaxes(1, 2), d = rows/heads/2).
uint64_t gguf_unpermuted_row(uint64_t r, uint64_t rows, uint32_t heads);

struct GgufModel {
  nlohmann::json config;            // as a Hugging Face config.json
  nlohmann::json generation_config; // bos/eos ids
  std::vector<GgufModelTensor> tensors;
  std::vector<std::string> ignored; // GGUF tensors not used, with the reason
  std::string tokenizer_json;       // a Hugging Face tokenizer.json
  std::string tokenizer_config_json;
};

// Architectures llama and qwen2 (Mistral files are "llama"). Every required metadata key, each
// tensor type and name is checked here; unsupported ones give one clear line naming it.
GgufModel gguf_to_model(const GgufHeader&, const std::string& path_for_errors);

// The tokenizer.json / tokenizer_config.json described by tokenizer.ggml.* (exposed for tests).
// Models: "gpt2" (byte-level BPE; pre-tokenizers smollm, llama-bpe/llama3, qwen2, gpt-2/default)
// and "llama" (SentencePiece BPE with byte fallback; merges from the file or from the scores).
nlohmann::json gguf_tokenizer_json(const GgufHeader&, const std::string& path_for_errors);
nlohmann::json gguf_tokenizer_config(const GgufHeader&, const std::string& path_for_errors);

}  // namespace endor
