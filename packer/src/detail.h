// Private helpers of endor_packer: the one-line error convention and checked arithmetic.
#pragma once

#include <cstdint>
#include <string>

#include "endor/checkpoint.h"
#include "endor/pack.h"

namespace endor::packer_detail {

// Throws endor::FileError("<where>: <what>"), where() kept.
[[noreturn]] inline void fail(const std::string& where, const std::string& what) {
  throw FileError(where, what);
}

// The last component of a path ("a/b/" -> "b"): what a manifest or report may name of a source
// without carrying the packer's file system layout.
inline std::string base_name(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// Overflow-checked arithmetic; false on overflow.
inline bool mul_ok(uint64_t a, uint64_t b, uint64_t* r) { return !__builtin_mul_overflow(a, b, r); }
inline bool add_ok(uint64_t a, uint64_t b, uint64_t* r) { return !__builtin_add_overflow(a, b, r); }

// Text from an untrusted file as it may appear inside a one-line message: control bytes as \xNN,
// at most 64 bytes (then "...").
inline std::string printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) {
      static const char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  if (s.size() > 64) out += "...";
  return out;
}

// pack.cpp's checks, shared with the calibration driver (which runs them before hours of work):
// option consistency (dtype, group size, --skip regex), and an output path that would replace
// an input file, a folder, or a .safetensors file.
void validate_options(const PackOptions&);
void check_output_is_not_input(const std::string& output, const Checkpoint&);

}  // namespace endor::packer_detail
