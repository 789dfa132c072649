// Scalar conversions (every f16/bf16 bit pattern, rounding ties, NaN/inf/subnormals) and enum spellings.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "test_util.h"

using namespace endor;
using namespace endor::test;

namespace {

// Independent definition of an f16 value: (-1)^s · 2^(e-15) · (1 + m/1024), subnormals m · 2^-24.
double f16_value(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (e == 0) return sign * std::ldexp(double(m), -24);
  return sign * std::ldexp(1024.0 + m, e - 25);
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_CASE("f16 -> f32 matches the definition for all 65536 bit patterns, and converts back exactly") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    const double want = f16_value(uint16_t(h));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f));
      CHECK(f32_to_f16(f) == uint16_t(h | 0x0200));  // payload kept, made quiet
    } else {
      REQUIRE(double(f) == want);
      REQUIRE(std::signbit(f) == bool(h & 0x8000));
      REQUIRE(f32_to_f16(f) == h);
    }
  }
}

TEST_CASE("f32 -> f16 rounds to nearest, ties to even, across subnormals, normals and overflow") {
  // For each pair of adjacent positive f16 values (a, b): the midpoint goes to the even one,
  // just below it to a, just above it to b. Midpoints are exact in f32 (12 significant bits).
  for (uint16_t a = 0; a < 0x7C00; ++a) {
    const uint16_t b = uint16_t(a + 1);  // 0x7C00 = +inf is the neighbour of 65504
    const double mid = (f16_value(a) + (b == 0x7C00 ? 65536.0 : f16_value(b))) / 2;
    const float m = float(mid);
    REQUIRE(double(m) == mid);
    const uint16_t even = (a % 2 == 0) ? a : b;
    REQUIRE(f32_to_f16(m) == even);
    REQUIRE(f32_to_f16(std::nextafter(m, 0.0f)) == a);
    REQUIRE(f32_to_f16(std::nextafter(m, INFINITY)) == b);
    REQUIRE(f32_to_f16(-m) == uint16_t(even | 0x8000));
  }
  CHECK(f32_to_f16(65504.0f) == 0x7BFF);
  CHECK(f32_to_f16(65519.99f) == 0x7BFF);
  CHECK(f32_to_f16(65520.0f) == 0x7C00);  // tie between 65504 (odd) and 2^16 -> infinity
  CHECK(f32_to_f16(1e30f) == 0x7C00);
  CHECK(f32_to_f16(-INFINITY) == 0xFC00);
  CHECK(f32_to_f16(-0.0f) == 0x8000);
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and the smallest subnormal
  CHECK(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(f32_to_f16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(f32_to_f16(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(f32_to_f16(std::ldexp(1023.5f, -24)) == 0x0400);  // subnormal rounding carries into normal
}

TEST_CASE("f32 -> f16/bf16 keep NaN a NaN, even when only low payload bits are set") {
  for (uint32_t bits : {0x7F800001u, 0xFF800001u, 0x7FC00000u, 0x7FFFFFFFu, 0x7F802000u}) {
    const float nan = from_bits(bits);
    const uint16_t h = f32_to_f16(nan);
    CHECK((h & 0x7C00) == 0x7C00);
    CHECK((h & 0x03FF) != 0);
    CHECK(bool(h & 0x8000) == bool(bits >> 31));
    const uint16_t b = f32_to_bf16(nan);
    CHECK((b & 0x7F80) == 0x7F80);
    CHECK((b & 0x007F) != 0);
    CHECK(std::isnan(bf16_to_f32(b)));
  }
}

TEST_CASE("bf16 <-> f32: all bit patterns round trip, ties go to even") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_f32(uint16_t(b));
    REQUIRE(f32_bits(f) == b << 16);
    if (!std::isnan(f)) REQUIRE(f32_to_bf16(f) == b);
  }
  for (uint32_t a = 0; a < 0x7F80; ++a) {  // adjacent positive finite pairs (a, a+1)
    const uint32_t mid_bits = (a << 16) | 0x8000;  // the exact midpoint
    const uint16_t even = uint16_t((a % 2 == 0) ? a : a + 1);
    REQUIRE(f32_to_bf16(from_bits(mid_bits)) == even);
    REQUIRE(f32_to_bf16(from_bits(mid_bits - 1)) == a);
    REQUIRE(f32_to_bf16(from_bits(mid_bits + 1)) == a + 1);
  }
  CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to infinity
  CHECK(f32_to_bf16(-0.0f) == 0x8000);
}

TEST_CASE("Dtype: every manifest dtype, its spelling, and the layout's (value type, int4 params) both ways") {
  const char* spellings[] = {"f16", "bf16", "f32", "int8", "int8g", "int4", "int4k"};
  size_t i = 0;
  for (Dtype d : kAllDtypes) {
    CAPTURE(spellings[i]);
    CHECK(std::string(to_string(d)) == spellings[i++]);
    CHECK(parse_dtype(to_string(d)) == d);
    CHECK(dtype_of(value_type_of(d), int4_params_of(d)) == d);
    CHECK(value_bits(d) == value_bits(value_type_of(d)));
    CHECK(is_float(d) != is_quantized(d));
    // The layout takes a group size exactly for the grouped dtypes, and Coded6 only for int4k.
    const uint32_t g = is_grouped(d) ? 4 : 0;
    CHECK(compute_layout({2, 8}, Encoding::Dense, value_type_of(d), g, 16, int4_params_of(d)).dtype() == d);
    if (!is_grouped(d)) CHECK_THROWS_AS(compute_layout({2, 8}, Encoding::Dense, value_type_of(d), 4, 16), Error);
  }
  CHECK(i == 7);
  for (ValueType v : {ValueType::F16, ValueType::BF16, ValueType::F32, ValueType::I8, ValueType::I4, ValueType::I8G})
    CHECK(std::string(to_string(dtype_of(v))) == to_string(v));  // int4k aside, the two spellings agree
  CHECK(dtype_of(ValueType::I4, Int4Params::Coded6) == Dtype::Int4k);
  CHECK(dtype_of(ValueType::I8G, Int4Params::Coded6) == Dtype::Int8g);  // params read for I4 only
  CHECK(is_grouped(Dtype::Int4k));
  CHECK(is_grouped(Dtype::Int8g));
  CHECK_FALSE(is_grouped(Dtype::Int8));
  CHECK(is_int4(Dtype::Int4k));
  CHECK_FALSE(parse_dtype("INT4").has_value());
  CHECK_FALSE(parse_dtype("int4k ").has_value());
  CHECK_FALSE(parse_dtype("").has_value());
  const EncodeOptions o = EncodeOptions::of(Dtype::Int4k, Encoding::Dense, 32);
  CHECK(o.value_type == ValueType::I4);
  CHECK(o.int4_params == Int4Params::Coded6);
  CHECK(o.group_size == 32);
  CHECK(EncodeOptions::of(Dtype::Int8, Encoding::Dense, 32).group_size == kDefaultGroupSize);
}

TEST_CASE("enum spellings round trip and unknown spellings are rejected") {
  for (ValueType t : {ValueType::F16, ValueType::BF16, ValueType::F32, ValueType::I8, ValueType::I4})
    CHECK(parse_value_type(to_string(t)) == t);
  for (Encoding e : {Encoding::Dense, Encoding::Bitmap}) CHECK(parse_encoding(to_string(e)) == e);
  for (Tier t : {Tier::Gpu, Tier::Cpu, Tier::Disk}) CHECK(parse_tier(to_string(t)) == t);
  CHECK_FALSE(parse_value_type("F16").has_value());
  CHECK_FALSE(parse_value_type("fp8").has_value());
  CHECK_FALSE(parse_encoding("bitmap-tile").has_value());
  CHECK_FALSE(parse_tier("nvme").has_value());
  CHECK(value_bits(ValueType::F16) == 16);
  CHECK(value_bits(ValueType::BF16) == 16);
  CHECK(value_bits(ValueType::F32) == 32);
  CHECK(value_bits(ValueType::I8) == 8);
  CHECK(value_bits(ValueType::I4) == 4);
}

// Issue 36: the file an error is about and its closing hint are fields, not text to search.
TEST_CASE("FileError: what() is where: message + hint; where() and without_hint() keep the parts") {
  const endor::FileError e("model.endor", "no chat template", ", so --chat cannot format a conversation");
  CHECK(std::string(e.what()) == "model.endor: no chat template, so --chat cannot format a conversation");
  CHECK(e.where() == "model.endor");
  CHECK(e.without_hint() == "model.endor: no chat template");
  CHECK(e.names("model.endor"));
  CHECK_FALSE(e.names("model"));
  CHECK(endor::FileError("ck/model.safetensors", "x").names("ck"));
  CHECK(endor::FileError("ck: tensor 'w'", "x").names("ck"));
  CHECK_FALSE(endor::FileError("ck2/model.safetensors", "x").names("ck"));
  CHECK_FALSE(e.names(""));
  const endor::FileError bare("", "no file");
  CHECK(std::string(bare.what()) == "no file");
  CHECK(bare.without_hint() == "no file");
  CHECK_FALSE(bare.names("x"));
}
