// Private helpers of endor_packer: the one-line error convention and checked arithmetic.
#pragma once

#include <cstdint>
#include <string>

#include "endor/packer.h"

namespace endor::packer_detail {

// Throws endor::Error("<where>: <what>").
[[noreturn]] inline void fail(const std::string& where, const std::string& what) {
  throw Error(where.empty() ? what : where + ": " + what);
}

// Overflow-checked arithmetic; false on overflow.
inline bool mul_ok(uint64_t a, uint64_t b, uint64_t* r) { return !__builtin_mul_overflow(a, b, r); }
inline bool add_ok(uint64_t a, uint64_t b, uint64_t* r) { return !__builtin_add_overflow(a, b, r); }

// "1.23 MB"-style human sizes (decimal units, as du -h --si / the paper's tables).
std::string human_bytes(uint64_t n);

// pack.cpp's checks, shared with the calibration driver (which runs them before hours of work):
// option consistency (dtype, group size, --skip regex), and an output path that would replace
// an input file, a folder, or a .safetensors file.
void validate_options(const PackOptions&);
void check_output_is_not_input(const std::string& output, const Checkpoint&);

}  // namespace endor::packer_detail
