// int4k (SPEC.md §6.7, §7.4): the layout of its sections, the six-bit code packing, the reference
// grid's error, explicit codes stored exactly, and a container that carries it (format 1.1).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "test_util.h"

using namespace endor;
using namespace endor::test;

namespace {

// Code k of a super-block's 12 bytes, read bit by bit from SPEC.md §6.7's text (independent of
// the library's shifts).
uint32_t code_bits(const uint8_t* codes, uint32_t k) {
  uint32_t v = 0;
  for (uint32_t b = 0; b < 6; ++b) {
    const uint32_t i = 6 * k + b;
    v |= uint32_t((codes[i / 8] >> (i % 8)) & 1) << b;
  }
  return v;
}

}  // namespace

TEST_CASE("int4k layout: f16 (d, dmin) and 12 code bytes per super-block of 8 (row, group) parameters") {
  // [5, 12] in groups of 4: 15 parameters, 2 super-blocks; 30 values bytes.
  const TensorLayout L = compute_layout({5, 12}, Encoding::Dense, ValueType::I4, 4, 60, Int4Params::Coded6);
  CHECK(L.int4_params == Int4Params::Coded6);
  CHECK(L.n_super == 2);
  CHECK(L.values_bytes == 30);
  CHECK(L.scales_offset == 32);
  CHECK(L.scales_bytes == 8);
  CHECK(L.mins_offset == 48);
  CHECK(L.mins_bytes == 24);
  CHECK(L.total_bytes == 72);
  // 4.5 bits a weight at groups of 32 on SmolLM2's 576-wide rows (no partial super-blocks per row).
  const TensorLayout s = compute_layout({576, 576}, Encoding::Dense, ValueType::I4, 32, 576 * 576, Int4Params::Coded6);
  CHECK(double(s.total_bytes) * 8 / (576.0 * 576.0) == doctest::Approx(4.5).epsilon(1e-4));
  CHECK_THROWS_AS(compute_layout({4, 4}, Encoding::Dense, ValueType::I8, 0, 16, Int4Params::Coded6), Error);
}

TEST_CASE("int4k_super: d = f16(max S / 63), codes rounded, a non-zero scale keeps code >= 1") {
  const float s[3] = {0.63f, 0.0001f, 0.0f}, m[3] = {-0.126f, 0.0f, -0.063f};
  const Int4kSuper sb = int4k_super(s, m, 3);
  const float d = f16_to_f32(sb.d_f16), dmin = f16_to_f32(sb.dmin_f16);
  CHECK(d == f16_to_f32(f32_to_f16(0.63f / 63)));
  CHECK(dmin == f16_to_f32(f32_to_f16(0.126f / 63)));
  CHECK(sb.sc[0] == 63);
  CHECK(sb.sc[1] == 1);  // 0.0001 / 0.01 rounds to 0: kept at 1 (the group has a range)
  CHECK(sb.sc[2] == 0);
  CHECK(sb.mc[0] == 63);
  CHECK(sb.mc[1] == 0);
  CHECK(sb.mc[2] == std::lround(0.063f / dmin));
  const float bad_s[1] = {-1.0f}, bad_m[1] = {0.5f}, ok[1] = {0.0f};
  CHECK_THROWS_AS(int4k_super(bad_s, ok, 1), Error);
  CHECK_THROWS_AS(int4k_super(ok, bad_m, 1), Error);
  CHECK_THROWS_AS(int4k_super(ok, ok, 9), Error);
}

TEST_CASE("int4k reference grid: codes packed per SPEC.md, parameters decode exactly, error within the grid's") {
  for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
    for (uint32_t G : {32u, 64u, 128u, 7u}) {
      const uint64_t rows = 13, cols = 300;
      const std::vector<float> x = random_tensor(rows * cols, enc == Encoding::Bitmap ? 0.5 : 0.0, 40 + G);
      EncodeOptions opt{enc, ValueType::I4, G, Int4Params::Coded6};
      const EncodedTensor e = encode_tensor(x.data(), {rows, cols}, opt);
      const TensorView v = view_of(e);
      CAPTURE(G);
      CAPTURE(to_string(enc));
      const uint64_t gpr = v.layout.groups_per_row, n_params = rows * gpr;
      std::vector<float> S(n_params), M(n_params);
      int4_params_f32(v, 0, n_params, S.data(), M.data());
      // The parameters from the bytes as the spec's text reads them.
      for (uint64_t p = 0; p < n_params; ++p) {
        const uint64_t b = p / 8, j = p % 8;
        uint16_t d, dmin;
        std::memcpy(&d, v.data + v.layout.scales_offset + 4 * b, 2);
        std::memcpy(&dmin, v.data + v.layout.scales_offset + 4 * b + 2, 2);
        const uint8_t* codes = v.data + v.layout.mins_offset + 12 * b;
        REQUIRE(S[p] == f16_to_f32(d) * float(code_bits(codes, uint32_t(j))));
        REQUIRE(M[p] == -(f16_to_f32(dmin) * float(code_bits(codes, uint32_t(8 + j)))));
      }
      // Unused codes of the last super-block are 0.
      for (uint64_t p = n_params; p < v.layout.n_super * 8; ++p) {
        const uint8_t* codes = v.data + v.layout.mins_offset + 12 * (p / 8);
        CHECK(code_bits(codes, uint32_t(p % 8)) == 0);
        CHECK(code_bits(codes, uint32_t(8 + p % 8)) == 0);
      }
      // Decoded values: absent ones +0; present ones within half a step of the grid, or clamped at
      // its ends, where the super-block's coded parameters may fall short of the group's range.
      const std::vector<float> y = decode_all(v);
      double err2 = 0, sig2 = 0;
      for (uint64_t r = 0; r < rows; ++r)
        for (uint64_t c = 0; c < cols; ++c) {
          const float w = x[r * cols + c], got = y[r * cols + c];
          if (enc == Encoding::Bitmap && w == 0.0f) {
            REQUIRE(std::signbit(got) == false);
            REQUIRE(got == 0.0f);
            continue;
          }
          const uint64_t p = r * gpr + c / G;
          const float lo = M[p], hi = M[p] + 15 * S[p];
          if (w >= lo && w <= hi) REQUIRE(std::fabs(got - w) <= S[p] / 2 * (1 + 1e-5f) + 1e-7f);
          err2 += double(got - w) * (got - w);
          sig2 += double(w) * w;
        }
      CHECK(err2 / sig2 < (G <= 32 ? 0.012 : 0.03));  // a 4-bit grid: ~1/230 of the variance and up
    }
}

TEST_CASE("int4k: explicit codes and parameters are stored exactly and refused out of range") {
  const uint64_t rows = 3, cols = 10;
  const uint32_t G = 4;  // 3 groups a row, 9 parameters: 2 super-blocks
  std::vector<uint8_t> codes(rows * cols), pc(2 * 9);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t((i * 7) % 16);
  for (size_t i = 0; i < pc.size(); ++i) pc[i] = uint8_t((i * 29 + 3) % 64);
  const uint16_t super[4] = {f32_to_f16(0.01f), f32_to_f16(0.002f), f32_to_f16(0.5f), f32_to_f16(0.25f)};
  QuantizedValues q;
  q.value_type = ValueType::I4;
  q.group_size = G;
  q.int4_params = Int4Params::Coded6;
  q.int4_codes = codes.data();
  q.super_scales = super;
  q.param_codes = pc.data();
  const EncodedTensor e = encode_quantized({rows, cols}, Encoding::Dense, q);
  const TensorView v = view_of(e);
  const std::vector<float> y = decode_all(v);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t p = r * 3 + c / G, b = p / 8;
      const float S = f16_to_f32(super[2 * b]) * float(pc[2 * p]);
      const float M = -(f16_to_f32(super[2 * b + 1]) * float(pc[2 * p + 1]));
      REQUIRE(y[r * cols + c] == float(codes[r * cols + c]) * S + M);
    }
  pc[5] = 64;
  CHECK_THROWS_WITH_AS(encode_quantized({rows, cols}, Encoding::Dense, q), doctest::Contains("[0, 63]"), Error);
  pc[5] = 1;
  const uint16_t inf_super[4] = {0x7C00, 0, 0, 0};
  q.super_scales = inf_super;
  CHECK_THROWS_WITH_AS(encode_quantized({rows, cols}, Encoding::Dense, q), doctest::Contains("finite"), Error);
}

TEST_CASE("int4k in a container: dtype \"int4k\", format 1.1; without it the writer stays at 1.0") {
  TempDir dir;
  const std::vector<float> x = random_tensor(8 * 64, 0.0, 7);
  auto write = [&](const std::string& path, bool coded) {
    EncodeOptions opt{Encoding::Dense, ValueType::I4, 32, coded ? Int4Params::Coded6 : Int4Params::F16};
    const EncodedTensor e = encode_tensor(x.data(), {8, 64}, opt);
    ContainerWriter w(path);
    w.begin_group("g0", Tier::Gpu);
    TensorInfo meta;
    meta.name = "w";
    meta.shape = {8, 64};
    meta.encoding = Encoding::Dense;
    meta.value_type = ValueType::I4;
    meta.group_size = 32;
    meta.int4_params = opt.int4_params;
    meta.nnz = 8 * 64;
    w.add_tensor(meta, e.bytes.data(), e.bytes.size());
    w.end_group();
    w.commit(nlohmann::json::object(), nullptr, nlohmann::json::object());
  };
  write(dir.file("k.endor"), true);
  write(dir.file("f.endor"), false);
  auto k = ContainerReader::open(dir.file("k.endor"));
  CHECK(k->header().version_minor == 1);
  CHECK(k->manifest().to_json()["tensors"][0]["dtype"] == "int4k");
  CHECK(k->manifest().tensors[0].int4_params == Int4Params::Coded6);
  const TensorView v = k->tensor(k->manifest().tensors[0]);
  CHECK(v.layout.int4_params == Int4Params::Coded6);
  CHECK(decode_all(v).size() == 8 * 64);
  CHECK(ContainerReader::open(dir.file("f.endor"))->header().version_minor == 0);
}
