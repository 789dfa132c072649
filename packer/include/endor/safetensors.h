// endor_packer: the safetensors reader (a checkpoint's shard files), distrusting the file.
// Errors: bad input throws endor::Error (format.h) whose what() is one line naming the file and
// what is wrong; nothing here prints or exits.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace endor {

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

}  // namespace endor
