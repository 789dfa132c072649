// int8g (SPEC.md §6.8, §7.5): the layout of its sections, the reference grid and its error bound,
// explicit codes stored exactly, and a container that carries it (format 1.2).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "test_util.h"

using namespace endor;
using namespace endor::test;

TEST_CASE("int8g layout: int8 values, then one f16 scale per (row, group); no mins") {
  // [3, 40] in groups of 32: 2 groups a row, 120 value bytes, 6 scales.
  const TensorLayout L = compute_layout({3, 40}, Encoding::Dense, ValueType::I8G, 32, 120);
  CHECK(L.groups_per_row == 2);
  CHECK(L.values_bytes == 120);
  CHECK(L.scales_offset == 128);
  CHECK(L.scales_bytes == 12);
  CHECK(L.mins_bytes == 0);
  CHECK(L.total_bytes == 140);
  // 8.5 bits a weight at groups of 32: Q8_0's size.
  const TensorLayout s = compute_layout({576, 1536}, Encoding::Dense, ValueType::I8G, 32, 576 * 1536);
  CHECK(double(s.total_bytes) * 8 / (576.0 * 1536.0) == doctest::Approx(8.5).epsilon(1e-6));
  // Bitmap: bitmap and index first, as every bitmap tensor.
  const TensorLayout b = compute_layout({2, 70}, Encoding::Bitmap, ValueType::I8G, 16, 50);
  CHECK(b.bitmap_bytes == 32);
  CHECK(b.values_offset == 48);
  CHECK(b.scales_offset == 112);
  CHECK(b.scales_bytes == 2 * 2 * 5);
  CHECK_THROWS_AS(compute_layout({4, 4}, Encoding::Dense, ValueType::I8G, 0, 16), Error);
  CHECK_THROWS_AS(compute_layout({4, 4}, Encoding::Dense, ValueType::I8G, 4, 16, Int4Params::Coded6), Error);
  CHECK(std::string(to_string(ValueType::I8G)) == "int8g");
  CHECK(parse_dtype("int8g") == Dtype::Int8g);
  CHECK(value_bits(ValueType::I8G) == 8);
}

TEST_CASE("int8g reference grid: S = f16(amax/127), |w - q·S| <= S/2, decode q·S exactly") {
  for (const uint32_t g : {1u, 7u, 32u, 64u, 128u})
    for (const Encoding enc : {Encoding::Dense, Encoding::Bitmap}) {
      CAPTURE(g);
      const uint64_t rows = 5, cols = 200;
      std::vector<float> x = random_tensor(rows * cols, enc == Encoding::Bitmap ? 0.5 : 0.0, 17 + g);
      for (uint64_t c = 0; c < std::min<uint64_t>(g, cols); ++c) x[2 * cols + c] = 0.0f;  // an all-zero first group
      x[3 * cols + 5] = 3000.0f;  // a large outlier spoils one group only
      const EncodedTensor e = encode_tensor(x.data(), {rows, cols}, {enc, ValueType::I8G, g});
      const TensorView v = view_of(e);
      const std::vector<float> y = decode_all(v);
      const uint64_t gpr = (cols + g - 1) / g;
      for (uint64_t r = 0; r < rows; ++r)
        for (uint64_t gi = 0; gi < gpr; ++gi) {
          const uint64_t c0 = gi * g, c1 = std::min(cols, c0 + g);
          float amax = 0.0f;
          for (uint64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
          const uint16_t sh = v.group_scales()[r * gpr + gi];
          CHECK(sh == f32_to_f16(amax / 127.0f));
          const float s = f16_to_f32(sh);
          for (uint64_t c = c0; c < c1; ++c) {
            const float w = x[r * cols + c], d = y[r * cols + c];
            if (w == 0.0f) {
              CHECK(f32_bits(d) == 0u);  // absent or code 0: +0
              continue;
            }
            // The largest |w| sits one rounding of S away from ±127·S; every other within S/2.
            CHECK(std::fabs(w - d) <= s * 0.5f + std::fabs(w) * 0x1p-10f);
            const float q = std::round(w / s);
            CHECK(d == std::clamp(q, -127.0f, 127.0f) * s);
          }
        }
    }
}

TEST_CASE("int8g encode_quantized stores codes and scales as given; refuses -128 and non-finite scales") {
  const uint64_t rows = 2, cols = 40;
  std::vector<int8_t> codes(rows * cols);
  for (uint64_t i = 0; i < codes.size(); ++i) codes[i] = int8_t(int(i * 37 % 255) - 127);
  std::vector<uint16_t> scales = {f32_to_f16(0.5f), f32_to_f16(-0.25f), f32_to_f16(0.0f), f32_to_f16(1e-3f)};
  std::vector<uint8_t> present(rows * cols, 1);
  for (uint64_t i = 0; i < present.size(); i += 3) present[i] = 0;
  QuantizedValues q;
  q.value_type = ValueType::I8G;
  q.group_size = 32;
  q.int8_codes = codes.data();
  q.group_scales = scales.data();
  for (const Encoding enc : {Encoding::Dense, Encoding::Bitmap}) {
    q.present = enc == Encoding::Bitmap ? present.data() : nullptr;
    const EncodedTensor e = encode_quantized({rows, cols}, enc, q);
    const std::vector<float> y = decode_all(view_of(e));
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t c = 0; c < cols; ++c) {
        const uint64_t i = r * cols + c;
        const float want = q.present && !present[i] ? 0.0f : float(codes[i]) * f16_to_f32(scales[r * 2 + c / 32]);
        CHECK(f32_bits(y[i]) == f32_bits(want));
      }
  }
  q.present = nullptr;
  std::vector<int8_t> bad = codes;
  bad[5] = -128;
  q.int8_codes = bad.data();
  CHECK_THROWS_WITH_AS(encode_quantized({rows, cols}, Encoding::Dense, q), doctest::Contains("-128"), Error);
  q.int8_codes = codes.data();
  std::vector<uint16_t> inf = scales;
  inf[3] = 0x7C00;
  q.group_scales = inf.data();
  CHECK_THROWS_WITH_AS(encode_quantized({rows, cols}, Encoding::Dense, q), doctest::Contains("not a finite f16"), Error);
  q.group_scales = nullptr;
  CHECK_THROWS_WITH_AS(encode_quantized({rows, cols}, Encoding::Dense, q), doctest::Contains("group scales"), Error);
  // A value whose scale would pass f16: refused by the reference encoder, naming the row.
  std::vector<float> huge(64, 1.0f);
  huge[40] = 1e7f;
  CHECK_THROWS_WITH_AS(encode_tensor(huge.data(), {2, 32}, {Encoding::Dense, ValueType::I8G, 32}),
                       doctest::Contains("row 1"), Error);
}

TEST_CASE("a container with an int8g tensor is format 1.2 and reads back") {
  TempDir dir;
  std::vector<float> x = random_tensor(8 * 64, 0.0, 3);
  const EncodedTensor e = encode_tensor(x.data(), {8, 64}, {Encoding::Dense, ValueType::I8G, 32});
  {
    ContainerWriter w(dir.file("g.endor"));
    w.begin_group("g0", Tier::Gpu);
    TensorInfo meta;
    meta.name = "w";
    meta.shape = {8, 64};
    meta.encoding = Encoding::Dense;
    meta.value_type = ValueType::I8G;
    meta.group_size = 32;
    meta.nnz = 8 * 64;
    w.add_tensor(meta, e.bytes.data(), e.bytes.size());
    w.end_group();
    w.commit(nlohmann::json::object(), nullptr, nlohmann::json::object());
  }
  auto r = ContainerReader::open(dir.file("g.endor"));
  CHECK(r->header().version_minor == 2);
  CHECK(r->manifest().to_json()["tensors"][0]["dtype"] == "int8g");
  CHECK(r->manifest().to_json()["tensors"][0]["group_size"] == 32);
  const TensorView v = r->tensor(r->manifest().tensors[0]);
  CHECK(v.layout.value_type == ValueType::I8G);
  const std::vector<float> a = decode_all(v), b = decode_all(view_of(e));
  CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
  r->verify_all();
}
