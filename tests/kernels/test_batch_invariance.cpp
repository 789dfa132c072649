// Batch invariance of the CPU backend (cpu::Options::batch_invariant, the default): a row's result
// does not depend on the other rows of the call, on the token count T (the fused 1..8-token
// kernels, blocks of 8 above that, the counts where the fast path would take row-decode or a GEMM),
// nor on the number of threads, bit for bit, on every weight form, instruction set and arithmetic
// (int8/f16/f32 activations); and attention gives a query the same output whatever other queries
// of its sequence are computed in the same call. This is what makes a sequence's greedy ids
// independent of the batch it is served in (tests/server/test_batch_invariance.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernel_test_util.h"

using namespace endor;
using namespace endor::ktest;

namespace {

struct Form {
  const char* name;
  Encoding enc;
  ValueType vt;
  uint32_t group;
  Int4Params ip;
  uint64_t cols;
};
// Every value type dense and bitmap; int4 in groups of 64, 128 and 256 (the AVX-512 kernels), of 96
// and int4k's 32 (handed to AVX2 by the AVX-512 set), int8g at Q8_0's 32, 64, 128 (the AVX-512
// one-token kernels) and 96 (the portable fallback); f16/bf16 bitmap rows over 4096 columns (f16
// activations) and under (f32 ones). Batch invariance runs the fused kernels in blocks of as many
// tokens as keep a token's one-token arithmetic (linear.cpp, fused_block): a form whose kernel
// changes its arithmetic with the token count inside such a block fails here.
const Form kForms[] = {
    {"dense f32", Encoding::Dense, ValueType::F32, 0, Int4Params::F16, 200},
    {"dense f16", Encoding::Dense, ValueType::F16, 0, Int4Params::F16, 200},
    // f16 x widened once for a block of tokens (linear.cpp), in row runs shorter than a thread's range
    {"dense f16 1024", Encoding::Dense, ValueType::F16, 0, Int4Params::F16, 1024},
    {"dense bf16", Encoding::Dense, ValueType::BF16, 0, Int4Params::F16, 200},
    {"dense int8", Encoding::Dense, ValueType::I8, 0, Int4Params::F16, 200},
    {"dense int8g", Encoding::Dense, ValueType::I8G, 32, Int4Params::F16, 192},
    {"dense int4", Encoding::Dense, ValueType::I4, 128, Int4Params::F16, 256},
    {"dense int4k", Encoding::Dense, ValueType::I4, 32, Int4Params::Coded6, 192},
    {"bitmap f32", Encoding::Bitmap, ValueType::F32, 0, Int4Params::F16, 200},
    {"bitmap f16", Encoding::Bitmap, ValueType::F16, 0, Int4Params::F16, 200},
    {"bitmap f16 wide", Encoding::Bitmap, ValueType::F16, 0, Int4Params::F16, 4160},
    {"bitmap bf16 wide", Encoding::Bitmap, ValueType::BF16, 0, Int4Params::F16, 4160},
    {"bitmap int8", Encoding::Bitmap, ValueType::I8, 0, Int4Params::F16, 200},
    {"bitmap int8g", Encoding::Bitmap, ValueType::I8G, 32, Int4Params::F16, 192},
    {"bitmap int8g/96", Encoding::Bitmap, ValueType::I8G, 96, Int4Params::F16, 192},
    {"dense int4/64", Encoding::Dense, ValueType::I4, 64, Int4Params::F16, 320},
    {"dense int8g/128", Encoding::Dense, ValueType::I8G, 128, Int4Params::F16, 256},
    {"bitmap int8g/64", Encoding::Bitmap, ValueType::I8G, 64, Int4Params::F16, 320},
    {"bitmap int4/64", Encoding::Bitmap, ValueType::I4, 64, Int4Params::F16, 256},
    {"bitmap int4/128", Encoding::Bitmap, ValueType::I4, 128, Int4Params::F16, 4160},
    {"bitmap int4/256", Encoding::Bitmap, ValueType::I4, 256, Int4Params::F16, 512},
    {"bitmap int4/96", Encoding::Bitmap, ValueType::I4, 96, Int4Params::F16, 288},
    {"bitmap int4k", Encoding::Bitmap, ValueType::I4, 32, Int4Params::Coded6, 192},
};
constexpr uint64_t kRows = 67;  // not a multiple of any kernel's row block nor of the threads' chunks
// Token counts: every fused count, blocks of 8 with a remainder, and counts where the fast path
// would take row-decode (17) or a GEMM (64 for f16/bf16/f32, 300 for every weight).
const size_t kTokenCounts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 64, 300};
constexpr size_t kMaxT = 300;

// Rows of x differ in scale (1/8 to 8) so that each token's activation quantization differs, and
// token 5 holds a value beyond f16's range: a call with it keeps f32 x for that token only.
std::vector<float> make_x(uint64_t cols, uint32_t seed) {
  std::vector<float> x = random_activations(kMaxT * cols, seed);
  for (size_t t = 0; t < kMaxT; ++t)
    for (uint64_t c = 0; c < cols; ++c) x[t * cols + c] *= std::ldexp(1.0f, int(t % 7) - 3);
  x[5 * cols + 3] = 1.0e6f;
  return x;
}

std::string label(const Form& f, cpu::Isa isa, bool exact) {
  return std::string(f.name) + ", " + isa_name(isa) + (exact ? ", exact" : ", default arithmetic");
}

}  // namespace

TEST_CASE("batch invariance: linear() gives each row what a one-token call of that row gives, any T, any threads") {
  for (cpu::Isa isa : cpu_isas())
    for (bool exact : {false, true})
      for (const Form& f : kForms) {
        const uint64_t cols = f.cols;
        const auto w = random_weights(kRows, cols, f.enc == Encoding::Bitmap ? 0.5 : 0.0, uint32_t(cols + kRows));
        const EncodedWeight ew = encode(w, kRows, cols, f.enc, f.vt, f.group ? f.group : kDefaultGroupSize, f.ip);
        const std::vector<float> x = make_x(cols, uint32_t(cols));
        const std::vector<float> bias = random_activations(kRows, 3);
        // The reference: every token alone, on one thread.
        std::vector<float> alone(kMaxT * kRows);
        {
          cpu::Options opt;
          opt.isa = isa;
          opt.exact = exact;
          opt.n_threads = 1;
          auto b = make_cpu_backend(opt);
          auto wt = b->prepare_weight(ew.view());
          for (size_t t = 0; t < kMaxT; ++t) b->linear(*wt, x.data() + t * cols, 1, bias.data(), alone.data() + t * kRows);
        }
        for (int threads : {1, 2}) {
          cpu::Options opt;
          opt.isa = isa;
          opt.exact = exact;
          opt.n_threads = threads;
          auto b = make_cpu_backend(opt);
          auto wt = b->prepare_weight(ew.view());
          for (size_t T : kTokenCounts) {
            // Rows [t0, t0 + T) of x: not always the first ones.
            const size_t t0 = T == kMaxT ? 0 : (T * 7) % (kMaxT - T);
            std::vector<float> y(T * kRows, -1.0f);
            b->linear(*wt, x.data() + t0 * cols, T, bias.data(), y.data());
            size_t bad = 0, first = 0;
            for (size_t t = 0; t < T; ++t)
              if (std::memcmp(y.data() + t * kRows, alone.data() + (t0 + t) * kRows, kRows * 4) != 0 && bad++ == 0)
                first = t0 + t;
            const std::string what = label(f, isa, exact) + ", " + std::to_string(threads) + " threads, T = " +
                                     std::to_string(T) + ": first differing token " + std::to_string(first);
            CAPTURE(what);
            CHECK(bad == 0);
          }
        }
      }
}

TEST_CASE("batch invariance: linear_group gives each row what a one-token linear() gives, any T, any threads") {
  // q/k/v-like: three weights of one width in different forms (one group shares x's quantization
  // and its f16 rounding).
  const uint64_t cols = 4160;
  const uint64_t rows[] = {40, 16, 24};
  const Form forms[] = {{"bitmap int4", Encoding::Bitmap, ValueType::I4, 64, Int4Params::F16, cols},
                        {"dense int8", Encoding::Dense, ValueType::I8, 0, Int4Params::F16, cols},
                        {"bitmap f16 wide", Encoding::Bitmap, ValueType::F16, 0, Int4Params::F16, cols}};
  const std::vector<float> x = make_x(cols, 11);
  std::vector<EncodedWeight> enc;
  for (size_t i = 0; i < 3; ++i)
    enc.push_back(encode(random_weights(rows[i], cols, 0.5, uint32_t(20 + i)), rows[i], cols, forms[i].enc,
                         forms[i].vt, forms[i].group ? forms[i].group : kDefaultGroupSize, forms[i].ip));
  for (cpu::Isa isa : cpu_isas())
    for (bool exact : {false, true}) {
      cpu::Options opt;
      opt.isa = isa;
      opt.exact = exact;
      opt.n_threads = 1;
      auto one = make_cpu_backend(opt);
      opt.n_threads = 2;
      auto two = make_cpu_backend(opt);
      std::vector<std::unique_ptr<Weight>> w1, w2;
      for (const EncodedWeight& e : enc) {
        w1.push_back(one->prepare_weight(e.view()));
        w2.push_back(two->prepare_weight(e.view()));
      }
      std::vector<std::vector<float>> alone(3);
      for (size_t i = 0; i < 3; ++i) {
        alone[i].resize(kMaxT * rows[i]);
        for (size_t t = 0; t < kMaxT; ++t)
          one->linear(*w1[i], x.data() + t * cols, 1, nullptr, alone[i].data() + t * rows[i]);
      }
      for (Backend* b : {one.get(), two.get()})
        for (size_t T : {size_t(3), size_t(8), size_t(17), size_t(300)}) {
          std::vector<std::vector<float>> y(3);
          std::vector<Backend::LinearTarget> targets;
          for (size_t i = 0; i < 3; ++i) {
            y[i].assign(T * rows[i], -1.0f);
            targets.push_back({(b == one.get() ? w1 : w2)[i].get(), nullptr, y[i].data()});
          }
          b->linear_group(targets.data(), 3, x.data(), T);
          for (size_t i = 0; i < 3; ++i) {
            const std::string what = std::string(forms[i].name) + ", " + isa_name(isa) + (exact ? ", exact, " : ", ") +
                                     b->name() + ", T = " + std::to_string(T);
            CAPTURE(what);
            CHECK(std::memcmp(y[i].data(), alone[i].data(), y[i].size() * 4) == 0);
          }
        }
    }
}

TEST_CASE("batch invariance: the fast path (batch_invariant = false) is what differs, so the test above can fail") {
  // Dense f32 at T = 64 takes the GEMM on the fast path: its rows are not the one-token kernel's.
  const uint64_t cols = 512, rows = 96;
  const EncodedWeight ew = encode(random_weights(rows, cols, 0.0, 5), rows, cols, Encoding::Dense, ValueType::F32);
  const std::vector<float> x = random_activations(64 * cols, 6);
  cpu::Options opt;
  opt.n_threads = 1;
  opt.exact = true;
  opt.batch_invariant = false;
  auto b = make_cpu_backend(opt);
  auto wt = b->prepare_weight(ew.view());
  std::vector<float> y(64 * rows), alone(64 * rows);
  b->linear(*wt, x.data(), 64, nullptr, y.data());
  for (size_t t = 0; t < 64; ++t) b->linear(*wt, x.data() + t * cols, 1, nullptr, alone.data() + t * rows);
  CHECK(std::memcmp(y.data(), alone.data(), y.size() * 4) != 0);
}

namespace {

struct AttnCase {
  uint32_t nh, nkv, hd, window;
  size_t n_ctx;
};

// out[pos] for every position of one sequence, each query computed alone (T = 1 at n_past = pos).
std::vector<float> attention_alone(Backend& b, const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, const std::vector<uint16_t>* k16,
                                   const std::vector<uint16_t>* v16, const AttnCase& c, const AttentionParams& p) {
  const size_t qd = size_t(c.nh) * c.hd;
  std::vector<float> out(c.n_ctx * qd, 9.0f);
  for (size_t pos = 0; pos < c.n_ctx; ++pos) {
    if (k16) b.attention_f16(q.data() + pos * qd, k16->data(), v16->data(), pos, 1, p, out.data() + pos * qd);
    else b.attention(q.data() + pos * qd, k.data(), v.data(), pos, 1, p, out.data() + pos * qd);
  }
  return out;
}

}  // namespace

TEST_CASE("batch invariance: attention gives a query the same output whatever other queries share the call") {
  const AttnCase cases[] = {{9, 3, 64, 0, 150}, {4, 4, 32, 0, 70}, {6, 2, 16, 24, 90}, {8, 8, 128, 0, 40}};
  for (const AttnCase& c : cases) {
    const AttentionParams p = attention_params(c.nh, c.nkv, c.hd, c.window);
    const size_t qd = size_t(c.nh) * c.hd, kvd = size_t(c.nkv) * c.hd;
    const auto q = random_activations(c.n_ctx * qd, 1, 2.0f);
    const auto k = random_activations(c.n_ctx * kvd, 2, 2.0f);
    const auto v = random_activations(c.n_ctx * kvd, 3);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    auto ref_backend = make_cpu_backend(1);
    ref_backend->store_f16(k16.data(), k.data(), k.size());
    ref_backend->store_f16(v16.data(), v.data(), v.size());
    for (bool half : {false, true}) {
      const std::vector<float> alone =
          attention_alone(*ref_backend, q, k, v, half ? &k16 : nullptr, half ? &v16 : nullptr, c, p);
      for (int threads : {1, 2}) {
        auto b = make_cpu_backend(threads);
        // The sequence's positions in chunks of every size from 1 to all of them (a prompt prefilled
        // whole, chunked prefill at several budgets, decode steps).
        for (size_t chunk : {size_t(1), size_t(2), size_t(7), size_t(16), size_t(33), c.n_ctx}) {
          std::vector<float> out(c.n_ctx * qd, -5.0f);
          for (size_t p0 = 0; p0 < c.n_ctx; p0 += chunk) {
            const size_t n = std::min(chunk, c.n_ctx - p0);
            if (half) b->attention_f16(q.data() + p0 * qd, k16.data(), v16.data(), p0, n, p, out.data() + p0 * qd);
            else b->attention(q.data() + p0 * qd, k.data(), v.data(), p0, n, p, out.data() + p0 * qd);
          }
          const std::string what = "heads " + std::to_string(c.nh) + "/" + std::to_string(c.nkv) + " hd " +
                                   std::to_string(c.hd) + " window " + std::to_string(c.window) + " ctx " +
                                   std::to_string(c.n_ctx) + (half ? " f16 cache, " : ", ") + std::to_string(threads) +
                                   " threads, chunks of " + std::to_string(chunk);
          CAPTURE(what);
          CHECK(std::memcmp(out.data(), alone.data(), out.size() * 4) == 0);
        }
      }
    }
  }
}
