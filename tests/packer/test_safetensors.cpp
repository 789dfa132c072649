// The safetensors parser: well-formed files parse to the right entries; a table of malformed
// files each fails with one line naming the file.
#include <doctest/doctest.h>

#include <string>

#include "endor/safetensors.h"
#include "synthetic_checkpoint.h"

using namespace endor;
using endor::test::RawTensor;
using endor::test::safetensors_file;

namespace {

SafetensorsHeader parse(const std::string& bytes, const std::string& name = "case.safetensors") {
  return parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), name);
}

// The error message of parsing `bytes`, or "" when it parsed.
std::string parse_error(const std::string& bytes, const std::string& name = "case.safetensors") {
  try {
    parse(bytes, name);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string u64le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xFF);
  return s;
}

}  // namespace

TEST_CASE("well-formed safetensors: entries, dtypes, offsets, metadata") {
  const std::vector<RawTensor> ts = {
      {"b", "F16", {2, 3}, std::vector<uint8_t>(12, 1)},
      {"a", "BF16", {4}, std::vector<uint8_t>(8, 2)},
      {"c", "F32", {}, std::vector<uint8_t>(4, 3)},
      {"empty", "I64", {0, 5}, {}},
  };
  const std::string file = safetensors_file(ts, {{"format", "pt"}});
  const SafetensorsHeader h = parse(file);
  REQUIRE(h.tensors.size() == 4);
  CHECK(h.metadata.at("format") == "pt");
  const SafetensorsEntry* b = h.find("b");
  REQUIRE(b != nullptr);
  CHECK(b->dtype == SafetensorsDType::F16);
  CHECK(b->shape == std::vector<uint64_t>{2, 3});
  CHECK(b->begin == 0);
  CHECK(b->end == 12);
  CHECK(b->numel() == 6);
  CHECK(h.find("a")->begin == 12);
  CHECK(h.find("c")->shape.empty());
  CHECK(h.find("c")->numel() == 1);
  CHECK(h.find("nope") == nullptr);
  // data_offset = 8 + padded header length; data bytes are where the offsets say.
  CHECK(h.data_offset + 24 == file.size());
  CHECK(uint8_t(file[h.data_offset + h.find("a")->begin]) == 2);
  // Sorted by offset.
  for (size_t i = 1; i < h.tensors.size(); ++i) CHECK(h.tensors[i - 1].begin <= h.tensors[i].begin);
}

TEST_CASE("empty safetensors file and every dtype size") {
  CHECK(parse(safetensors_file("{}", "")).tensors.empty());
  const std::pair<const char*, uint32_t> sizes[] = {{"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"I16", 2}, {"U16", 2},
                                                    {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},
                                                    {"F64", 8},  {"I64", 8}, {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : sizes) {
    const SafetensorsHeader h = parse(safetensors_file({{"t", name, {3}, std::vector<uint8_t>(3 * size, 0)}}));
    CHECK(std::string(to_string(h.tensors[0].dtype)) == name);
    CHECK(dtype_bytes(h.tensors[0].dtype) == size);
  }
}

TEST_CASE("malformed safetensors: one-line error naming the file") {
  const std::string good_data(16, '\0');
  auto entry = [](const std::string& dtype, const std::string& shape, uint64_t b, uint64_t e) {
    return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(b) + "," +
           std::to_string(e) + "]}";
  };
  struct Case {
    const char* what;
    std::string bytes;
    const char* expect;  // a fragment of the message
  };
  const std::string huge_len = u64le(200'000'000) + std::string(64, ' ');
  std::string past_end = u64le(1000) + "{}";
  const std::vector<Case> cases = {
      {"shorter than the length field", std::string("\x05\x00\x00", 3), "too short"},
      {"empty file", "", "too short"},
      {"huge header length", huge_len, "100 MB"},
      {"header length past the end", past_end, "past the end"},
      {"length field all ones", u64le(~0ull) + "{}", "100 MB"},
      {"not JSON", safetensors_file("{\"a\": [1, 2", ""), "not valid JSON"},
      {"JSON but not an object", safetensors_file("[1, 2, 3]", ""), "must start with '{'"},
      {"leading space", safetensors_file(" {}", ""), "must start with '{'"},
      {"zero header length", u64le(0), "must start with '{'"},
      {"trailing garbage after JSON", safetensors_file("{} x", ""), "not valid JSON"},
      {"NUL padding", u64le(8) + std::string("{}\0\0\0\0\0\0", 8), "NUL byte"},
      {"NUL inside", safetensors_file(std::string("{}\0{\"t\": 1}", 11), ""), "NUL byte"},
      {"unknown dtype", safetensors_file("{\"t\":" + entry("F17", "[4]", 0, 16) + "}", good_data), "unknown dtype"},
      {"dtype not a string", safetensors_file("{\"t\":{\"dtype\":5,\"shape\":[4],\"data_offsets\":[0,16]}}", good_data), "dtype"},
      {"missing dtype", safetensors_file("{\"t\":{\"shape\":[4],\"data_offsets\":[0,16]}}", good_data), "dtype"},
      {"missing shape", safetensors_file("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", good_data), "shape"},
      {"negative dimension", safetensors_file("{\"t\":" + entry("F32", "[-4]", 0, 16) + "}", good_data), "non-negative integer"},
      {"fractional dimension", safetensors_file("{\"t\":" + entry("F32", "[4.0]", 0, 16) + "}", good_data), "non-negative integer"},
      {"shape overflow", safetensors_file("{\"t\":" + entry("F32", "[4294967296,4294967296]", 0, 16) + "}", good_data), "overflows"},
      {"byte count overflow", safetensors_file("{\"t\":" + entry("F64", "[4611686018427387904]", 0, 16) + "}", good_data), "overflows"},
      {"missing data_offsets", safetensors_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[4]}}", good_data), "data_offsets"},
      {"data_offsets of 3", safetensors_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,8,16]}}", good_data), "data_offsets"},
      {"end before begin", safetensors_file("{\"t\":" + entry("F32", "[0]", 16, 8) + "}", good_data), "end < begin"},
      {"shape/offset mismatch", safetensors_file("{\"t\":" + entry("F32", "[3]", 0, 16) + "}", good_data), "needs 12"},
      {"hole between tensors", safetensors_file("{\"a\":" + entry("F32", "[1]", 0, 4) + ",\"b\":" + entry("F32", "[2]", 8, 16) + "}", good_data), "hole"},
      {"hole at the start", safetensors_file("{\"a\":" + entry("F32", "[3]", 4, 16) + "}", good_data), "hole"},
      {"overlapping tensors", safetensors_file("{\"a\":" + entry("F32", "[3]", 0, 12) + ",\"b\":" + entry("F32", "[2]", 8, 16) + "}", good_data), "overlaps"},
      {"bytes after the last tensor", safetensors_file("{\"a\":" + entry("F32", "[2]", 0, 8) + "}", good_data), "after the last tensor"},
      {"truncated data", safetensors_file("{\"a\":" + entry("F32", "[4]", 0, 16) + "}", std::string(10, '\0')), "past the data buffer"},
      {"offset far past the end", safetensors_file("{\"a\":" + entry("U8", "[16]", 18446744073709551000ull, 18446744073709551016ull) + "}", good_data), "past the data buffer"},
      {"tensor entry not an object", safetensors_file("{\"t\": 7}", ""), "not an object"},
      {"metadata not an object", safetensors_file("{\"__metadata__\": [1]}", ""), "__metadata__"},
      {"metadata value not a string", safetensors_file("{\"__metadata__\": {\"k\": 1}}", ""), "not a string"},
      {"duplicate tensor name", safetensors_file("{\"a\":" + entry("F32", "[2]", 0, 8) + ",\"a\":" + entry("F32", "[2]", 8, 16) + "}", good_data), "twice"},
  };
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    const std::string msg = parse_error(c.bytes, "models/broken.safetensors");
    REQUIRE_FALSE(msg.empty());
    CHECK(msg.find("models/broken.safetensors") == 0);
    CHECK(msg.find(c.expect) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
    CHECK(msg.size() < 300);
  }
}

TEST_CASE("SafetensorsFile maps a file and reports errors with its path") {
  const std::string dir = endor::test::make_temp_dir("st");
  const std::vector<RawTensor> ts = {{"w", "F16", {2, 2}, endor::test::encode_values({1.0f, -2.0f, 0.5f, 0.0f}, "F16")}};
  endor::test::write_bytes(dir + "/ok.safetensors", safetensors_file(ts));
  const auto f = SafetensorsFile::open(dir + "/ok.safetensors");
  const SafetensorsEntry& e = f->header().tensors.at(0);
  float out[4];
  convert_to_f32(e.dtype, f->data(e), 4, out);
  CHECK(out[0] == 1.0f);
  CHECK(out[1] == -2.0f);
  CHECK(out[2] == 0.5f);
  CHECK(out[3] == 0.0f);
  f->release(e);  // pages dropped, data still readable
  convert_to_f32(e.dtype, f->data(e), 4, out);
  CHECK(out[1] == -2.0f);

  // Truncated copy of the same file: the data no longer covers the offsets.
  const std::string good = endor::test::read_bytes(dir + "/ok.safetensors");
  endor::test::write_bytes(dir + "/cut.safetensors", good.substr(0, good.size() - 3));
  try {
    SafetensorsFile::open(dir + "/cut.safetensors");
    FAIL("truncated file opened");
  } catch (const Error& err) {
    CHECK(std::string(err.what()).find(dir + "/cut.safetensors") == 0);
  }
  CHECK_THROWS_AS(SafetensorsFile::open(dir + "/missing.safetensors"), Error);
  CHECK_THROWS_AS(SafetensorsFile::open(dir), Error);  // a folder
  endor::test::remove_tree(dir);
}

TEST_CASE("convert_to_f32 for F16, BF16, F32, F64; integer dtypes refused") {
  const uint16_t f16_one = 0x3C00, bf16_minus_two = 0xC000;
  uint8_t b[8];
  float out = 0;
  std::memcpy(b, &f16_one, 2);
  convert_to_f32(SafetensorsDType::F16, b, 1, &out);
  CHECK(out == 1.0f);
  std::memcpy(b, &bf16_minus_two, 2);
  convert_to_f32(SafetensorsDType::BF16, b, 1, &out);
  CHECK(out == -2.0f);
  const double d = 0.25;
  std::memcpy(b, &d, 8);
  convert_to_f32(SafetensorsDType::F64, b, 1, &out);
  CHECK(out == 0.25f);
  CHECK_THROWS_AS(convert_to_f32(SafetensorsDType::I32, b, 1, &out), Error);
}
