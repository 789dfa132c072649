// endor_packer: reads a Hugging Face checkpoint (config.json + safetensors), prunes and
// quantizes its decoder Linears, encodes every tensor and writes one .endor container; also
// inspects containers and compares Endor against zstd. The `endor-pack` CLI is a thin shell
// over this header.
//
// Errors: every function reports bad input by throwing endor::Error (format.h) whose what() is
// one line naming the file and what is wrong. Nothing here calls exit(), prints, or installs
// signal handlers (the CLI does; see PackCallbacks::on_temp_file).
//
// Tensor names inside a container are the canonical Hugging Face names WITH the `model.`
// prefix, whatever the source used: OPT "model.decoder.layers.3.fc1.weight", Llama family
// "model.layers.3.mlp.up_proj.weight", "lm_head.weight" (only when the head is untied).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "endor/format.h"
#include "endor/model_registry.h"

namespace endor {

// ==== safetensors ============================================================================

enum class SafetensorsDType : uint8_t {
  Bool, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, F8_E4M3, F8_E5M2
};
const char* to_string(SafetensorsDType);           // the file's spelling: "F16", "BF16", ...
uint32_t dtype_bytes(SafetensorsDType);

struct SafetensorsEntry {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::F32;
  std::vector<uint64_t> shape;                      // [] = scalar (1 element)
  uint64_t begin = 0, end = 0;                      // relative to the data buffer
  uint64_t numel() const;
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;                         // 8 + header length: first buffer byte
  std::vector<SafetensorsEntry> tensors;            // sorted by begin (they tile the buffer)
  std::map<std::string, std::string> metadata;      // optional "__metadata__"
  const SafetensorsEntry* find(const std::string& name) const;  // nullptr when absent
};

// Parses and validates a whole safetensors file image of n_bytes (header + data buffer) without
// reading tensor data. Distrusts the file: header length <= 100 MB and inside the file, JSON
// object starting with '{' (trailing spaces allowed), known dtypes, shapes and data_offsets
// checked with overflow-safe arithmetic, end - begin == numel * dtype size, and the tensors
// tile the buffer exactly (no holes, no overlap, no bytes after the last one).
SafetensorsHeader parse_safetensors(const uint8_t* file, uint64_t n_bytes,
                                    const std::string& path_for_errors);

// A read-only memory-mapped safetensors file. Thread-safe for concurrent reads.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const uint8_t* data(const SafetensorsEntry& e) const { return base_ + header_.data_offset + e.begin; }
  // Drops the mapped pages of a tensor from this process (madvise MADV_DONTNEED) so the
  // resident set stays small while streaming; the data stays readable (re-faulted on access).
  void release(const SafetensorsEntry&) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  SafetensorsHeader header_;
  const uint8_t* base_ = nullptr;
  uint64_t mapped_bytes_ = 0;
};

// Converts n source values of a float dtype (F16, BF16, F32, F64) to f32. Throws for others.
void convert_to_f32(SafetensorsDType, const uint8_t* src, uint64_t n, float* out);

// ==== Hugging Face checkpoint ================================================================

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

// ==== pruning ================================================================================

enum class PruneScope : uint8_t { Row, Matrix };

// The pruning method (--method). Gptq prunes nothing: calibrated quantization only. Parsed once
// where the options come in (the CLI); the library compares values, never names.
enum class PruneMethod : uint8_t { Magnitude, Wanda, SparseGpt, Gptq };
// "magnitude", "wanda", "sparsegpt", "gptq": --method's spelling and the provenance's "method".
const char* to_string(PruneMethod);
std::optional<PruneMethod> parse_prune_method(std::string_view);  // nullopt for any other spelling
// Wanda, SparseGPT and GPTQ run the model on calibration data (pack_calibrated).
inline bool calibrated(PruneMethod m) { return m != PruneMethod::Magnitude; }

struct PruneSpec {
  PruneMethod method = PruneMethod::Magnitude;
  double sparsity = 0.0;              // [0, 1); unstructured only
  uint32_t n = 0, m = 0;              // N:M when m > 0 (zero N of every M)
  PruneScope scope = PruneScope::Row;
  // Unstructured, calibrated methods: sparsity rises linearly through the decoder blocks, from
  // sparsity - ramp in the first to sparsity + ramp in the last (mean: sparsity). Small models
  // lose much less accuracy when their early blocks keep more weights (bench/ACCURACY.md).
  double sparsity_ramp = 0.0;
  // Block `layer` of `n_layers`: sparsity + ramp * (2 layer / (n_layers - 1) - 1).
  double block_sparsity(uint32_t layer, uint32_t n_layers) const;
  bool structured() const { return m > 0; }
  // Whether the Linears go through the method (pruned, or for gptq quantized with calibration).
  bool active() const { return structured() || sparsity > 0.0 || method == PruneMethod::Gptq; }
  std::string pattern() const;        // "unstructured" or "2:4"
};

// Zeroes entries of one weight W [rows = out, cols = in], row-major f32, in place. Calibrated
// methods (later) will see the block's inputs through an extended interface; this one is all a
// data-free method needs.
class Pruner {
 public:
  virtual ~Pruner() = default;
  virtual void prune(const std::string& tensor_name, float* w, uint64_t rows, uint64_t cols) = 0;
  // A pruner that has already encoded a tensor (the calibration driver: its bytes are decided,
  // e.g. SparseGPT's own quantization codes) hands the blob over here, once; pack then writes it
  // as it is and does not call prune() for it. Default: nothing precomputed.
  virtual std::optional<EncodedTensor> take_encoded(const std::string& /*tensor_name*/) { return std::nullopt; }
};
// Validates the spec (sparsity in [0,1), 0 < N < M, method known and implemented).
std::unique_ptr<Pruner> make_pruner(const PruneSpec&);

// The magnitude building blocks (NaN counts as the largest magnitude):
// per row, zero the int(cols * sparsity) smallest |w| (stable: ties -> lower column first).
void magnitude_prune_rows(float* w, uint64_t rows, uint64_t cols, double sparsity);
// whole matrix: thresh = sorted(|W|)[int(numel * sparsity)], zero |w| <= thresh (wanda's
// prune_magnitude). sparsity 0 prunes nothing here (the reference would zero the minimum).
void magnitude_prune_matrix(float* w, uint64_t rows, uint64_t cols, double sparsity);
// in each group of m consecutive columns of a row, zero the n smallest |w| (stable); cols must
// be a multiple of m.
void magnitude_prune_n_m(float* w, uint64_t rows, uint64_t cols, uint32_t n, uint32_t m);

// ==== tier planning ==========================================================================

// Budgets are parsed by parse_byte_size (endor/format.h).
struct TierBudget {
  std::optional<uint64_t> gpu_bytes, cpu_bytes;     // nullopt = unlimited
};

// Groups in execution order: "embed", "layers.0", ..., "head" (others are ignored and keep Cpu).
// embed and head go to gpu first, then layers in order fill gpu, then cpu, then disk; once a
// layer spills to a slower tier, every later layer stays at that tier or slower. A group goes
// to a tier only if it fits in what is left there.
std::vector<Tier> plan_tiers(const std::vector<std::string>& group_names,
                             const std::vector<uint64_t>& group_bytes, const TierBudget&);

// ==== packing ================================================================================

// --quant and --quant-head are a Quantization (endor/dtype.h): none, or the container dtype the
// tensors are stored in: Int8, Int8g (int8 codes with one f16 scale per group, SPEC.md §6.8: at
// groups of 32, 8.5 bits a weight, llama.cpp's Q8_0 grid), Int4 or Int4k (int4 whose group
// parameters are six-bit codes under f16 super-block scales, SPEC.md §6.7: at groups of 32, 4.5 bits
// a weight with a float minimum).
// The quantizations whose tensors take PackOptions::group_size.
inline bool grouped(const Quantization& q) { return q && is_grouped(*q); }

struct PackOptions {
  std::string command = "convert";     // "convert" | "prune" (provenance)
  std::optional<ValueType> dtype;      // F16/BF16/F32; nullopt = each tensor's source dtype
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

// Temporary files: on_temp_file(path, true) comes BEFORE `path` may be created, and
// on_temp_file(path, false) once it is gone (renamed, removed or unlinked). Several can be
// registered at once. The CLI keeps them for its signal handler, which unlinks them.
using TempFileCallback = std::function<void(const std::string& path, bool exists)>;

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

// ==== calibrated pruning (Wanda, SparseGPT): packer/src/calibrate.cpp ========================
// docs/algorithms.md, "Sequential calibration". Sampling: the calibration text is tokenized once with
// the checkpoint's tokenizer.json (add_special_tokens: one BOS at the start when the tokenizer
// adds one); with std::mt19937_64(seed), each of n_samples windows starts at
// std::uniform_int_distribution<uint64_t>(0, n_tokens - seq_len - 1)(rng) (the reference's
// random.randint(0, len - seqlen - 1) over one C4 document; here the whole text is one document).
// The defaults of `endor-pack prune` without --calib (bench/ACCURACY.md, "The default prune").
inline constexpr uint64_t kSelfCalibSamples = 128;
inline constexpr uint64_t kSelfCalibSeqLen = 128;
// An MoE expert routed fewer calibration tokens than this is pruned by magnitude, not by the
// calibrated method (statistics of so few tokens describe them, not the expert's inputs: docs/moe.md).
inline constexpr uint64_t kMinExpertTokens = 128;
// Self-generation's batch: 128 sequences a step multiply 128 tokens, which takes every Linear to
// the GEMM path (the exact backend's row-decode serves 9 to 63 tokens, and its fused kernels
// re-read each weight per 8 tokens); on SmolLM2 that wrote the text in 2/3 of the CPU time of
// batches of 64 and ~1/2 of batches of 8 (Intel Xeon, 2 threads). Bounded by the batch's f16 KV
// caches (SmolLM2 and the 1 B shape: 128 sequences of 128 tokens in ~370 MB; a 7 B Llama-2 fits 16).
inline constexpr uint32_t kSelfCalibMaxBatch = 128;
inline constexpr uint64_t kSelfCalibKvBudget = uint64_t(1) << 30;

// Self-generated calibration (text_path empty: no --calib/--calib-ids): the model writes its own
// calibration text first. n_samples sequences, each started at the BOS token (else the first EOS
// token, else id 0) and continued for seq_len - 1 tokens sampled at self_temperature / _top_k / _top_p
// with seed + the sequence's index (EOS does not stop a sequence), self_batch sequences at a time
// (throughput mode: one pass over the blocks per step for all of them). Each sequence is one
// calibration window. Needs no tokenizer.
struct CalibrationOptions {
  std::string text_path;               // --calib (or --calib-ids: then a file of token ids); empty: self-generated
  bool ids = false;                    // text_path holds whitespace-separated token ids, not text
  uint64_t n_samples = 128;            // --calib-samples
  uint64_t seq_len = 0;                // --calib-seqlen; 0 = the model's max_position_embeddings
                                       // (self-generated: min(kSelfCalibSeqLen, max_position_embeddings))
  uint64_t seed = 0;                   // --seed
  int n_threads = 0;                   // CPU threads: backend, OpenMP and BLAS (0 = all cores)
  // transformers' default sampling (generate() with do_sample: temperature 1, top-k 50). Top-k also
  // spares the sampler a sort of the whole vocabulary per token (SmolLM2: 49152 ids).
  float self_temperature = 1.0f;
  uint32_t self_top_k = 50;
  float self_top_p = 1.0f;
  // Sequences generated together; 0 = as many as kSelfCalibMaxBatch and the f16 KV caches'
  // kSelfCalibKvBudget allow (KV caches: self_batch x seq_len tokens).
  uint32_t self_batch = 0;
  uint64_t min_expert_tokens = kMinExpertTokens;  // see kMinExpertTokens
  bool self_generated() const { return text_path.empty(); }
  // Called with each calibrated Linear's f32 weights [rows, cols] as the algorithm leaves them
  // (SparseGPT with --quant: the dequantized codes it chose), before they are encoded. Optional.
  std::function<void(const std::string& tensor, const float* w, uint64_t rows, uint64_t cols)> on_pruned;
};

// Runs the model block by block on the calibration windows (CPU backend) and prunes each block's
// Linears with o.prune.method (wanda | sparsegpt), feeding the pruned block's outputs to the next
// block, then writes `output_path` through the normal packer path. Quantization (o.quant):
// SparseGPT quantizes jointly and the container stores exactly its codes and parameters
// (encode_quantized); Wanda, like magnitude, is quantized by the encoder after pruning. The
// pruned re-run of a block uses its weights as they will be stored.
// Temporary files, next to the output, all "<output>.calib-*.tmp-<pid>": the model converted to a
// dense container (source dtypes; unlinked once mapped), the activations [n_samples, seq_len,
// hidden] f32 and the encoded calibrated Linears (both unlinked at creation). Only the first
// exists by name, and only while it is being written; every one is reported to on_temp_file.
// Disk: the dense model + n_samples·seq_len·hidden·4 bytes + the calibrated Linears encoded.
// Memory (peak RSS) does not grow with n_samples: one window's activations and scratch, and one
// block's weights, statistics and pruning work (calibrate.cpp; measured in packer/README.md).
PackSummary pack_calibrated(const std::string& source_dir, const std::string& output_path,
                            const PackOptions&, const CalibrationOptions&, const PackCallbacks& = {});

// The default self_batch: n sequences of L tokens, at most kSelfCalibMaxBatch at a time and as many
// as kSelfCalibKvBudget of f16 keys and values holds (at least 1).
uint32_t self_calibration_batch(const ModelConfig& config, uint64_t n, uint64_t L);

class Model;
// Self-generated calibration text (CalibrationOptions): n sequences of L tokens the model writes,
// concatenated [n * L] in sequence order, each starting at the start token. Throws when L is
// outside [1, the context length].
std::vector<int32_t> self_calibration_ids(Model& model, uint64_t n, uint64_t L, const CalibrationOptions& co,
                                          const PackCallbacks& cb = {});

// Provenance object written into the manifest.
nlohmann::json make_provenance(const std::string& source_dir, const PackOptions&);

// ==== inspect ================================================================================

// Per tensor: name, shape, encoding, value type, sparsity, bytes, ratio to dense in the source
// dtype; totals per tier and overall; provenance. With verify, runs verify_all() first (throws
// on the first bad group) and records "verified": true.
nlohmann::json inspect_container(const ContainerReader&, bool verify);
std::string render_inspect_text(const nlohmann::json& report);

// ==== compare (Endor vs zstd) ================================================================

struct CompareOptions {
  std::vector<int> zstd_levels{1, 3, 19};
  int n_threads = 0;                   // Endor multithreaded decode (0 = OpenMP default)
  double min_time_s = 0.02;            // each speed is the best of repeats lasting at least this
};

struct CompareRow {
  std::string name;
  bool linear = false;                 // a prunable decoder Linear (classify_tensor)
  std::string encoding, value_type;
  uint64_t numel = 0;
  uint64_t dense_bytes = 0;            // the (pruned) tensor dense in its stored value type
  uint64_t endor_bytes = 0;
  std::vector<uint64_t> zstd_bytes;         // zstd(dense) per level
  std::vector<uint64_t> endor_zstd_bytes;   // zstd(Endor blob) per level
  double endor_mt_s = 0, endor_1t_s = 0;    // decode time to dense
  std::vector<double> zstd_s;               // ZSTD_decompress time per level
};

struct CompareReport {
  std::string input, description;      // what was compared (model, method, sparsity, dtype)
  std::vector<int> levels;
  int threads = 1;
  std::vector<CompareRow> rows;
  CompareRow total;                    // sums over all tensors (times summed too)
  CompareRow linears;                  // sums over the decoder Linears (what pruning touches)
};

// SRC = a checkpoint folder (packed in memory with `options`, nothing written) or a .endor file.
CompareReport compare_sizes(const std::string& input, const PackOptions&, const CompareOptions&,
                            const PackCallbacks& = {});
std::string render_compare_table(const CompareReport&);
std::string render_compare_csv(const CompareReport&);
nlohmann::json compare_to_json(const CompareReport&);
std::string render_compare_svg(const CompareReport&);

// ==== output files ============================================================================

// Writes `content` to "<path>.tmp-<pid>", fsyncs and renames it to `path`; removes the temp on
// error. on_temp_file as in PackCallbacks.
void write_file_atomic(const std::string& path, const std::string& content,
                       const TempFileCallback& on_temp_file = {});

}  // namespace endor
