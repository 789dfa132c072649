// linear() with exact f32 activations (cpu::Options::exact; int8 activations are
// test_int8_activations.cpp's) on every encoding × value type, both instruction sets and every path, against the
// double-precision reference built on decode_rows_f32, with a derived error bound:
//
//   |y − y_ref| ≤ (k + 6)·u·Σ_c |W[r,c]·x[t,c]|,   u = 2^-24,
//
// where k is the longest chain of f32 additions into one accumulator: ceil(in/8) for our kernels
// (eight column lanes, c mod 8, reduced pairwise: +3; each product and the int8 row scale round
// once more: +2; +1 slack), and `in` for oneDNN, whose summation order we do not control.
// Every kernel forms the exactly-decoded weight (int4: q·s is exact, so q·s + m rounds once as
// the reference does; int8 factors the row scale out, which Σ|W·x| still bounds; int8g's q·S is exact).
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "kernel_test_util.h"

using namespace endor;
using namespace endor::ktest;

namespace {

struct Case {
  uint64_t rows, cols;
};
const Case kShapes[] = {{1, 1}, {3, 63}, {65, 65}, {63, 127}, {17, 4097}, {5, 5000}, {127, 3}};
const double kSparsities[] = {0.0, 0.5, 0.9, 1.0};
const size_t kTokenCounts[] = {1, 2, 3, 8, 17, 64};
const uint32_t kGroupSizes[] = {1, 7, 24, 32, 64, 128};
const ValueType kValueTypes[] = {ValueType::F16, ValueType::BF16, ValueType::F32, ValueType::I8, ValueType::I4, ValueType::I8G};

const char* path_name(cpu::LinearPath p) {
  switch (p) {
    case cpu::LinearPath::Fused: return "fused";
    case cpu::LinearPath::RowDecode: return "row-decode";
    case cpu::LinearPath::PanelGemm: return "panel-gemm";
    default: return "auto";
  }
}

// Runs linear() through `backend` and checks every output against the reference and the bound.
// Returns the number of outputs that broke the bound (0 expected).
size_t check_linear(Backend& backend, const EncodedWeight& ew, size_t n_tokens, bool with_bias, double chain,
                    uint32_t seed) {
  const TensorView v = ew.view();
  const uint64_t rows = v.layout.rows, cols = v.layout.cols;
  const std::vector<float> x = random_activations(n_tokens * cols, seed);
  const std::vector<float> bias = random_activations(rows, seed + 1);
  std::vector<float> y(n_tokens * rows, -12345.0f);
  auto w = backend.prepare_weight(v);
  backend.linear(*w, x.data(), n_tokens, with_bias ? bias.data() : nullptr, y.data());
  const Reference ref = reference_linear(v, x, n_tokens);
  size_t bad = 0;
  for (size_t t = 0; t < n_tokens; ++t)
    for (uint64_t r = 0; r < rows; ++r) {
      const size_t i = t * rows + r;
      // The bias add rounds once more, relative to |y_ref + b|.
      const double expect = ref.y[i] + (with_bias ? double(bias[r]) : 0.0);
      const double tol = (chain + 6.0) * kEpsF32 * ref.bound[i] + 2.0 * kEpsF32 * std::fabs(expect);
      if (!(std::fabs(double(y[i]) - expect) <= tol)) {
        if (bad == 0)
          MESSAGE("first mismatch at t=" << t << " r=" << r << ": got " << y[i] << " want " << expect
                                         << " tol " << tol);
        ++bad;
      }
    }
  return bad;
}

double chain_length(cpu::LinearPath path, uint64_t cols) {
  if (path == cpu::LinearPath::PanelGemm && cpu::have_onednn()) return double(cols);
  return double((cols + 7) / 8);
}

}  // namespace

TEST_CASE("linear matches the reference on every encoding, value type, instruction set and path") {
  const cpu::LinearPath paths[] = {cpu::LinearPath::Fused, cpu::LinearPath::RowDecode, cpu::LinearPath::PanelGemm};
  uint32_t seed = 1;
  size_t counter = 0;
  for (cpu::Isa isa : cpu_isas())
    for (cpu::LinearPath path : paths) {
      cpu::Options opt;
      opt.isa = isa;
      opt.exact = true;  // f32 activations for int8/int4 too: this file tests the exact path
      opt.linear_path = path;
      auto backend = make_cpu_backend(opt);
      for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
        for (ValueType vt : kValueTypes)
          for (const Case& s : kShapes)
            for (double sp : kSparsities) {
              if (enc == Encoding::Dense && sp > 0.5) continue;  // dense stores zeros like any value
              // The panel path is decode_rows (bit-exact, test_decode.cpp) plus a GEMM: a few shapes
              // suffice, and each new shape costs oneDNN a JIT compile.
              if (path == cpu::LinearPath::PanelGemm && s.cols != 4097 && s.cols != 65) continue;
              ++counter;
              const size_t T = kTokenCounts[counter % std::size(kTokenCounts)];
              const uint32_t g = kGroupSizes[counter % std::size(kGroupSizes)];
              const auto w = random_weights(s.rows, s.cols, sp, ++seed);
              const Int4Params ip = (counter / 2) % 2 ? Int4Params::Coded6 : Int4Params::F16;  // int4k: every other
              const EncodedWeight ew = encode(w, s.rows, s.cols, enc, vt, g, ip);
              CAPTURE(int(ip));
              CAPTURE(isa_name(isa));
              CAPTURE(path_name(path));
              CAPTURE(to_string(enc));
              CAPTURE(to_string(vt));
              CAPTURE(s.rows);
              CAPTURE(s.cols);
              CAPTURE(sp);
              CAPTURE(T);
              CAPTURE(g);
              CHECK(check_linear(*backend, ew, T, counter % 3 == 0, chain_length(path, s.cols), seed) == 0);
            }
    }
}

TEST_CASE("linear: every token count through the automatic path choice") {
  for (cpu::Isa isa : cpu_isas()) {
    cpu::Options opt;
    opt.isa = isa;
    opt.exact = true;
    auto backend = make_cpu_backend(opt);
    const auto w = random_weights(129, 300, 0.5, 77);
    for (ValueType vt : kValueTypes) {
      const EncodedWeight ew = encode(w, 129, 300, Encoding::Bitmap, vt, 32);
      for (size_t T : kTokenCounts) {
        CAPTURE(isa_name(isa));
        CAPTURE(to_string(vt));
        CAPTURE(T);
        CHECK(check_linear(*backend, ew, T, true, 300.0, uint32_t(T)) == 0);
      }
    }
  }
}

TEST_CASE("linear: the built-in GEMM (no oneDNN) on prefill token counts") {
  for (cpu::Isa isa : cpu_isas()) {
    cpu::Options opt;
    opt.isa = isa;
    opt.linear_path = cpu::LinearPath::PanelGemm;
    opt.gemm = cpu::GemmImpl::Builtin;
    auto backend = make_cpu_backend(opt);
    const auto w = random_weights(70, 333, 0.5, 5);
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap}) {
      const EncodedWeight ew = encode(w, 70, 333, enc, ValueType::F32);
      for (size_t T : {size_t(1), size_t(17), size_t(64)}) {
        CAPTURE(isa_name(isa));
        CAPTURE(to_string(enc));
        CAPTURE(T);
        CHECK(check_linear(*backend, ew, T, false, double((333 + 7) / 8), 9) == 0);
      }
    }
  }
}

TEST_CASE("linear: a tampered output element is caught by the bound") {
  // The bound must be tight enough to see one wrong weight among 5000 columns.
  const auto w = random_weights(4, 5000, 0.5, 3);
  EncodedWeight ew = encode(w, 4, 5000, Encoding::Bitmap, ValueType::F16);
  const Reference ref = reference_linear(ew.view(), random_activations(5000, 4), 1);
  // One element's share of Σ|w·x| is about bound/2500 (2500 stored values per row).
  for (uint64_t r = 0; r < 4; ++r) CHECK((double((5000 + 7) / 8) + 6.0) * kEpsF32 * ref.bound[r] < ref.bound[r] / 25000);
}

TEST_CASE("linear: AVX-512 fused kernels on word and block edges") {
  if (!cpu::cpu_has_avx512()) {
    MESSAGE("skipped: this CPU (or build) has no AVX-512 VBMI2; the AVX2 and portable kernels are tested above");
    return;
  }
  cpu::Options opt;
  opt.isa = cpu::Isa::Avx512;
  opt.exact = true;
  opt.linear_path = cpu::LinearPath::Fused;
  auto backend = make_cpu_backend(opt);
  // Columns at and around the 64-column word and the 4096-column index block; group sizes that
  // take the AVX-512 int4 path (multiples of 64) and one that falls back to AVX2.
  const Case shapes[] = {{3, 64}, {2, 128}, {5, 191}, {2, 4096}, {3, 4160}, {2, 8193}};
  const uint32_t groups[] = {64, 128, 256, 96};
  const double sparsities[] = {0.0, 0.5, 0.97, 1.0};
  uint32_t seed = 500;
  for (const Case& s : shapes)
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
      for (ValueType vt : kValueTypes)
        for (double sp : sparsities) {
          if (enc == Encoding::Dense && sp > 0.5) continue;
          ++seed;
          const uint32_t g = groups[seed % std::size(groups)];
          const size_t T = 1 + seed % 8;
          const auto w = random_weights(s.rows, s.cols, sp, seed);
          const EncodedWeight ew = encode(w, s.rows, s.cols, enc, vt, g);
          CAPTURE(to_string(enc));
          CAPTURE(to_string(vt));
          CAPTURE(s.rows);
          CAPTURE(s.cols);
          CAPTURE(sp);
          CAPTURE(T);
          CAPTURE(g);
          CHECK(check_linear(*backend, ew, T, false, double((s.cols + 7) / 8), seed) == 0);
        }
}

TEST_CASE("ENDOR_ISA caps the instruction set the automatic choice takes") {
  const char* saved = std::getenv("ENDOR_ISA");
  const std::string restore = saved ? saved : "";
  ::setenv("ENDOR_ISA", "portable", 1);
  CHECK(std::string(cpu::simd_level()) == "portable");
  ::setenv("ENDOR_ISA", "avx2", 1);
  CHECK(std::string(cpu::simd_level()) == (cpu::cpu_has_avx2() ? "avx2+f16c+fma" : "portable"));
  ::setenv("ENDOR_ISA", "avx512", 1);
  CHECK(std::string(cpu::simd_level()) ==
        (cpu::cpu_has_avx512() ? "avx512-vbmi2" : cpu::cpu_has_avx2() ? "avx2+f16c+fma" : "portable"));
  ::setenv("ENDOR_ISA", "sse9", 1);
  CHECK_THROWS_WITH_AS(make_cpu_backend(1), doctest::Contains("ENDOR_ISA: unknown instruction set 'sse9'"), Error);
  if (saved) ::setenv("ENDOR_ISA", restore.c_str(), 1);
  else ::unsetenv("ENDOR_ISA");
  CHECK_THROWS_AS(cpu::parse_isa("neon"), Error);
  CHECK(cpu::parse_isa("avx512") == cpu::Isa::Avx512);
}

TEST_CASE("linear_group: bit-identical to one linear() per target, with and without biases") {
  // q/k/v-like group: three weights of one input width, different row counts, mixed encodings;
  // at decode token counts they share one parallel region, at prefill counts they run one by one.
  const uint64_t cols = 200;
  const uint64_t rows[] = {67, 16, 130};
  for (cpu::Isa isa : cpu_isas())
    for (int threads : {1, 2, 3}) {
      cpu::Options opt;
      opt.isa = isa;
      opt.n_threads = threads;
      opt.exact = threads == 2;  // int8 activations (the default) and the exact path
      auto backend = make_cpu_backend(opt);
      for (ValueType vt : kValueTypes) {
        std::vector<EncodedWeight> enc;
        std::vector<std::unique_ptr<Weight>> ws;
        std::vector<std::vector<float>> biases;
        for (size_t i = 0; i < 3; ++i) {
          const auto w = random_weights(rows[i], cols, i == 1 ? 0.0 : 0.5, uint32_t(40 + i));
          enc.push_back(encode(w, rows[i], cols, i == 1 ? Encoding::Dense : Encoding::Bitmap, vt, 64));
          biases.push_back(random_activations(rows[i], uint32_t(50 + i)));
        }
        for (const EncodedWeight& e : enc) ws.push_back(backend->prepare_weight(e.view()));
        for (size_t T : kTokenCounts)
          for (bool with_bias : {false, true}) {
            const auto x = random_activations(T * cols, uint32_t(T));
            std::vector<std::vector<float>> want(3), got(3);
            std::vector<Backend::LinearTarget> targets;
            for (size_t i = 0; i < 3; ++i) {
              want[i].assign(T * rows[i], 0.0f);
              got[i].assign(T * rows[i], -1.0f);
              const float* b = with_bias ? biases[i].data() : nullptr;
              backend->linear(*ws[i], x.data(), T, b, want[i].data());
              targets.push_back({ws[i].get(), b, got[i].data()});
            }
            backend->linear_group(targets.data(), targets.size(), x.data(), T);
            CAPTURE(isa_name(isa));
            CAPTURE(threads);
            CAPTURE(to_string(vt));
            CAPTURE(T);
            CAPTURE(with_bias);
            for (size_t i = 0; i < 3; ++i) CHECK(std::memcmp(want[i].data(), got[i].data(), want[i].size() * 4) == 0);
          }
      }
    }
}

TEST_CASE("linear: prefill token counts through the fused kernels equal the 8-token blocks run one by one") {
  // Auto sends prefill below a per-weight crossover through the fused kernels in blocks of <= 8
  // tokens (kernels/cpu/linear.cpp; gemm_min_tokens = 128 here puts all of these T below it);
  // forced Fused does so at any T. Each block must give what a
  // separate linear() of that block gives (bit for bit), with and without int8/f16 activations,
  // through linear() and linear_group(), and the exact path must stay within the reference bound.
  const uint64_t cols = 4200;  // over kHalfXMinCols: bitmap f16 takes f16 activations when not exact
  const uint64_t rows[] = {37, 20};
  struct Form {
    Encoding enc;
    ValueType vt;
    Int4Params ip;
    uint32_t group;
  };
  const Form forms[] = {{Encoding::Bitmap, ValueType::I4, Int4Params::F16, 128},
                        {Encoding::Bitmap, ValueType::I4, Int4Params::Coded6, 32},
                        {Encoding::Bitmap, ValueType::I8, Int4Params::F16, 0},
                        {Encoding::Bitmap, ValueType::F16, Int4Params::F16, 0},
                        {Encoding::Dense, ValueType::I4, Int4Params::F16, 128},
                        {Encoding::Dense, ValueType::F16, Int4Params::F16, 0}};
  for (cpu::Isa isa : cpu_isas())
    for (cpu::LinearPath path : {cpu::LinearPath::Auto, cpu::LinearPath::Fused})
      for (bool exact : {false, true}) {
        cpu::Options opt;
        opt.isa = isa;
        opt.n_threads = 2;
        opt.exact = exact;
        opt.linear_path = path;
        opt.gemm_min_tokens = 128;
        opt.batch_invariant = false;  // the fast path's 8-token blocks (test_batch_invariance.cpp: one token a call)
        auto backend = make_cpu_backend(opt);
        cpu::Options fused_opt = opt;  // the reference blocks: always the fused kernels
        fused_opt.linear_path = cpu::LinearPath::Fused;
        auto blocks = make_cpu_backend(fused_opt);
        cpu::Options row_opt = opt;  // what Auto takes instead for the other weights
        row_opt.linear_path = cpu::LinearPath::RowDecode;
        auto row_decode = make_cpu_backend(row_opt);
        uint32_t seed = 900;
        for (const Form& f : forms) {
          // Auto's fused blocks serve int8-activation weights (not bitmap int4 in groups of 32);
          // the rest take row-decode below the crossover (endor/kernels.h).
          const bool fused_blocks = path == cpu::LinearPath::Fused ||
                                    (!exact && (f.vt == ValueType::I8 || f.vt == ValueType::I4) &&
                                     !(f.enc == Encoding::Bitmap && f.vt == ValueType::I4 && f.group % 64 != 0));
          std::vector<EncodedWeight> enc;
          std::vector<std::unique_ptr<Weight>> ws, wb, wr;
          std::vector<std::vector<float>> biases;
          for (uint64_t r : rows) {
            enc.push_back(encode(random_weights(r, cols, f.enc == Encoding::Bitmap ? 0.5 : 0.0, ++seed), r, cols, f.enc,
                                 f.vt, f.group ? f.group : kDefaultGroupSize, f.ip));
            biases.push_back(random_activations(r, ++seed));
          }
          for (const EncodedWeight& e : enc) {
            ws.push_back(backend->prepare_weight(e.view()));
            wb.push_back(blocks->prepare_weight(e.view()));
            wr.push_back(row_decode->prepare_weight(e.view()));
          }
          for (size_t T : {size_t(16), size_t(24), size_t(77)}) {
            CAPTURE(std::string(isa_name(isa)));
            CAPTURE(std::string(path_name(path)));
            CAPTURE(exact);
            CAPTURE(std::string(to_string(f.enc)));
            CAPTURE(std::string(to_string(f.vt)));
            CAPTURE(int(f.ip));
            CAPTURE(fused_blocks);
            CAPTURE(T);
            const std::vector<float> x = random_activations(T * cols, ++seed);
            std::vector<std::vector<float>> want(2), got(2), grouped(2);
            std::vector<Backend::LinearTarget> targets;
            for (size_t i = 0; i < 2; ++i) {
              want[i].assign(T * rows[i], 0.0f);
              got[i].assign(T * rows[i], -1.0f);
              grouped[i].assign(T * rows[i], -2.0f);
              if (fused_blocks) {
                for (size_t t0 = 0; t0 < T; t0 += 8) {
                  const size_t nt = std::min<size_t>(8, T - t0);
                  blocks->linear(*wb[i], x.data() + t0 * cols, nt, biases[i].data(), want[i].data() + t0 * rows[i]);
                }
              } else {
                row_decode->linear(*wr[i], x.data(), T, biases[i].data(), want[i].data());
              }
              backend->linear(*ws[i], x.data(), T, biases[i].data(), got[i].data());
              targets.push_back({ws[i].get(), biases[i].data(), grouped[i].data()});
            }
            backend->linear_group(targets.data(), targets.size(), x.data(), T);
            for (size_t i = 0; i < 2; ++i) {
              CHECK(std::memcmp(want[i].data(), got[i].data(), want[i].size() * 4) == 0);
              CHECK(std::memcmp(want[i].data(), grouped[i].data(), want[i].size() * 4) == 0);
            }
            if (exact)
              for (size_t i = 0; i < 2; ++i)
                CHECK(check_linear(*backend, enc[i], T, true, double(cols), seed + uint32_t(i)) == 0);
          }
        }
      }
}
