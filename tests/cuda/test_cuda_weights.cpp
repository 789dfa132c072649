// Whole-tensor decode and embedding lookup on the GPU against the reference decoder
// (decode_rows_f32), bit for bit: f32 output must be the reference's value, f16/bf16 output that
// value rounded to nearest even (format.h's f32_to_f16 / f32_to_bf16). Every encoding × value
// type × sparsity, on shapes with one and several 4096-column index blocks, ragged last bitmap
// words and single rows/columns, and every int4/int8g group-size path (< 32, multiple of 32 but not
// of 64, larger than an index block; int8g also 16 and 48, multiples of 16 but not of 32).
#include "cuda_test_util.h"

using namespace endor;
using namespace endor::cudatest;

namespace {

struct Shape {
  uint64_t rows, cols;
};
const Shape kShapes[] = {{1, 1}, {3, 3}, {65, 127}, {127, 65}, {3, 4097}, {2, 8193}, {4097, 3}, {1, 12288}, {17, 4096}};
const double kSparsities[] = {0.0, 0.5, 0.9, 1.0};
const ValueType kValueTypes[] = {ValueType::F16, ValueType::BF16, ValueType::F32,
                                 ValueType::I8,  ValueType::I4,   ValueType::I8G};
const uint32_t kGroupSizes[] = {1, 7, 32, 96, 128, 5000};
const uint32_t kInt8gGroupSizes[] = {1, 7, 16, 32, 48, 128, 5000};

// The group sizes a value type is decoded with (0: the type has no groups).
std::vector<uint32_t> group_sizes(ValueType vt) {
  if (vt == ValueType::I4) return {std::begin(kGroupSizes), std::end(kGroupSizes)};
  if (vt == ValueType::I8G) return {std::begin(kInt8gGroupSizes), std::end(kInt8gGroupSizes)};
  return {0};
}

// Decodes `ew` on the GPU to f32, f16 and bf16 and counts elements whose bits differ from the
// reference. Returns {f32 mismatches, f16 mismatches, bf16 mismatches}.
struct Mismatches {
  size_t f32 = 0, f16 = 0, bf16 = 0;
};
Mismatches decode_mismatches(Backend& b, const EncodedWeight& ew) {
  const TensorView v = ew.view();
  const uint64_t n = v.layout.rows * v.layout.cols;
  std::vector<float> ref(n);
  decode_rows_f32(v, 0, v.layout.rows, ref.data());
  auto w = b.prepare_weight(v);
  Mismatches m;

  DeviceFloats out32(b, n);
  cuda::decode_to_f32(b, *w, out32.get());
  const std::vector<float> got32 = out32.download();
  for (uint64_t i = 0; i < n; ++i) m.f32 += bits(got32[i]) != bits(ref[i]);

  void* out16 = cuda::alloc_bytes(b, n * 2);
  std::vector<uint16_t> got16(n);
  cuda::decode_to_f16(b, *w, static_cast<uint16_t*>(out16));
  cuda::download_bytes(b, got16.data(), out16, n * 2);
  for (uint64_t i = 0; i < n; ++i) m.f16 += got16[i] != f32_to_f16(ref[i]);
  cuda::decode_to_bf16(b, *w, static_cast<uint16_t*>(out16));
  cuda::download_bytes(b, got16.data(), out16, n * 2);
  for (uint64_t i = 0; i < n; ++i) m.bf16 += got16[i] != f32_to_bf16(ref[i]);
  cuda::free_bytes(b, out16);
  return m;
}

}  // namespace

GPU_TEST_CASE("cuda decode: every encoding, value type, shape and sparsity is bit-exact") {
  REQUIRE_GPU();
  auto b = make_cuda_backend();
  uint32_t seed = 100;
  for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
    for (ValueType vt : kValueTypes)
      for (const Shape& s : kShapes)
        for (double sp : kSparsities) {
          if (enc == Encoding::Dense && sp > 0.5) continue;  // dense stores zeros like any value
          const auto w = random_weights(s.rows, s.cols, sp, ++seed);
          for (uint32_t g : group_sizes(vt)) {
            const Int4Params ip = (seed + g) % 2 ? Int4Params::Coded6 : Int4Params::F16;  // int4k: about half
            CAPTURE(int(ip));
            CAPTURE(to_string(enc));
            CAPTURE(to_string(vt));
            CAPTURE(s.rows);
            CAPTURE(s.cols);
            CAPTURE(sp);
            CAPTURE(g);
            const Mismatches m = decode_mismatches(*b, encode(w, s.rows, s.cols, enc, vt, g, ip));
            CHECK(m.f32 == 0);
            CHECK(m.f16 == 0);
            CHECK(m.bf16 == 0);
          }
        }
}

GPU_TEST_CASE("cuda decode: an 11008 x 4096 weight is bit-exact (int4 g128, int8, int8g g32, f16 at 50 %)") {
  REQUIRE_GPU();
  auto b = make_cuda_backend();
  const uint64_t rows = 11008, cols = 4096;
  const auto w = random_weights(rows, cols, 0.5, 7);
  for (ValueType vt : {ValueType::I4, ValueType::I8, ValueType::I8G, ValueType::F16}) {
    CAPTURE(to_string(vt));
    const Mismatches m = decode_mismatches(*b, encode(w, rows, cols, Encoding::Bitmap, vt, vt == ValueType::I8G ? 32 : 128));
    CHECK(m.f32 == 0);
    CHECK(m.f16 == 0);
    CHECK(m.bf16 == 0);
  }
}

GPU_TEST_CASE("cuda embed: gathered rows are the reference decoder's, bit for bit; bad ids are refused") {
  REQUIRE_GPU();
  auto b = make_cuda_backend();
  const uint64_t rows = 1000, cols = 4097;  // two index blocks per row, a ragged last word
  const auto table = random_weights(rows, cols, 0.5, 11);
  std::vector<int32_t> ids = {0, 999, 5, 5, 123, 999, 0};
  for (int i = 0; i < 300; ++i) ids.push_back(int32_t((i * 7919) % rows));
  for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
    for (ValueType vt : kValueTypes) {
      CAPTURE(to_string(enc));
      CAPTURE(to_string(vt));
      const EncodedWeight ew = encode(table, rows, cols, enc, vt, 32);
      auto w = b->prepare_weight(ew.view());
      DeviceFloats out(*b, ids.size() * cols);
      b->embed(*w, ids.data(), ids.size(), out.get());
      const std::vector<float> got = out.download();
      std::vector<float> ref(cols);
      size_t differ = 0;
      for (size_t t = 0; t < ids.size(); ++t) {
        decode_rows_f32(ew.view(), uint64_t(ids[t]), uint64_t(ids[t]) + 1, ref.data());
        for (uint64_t c = 0; c < cols; ++c) differ += bits(got[t * cols + c]) != bits(ref[c]);
      }
      CHECK(differ == 0);

      const int32_t negative[] = {3, -1};
      const int32_t past_end[] = {int32_t(rows)};
      CHECK_THROWS_AS(b->embed(*w, negative, 2, out.get()), Error);
      CHECK_THROWS_AS(b->embed(*w, past_end, 1, out.get()), Error);
      b->embed(*w, ids.data(), 0, out.get());  // no tokens: nothing to do, no error
    }
}

// cuda::make_weight_at (streamed blocks): a weight over bytes the caller keeps in device memory binds
// the same sections as an uploaded one (int8g's f16 group scales included): its decode is the
// reference's bit for bit and its products equal the uploaded weight's bit for bit. A device address
// that is not 16-byte aligned is refused.
GPU_TEST_CASE("cuda make_weight_at: a caller's device blob decodes and multiplies like an uploaded weight") {
  REQUIRE_GPU();
  auto b = make_cuda_backend();
  const uint64_t rows = 37, cols = 2080;
  const size_t T = 3;
  const std::vector<float> x = random_normal(T * cols, 17);
  DeviceFloats dx(*b, x), y_uploaded(*b, T * rows), y_streamed(*b, T * rows), decoded(*b, rows * cols);
  uint32_t seed = 60;
  for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
    for (ValueType vt : kValueTypes) {
      CAPTURE(to_string(enc));
      CAPTURE(to_string(vt));
      const auto wf = random_weights(rows, cols, enc == Encoding::Bitmap ? 0.5 : 0.0, ++seed);
      const EncodedWeight ew = encode(wf, rows, cols, enc, vt, vt == ValueType::I8G ? 32 : 128);
      const TensorView v = ew.view();
      // The blob in device memory (alloc is 256-byte aligned), with the 16 readable bytes past its end.
      std::vector<float> host((v.layout.total_bytes + 16 + 3) / 4, 0.0f);
      std::memcpy(host.data(), v.data, v.layout.total_bytes);
      DeviceFloats blob(*b, host);
      auto uploaded = b->prepare_weight(v);
      auto streamed = cuda::make_weight_at(*b, v, blob.get());
      b->linear(*uploaded, dx.get(), T, nullptr, y_uploaded.get());
      b->linear(*streamed, dx.get(), T, nullptr, y_streamed.get());
      const std::vector<float> a = y_uploaded.download(), s = y_streamed.download();
      size_t differ = 0;
      for (size_t i = 0; i < a.size(); ++i) differ += bits(a[i]) != bits(s[i]);
      CHECK(differ == 0);
      cuda::decode_to_f32(*b, *streamed, decoded.get());
      const std::vector<float> got = decoded.download();
      std::vector<float> ref(rows * cols);
      decode_rows_f32(v, 0, rows, ref.data());
      size_t wrong = 0;
      for (size_t i = 0; i < ref.size(); ++i) wrong += bits(got[i]) != bits(ref[i]);
      CHECK(wrong == 0);
      CHECK_THROWS_AS(cuda::make_weight_at(*b, v, reinterpret_cast<const uint8_t*>(blob.get()) + 4), Error);
    }
}
