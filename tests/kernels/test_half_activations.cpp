// linear() with f16 activations (the default for dense f16/bf16 weights, and for bitmap ones of
// rows at least kHalfXMinCols = 4097 columns wide; kernels/cpu/weight_kernels.h) against the
// double-precision reference of the same function: x rounded to f16 (round to nearest even, the
// format library's f32_to_f16), then the exact product, with test_linear.cpp's bound
//
//   |y − y_ref| ≤ (k + 6)·u·Σ_c |W[r,c]·x16[t,c]|,   u = 2^-24, k = ceil(in/8) (in with oneDNN).
//
// To tell the two functions apart, x is also taken as 1 + 3·2^-12 with positive weights: every
// element rounds up by 2^-12, so the rounded product is 2.4e-4 of the sum above the f32 one,
// far outside the bound (k·u < 4.3e-5 for 5632 columns).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "kernel_test_util.h"

using namespace endor;
using namespace endor::ktest;

namespace {

constexpr uint64_t kMinCols = 4097;

std::vector<float> rounded_to_f16(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = f16_to_f32(f32_to_f16(x[i]));
  return r;
}

double chain_length(cpu::LinearPath path, uint64_t cols) {
  if (path == cpu::LinearPath::PanelGemm && cpu::have_onednn()) return double(cols);
  return double((cols + 7) / 8);
}

// Outputs of y outside the bound around the reference product of x_ref.
size_t outside(const std::vector<float>& y, const TensorView& v, const std::vector<float>& x_ref, size_t n_tokens,
               double chain) {
  const Reference ref = reference_linear(v, x_ref, n_tokens);
  size_t bad = 0;
  for (size_t i = 0; i < y.size(); ++i)
    if (!(std::fabs(double(y[i]) - ref.y[i]) <= (chain + 6.0) * kEpsF32 * ref.bound[i])) ++bad;
  return bad;
}

std::vector<float> run_linear(Backend& b, const TensorView& v, const std::vector<float>& x, size_t n_tokens) {
  auto w = b.prepare_weight(v);
  std::vector<float> y(n_tokens * v.layout.rows, -12345.0f);
  b.linear(*w, x.data(), n_tokens, nullptr, y.data());
  return y;
}

std::vector<float> positive(std::vector<float> w) {
  for (float& v : w) v = std::fabs(v);
  return w;
}

}  // namespace

TEST_CASE("f16 activations: dense and wide bitmap f16/bf16 rows multiply x rounded to f16 on every ISA, path and token count") {
  struct Shape {
    uint64_t rows, cols;
  };
  // Narrow (dense only), the bitmap threshold itself, a 1 B model's down projection, and one past
  // two index blocks with a partial last word.
  const Shape shapes[] = {{4, 64}, {7, 333}, {5, kMinCols}, {9, 5632}, {3, 8193}};
  const cpu::LinearPath paths[] = {cpu::LinearPath::Auto, cpu::LinearPath::RowDecode, cpu::LinearPath::PanelGemm};
  uint32_t seed = 900;
  for (cpu::Isa isa : cpu_isas())
    for (cpu::LinearPath path : paths) {
      cpu::Options opt;
      opt.isa = isa;
      opt.linear_path = path;
      opt.n_threads = 2;
      auto backend = make_cpu_backend(opt);
      for (const Shape& s : shapes)
        for (ValueType vt : {ValueType::F16, ValueType::BF16})
          for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
            for (double sp : {0.0, 0.5, 0.97}) {
              if (enc == Encoding::Dense && sp > 0.5) continue;
              if (enc == Encoding::Bitmap && s.cols < kMinCols) continue;  // the next test's
              ++seed;
              const size_t T = path != cpu::LinearPath::Auto ? 2 : size_t(1 + seed % 3) * (seed % 5 == 0 ? 3 : 1);
              const EncodedWeight ew = encode(positive(random_weights(s.rows, s.cols, sp, seed)), s.rows, s.cols, enc, vt);
              const double chain = chain_length(path, s.cols);
              CAPTURE(std::string(isa_name(isa)));
              CAPTURE(int(path));
              CAPTURE(std::string(to_string(vt)));
              CAPTURE(std::string(to_string(enc)));
              CAPTURE(s.cols);
              CAPTURE(sp);
              CAPTURE(T);
              // Random x: the rounded function, within the bound.
              const std::vector<float> x = random_activations(T * s.cols, seed);
              CHECK(outside(run_linear(*backend, ew.view(), x, T), ew.view(), rounded_to_f16(x), T, chain) == 0);
              // x that rounds up everywhere: the rounded function and not the f32 one (where the
              // bound is tight enough to tell: not oneDNN's, k = in).
              if (sp < 0.9 && (chain + 6.0) * kEpsF32 < 1e-4) {
                const std::vector<float> up(T * s.cols, 1.0f + 3.0f * std::ldexp(1.0f, -12));
                const std::vector<float> y = run_linear(*backend, ew.view(), up, T);
                CHECK(outside(y, ew.view(), rounded_to_f16(up), T, chain) == 0);
                CHECK(outside(y, ew.view(), up, T, chain) == y.size());
              }
            }
    }
}

TEST_CASE("f16 activations: Options::exact, narrower bitmap rows, other value types and x beyond f16's range keep f32 x") {
  const std::vector<float> up_value(1, 1.0f + 3.0f * std::ldexp(1.0f, -12));
  for (cpu::Isa isa : cpu_isas()) {
    cpu::Options def, exact;
    def.isa = exact.isa = isa;
    exact.exact = true;
    auto b_def = make_cpu_backend(def), b_exact = make_cpu_backend(exact);
    CAPTURE(std::string(isa_name(isa)));
    // Options::exact on a wide f16 row: the f32 function.
    {
      const uint64_t rows = 4, cols = 5632;
      const EncodedWeight ew = encode(positive(random_weights(rows, cols, 0.5, 31)), rows, cols, Encoding::Bitmap, ValueType::F16);
      const std::vector<float> up(cols, up_value[0]);
      const std::vector<float> y = run_linear(*b_exact, ew.view(), up, 1);
      CHECK(outside(y, ew.view(), up, 1, chain_length(cpu::LinearPath::Fused, cols)) == 0);
      CHECK(outside(y, ew.view(), rounded_to_f16(up), 1, chain_length(cpu::LinearPath::Fused, cols)) == rows);
    }
    // Bitmap rows of 4096 columns (one under the threshold) and of 333, f32 weights of any width and
    // encoding: bit for bit the exact path.
    for (ValueType vt : {ValueType::F16, ValueType::BF16, ValueType::F32})
      for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
        for (uint64_t cols : {uint64_t(333), kMinCols - 1, uint64_t(5632)}) {
          if (vt != ValueType::F32 && (enc == Encoding::Dense || cols >= kMinCols)) continue;
          const uint64_t rows = 3;
          const EncodedWeight ew = encode(random_weights(rows, cols, 0.5, 32), rows, cols, enc, vt);
          const std::vector<float> x = random_activations(cols, 33);
          CAPTURE(std::string(to_string(vt)));
          CAPTURE(std::string(to_string(enc)));
          CAPTURE(cols);
          const std::vector<float> a = run_linear(*b_def, ew.view(), x, 1), b = run_linear(*b_exact, ew.view(), x, 1);
          CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
        }
    // An x beyond f16's range (or inf/NaN) would become inf: that call keeps f32 x.
    for (float big : {70000.0f, -1e30f, INFINITY}) {
      const uint64_t rows = 3, cols = 5000;
      const EncodedWeight ew = encode(random_weights(rows, cols, 0.5, 34), rows, cols, Encoding::Dense, ValueType::F16);
      std::vector<float> x = random_activations(cols, 35);
      x[4321] = big;
      CAPTURE(big);
      const std::vector<float> a = run_linear(*b_def, ew.view(), x, 1), b = run_linear(*b_exact, ew.view(), x, 1);
      CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
    }
  }
}

TEST_CASE("f16 activations: linear_group rounds x once and gives what linear() gives, beside int4 and narrow jobs") {
  const uint64_t cols = 5632;
  const uint64_t rows[] = {37, 16, 21};
  const ValueType vts[] = {ValueType::F16, ValueType::I4, ValueType::BF16};
  for (cpu::Isa isa : cpu_isas()) {
    cpu::Options opt;
    opt.isa = isa;
    opt.n_threads = 2;
    auto backend = make_cpu_backend(opt);
    std::vector<EncodedWeight> enc;
    std::vector<std::unique_ptr<Weight>> ws;
    for (size_t i = 0; i < 3; ++i)
      enc.push_back(encode(positive(random_weights(rows[i], cols, 0.5, uint32_t(80 + i))), rows[i], cols, Encoding::Bitmap, vts[i], 128));
    for (const EncodedWeight& e : enc) ws.push_back(backend->prepare_weight(e.view()));
    for (size_t T : {size_t(1), size_t(4)}) {
      const std::vector<float> x(T * cols, 1.0f + 3.0f * std::ldexp(1.0f, -12));
      const auto [want, got] = run_group_and_singles(*backend, ws, rows, x, T);
      CAPTURE(std::string(isa_name(isa)));
      CAPTURE(T);
      for (size_t i = 0; i < 3; ++i) CHECK(std::memcmp(want[i].data(), got[i].data(), want[i].size() * 4) == 0);
      for (size_t i : {size_t(0), size_t(2)})
        CHECK(outside(got[i], enc[i].view(), rounded_to_f16(x), T, chain_length(cpu::LinearPath::Fused, cols)) == 0);
    }
  }
}
