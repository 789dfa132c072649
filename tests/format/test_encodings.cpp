// Tensor encodings: bit-exact round trips for every encoding x value type on odd shapes and
// sparsities, quantization against an in-test implementation of the spec's formulas with named
// error bounds, byte sizes against the spec's size formulas, and the bitmap index check.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "test_util.h"

using namespace endor;
using namespace endor::test;

namespace {

// Named error bounds (SPEC.md §7), in units of the quantization step:
// int8: |x - x'| <= s/2, plus slack for the f32 division and product (< 2^-16 steps).
constexpr double kInt8MaxErrorSteps = 0.5 + 1.0 / 65536;
// int4: |x - x'| <= scale_f16/2 + (error from rounding scale and min to f16), see int4_bound.

struct Shape2 {
  uint64_t rows, cols;
};
const Shape2 kShapes[] = {{1, 1}, {1, 63}, {3, 65}, {7, 4097}, {5, 130}};
const double kSparsities[] = {0.0, 0.5, 0.97, 1.0};
const uint32_t kGroupSizes[] = {1, 7, 128};

uint64_t pad16(uint64_t x) { return (x + 15) / 16 * 16; }

// Spec §6.2 size formula, written independently of compute_layout: the padded sizes of every
// section but the last non-empty one, plus the last non-empty one's size.
uint64_t expected_size(uint64_t rows, uint64_t cols, Encoding enc, ValueType vt, uint32_t g, uint64_t nnz) {
  std::vector<uint64_t> sections;
  if (enc == Encoding::Bitmap) {
    sections.push_back(rows * ((cols + 63) / 64) * 8);      // bitmap
    sections.push_back(rows * ((cols + 4095) / 4096) * 4);  // index
  }
  const uint64_t n = enc == Encoding::Dense ? rows * cols : nnz;
  sections.push_back(vt == ValueType::I4 ? (n + 1) / 2 : n * value_bits(vt) / 8);  // values
  if (vt == ValueType::I8) sections.push_back(rows * 4);                          // f32 per row
  if (vt == ValueType::I4) {
    sections.push_back(rows * ((cols + g - 1) / g) * 2);  // f16 scales
    sections.push_back(rows * ((cols + g - 1) / g) * 2);  // f16 mins
  }
  while (sections.back() == 0) sections.pop_back();
  uint64_t total = 0;
  for (size_t i = 0; i + 1 < sections.size(); ++i) total += pad16(sections[i]);
  return total + sections.back();
}

// In-test dequantization of int8 (SPEC.md §7.1) straight from the definition.
std::vector<float> int8_reference(const std::vector<float>& x, uint64_t rows, uint64_t cols, bool bitmap,
                                  std::vector<float>* scales) {
  std::vector<float> out(x.size(), 0.0f);
  for (uint64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (uint64_t c = 0; c < cols; ++c)
      if (!bitmap || x[r * cols + c] != 0.0f) amax = std::max(amax, std::fabs(x[r * cols + c]));
    const float s = std::max(amax, 1e-5f) / 127.0f;
    scales->push_back(s);
    for (uint64_t c = 0; c < cols; ++c) {
      const float w = x[r * cols + c];
      if (bitmap && w == 0.0f) continue;
      const long q = std::clamp(std::lround(w / s), -127L, 127L);
      out[r * cols + c] = float(q) * s;
    }
  }
  return out;
}

struct Int4Group {
  float scale, min;  // f16-rounded parameters as f32
  double bound;      // max |x - x'| allowed for this group
};

// In-test int4 quantize + dequantize (SPEC.md §7.2): params over the group's present values.
std::vector<float> int4_reference(const std::vector<float>& x, uint64_t rows, uint64_t cols, uint32_t gs,
                                  bool bitmap, std::vector<Int4Group>* groups) {
  std::vector<float> out(x.size(), 0.0f);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c0 = 0; c0 < cols; c0 += gs) {
      const uint64_t c1 = std::min<uint64_t>(cols, c0 + gs);
      float mn = INFINITY, mx = -INFINITY;
      for (uint64_t c = c0; c < c1; ++c) {
        const float w = x[r * cols + c];
        if (bitmap && w == 0.0f) continue;
        mn = std::min(mn, w);
        mx = std::max(mx, w);
      }
      if (mn > mx) {  // no present value
        groups->push_back({0.0f, 0.0f, 0.0});
        continue;
      }
      // The grid with a zero code: [min(mn, 0), max(mx, 0)] in 15 steps, the step rounded up to 7
      // significant bits (or, below f16's normal range, to a multiple of 2^-24), M = −z·S.
      const float lo = std::min(mn, 0.0f), hi = std::max(mx, 0.0f);
      float s = 1.0f, m = 0.0f;
      if (hi > lo) {
        const float step = (hi - lo) / 15.0f;
        double S = std::ldexp(1.0, int(std::floor(std::log2(double(step)))) - 6);  // 2^-6 of step's leading bit
        S = std::ceil(step / S) * S;
        if (S < std::ldexp(1.0, -14) && std::ldexp(S, 24) != std::floor(std::ldexp(S, 24)))
          S = std::ceil(std::ldexp(double(step), 24)) * std::ldexp(1.0, -24);
        s = float(S);
        m = -std::clamp(std::round(-lo / s), 0.0f, 15.0f) * s;
        m = m == 0.0f ? 0.0f : m;
      }
      for (uint64_t c = c0; c < c1; ++c) {
        const float w = x[r * cols + c];
        if (bitmap && w == 0.0f) continue;
        const long q = std::clamp(std::lround((w - m) / s), 0L, 15L);
        out[r * cols + c] = float(q) * s + m;
      }
      // Half a step inside the grid [m, m + 15·s], the distance to its ends outside it, plus f32
      // rounding of the result.
      const double bound = std::max({s / 2.0, double(m) - mn, double(mx) - (double(m) + 15.0 * s)}) +
                           4 * std::ldexp(1.0, -24) * (std::fabs(mx) + std::fabs(mn) + s);
      groups->push_back({s, m, bound});
    }
  return out;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (f32_bits(a[i]) != f32_bits(b[i])) return false;
  return true;
}

void check_absent_are_positive_zero(const std::vector<float>& x, const std::vector<float>& decoded, bool bitmap) {
  if (!bitmap) return;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] == 0.0f) REQUIRE(f32_bits(decoded[i]) == 0u);
}

}  // namespace

TEST_CASE("f16/bf16/f32: decode(encode(x)) == x bit for bit, dense and bitmap, odd shapes, all sparsities") {
  uint64_t seed = 1;
  for (ValueType vt : {ValueType::F16, ValueType::BF16, ValueType::F32})
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
      for (const Shape2& sh : kShapes)
        for (double sparsity : kSparsities) {
          CAPTURE(to_string(vt));
          CAPTURE(to_string(enc));
          CAPTURE(sh.rows);
          CAPTURE(sh.cols);
          CAPTURE(sparsity);
          const auto x = random_tensor(sh.rows * sh.cols, sparsity, seed++, vt);
          const EncodedTensor e = encode_tensor(x.data(), {sh.rows, sh.cols}, {enc, vt, 0});
          const bool bitmap = enc == Encoding::Bitmap;
          uint64_t nnz = 0;
          for (float v : x) nnz += v != 0.0f;
          CHECK(e.layout.nnz == (bitmap ? nnz : x.size()));
          CHECK(e.bytes.size() == expected_size(sh.rows, sh.cols, enc, vt, 0, e.layout.nnz));
          CHECK(e.layout.total_bytes == e.bytes.size());
          CHECK_NOTHROW(validate_bitmap(view_of(e), "t"));
          const auto decoded = decode_all(view_of(e));
          auto expected = x;
          if (bitmap)
            for (float& v : expected)
              if (v == 0.0f) v = 0.0f;  // -0.0 is absent and decodes to +0.0
          CHECK(bits_equal(decoded, expected));
          check_absent_are_positive_zero(x, decoded, bitmap);
        }
}

TEST_CASE("int8 per-row symmetric: decode equals the spec formula, |err| <= s/2") {
  uint64_t seed = 1000;
  for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
    for (const Shape2& sh : kShapes)
      for (double sparsity : kSparsities) {
        CAPTURE(to_string(enc));
        CAPTURE(sh.rows);
        CAPTURE(sh.cols);
        CAPTURE(sparsity);
        const bool bitmap = enc == Encoding::Bitmap;
        auto x = random_tensor(sh.rows * sh.cols, sparsity, seed++);
        for (float& v : x) v *= 0.05f;  // weight-like magnitudes
        const EncodedTensor e = encode_tensor(x.data(), {sh.rows, sh.cols}, {enc, ValueType::I8, 0});
        CHECK(e.bytes.size() == expected_size(sh.rows, sh.cols, enc, ValueType::I8, 0, e.layout.nnz));
        std::vector<float> scales;
        const auto expected = int8_reference(x, sh.rows, sh.cols, bitmap, &scales);
        const auto decoded = decode_all(view_of(e));
        CHECK(bits_equal(decoded, expected));
        check_absent_are_positive_zero(x, decoded, bitmap);
        for (uint64_t r = 0; r < sh.rows; ++r) {
          CHECK(view_of(e).row_scales()[r] == scales[r]);
          for (uint64_t c = 0; c < sh.cols; ++c) {
            const size_t i = r * sh.cols + c;
            if (bitmap && x[i] == 0.0f) continue;
            REQUIRE(std::fabs(double(decoded[i]) - x[i]) <= kInt8MaxErrorSteps * scales[r]);
          }
        }
      }
}

TEST_CASE("int4 per (row, group) asymmetric: decode equals the spec formula, |err| <= scale/2 + f16 rounding") {
  uint64_t seed = 2000;
  for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
    for (const Shape2& sh : kShapes)
      for (uint32_t gs : kGroupSizes)
        for (double sparsity : kSparsities) {
          CAPTURE(to_string(enc));
          CAPTURE(sh.rows);
          CAPTURE(sh.cols);
          CAPTURE(gs);
          CAPTURE(sparsity);
          const bool bitmap = enc == Encoding::Bitmap;
          auto x = random_tensor(sh.rows * sh.cols, sparsity, seed++);
          for (float& v : x) v *= 0.05f;
          const EncodedTensor e = encode_tensor(x.data(), {sh.rows, sh.cols}, {enc, ValueType::I4, gs});
          CHECK(e.layout.groups_per_row == (sh.cols + gs - 1) / gs);
          CHECK(e.bytes.size() == expected_size(sh.rows, sh.cols, enc, ValueType::I4, gs, e.layout.nnz));
          std::vector<Int4Group> groups;
          const auto expected = int4_reference(x, sh.rows, sh.cols, gs, bitmap, &groups);
          const auto decoded = decode_all(view_of(e));
          CHECK(bits_equal(decoded, expected));
          check_absent_are_positive_zero(x, decoded, bitmap);
          const TensorView v = view_of(e);
          for (uint64_t r = 0; r < sh.rows; ++r)
            for (uint64_t c = 0; c < sh.cols; ++c) {
              const size_t i = r * sh.cols + c;
              const Int4Group& g = groups[r * e.layout.groups_per_row + c / gs];
              if (c % gs == 0) {  // stored parameters are the f16-rounded ones
                const uint64_t p = r * e.layout.groups_per_row + c / gs;
                REQUIRE(f16_to_f32(v.group_scales()[p]) == g.scale);
                REQUIRE(f16_to_f32(v.group_mins()[p]) == g.min);
              }
              if (bitmap && x[i] == 0.0f) continue;
              REQUIRE(std::fabs(double(decoded[i]) - x[i]) <= g.bound);
            }
        }
}

TEST_CASE("int4: the zero code, constant and tiny groups, nibble order and empty groups") {
  // Row 0: a constant group (grid [0, 0.25]: code 15 within half a step) and a range below f16's
  // normal numbers (the step becomes a multiple of 2^-24). Row 1: all absent in group 0 (stored
  // scale 0, min 0), then {-3, 1.5, 12}: step 1, z = 3, min -3.
  const std::vector<float> x = {0.25f, 0.25f, 0.25f, 0.25f, 1e-7f, 2e-7f, 0.0f, 3e-7f,
                                0.0f,  0.0f,  0.0f,  0.0f,  -3.0f, 0.0f, 1.5f, 12.0f};
  const EncodedTensor e = encode_tensor(x.data(), {2, 8}, {Encoding::Bitmap, ValueType::I4, 4});
  const TensorView v = view_of(e);
  CHECK(e.layout.nnz == 10);
  const float s0 = f16_to_f32(v.group_scales()[0]);
  CHECK(s0 == 0.016845703125f);  // 0.25/15 = 0.01666… rounded up to 7 bits: 69·2^-12
  CHECK(v.group_mins()[0] == 0);  // z = 0
  CHECK(v.group_scales()[1] == 0x0001);  // 2^-24, the least f16 step
  CHECK(v.group_mins()[1] == 0);
  CHECK(v.group_scales()[2] == 0);
  CHECK(v.group_mins()[2] == 0);
  CHECK(f16_to_f32(v.group_scales()[3]) == 1.0f);
  CHECK(f16_to_f32(v.group_mins()[3]) == -3.0f);
  const uint8_t* values = v.values();
  CHECK((values[0] & 0x0F) == 15);        // 0.25 -> 14.84 -> 15
  CHECK((values[2] & 0x0F) == 2);         // value 4 (1e-7 = 1.68 steps of 2^-24)
  CHECK((values[2] >> 4) == 3);           // value 5 (2e-7 = 3.36)
  CHECK((values[3] & 0x0F) == 5);         // value 6 (3e-7 = 5.03)
  CHECK((values[3] >> 4) == 0);           // value 7 (-3) in the high nibble of byte 3
  CHECK((values[4] & 0x0F) == 5);         // value 8 (1.5 -> 4.5 -> 5, half away from zero)
  CHECK((values[4] >> 4) == 15);          // value 9 (12)
  const auto d = decode_all(v);
  CHECK(d[0] == 15.0f * s0);
  CHECK(std::fabs(d[0] - 0.25f) <= s0 / 2);
  CHECK(d[4] == std::ldexp(2.0f, -24));
  CHECK(f32_bits(d[6]) == 0u);
  CHECK(d[12] == -3.0f);
  CHECK(d[14] == 2.0f);
  CHECK(d[15] == 12.0f);
  CHECK(f32_bits(d[8]) == 0u);
}

TEST_CASE("int4_grid: code z is exactly 0, the step is at most 1/64 coarser, the fallback near 65504") {
  std::mt19937 rng(4242);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-30, 14);  // |x| < 2^14: M = −z·S fits f16
  for (int i = 0; i < 20000; ++i) {
    const float a = std::ldexp(u(rng), ex(rng)), b = std::ldexp(u(rng), ex(rng));
    const float mn = std::min(a, b), mx = std::max(a, b);
    CAPTURE(mn);
    CAPTURE(mx);
    const Int4Grid g = int4_grid(mn, mx);
    const float s = f16_to_f32(g.scale_f16), m = f16_to_f32(g.min_f16);
    REQUIRE(s > 0.0f);
    const float z = -m / s;
    REQUIRE(z == std::round(z));  // an integer zero code ...
    REQUIRE((z >= 0.0f && z <= 15.0f));
    REQUIRE(z * s + m == 0.0f);  // ... that decodes to exactly 0
    const double step = (double(std::max(mx, 0.0f)) - std::min(mn, 0.0f)) / 15.0;
    REQUIRE(s >= float(step) * (1 - 1e-7));  // covers the range
    if (s >= std::ldexp(1.0f, -14)) REQUIRE(s <= step * (1.0 + 1.0 / 64) * (1 + 1e-7));
    // Every value of [mn, mx] within half a step of the grid.
    REQUIRE(m <= mn + s / 2 * (1 + 1e-6));
    REQUIRE(m + 15 * s >= mx - s / 2 * (1 + 1e-6));
  }
  // Near the f16 limit M = −z·S would overflow: the grid over [mn, mx] as stored f16 values.
  // (z = 15, S = 4384: M = −65760.)
  const Int4Grid edge = int4_grid(-65504.0f, 0.5f);
  CHECK(f16_to_f32(edge.min_f16) == -65504.0f);
  CHECK(f16_to_f32(edge.scale_f16) == f16_to_f32(f32_to_f16(65504.5f / 15.0f)));
  const Int4Grid wide = int4_grid(-65504.0f, 65504.0f);  // z = 7: no fallback needed
  CHECK(f16_to_f32(wide.min_f16) == -7.0f * f16_to_f32(wide.scale_f16));
  CHECK_THROWS_AS(int4_grid(0.0f, 65520.0f), Error);
  CHECK_THROWS_AS(int4_grid(1.0f, 0.0f), Error);
  CHECK(int4_grid(0.0f, 0.0f).scale_f16 == 0x3C00);  // an all-zero (dense) group: scale 1, min 0
  CHECK(int4_grid(0.0f, 0.0f).min_f16 == 0);
}

TEST_CASE("quantizers refuse non-finite or out-of-f16-range input") {
  const std::vector<float> nan_row = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK_THROWS_WITH_AS(encode_tensor(nan_row.data(), {1, 2}, {Encoding::Dense, ValueType::I8, 0}),
                       doctest::Contains("int8 quantization needs finite values"), Error);
  CHECK_THROWS_WITH_AS(encode_tensor(nan_row.data(), {1, 2}, {Encoding::Bitmap, ValueType::I4, 2}),
                       doctest::Contains("int4 quantization needs finite values"), Error);
  const std::vector<float> big = {1.0f, 1e6f};
  CHECK_THROWS_WITH_AS(encode_tensor(big.data(), {1, 2}, {Encoding::Dense, ValueType::I4, 2}),
                       doctest::Contains("f16 range"), Error);
}

TEST_CASE("bitmap bit order and index, byte by byte") {
  // 2 x 70: row 0 has columns 0, 63, 64, 69; row 1 has column 1.
  std::vector<float> x(140, 0.0f);
  x[0] = 1, x[63] = 2, x[64] = 3, x[69] = 4, x[70 + 1] = 5;
  const EncodedTensor e = encode_tensor(x.data(), {2, 70}, {Encoding::Bitmap, ValueType::F32, 0});
  const TensorView v = view_of(e);
  CHECK(e.layout.words_per_row == 2);
  CHECK(e.layout.blocks_per_row == 1);
  CHECK(e.layout.bitmap_offset == 0);
  CHECK(e.layout.index_offset == 32);
  CHECK(e.layout.values_offset == 48);
  CHECK(e.bytes.size() == 48 + 5 * 4);
  CHECK(v.bitmap()[0] == ((1ull << 0) | (1ull << 63)));
  CHECK(v.bitmap()[1] == ((1ull << 0) | (1ull << 5)));
  CHECK(v.bitmap()[2] == (1ull << 1));
  CHECK(v.bitmap()[3] == 0);
  CHECK(v.index()[0] == 0);
  CHECK(v.index()[1] == 4);
  const float* values = reinterpret_cast<const float*>(v.values());
  CHECK(values[0] == 1);
  CHECK(values[3] == 4);
  CHECK(values[4] == 5);
}

TEST_CASE("index has one entry per (row, 4096-column block) counting values before it") {
  const uint64_t rows = 3, cols = 9000;  // 3 blocks per row
  auto x = random_tensor(rows * cols, 0.5, 77);
  const EncodedTensor e = encode_tensor(x.data(), {rows, cols}, {Encoding::Bitmap, ValueType::F16, 0});
  const TensorView v = view_of(e);
  REQUIRE(e.layout.blocks_per_row == 3);
  uint64_t count = 0;
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) {
      if (c % 4096 == 0) REQUIRE(v.index()[r * 3 + c / 4096] == count);
      count += x[r * cols + c] != 0.0f;
    }
  // Any row range decodes on its own.
  std::vector<float> row2(cols);
  decode_rows_f32(v, 2, 3, row2.data());
  const auto all = decode_all(v);
  CHECK(std::equal(row2.begin(), row2.end(), all.begin() + 2 * cols));
  CHECK_THROWS_AS(decode_rows_f32(v, 2, 4, row2.data()), Error);
}

TEST_CASE("validate_bitmap detects an inconsistent index, stray padding bits and a wrong nnz") {
  const uint64_t rows = 4, cols = 100;
  const auto x = random_tensor(rows * cols, 0.5, 5);
  const EncodedTensor good = encode_tensor(x.data(), {rows, cols}, {Encoding::Bitmap, ValueType::F16, 0});
  CHECK_NOTHROW(validate_bitmap(view_of(good), "t"));

  EncodedTensor bad_index = good;
  TensorView v = view_of(bad_index);
  const_cast<uint32_t*>(v.index())[2] += 1;
  CHECK_THROWS_WITH_AS(validate_bitmap(v, "model.endor: tensor 'w'"),
                       doctest::Contains("model.endor: tensor 'w': bitmap index entry (row 2, block 0)"), Error);

  EncodedTensor bad_pad = good;
  v = view_of(bad_pad);
  const_cast<uint64_t*>(v.bitmap())[1] |= 1ull << 63;  // column 127 of row 0 does not exist
  CHECK_THROWS_WITH_AS(validate_bitmap(v, "t"), doctest::Contains("bits set beyond column 99"), Error);

  EncodedTensor bad_bits = good;
  v = view_of(bad_bits);
  const_cast<uint64_t*>(v.bitmap())[3 * 2] ^= 1;  // flips a bit in the last row: count != nnz
  CHECK_THROWS_WITH_AS(validate_bitmap(v, "t"), doctest::Contains("set bits but nnz is"), Error);

  // The reference decoder itself never reads past the values, even on an unvalidated bitmap.
  EncodedTensor overfull = good;
  v = view_of(overfull);
  for (uint64_t w = 0; w < rows * 2; ++w) const_cast<uint64_t*>(v.bitmap())[w] = ~0ull;
  std::vector<float> out(rows * cols);
  CHECK_THROWS_AS(decode_rows_f32(v, 0, rows, out.data()), Error);
}

TEST_CASE("compute_layout: checked arithmetic and argument validation") {
  CHECK_THROWS_WITH_AS(compute_layout({}, Encoding::Dense, ValueType::F16, 0, 1), doctest::Contains("1 to 8 dimensions"),
                       Error);
  CHECK_THROWS_WITH_AS(compute_layout({3, 0}, Encoding::Dense, ValueType::F16, 0, 0), doctest::Contains(">= 1"), Error);
  CHECK_THROWS_WITH_AS(compute_layout({1ull << 33, 1ull << 33}, Encoding::Dense, ValueType::F16, 0, 0),
                       doctest::Contains("overflow"), Error);
  CHECK_THROWS_WITH_AS(compute_layout({1ull << 62, 2}, Encoding::Dense, ValueType::F32, 0, 1ull << 63),
                       doctest::Contains("overflow"), Error);
  CHECK_THROWS_WITH_AS(compute_layout({4, 4}, Encoding::Bitmap, ValueType::F16, 0, 17), doctest::Contains("exceeds"),
                       Error);
  CHECK_THROWS_WITH_AS(compute_layout({1ull << 20, 1ull << 13}, Encoding::Bitmap, ValueType::F16, 0, 1ull << 32),
                       doctest::Contains("2^32-1"), Error);
  CHECK_NOTHROW(compute_layout({1ull << 20, 1ull << 13}, Encoding::Bitmap, ValueType::F16, 0, (1ull << 32) - 1));
  CHECK_THROWS_WITH_AS(compute_layout({4, 4}, Encoding::Dense, ValueType::I4, 0, 16), doctest::Contains("group_size"),
                       Error);
  CHECK_THROWS_WITH_AS(compute_layout({4, 4}, Encoding::Dense, ValueType::I8, 128, 16), doctest::Contains("group_size"),
                       Error);
  // 1-D is one row; higher ranks fold into columns.
  const TensorLayout l1 = compute_layout({10}, Encoding::Bitmap, ValueType::F16, 0, 3);
  CHECK(l1.rows == 1);
  CHECK(l1.cols == 10);
  const TensorLayout l3 = compute_layout({2, 3, 5}, Encoding::Dense, ValueType::F32, 0, 30);
  CHECK(l3.rows == 2);
  CHECK(l3.cols == 15);
  CHECK(l3.total_bytes == 120);
  // Hand-computed: bitmap int4 g=4, 3 x 65, nnz 100: bitmap 48 | index @48 12 | values @64 50 |
  // scales @128 3*17*2=102 | mins @240 102 -> 342.
  const TensorLayout l = compute_layout({3, 65}, Encoding::Bitmap, ValueType::I4, 4, 100);
  CHECK(l.index_offset == 48);
  CHECK(l.values_offset == 64);
  CHECK(l.values_bytes == 50);
  CHECK(l.scales_offset == 128);
  CHECK(l.mins_offset == 240);
  CHECK(l.total_bytes == 342);
}

TEST_CASE("size targets of the design: f16 50% = 9/16 dense + <0.1% index; int4 g128 50% ~ 3.25 bits") {
  const uint64_t rows = 4096, cols = 4096, numel = rows * cols;
  const TensorLayout f16 = compute_layout({rows, cols}, Encoding::Bitmap, ValueType::F16, 0, numel / 2);
  const double dense_f16 = 2.0 * numel;
  CHECK(double(f16.bitmap_bytes + f16.values_bytes) / dense_f16 == doctest::Approx(9.0 / 16));
  CHECK(double(f16.index_bytes) / dense_f16 < 0.001);
  CHECK(double(f16.index_bytes) / dense_f16 == doctest::Approx(32.0 / 4096 / 16));  // 0.05 %
  const TensorLayout i8 = compute_layout({rows, cols}, Encoding::Bitmap, ValueType::I8, 0, numel / 2);
  CHECK(double(i8.total_bytes) / numel == doctest::Approx(0.625).epsilon(0.002));  // 62.5 % of dense int8
  const TensorLayout i4 = compute_layout({rows, cols}, Encoding::Bitmap, ValueType::I4, 128, numel / 2);
  const double bits_per_weight = 8.0 * double(i4.total_bytes) / numel;
  CHECK(bits_per_weight == doctest::Approx(4 * 0.5 + 1 + 32.0 / 128 + 32.0 / 4096));
  CHECK(bits_per_weight < 3.26);
}
