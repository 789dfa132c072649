// Private helpers of endor_format: checked integer arithmetic, little-endian loads/stores,
// and the one-line error convention ("<where>: <what>"). Not installed, not for other modules.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "endor/format.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "endor_format assumes a little-endian host (TensorView hands out typed pointers)"
#endif

namespace endor::detail {

// Throws endor::FileError("<where>: <what>") (where() kept), or just <what> when `where` is empty.
[[noreturn]] inline void fail(const std::string& where, const std::string& what) {
  throw FileError(where, what);
}

// Overflow-checked arithmetic; `what` names the quantity in the error message.
inline uint64_t checked_add(uint64_t a, uint64_t b, const char* what) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw Error(std::string("integer overflow computing ") + what);
  return r;
}
inline uint64_t checked_mul(uint64_t a, uint64_t b, const char* what) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw Error(std::string("integer overflow computing ") + what);
  return r;
}
// Smallest multiple of `a` (a power of two) that is >= x.
inline uint64_t align_up(uint64_t x, uint64_t a, const char* what) {
  return checked_add(x, a - 1, what) & ~(a - 1);
}
inline uint64_t ceil_div(uint64_t x, uint64_t d) { return x / d + (x % d != 0); }

inline uint16_t load_u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
inline uint32_t load_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
inline uint64_t load_u64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }
inline void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline void store_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void store_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

// int4k.cpp: writes the (d, dmin) pairs and packed six-bit codes of every super-block of a
// Coded6 layout (param_codes: (sc, mc) per parameter, row-major).
void store_int4k_params(const TensorLayout& L, const uint16_t* super_scales, const uint8_t* param_codes,
                        uint8_t* base);

// 16 lowercase hex digits, the manifest spelling of a checksum.
inline std::string hex16(uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = digits[v & 15];
  return s;
}

}  // namespace endor::detail
