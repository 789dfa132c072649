// Batch invariance of the CUDA backend (cuda::Options::batch_invariant, the default): each row of
// linear() is what a one-token call of that row gives, bit for bit, at every token count (the
// fused kernels at any T instead of DecodeGemm's cuBLAS, whose per-row result depends on the
// GEMM's shape), on every weight form; attention gives a query the same output whatever other
// queries of its sequence share the call. Runs on a GPU, and on the CPU under tests/cuemu.
#include "cuda_test_util.h"

using namespace endor;
using namespace endor::cudatest;

namespace {

struct Form {
  const char* name;
  Encoding enc;
  ValueType vt;
  uint32_t group;
  Int4Params ip;
};
const Form kForms[] = {
    {"dense f32", Encoding::Dense, ValueType::F32, 0, Int4Params::F16},
    {"dense f16", Encoding::Dense, ValueType::F16, 0, Int4Params::F16},
    {"bitmap bf16", Encoding::Bitmap, ValueType::BF16, 0, Int4Params::F16},
    {"dense int8", Encoding::Dense, ValueType::I8, 0, Int4Params::F16},
    {"bitmap int8", Encoding::Bitmap, ValueType::I8, 0, Int4Params::F16},
    {"bitmap int8g", Encoding::Bitmap, ValueType::I8G, 32, Int4Params::F16},
    {"dense int4", Encoding::Dense, ValueType::I4, 128, Int4Params::F16},
    {"bitmap int4", Encoding::Bitmap, ValueType::I4, 64, Int4Params::F16},
    {"bitmap int4k", Encoding::Bitmap, ValueType::I4, 32, Int4Params::Coded6},
};
constexpr uint64_t kRows = 37, kCols = 320;
const size_t kTokenCounts[] = {1, 2, 3, 5, 8, 9, 17, 40};
constexpr size_t kMaxT = 40;

}  // namespace

GPU_TEST_CASE("cuda batch invariance: linear() gives each row what a one-token call of that row gives, any T") {
  REQUIRE_GPU();
  auto b = make_cuda_backend(cuda::Options{});
  const auto x = random_normal(kMaxT * kCols, 3);
  const auto bias = random_normal(kRows, 4);
  DeviceFloats dx(*b, x), dbias(*b, bias);
  for (const Form& f : kForms) {
    const EncodedWeight ew = encode(random_weights(kRows, kCols, f.enc == Encoding::Bitmap ? 0.5 : 0.0, 7), kRows, kCols,
                                    f.enc, f.vt, f.group ? f.group : kDefaultGroupSize, f.ip);
    auto w = b->prepare_weight(ew.view());
    DeviceFloats alone_d(*b, kMaxT * kRows);
    for (size_t t = 0; t < kMaxT; ++t) b->linear(*w, dx.get() + t * kCols, 1, dbias.get(), alone_d.get() + t * kRows);
    const std::vector<float> alone = alone_d.download();
    for (size_t T : kTokenCounts) {
      const size_t t0 = T == kMaxT ? 0 : (T * 3) % (kMaxT - T);
      DeviceFloats y(*b, T * kRows);
      b->linear(*w, dx.get() + t0 * kCols, T, dbias.get(), y.get());
      const std::vector<float> got = y.download();
      const std::string what = std::string(f.name) + ", T = " + std::to_string(T);
      CAPTURE(what);
      CHECK(std::memcmp(got.data(), alone.data() + t0 * kRows, got.size() * 4) == 0);
    }
  }
}

GPU_TEST_CASE("cuda batch invariance: the fast path (batch_invariant = false) differs, so the check above can fail") {
  REQUIRE_GPU();
  cuda::Options o;
  o.batch_invariant = false;  // T = 17 takes DecodeGemm (cuBLAS)
  auto b = make_cuda_backend(o);
  const auto x = random_normal(17 * kCols, 5);
  DeviceFloats dx(*b, x);
  const EncodedWeight ew = encode(random_weights(kRows, kCols, 0.0, 8), kRows, kCols, Encoding::Dense, ValueType::F32);
  auto w = b->prepare_weight(ew.view());
  DeviceFloats alone(*b, 17 * kRows), y(*b, 17 * kRows);
  for (size_t t = 0; t < 17; ++t) b->linear(*w, dx.get() + t * kCols, 1, nullptr, alone.get() + t * kRows);
  b->linear(*w, dx.get(), 17, nullptr, y.get());
  const auto a = alone.download(), g = y.download();
  CHECK(std::memcmp(a.data(), g.data(), a.size() * 4) != 0);
}

GPU_TEST_CASE("cuda batch invariance: attention gives a query the same output in any chunk of its sequence") {
  REQUIRE_GPU();
  auto b = make_cuda_backend(cuda::Options{});
  struct Case {
    uint32_t nh, nkv, hd, window;
    size_t n_ctx;
  };
  for (const Case& c : {Case{9, 3, 64, 0, 70}, Case{4, 2, 128, 16, 50}}) {
    AttentionParams p;
    p.n_heads = c.nh;
    p.n_kv_heads = c.nkv;
    p.head_dim = c.hd;
    p.scale = float(1.0 / std::sqrt(double(c.hd)));
    p.sliding_window = c.window;
    const size_t qd = size_t(c.nh) * c.hd, kvd = size_t(c.nkv) * c.hd;
    DeviceFloats q(*b, random_normal(c.n_ctx * qd, 1)), k(*b, random_normal(c.n_ctx * kvd, 2)),
        v(*b, random_normal(c.n_ctx * kvd, 3));
    DeviceFloats alone(*b, c.n_ctx * qd);
    for (size_t pos = 0; pos < c.n_ctx; ++pos)
      b->attention(q.get() + pos * qd, k.get(), v.get(), pos, 1, p, alone.get() + pos * qd);
    const std::vector<float> want = alone.download();
    for (size_t chunk : {size_t(3), size_t(16), c.n_ctx}) {
      DeviceFloats out(*b, c.n_ctx * qd);
      for (size_t p0 = 0; p0 < c.n_ctx; p0 += chunk)
        b->attention(q.get() + p0 * qd, k.get(), v.get(), p0, std::min(chunk, c.n_ctx - p0), p, out.get() + p0 * qd);
      const std::string what = "heads " + std::to_string(c.nh) + ", chunks of " + std::to_string(chunk);
      CAPTURE(what);
      const std::vector<float> got = out.download();
      CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
    }
  }
}
