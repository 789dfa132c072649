// Enum spellings of the manifest and the scalar conversions f16/bf16 <-> f32 (SPEC.md §6.1).
// Written out bit by bit (no F16C) so the reference does not depend on the host's instructions.
#include <cstring>

#include "detail.h"

namespace endor {

const char* to_string(ValueType t) {
  switch (t) {
    case ValueType::F16: return "f16";
    case ValueType::BF16: return "bf16";
    case ValueType::F32: return "f32";
    case ValueType::I8: return "int8";
    case ValueType::I4: return "int4";
    case ValueType::I8G: return "int8g";
  }
  return "?";
}
const char* to_string(Encoding e) {
  switch (e) {
    case Encoding::Dense: return "dense";
    case Encoding::Bitmap: return "bitmap";
  }
  return "?";
}
const char* to_string(Tier t) {
  switch (t) {
    case Tier::Gpu: return "gpu";
    case Tier::Cpu: return "cpu";
    case Tier::Disk: return "disk";
  }
  return "?";
}

std::optional<ValueType> parse_value_type(std::string_view s) {
  if (s == "f16") return ValueType::F16;
  if (s == "bf16") return ValueType::BF16;
  if (s == "f32") return ValueType::F32;
  if (s == "int8") return ValueType::I8;
  if (s == "int4") return ValueType::I4;
  if (s == "int8g") return ValueType::I8G;
  return std::nullopt;
}
std::optional<Encoding> parse_encoding(std::string_view s) {
  if (s == "dense") return Encoding::Dense;
  if (s == "bitmap") return Encoding::Bitmap;
  return std::nullopt;
}
std::optional<Tier> parse_tier(std::string_view s) {
  if (s == "gpu") return Tier::Gpu;
  if (s == "cpu") return Tier::Cpu;
  if (s == "disk") return Tier::Disk;
  return std::nullopt;
}

const char* to_string(Dtype d) {
  switch (d) {
    case Dtype::F16: return "f16";
    case Dtype::BF16: return "bf16";
    case Dtype::F32: return "f32";
    case Dtype::Int8: return "int8";
    case Dtype::Int8g: return "int8g";
    case Dtype::Int4: return "int4";
    case Dtype::Int4k: return "int4k";
  }
  return "?";
}

std::optional<Dtype> parse_dtype(std::string_view s) {
  for (Dtype d : kAllDtypes)
    if (s == to_string(d)) return d;
  return std::nullopt;
}

uint32_t value_bits(ValueType t) {
  switch (t) {
    case ValueType::F16: return 16;
    case ValueType::BF16: return 16;
    case ValueType::F32: return 32;
    case ValueType::I8: return 8;
    case ValueType::I4: return 4;
    case ValueType::I8G: return 8;
  }
  return 0;
}

static uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (mant << 13));  // inf, NaN (payload kept)
  if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return bits_f32(sign);  // ±0
  // Subnormal: mant · 2^-24. Normalise so the leading 1 sits at bit 10.
  uint32_t e = 113;  // biased f32 exponent of 2^-14
  while (!(mant & 0x400)) { mant <<= 1; --e; }
  return bits_f32(sign | (e << 23) | ((mant & 0x3FF) << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) {
    // NaN: keep the top 10 payload bits and force the quiet bit so it stays a NaN.
    return uint16_t(sign | 0x7E00 | ((a >> 13) & 0x3FF));
  }
  if (a >= 0x38800000u) {
    // f16 normal range or beyond: rebias the exponent (127 -> 15), round to nearest even at
    // bit 13; a carry into the exponent is correct, and >= 0x7C00 means overflow to infinity.
    uint32_t v = a - (112u << 23);
    v += 0x0FFFu + ((v >> 13) & 1);
    v >>= 13;
    return uint16_t(sign | (v >= 0x7C00u ? 0x7C00u : v));
  }
  if (a <= 0x33000000u) return sign;  // |f| <= 2^-25: rounds to ±0 (2^-25 is a tie, 0 is even)
  // f16 subnormal: result = round_nearest_even(|f| · 2^24) units of 2^-24.
  const uint32_t e = a >> 23;                        // 102..112
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;    // 24-bit significand
  const uint32_t shift = 126 - e;                    // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;   // may carry into the smallest normal: fine
  return uint16_t(sign | q);
}

float bf16_to_f32(uint16_t b) { return bits_f32(uint32_t(b) << 16); }

uint16_t f32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x0040);  // quiet NaN
  return uint16_t((x + 0x7FFFu + ((x >> 16) & 1)) >> 16);  // RNE; overflow lands on infinity
}

}  // namespace endor
