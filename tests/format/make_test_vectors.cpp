// Writes format-spec/test-vectors/: tiny .endor files, one per encoding, and for each the
// encoder's input and the expected decoded values as JSON (exact f32 values).
// Usage: make_test_vectors <output-dir>. Not run by ctest; test_vectors.cpp checks the output.
// Inputs are multiples of powers of two (exact in f32, and in f16/bf16 where stored as such) so
// regeneration is bit-identical on any IEEE-754 machine: no RNG distributions, no libm.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>

#include "endor/format.h"

using namespace endor;
using nlohmann::json;

namespace {

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;
  EncodeOptions opt;
  std::function<float(uint64_t r, uint64_t c, uint64_t i)> value;  // element (r, c), flat index i
};

struct Vector {
  std::string name, description;
  std::vector<std::vector<TensorSpec>> groups;           // group g holds these tensors
  std::vector<std::pair<std::string, std::string>> files;  // carried in a last group "files"
};

// A small integer in [-30, 30] that looks irregular, never 0 (k/scale is exact in every type).
float irregular(uint64_t i, float scale) {
  const int k = int((i * 37 + 11) % 61) - 30;
  return float(k == 0 ? 7 : k) / scale;
}

json tensor_json(const TensorSpec& t, const std::vector<float>& input, const EncodedTensor& e) {
  TensorView view;
  view.layout = e.layout;
  view.data = e.bytes.data();
  std::vector<float> decoded(e.layout.rows * e.layout.cols);
  decode_rows_f32(view, 0, e.layout.rows, decoded.data());
  json j = {{"name", t.name},      {"shape", t.shape},
            {"encoding", to_string(e.layout.encoding)}, {"dtype", to_string(e.layout.dtype())},
            {"group_size", e.layout.group_size}, {"nnz", e.layout.nnz},
            {"size", e.bytes.size()}};
  // nlohmann prints doubles with round-trip precision; every f32 is exactly a double.
  j["input"] = json::array();
  for (float x : input) j["input"].push_back(double(x));
  j["values"] = json::array();
  for (float x : decoded) j["values"].push_back(double(x));
  return j;
}

void write_vector(const std::string& dir, const Vector& v) {
  const std::string path = dir + "/" + v.name + ".endor";
  json expected = {{"file", v.name + ".endor"}, {"description", v.description}, {"tensors", json::array()},
                   {"files", json::array()}};
  ContainerWriter w(path);
  for (size_t g = 0; g < v.groups.size(); ++g) {
    w.begin_group("g" + std::to_string(g), g == 0 ? Tier::Gpu : Tier::Cpu);
    for (const TensorSpec& t : v.groups[g]) {
      const uint64_t rows = t.shape.size() == 1 ? 1 : t.shape[0];
      uint64_t n = 1;
      for (uint64_t d : t.shape) n *= d;
      const uint64_t cols = n / rows;
      std::vector<float> x(n);
      for (uint64_t i = 0; i < n; ++i) x[i] = t.value(i / cols, i % cols, i);
      const EncodedTensor e = encode_tensor(x.data(), t.shape, t.opt);
      TensorInfo meta;
      meta.name = t.name;
      meta.shape = t.shape;
      meta.encoding = e.layout.encoding;
      meta.value_type = e.layout.value_type;
      meta.group_size = e.layout.group_size;
      meta.int4_params = e.layout.int4_params;
      meta.nnz = e.layout.nnz;
      meta.source_dtype = "F32";
      w.add_tensor(meta, e.bytes.data(), e.bytes.size());
      expected["tensors"].push_back(tensor_json(t, x, e));
    }
    w.end_group();
  }
  if (!v.files.empty()) {
    w.begin_group("files", Tier::Disk);
    for (const auto& [name, text] : v.files) {
      w.add_file(name, text.data(), text.size());
      expected["files"].push_back({{"name", name}, {"text", text}});
    }
    w.end_group();
  }
  w.commit(json{{"model_type", "endor-test-vector"}}, nullptr,
           json{{"tool", "make_test_vectors"}, {"source", "synthetic"}, {"vector", v.name}});
  // One key per line, arrays compact: readable and small.
  std::ofstream out(dir + "/" + v.name + ".expected.json");
  out << "{\n \"file\": " << expected["file"].dump() << ",\n \"description\": " << expected["description"].dump()
      << ",\n \"files\": " << expected["files"].dump() << ",\n \"tensors\": [";
  for (size_t i = 0; i < expected["tensors"].size(); ++i) {
    const json& t = expected["tensors"][i];
    out << (i ? ",\n  {" : "\n  {");
    bool first = true;
    for (const char* key : {"name", "shape", "encoding", "dtype", "group_size", "nnz", "size", "input", "values"}) {
      out << (first ? "" : ",\n   ") << json(key).dump() << ": " << t[key].dump();
      first = false;
    }
    out << "}";
  }
  out << "\n ]\n}\n";
  std::cout << path << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_test_vectors <output-dir>\n";
    return 2;
  }
  const std::string dir = argv[1];
  const float specials[15] = {0.0f,     -0.0f,           1.0f,       -2.0f,        0.5f,
                              65504.0f, -65504.0f,       0x1p-24f,   -0x1p-24f,    0x1p-14f,
                              1.0f / 3, 0.1f /*rounds*/, 3.140625f,  -1.5f,        1024.0f};
  // Presence patterns: which elements pruning "zeroed".
  auto half = [](uint64_t r, uint64_t c) { return (c * 7 + r * 3) % 5 < 2; };  // ~40 % zeros

  const std::vector<Vector> vectors = {
      {"dense-f16",
       "dense f16 [3,5] with -0, +-65504, subnormals, values that round (1/3, 0.1); a 1-D dense f16 tensor "
       "in a second group; an auxiliary file",
       {{{"w", {3, 5}, {Encoding::Dense, ValueType::F16, 0}, [&](uint64_t, uint64_t, uint64_t i) { return specials[i]; }}},
        {{"b", {5}, {Encoding::Dense, ValueType::F16, 0},
          [](uint64_t, uint64_t, uint64_t i) { return irregular(i, 4); }}}},
       {{"note.txt", "endor test vector\n"}}},
      {"bitmap-f16",
       "bitmap f16 [4,70]: rows cross a 64-bit word boundary (2 words per row, padding bits 0)",
       {{{"w", {4, 70}, {Encoding::Bitmap, ValueType::F16, 0},
          [&](uint64_t r, uint64_t c, uint64_t i) { return half(r, c) ? 0.0f : irregular(i, 16); }}}},
       {}},
      {"bitmap-bf16",
       "bitmap bf16, 3-D shape [3,2,10] viewed as 3 rows x 20 columns; includes 2^100 and -0.0 (absent)",
       {{{"w", {3, 2, 10}, {Encoding::Bitmap, ValueType::BF16, 0},
          [&](uint64_t r, uint64_t c, uint64_t i) {
            if (i == 7) return 0x1p100f;
            if (half(r, c)) return (i % 2) ? -0.0f : 0.0f;
            return irregular(i, 8);
          }}}},
       {}},
      {"bitmap-f32",
       "bitmap f32 [2,4100]: two 4096-column index blocks per row, ~4 % density",
       {{{"w", {2, 4100}, {Encoding::Bitmap, ValueType::F32, 0},
          [](uint64_t r, uint64_t c, uint64_t i) {
            const bool present = (c * 5 + r) % 23 == 0 || c >= 4094;
            return present ? (i == 0 ? 0.1f : irregular(i, 16)) : 0.0f;
          }}}},
       {}},
      {"bitmap-int8",
       "bitmap int8 [4,33], per-row symmetric scales; row 3 is entirely absent (scale 1e-5/127)",
       {{{"w", {4, 33}, {Encoding::Bitmap, ValueType::I8, 0},
          [&](uint64_t r, uint64_t c, uint64_t i) { return (r == 3 || half(r, c)) ? 0.0f : irregular(i, 64); }}}},
       {}},
      {"dense-int8",
       "dense int8 [2,5], per-row symmetric scales, rounding half away from zero",
       {{{"w", {2, 5}, {Encoding::Dense, ValueType::I8, 0},
          [](uint64_t, uint64_t, uint64_t i) { return irregular(i, 64); }}}},
       {}},
      {"bitmap-int4-g4",
       "bitmap int4 [3,10], group_size 4 (groups of 4, 4, 2 columns): one group with no present value "
       "(scale 0, min 0), one constant group (its grid from 0: the value is code 15); min = -z*scale, z an integer",
       {{{"w", {3, 10}, {Encoding::Bitmap, ValueType::I4, 4},
          [&](uint64_t r, uint64_t c, uint64_t i) {
            if (r == 1 && c < 4) return 0.0f;          // empty group
            if (r == 2 && c >= 4 && c < 8) return 0.75f;  // constant group
            return half(r, c) ? 0.0f : irregular(i, 32);
          }}}},
       {}},
      {"dense-int4",
       "dense int4 [3,7], group_size 4: 21 codes, the last byte holds one code in its low nibble",
       {{{"w", {3, 7}, {Encoding::Dense, ValueType::I4, 4},
          [](uint64_t, uint64_t, uint64_t i) { return irregular(i, 32); }}}},
       {}},
      {"dense-int4k",
       "dense int4k [5,12], group_size 4: 15 groups, two super-blocks (8 and 7 groups: the last one's eighth "
       "scale and min codes unused, 0); a super-block spans rows 0-2; an all-positive group (min code 0); codes of "
       "the scale and min halves packed 4 to 3 bytes",
       {{{"w", {5, 12}, {Encoding::Dense, ValueType::I4, 4, Int4Params::Coded6},
          [](uint64_t r, uint64_t c, uint64_t i) { return r == 3 && c < 4 ? float(c + 1) / 8 : irregular(i, 32); }}}},
       {}},
      {"bitmap-int4k",
       "bitmap int4k [3,20], group_size 8: 9 groups (the last of 4 columns), an empty group (scale and min codes 0)",
       {{{"w", {3, 20}, {Encoding::Bitmap, ValueType::I4, 8, Int4Params::Coded6},
          [&](uint64_t r, uint64_t c, uint64_t i) {
            if (r == 2 && c >= 8 && c < 16) return 0.0f;  // empty group
            return half(r, c) ? 0.0f : irregular(i, 16);
          }}}},
       {}},
      {"dense-int8g",
       "dense int8g [3,40], group_size 32 (groups of 32 and 8 columns: Q8_0's grid), one all-zero group (scale +0, "
       "codes 0), values that round half away from zero",
       {{{"w", {3, 40}, {Encoding::Dense, ValueType::I8G, 32},
          [](uint64_t r, uint64_t c, uint64_t i) { return r == 1 && c >= 32 ? 0.0f : irregular(i, 64); }}}},
       {}},
      {"bitmap-int8g",
       "bitmap int8g [3,70], group_size 16: 5 groups (the last of 6 columns) over two bitmap words, an empty group "
       "(scale +0)",
       {{{"w", {3, 70}, {Encoding::Bitmap, ValueType::I8G, 16},
          [&](uint64_t r, uint64_t c, uint64_t i) {
            if (r == 0 && c >= 16 && c < 32) return 0.0f;  // empty group
            return half(r, c) ? 0.0f : irregular(i, 64);
          }}}},
       {}},
  };
  try {
    for (const Vector& v : vectors) write_vector(dir, v);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
