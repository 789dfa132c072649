// The one C++ definition of the .endor container (format-spec/SPEC.md is normative; if this
// header and the spec disagree, one of them is a bug). Reader, writer, tensor encodings.
//
// Errors: every function here reports bad input by throwing endor::Error whose what() is one
// line naming the file (when there is one) and what is wrong. Nothing here calls exit().
// Thread safety: a ContainerReader is immutable after open() and may be shared across threads;
// a ContainerWriter is single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "endor/dtype.h"

namespace endor {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An Error about one file or folder: what() is "<where>: <message><hint>", and the parts a caller
// decides on or rewords are kept as fields rather than searched for in the text: where() (the file
// or folder the message begins with, maybe a place in it after) and the closing hint, advice for the
// tool that raised it (", so --chat ..."), which a caller giving its own advice leaves off.
class FileError : public Error {
 public:
  FileError(const std::string& where, const std::string& message, const std::string& hint = "")
      : Error((where.empty() ? message : where + ": " + message) + hint), where_(where), hint_bytes_(hint.size()) {}
  const std::string& where() const noexcept { return where_; }
  // Whether where() is `path` or a file or place in it ("<path>/...", "<path>: ...").
  bool names(const std::string& path) const {
    const size_t n = path.size();
    if (n == 0 || where_.compare(0, n, path) != 0) return false;
    return where_.size() == n || path.back() == '/' || where_[n] == '/' || where_[n] == ':';
  }
  std::string without_hint() const {
    const std::string s = what();
    return s.substr(0, s.size() - hint_bytes_);
  }

 private:
  std::string where_;
  size_t hint_bytes_ = 0;
};

// ---- constants of format v1 (SPEC.md §1-§3) ----------------------------------------------
inline constexpr char kMagic[8] = {'\x89', 'E', 'N', 'D', 'O', 'R', '\r', '\n'};
inline constexpr uint16_t kVersionMajor = 1;
inline constexpr uint16_t kVersionMinor = 2;  // the newest this build writes (1.1: int4k, 1.2: int8g)
inline constexpr uint32_t kHeaderBytes = 128;
inline constexpr uint32_t kGroupAlignment = 4096;   // every group starts on this boundary
inline constexpr uint32_t kTensorAlignment = 64;    // every tensor/file blob inside a group
inline constexpr uint32_t kSectionAlignment = 16;   // sections inside a tensor blob
inline constexpr uint32_t kIndexBlockCols = 4096;   // bitmap value-offset index granularity
inline constexpr uint64_t kMaxManifestBytes = 64ull << 20;
inline constexpr int kMaxManifestDepth = 64;        // nesting of JSON arrays/objects
inline constexpr uint32_t kDefaultGroupSize = 128;  // int4 group of consecutive input columns
inline constexpr size_t kMaxRank = 8;               // tensor shapes have 1..kMaxRank dimensions

// ValueType, Int4Params and Dtype (the manifest's dtypes): endor/dtype.h.
enum class Encoding : uint8_t { Dense, Bitmap };
enum class Tier : uint8_t { Gpu, Cpu, Disk };
inline constexpr uint32_t kInt4kSuperGroups = 8;  // parameters per int4k super-block
inline constexpr uint32_t kInt4kCodeBytes = 12;   // 16 six-bit codes of one super-block
inline constexpr uint32_t kInt4kCodeMax = 63;

const char* to_string(ValueType);
const char* to_string(Encoding);
const char* to_string(Tier);
// Parse the manifest spellings ("f16", "bitmap", "gpu", ...); nullopt when unknown.
std::optional<ValueType> parse_value_type(std::string_view);
std::optional<Encoding> parse_encoding(std::string_view);
std::optional<Tier> parse_tier(std::string_view);
// Bits one stored value occupies (16, 16, 32, 8, 4, 8).
uint32_t value_bits(ValueType);

// ---- scalar conversions (round to nearest even; NaN preserved) ------------------------------
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t b);
uint16_t f32_to_bf16(float f);

// ---- header (SPEC.md §3): 128 bytes at offset 0, little-endian ------------------------------
struct Header {
  uint16_t version_major = kVersionMajor;
  uint16_t version_minor = kVersionMinor;
  uint32_t header_bytes = kHeaderBytes;
  uint32_t alignment = kGroupAlignment;
  uint32_t flags = 0;            // reserved, MUST be 0 in v1
  uint64_t file_bytes = 0;       // total file length
  uint64_t data_offset = 0;      // first group; multiple of alignment
  uint64_t data_bytes = 0;       // groups occupy [data_offset, data_offset + data_bytes)
  uint64_t manifest_offset = 0;  // manifest follows the data
  uint64_t manifest_bytes = 0;
  uint64_t manifest_checksum = 0;  // XXH3-64 of the manifest bytes
};
// Serialize / parse the 128-byte header (parse checks magic, version, header checksum, fields).
void write_header(const Header&, uint8_t out[kHeaderBytes]);
// `n_bytes` is the length of the whole file (checked against file_bytes); only the first
// kHeaderBytes of `bytes` are read.
Header parse_header(const uint8_t* bytes, uint64_t n_bytes, const std::string& path_for_errors);

// ---- tensor layout (SPEC.md §6): every byte position is a function of these inputs -----------
// A tensor of shape [d0, d1, ..., dk] is viewed as rows = d0, cols = d1·…·dk (1-D: rows = 1).
struct TensorLayout {
  Encoding encoding = Encoding::Dense;
  ValueType value_type = ValueType::F32;
  uint64_t rows = 0, cols = 0;
  uint64_t nnz = 0;               // stored values (dense: rows·cols)
  uint32_t group_size = 0;        // int4 and int8g only; 0 otherwise
  Int4Params int4_params = Int4Params::F16;  // int4 only
  uint64_t words_per_row = 0;     // bitmap: ceil(cols/64) 64-bit words per row (rows padded)
  uint64_t blocks_per_row = 0;    // bitmap: ceil(cols/4096) index entries per row
  uint64_t groups_per_row = 0;    // int4, int8g: ceil(cols/group_size)
  // Byte offsets are relative to the tensor blob start; unused sections have 0 bytes.
  uint64_t bitmap_offset = 0, bitmap_bytes = 0;  // u64 words, bit c%64 of word c/64 = column c
  uint64_t index_offset = 0, index_bytes = 0;    // u32 per (row, block): values before it
  uint64_t values_offset = 0, values_bytes = 0;  // nnz values in row-major order of set bits
  // int8: f32 per row; int4, int8g: f16 per (row, group); int4k: f16 (d, dmin) per super-block
  uint64_t scales_offset = 0, scales_bytes = 0;
  // int4: f16 min per (row, group); int4k: 12 bytes of six-bit codes per super-block
  uint64_t mins_offset = 0, mins_bytes = 0;
  uint64_t n_super = 0;                          // int4k: ceil(rows·groups_per_row / 8)
  uint64_t total_bytes = 0;
  Dtype dtype() const { return dtype_of(value_type, int4_params); }
};
// Throws endor::Error on overflow or inconsistent arguments (e.g. nnz > numel, group_size 0 for
// int4 or != 0 otherwise, bitmap with nnz >= 2^32, shape rank outside 1..kMaxRank, a 0 dim).
TensorLayout compute_layout(const std::vector<uint64_t>& shape, Encoding, ValueType,
                            uint32_t group_size, uint64_t nnz, Int4Params = Int4Params::F16);

// ---- manifest (SPEC.md §4) ---------------------------------------------------------------
struct TensorInfo {
  std::string name;
  std::vector<uint64_t> shape;
  Encoding encoding = Encoding::Dense;
  ValueType value_type = ValueType::F32;
  uint32_t group_size = 0;       // int4 and int8g only
  Int4Params int4_params = Int4Params::F16;  // int4 only ("int4k" in the manifest when Coded6)
  uint64_t nnz = 0;
  std::string source_dtype;      // informational: dtype in the source checkpoint ("F16", ...)
  uint32_t group = 0;            // index into Manifest::groups
  uint64_t offset = 0;           // absolute file offset, multiple of kTensorAlignment
  uint64_t size = 0;             // == compute_layout(...).total_bytes
  uint64_t numel() const;
  Dtype dtype() const { return dtype_of(value_type, int4_params); }  // the manifest's "dtype"
};

struct FileInfo {                // an auxiliary file carried verbatim (tokenizer.json, ...)
  std::string name;
  uint32_t group = 0;
  uint64_t offset = 0, size = 0;
};

struct GroupInfo {               // a layer group: the unit of placement, transfer and checksum
  std::string name;              // "embed", "layers.0", ..., "head", "files"
  Tier tier = Tier::Gpu;
  uint64_t offset = 0, size = 0; // offset multiple of kGroupAlignment
  uint64_t checksum = 0;         // XXH3-64 of bytes [offset, offset+size)
  std::vector<uint32_t> tensors; // indices into Manifest::tensors, in file order
  std::vector<uint32_t> files;   // indices into Manifest::files
};

struct Manifest {
  uint16_t version_major = kVersionMajor, version_minor = kVersionMinor;
  nlohmann::json config;             // the checkpoint's config.json, verbatim
  nlohmann::json generation_config;  // generation_config.json or null
  nlohmann::json provenance;         // source, tool, method, sparsity, pattern, quant, ...
  std::vector<GroupInfo> groups;     // in execution order
  std::vector<TensorInfo> tensors;
  std::vector<FileInfo> files;

  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent
  const FileInfo* find_file(std::string_view name) const;
  nlohmann::json to_json() const;
  // Parses and validates structure (types, enums, uniqueness, shape/size formulas, extents
  // inside [data_offset, data_offset+data_bytes), alignment, no overlaps). Unknown keys ignored.
  static Manifest from_json(const nlohmann::json&, const Header&, const std::string& path_for_errors);
};

// A byte count as people write memory budgets for the tiers (--gpu-mem 3G, --cpu-mem 512M):
// a decimal number with an optional binary unit K, M, G or T (powers of 1024; "B"/"iB" suffix and
// case ignored). Throws endor::Error "invalid size '...' (examples: ...)" for anything else.
uint64_t parse_byte_size(const std::string& text);
// parse_byte_size with the option named in its error: "--gpu-mem: invalid size 'x' (examples: ...)".
uint64_t parse_memory_size(const std::string& text, const std::string& option);
// The one way every program prints a byte size to users, in parse_byte_size's binary units (so a
// size printed can be typed back): 12 -> "12 B", 1536 -> "1.50 KiB", 3221225472 -> "3.00 GiB"
// (KiB, MiB, GiB, TiB, two decimals). Rates stay in decimal GB/s, bandwidth's own convention.
std::string format_bytes(uint64_t bytes);

// ---- encoded tensors -----------------------------------------------------------------------
// A non-owning view of one tensor blob with its layout.
struct TensorView {
  const TensorInfo* info = nullptr;
  TensorLayout layout;
  const uint8_t* data = nullptr;  // blob start (64-aligned when backed by a container)
  // Set only by a backend that checked it with is_two_of_four() (never read from a file): every
  // aligned run of 4 columns holds exactly 2 stored values, so kernels may rely on the count.
  bool two_of_four = false;
  // Set only by the CPU backend (never read from a file): for a bitmap int4 weight, a private copy
  // of its codes with absent columns given their group's zero code (kernels/cpu/int4_dense.h),
  // which the AVX-512 VNNI one-token kernel and the AVX2 kernels read instead of expanding the
  // bitmap, summing in the same order (the same results bit for bit); every other path reads the bitmap.
  const uint8_t* dense_codes = nullptr;

  const uint64_t* bitmap() const { return reinterpret_cast<const uint64_t*>(data + layout.bitmap_offset); }
  const uint32_t* index() const { return reinterpret_cast<const uint32_t*>(data + layout.index_offset); }
  const uint8_t* values() const { return data + layout.values_offset; }
  const float* row_scales() const { return reinterpret_cast<const float*>(data + layout.scales_offset); }
  const uint16_t* group_scales() const { return reinterpret_cast<const uint16_t*>(data + layout.scales_offset); }
  const uint16_t* group_mins() const { return reinterpret_cast<const uint16_t*>(data + layout.mins_offset); }
  // int4k: f16 (d, dmin) of super-block b at super_scales()[2b], [2b + 1]; its codes at
  // param_codes() + 12·b.
  const uint16_t* super_scales() const { return reinterpret_cast<const uint16_t*>(data + layout.scales_offset); }
  const uint8_t* param_codes() const { return data + layout.mins_offset; }
};

struct EncodeOptions {
  Encoding encoding = Encoding::Bitmap;
  ValueType value_type = ValueType::F16;
  uint32_t group_size = kDefaultGroupSize;  // int4 and int8g only
  Int4Params int4_params = Int4Params::F16;  // int4 only (Coded6: SPEC.md §7.4's grid)
  // The options that store dtype d: its value type and int4 parameters, group_size kept for the
  // grouped dtypes (is_grouped) and kDefaultGroupSize otherwise (where it is not read).
  static EncodeOptions of(Dtype d, Encoding e, uint32_t group_size) {
    return {e, value_type_of(d), is_grouped(d) ? group_size : kDefaultGroupSize, int4_params_of(d)};
  }
};

struct EncodedTensor {
  TensorLayout layout;
  std::vector<uint8_t> bytes;  // size == layout.total_bytes; padding bytes are zero
};

// The int4 grid of one group (SPEC.md §7.2) whose present values span [mn, mx]: value =
// code·S + M with S, M as f16. The range is widened to hold 0 and the step rounded up to 7
// significant bits, so that M = −z·S exactly for an integer z in [0, 15]: code z is exactly 0,
// which lets a kernel treat a bitmap word as dense (absent elements are code z). Where M would
// pass the f16 range (values near ±65504) the grid is the fallback over [mn, mx] (SPEC.md §7.2).
// Throws endor::Error unless mn <= mx are finite and within the f16 range (|x| <= 65504).
struct Int4Grid {
  uint16_t scale_f16 = 0, min_f16 = 0;
};
Int4Grid int4_grid(float mn, float mx);
// The int8g scale of a group whose largest |present value| is amax (SPEC.md §7.5): f16(amax / 127),
// +0 for amax = 0. Codes are then chosen against its f32 value. Throws endor::Error when the scale
// would pass the f16 range (amax > 127 · 65504).
uint16_t int8g_scale(float amax);

// Encodes a row-major f32 tensor. Bitmap: entries equal to ±0 are the absent ones. f16/bf16
// values are rounded to nearest even (bit-exact for inputs that came from f16/bf16). int8/int8g/int4
// quantize here (docs/algorithms.md "Quantization"; int4 on int4_grid's grid with a zero code, which
// differs from FlexGen's [mn, mx] grid; params are f16 before codes are chosen, so
// decode(encode(x)) is what the spec's dequantization yields). Pruned zeros stay zero.
EncodedTensor encode_tensor(const float* values, const std::vector<uint64_t>& shape, const EncodeOptions&);
// The int4k reference grid (SPEC.md §7.4), what encode_tensor does for int4 with Coded6 params.
// (encode_tensor with I8G is SPEC.md §7.5's grid: S = f16(amax/127) per group, q = round(w/S).)
EncodedTensor encode_int4k(const float* values, const std::vector<uint64_t>& shape, Encoding, uint32_t group_size);

// int8/int8g/int4 content whose codes and parameters were chosen outside encode_tensor (SPEC.md §7.3),
// e.g. by SparseGPT/GPTQ, which quantize column by column while compensating the error: stored
// exactly as given. Arrays are row-major over the tensor's [rows, cols] view (§6).
struct QuantizedValues {
  ValueType value_type = ValueType::I8;     // I8, I8G or I4
  uint32_t group_size = 0;                  // I4, I8G: input columns per group (>= 1); I8: 0
  const uint8_t* present = nullptr;         // [rows·cols] nonzero = stored; nullptr = all present
  const int8_t* int8_codes = nullptr;       // I8, I8G: [rows·cols] in [-127, 127]
  const float* row_scales = nullptr;        // I8: [rows] finite f32
  const uint8_t* int4_codes = nullptr;      // I4: [rows·cols] one code in [0, 15] per byte
  // I4, I8G: [rows·ceil(cols/group_size)] f16 bits, finite
  const uint16_t* group_scales = nullptr;
  const uint16_t* group_mins = nullptr;     // I4: same shape, f16 bits, finite
  // I4 with Coded6 parameters (group_scales/group_mins unused):
  Int4Params int4_params = Int4Params::F16;
  const uint16_t* super_scales = nullptr;   // [ceil(rows·groups/8)·2] f16 (d, dmin), finite
  const uint8_t* param_codes = nullptr;     // [rows·groups·2] (sc, mc) per parameter, each <= 63
};
// Encodes explicit codes and parameters. Decoding the result gives, bit for bit, §6.6's value of
// the given code and parameters at every present element and +0 at every absent one. Bitmap:
// absent elements are not stored; a present element is stored even when its value is 0. Dense:
// an absent int8/int8g element is stored as code 0 (decodes to +0); dense int4 refuses absent elements
// (the asymmetric grid has no exact zero in general). Codes of absent elements are ignored.
// Throws endor::Error on another value type, a missing array, a code or parameter out of range.
EncodedTensor encode_quantized(const std::vector<uint64_t>& shape, Encoding, const QuantizedValues&);

// Checks a bitmap tensor's index against its bitmap popcounts and nnz (O(bitmap bytes)); throws
// endor::Error naming `what` on the first inconsistency. Dense tensors: no-op.
void validate_bitmap(const TensorView&, const std::string& what);

// True when a bitmap tensor is 2:4 throughout: cols a multiple of 4 and exactly 2 set bits in
// every aligned group of 4 columns of every row (so every row holds cols / 2 values, at fixed
// offsets). O(bitmap bytes), stops at the first other group. Dense tensors: false.
bool is_two_of_four(const TensorView&);

// The f32 scale and min of int4 parameters p0 .. p0+n−1 (p = row·groups_per_row + group), either
// storage: F16 widened, Coded6 S = d·sc and M = −(dmin·mc), both exact in binary32 (SPEC.md §6.7).
void int4_params_f32(const TensorView&, uint64_t p0, uint64_t n, float* scales, float* mins);

// The int4k super-block quantizer (SPEC.md §7.4): given the f32 scale S_p ≥ 0 and min M_p ≤ 0 that
// n ≤ 8 parameters want, the f16 d, dmin and six-bit codes (sc, mc) that store them: d = f16(max S
// / 63), sc = round(S/d) (at least 1 where S > 0), likewise dmin and mc for −M. Throws on
// non-finite or wrong-signed input.
struct Int4kSuper {
  uint16_t d_f16 = 0, dmin_f16 = 0;
  uint8_t sc[kInt4kSuperGroups] = {}, mc[kInt4kSuperGroups] = {};
};
Int4kSuper int4k_super(const float* scales, const float* mins, uint32_t n);

// Reference decoder (single-threaded, simple, the definition of the decoded value of every
// element): writes rows [row_begin, row_end) as f32 into out[(r - row_begin)·cols + c].
// Assumes validate_bitmap() passed for bitmap tensors.
void decode_rows_f32(const TensorView&, uint64_t row_begin, uint64_t row_end, float* out);

// ---- reader -----------------------------------------------------------------------------
class ContainerReader {
 public:
  // Memory-maps `path` read-only and validates header, manifest and every extent against the
  // file length before any tensor byte is touched. Checksums of groups are NOT read here.
  static std::unique_ptr<ContainerReader> open(const std::string& path);
  // Same validation over an in-memory image (copied into an owned, page-aligned buffer);
  // `name` stands in for the path in error messages. For tests and the fuzzer.
  static std::unique_ptr<ContainerReader> open_bytes(const uint8_t* bytes, uint64_t n_bytes,
                                                     const std::string& name);
  ~ContainerReader();
  ContainerReader(const ContainerReader&) = delete;
  ContainerReader& operator=(const ContainerReader&) = delete;

  const std::string& path() const { return path_; }
  const Header& header() const { return header_; }
  const Manifest& manifest() const { return manifest_; }
  const uint8_t* bytes() const { return base_; }  // whole file, read-only mapping
  uint64_t file_bytes() const { return header_.file_bytes; }

  TensorView tensor(const TensorInfo&) const;
  // nullopt when the tensor is absent.
  std::optional<TensorView> find_tensor(std::string_view name) const;
  // An auxiliary file's bytes; nullopt when absent.
  std::optional<std::string_view> file(std::string_view name) const;

  // XXH3-64 of group g's bytes; true when it matches the manifest.
  bool verify_group(size_t g) const;
  // Verifies every group checksum and every bitmap index; throws naming the first bad group.
  void verify_all() const;

 private:
  ContainerReader() = default;
  std::string path_;
  Header header_;
  Manifest manifest_;
  void validate();  // header, manifest checksum, manifest structure (throws endor::Error)
  const uint8_t* base_ = nullptr;
  uint64_t mapped_bytes_ = 0;  // > 0: base_ is an mmap of the file
  void* owned_ = nullptr;      // open_bytes(): base_ is this malloc'd copy
};

// ---- writer -----------------------------------------------------------------------------
// Streams groups to "<path>.tmp-<pid>" with pwrite, so memory stays bounded by one tensor.
// commit() writes the manifest and header, fsyncs and renames to `path`; destroying an
// uncommitted writer removes the temporary file. The input is never touched.
class ContainerWriter {
 public:
  explicit ContainerWriter(std::string path);
  ~ContainerWriter();
  ContainerWriter(const ContainerWriter&) = delete;
  ContainerWriter& operator=(const ContainerWriter&) = delete;

  const std::string& temp_path() const { return temp_path_; }

  // Groups are written in call order (= execution order). Returns the group index.
  uint32_t begin_group(const std::string& name, Tier tier);
  // `meta` supplies name, shape, encoding, value_type, group_size, nnz, source_dtype; the writer
  // fills group, offset and size. n_bytes must equal compute_layout(...).total_bytes.
  void add_tensor(const TensorInfo& meta, const uint8_t* bytes, uint64_t n_bytes);
  void add_file(const std::string& name, const void* bytes, uint64_t n_bytes);
  void end_group();

  // Tier planning happens after sizes are known; allowed until commit().
  std::vector<GroupInfo>& groups() { return manifest_.groups; }
  const std::vector<TensorInfo>& tensors() const { return manifest_.tensors; }

  void commit(const nlohmann::json& config, const nlohmann::json& generation_config,
              const nlohmann::json& provenance);

 private:
  void write_at(uint64_t offset, const void* bytes, uint64_t n);
  std::string path_, temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  bool in_group_ = false;
  uint64_t cursor_ = 0;
  Manifest manifest_;
  struct HashState;
  std::unique_ptr<HashState> hash_;  // running XXH3 of the open group
};

}  // namespace endor
