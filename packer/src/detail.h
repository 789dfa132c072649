// Private helpers of endor_packer: the one-line error convention and checked arithmetic.
#pragma once

#include <cstdint>
#include <string>

#include "endor/format.h"

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

}  // namespace endor::packer_detail
