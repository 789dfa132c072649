// Checks the committed test vectors (format-spec/test-vectors/): each file opens and verifies,
// every tensor decodes to the expected values bit for bit, and encoding the recorded input
// reproduces the stored blob byte for byte.
#include <doctest/doctest.h>

#include "test_util.h"

using namespace endor;
using namespace endor::test;
using nlohmann::json;

namespace {
const char* const kVectors[] = {"dense-f16",  "bitmap-f16", "bitmap-bf16",    "bitmap-f32",
                                "bitmap-int8", "dense-int8", "bitmap-int4-g4", "dense-int4",
                                "dense-int4k", "bitmap-int4k",
                                "dense-int8g", "bitmap-int8g"};
const std::string kDir = std::string(ENDOR_SOURCE_DIR) + "/format-spec/test-vectors/";
}  // namespace

TEST_CASE("committed test vectors decode to their expected values and re-encode to their bytes") {
  for (const char* name : kVectors) {
    CAPTURE(name);
    const std::string path = kDir + name + ".endor";
    const auto bytes = read_bytes(path);
    CHECK(bytes.size() <= 16384);  // vectors stay tiny (a few 4 KiB-aligned groups)
    std::ifstream in(kDir + name + ".expected.json");
    REQUIRE(in);
    const json expected = json::parse(in);
    CHECK(expected["file"] == std::string(name) + ".endor");

    auto r = ContainerReader::open(path);
    REQUIRE_NOTHROW(r->verify_all());
    REQUIRE(r->manifest().tensors.size() == expected["tensors"].size());
    for (const json& t : expected["tensors"]) {
      const std::string tname = t["name"];
      CAPTURE(tname);
      auto view = r->find_tensor(tname);
      REQUIRE(view.has_value());
      CHECK(view->info->shape == t["shape"].get<std::vector<uint64_t>>());
      CHECK(to_string(view->layout.encoding) == t["encoding"]);
      CHECK(to_string(view->layout.dtype()) == t["dtype"]);
      CHECK(view->layout.nnz == t["nnz"]);
      CHECK(view->layout.total_bytes == t["size"]);

      const auto decoded = decode_all(*view);
      const auto& values = t["values"];
      REQUIRE(decoded.size() == values.size());
      for (size_t i = 0; i < decoded.size(); ++i) {
        const float want = float(values[i].get<double>());
        REQUIRE(double(want) == values[i].get<double>());  // the JSON holds exact f32 values
        REQUIRE(f32_bits(decoded[i]) == f32_bits(want));
      }

      std::vector<float> input;
      for (const json& x : t["input"]) input.push_back(float(x.get<double>()));
      EncodeOptions opt{view->layout.encoding, view->layout.value_type, t["group_size"].get<uint32_t>(),
                        view->layout.int4_params};
      const EncodedTensor e = encode_tensor(input.data(), view->info->shape, opt);
      REQUIRE(e.bytes.size() == view->layout.total_bytes);
      CHECK(std::memcmp(e.bytes.data(), view->data, e.bytes.size()) == 0);
    }
    for (const json& f : expected["files"]) {
      auto content = r->file(f["name"].get<std::string>());
      REQUIRE(content.has_value());
      CHECK(*content == f["text"].get<std::string>());
    }
  }
}
