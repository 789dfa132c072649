// Whole-tensor and row decoders (cpu::decode_f32, cpu::decode_u16, Backend::embed) must give
// bit-identical values to the reference decoder, on both instruction sets, for every encoding,
// value type, int4/int8g group size and sparsity, at shapes that hit every partial word and block.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>

#include "kernel_test_util.h"

using namespace endor;
using namespace endor::ktest;

namespace {

struct Shape {
  uint64_t rows, cols;
};
const Shape kShapes[] = {{1, 1}, {3, 63}, {2, 64}, {65, 65}, {7, 127}, {3, 4097}, {2, 5000}, {1, 8200}};
const double kSparsities[] = {0.0, 0.5, 0.9, 1.0};
const uint32_t kGroupSizes[] = {1, 7, 24, 32, 64, 128};
const ValueType kValueTypes[] = {ValueType::F16, ValueType::BF16, ValueType::F32, ValueType::I8, ValueType::I4, ValueType::I8G};

std::vector<cpu::Isa> isas() {
  std::vector<cpu::Isa> v{cpu::Isa::Portable};
  if (cpu::cpu_has_avx2()) v.push_back(cpu::Isa::Avx2);
  return v;
}

std::vector<float> reference_decode(const TensorView& v) {
  std::vector<float> out(v.layout.rows * v.layout.cols);
  decode_rows_f32(v, 0, v.layout.rows, out.data());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("decode_f32 is bit-identical to decode_rows_f32") {
  uint32_t seed = 100;
  for (cpu::Isa isa : isas())
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
      for (ValueType vt : kValueTypes)
        for (const Shape& s : kShapes)
          for (double sp : kSparsities) {
              ++seed;
              const uint32_t g = kGroupSizes[seed % std::size(kGroupSizes)];  // every size, across cases
              const Int4Params ip = (seed / 2) % 2 ? Int4Params::Coded6 : Int4Params::F16;  // int4k: every other
              const EncodedWeight ew = encode(random_weights(s.rows, s.cols, sp, seed), s.rows, s.cols, enc, vt, g, ip);
              const TensorView v = ew.view();
              std::vector<float> got(s.rows * s.cols, 777.0f);
              cpu::decode_f32(v, got.data(), 2, isa);
              CAPTURE(int(ip));
              CAPTURE(int(isa));
              CAPTURE(to_string(enc));
              CAPTURE(to_string(vt));
              CAPTURE(s.rows);
              CAPTURE(s.cols);
              CAPTURE(sp);
              CAPTURE(g);
              CHECK(same_bits(got, reference_decode(v)));
            }
}

TEST_CASE("decode_u16 gives the stored 16-bit values with +0 for absent elements") {
  for (cpu::Isa isa : isas())
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
      for (ValueType vt : {ValueType::F16, ValueType::BF16})
        for (const Shape& s : kShapes) {
          const EncodedWeight ew = encode(random_weights(s.rows, s.cols, 0.5, 7), s.rows, s.cols, enc, vt);
          const TensorView v = ew.view();
          const std::vector<float> ref = reference_decode(v);
          std::vector<uint16_t> got(ref.size(), 0xDEAD);
          cpu::decode_u16(v, got.data(), 2, isa);
          size_t bad = 0;
          for (size_t i = 0; i < ref.size(); ++i) {
            // Every decoded value came from a 16-bit value, so converting back is exact.
            const uint16_t want = ref[i] == 0.0f && std::signbit(ref[i]) == false
                                      ? uint16_t(0)
                                      : (vt == ValueType::F16 ? f32_to_f16(ref[i]) : f32_to_bf16(ref[i]));
            bad += got[i] != want;
          }
          CAPTURE(to_string(enc));
          CAPTURE(to_string(vt));
          CAPTURE(s.rows);
          CAPTURE(s.cols);
          CHECK(bad == 0);
        }
}

TEST_CASE("decode_u16 refuses value types that are not 16-bit floats") {
  for (ValueType vt : {ValueType::F32, ValueType::I8, ValueType::I4}) {
    const EncodedWeight ew = encode(random_weights(2, 10, 0.5, 3), 2, 10, Encoding::Bitmap, vt, 32);
    std::vector<uint16_t> out(20);
    CHECK_THROWS_AS(cpu::decode_u16(ew.view(), out.data()), Error);
  }
}

TEST_CASE("embed decodes exactly the requested rows and rejects ids out of range") {
  const uint64_t rows = 37, cols = 130;
  const std::vector<int32_t> ids = {0, 36, 5, 5, 17, 1, 35};
  for (cpu::Isa isa : isas())
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
      for (ValueType vt : kValueTypes) {
        cpu::Options opt;
        opt.isa = isa;
        auto backend = make_cpu_backend(opt);
        const EncodedWeight ew = encode(random_weights(rows, cols, 0.5, 11), rows, cols, enc, vt, 32);
        const std::vector<float> ref = reference_decode(ew.view());
        auto table = backend->prepare_weight(ew.view());
        std::vector<float> out(ids.size() * cols, 5.0f);
        backend->embed(*table, ids.data(), ids.size(), out.data());
        std::vector<float> want;
        for (int32_t id : ids) want.insert(want.end(), ref.begin() + id * cols, ref.begin() + (id + 1) * cols);
        CAPTURE(to_string(enc));
        CAPTURE(to_string(vt));
        CHECK(same_bits(out, want));
        const int32_t bad_hi = int32_t(rows), bad_lo = -1;
        CHECK_THROWS_AS(backend->embed(*table, &bad_hi, 1, out.data()), Error);
        CHECK_THROWS_AS(backend->embed(*table, &bad_lo, 1, out.data()), Error);
      }
}

TEST_CASE("prepare_weight rejects a bitmap index that runs backwards or past nnz") {
  auto backend = make_cpu_backend();
  EncodedWeight ew = encode(random_weights(4, 5000, 0.5, 2), 4, 5000, Encoding::Bitmap, ValueType::F16);
  CHECK_NOTHROW(backend->prepare_weight(ew.view()));
  const TensorLayout& L = ew.enc.layout;
  uint32_t* index = reinterpret_cast<uint32_t*>(ew.enc.bytes.data() + L.index_offset);
  const uint32_t saved = index[3];
  index[3] = index[2] - 1;  // backwards
  CHECK_THROWS_AS(backend->prepare_weight(ew.view()), Error);
  index[3] = uint32_t(L.nnz + 1);  // past nnz
  CHECK_THROWS_AS(backend->prepare_weight(ew.view()), Error);
  index[3] = saved;
  CHECK_NOTHROW(backend->prepare_weight(ew.view()));
}

TEST_CASE("f16/bf16 subnormals, extremes, infinities and NaN decode bit-exactly") {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> special = {0.0f,   -0.0f,    5.96e-8f, -5.96e-8f, 3.0e-5f, 6.0e-5f, 6.104e-5f, 1.0f,
                                -2.5f,  65504.0f, -65504.0f, inf,      -inf,    std::nanf(""), 1e-30f, 3.0e38f};
  const uint64_t rows = 3, cols = 37;  // odd width: every lane position and the scalar tail
  std::vector<float> w(rows * cols);
  for (size_t i = 0; i < w.size(); ++i) w[i] = special[(i * 7) % special.size()];
  for (cpu::Isa isa : isas())
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
      for (ValueType vt : {ValueType::F16, ValueType::BF16, ValueType::F32}) {
        const EncodedWeight ew = encode(w, rows, cols, enc, vt);
        std::vector<float> got(rows * cols);
        cpu::decode_f32(ew.view(), got.data(), 1, isa);
        CAPTURE(int(isa));
        CAPTURE(to_string(enc));
        CAPTURE(to_string(vt));
        CHECK(same_bits(got, reference_decode(ew.view())));
      }
}
