// linear() with int8 activations (the default for int8/int4 weights) against a double-precision
// reference of the same quantized arithmetic, written here from its definition
// (kernels/cpu/weight_kernels.h, "int8 activations"), on every instruction set the machine has:
//
//   x per token in blocks of 32 columns: d = f32(amax/127), q = nearbyint(f32(x·f32(1/d))) in [−127, 127];
//   int8 weights:  y = s · Σ_b d_b · Σ_{c∈b} q_w·q
//   int4 weights:  y = Σ_b d_b · Σ_g (S_g·Σ_{c∈b∩g} q_w·q + M_g·Σ_{c∈b∩g, present} q)
//   int8g weights: y = Σ_b d_b · Σ_g S_g·Σ_{c∈b∩g} q_w·q   (f16 S per row group, no min)
//
// Integer sums are exact in every kernel; only the f32 steps round, so with B = Σ_c |d_b|·(|s·q_w·q|)
// (int8), Σ_c |d_b·S_g·q_w·q| (int8g) or Σ_c |d_b|·(|S_g·q_w·q| + |M_g·q|) (int4, present c) every partial sum is bounded by B
// and |y − y_ref| ≤ (k + 8)·u·B, k the longest chain of f32 additions: at most one per 32 columns
// plus the groups and a 16-lane reduction (cols/32 + 24 covers every kernel), or the exact path's
// chain (cols/8; cols with oneDNN) when a prefill path multiplies x̂ = d·q.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>

#include "kernel_test_util.h"
#include "weight_kernels.h"

using namespace endor;
using namespace endor::ktest;

namespace {

constexpr size_t kBlock = 32;

// The quantized activations, from the definition.
struct QuantX {
  std::vector<int32_t> q;  // [T, cols]
  std::vector<float> d;    // [T, blocks]
  size_t blocks = 0;
};
QuantX quantize(const std::vector<float>& x, size_t n_tokens, uint64_t cols) {
  QuantX r;
  r.blocks = (cols + kBlock - 1) / kBlock;
  r.q.resize(n_tokens * cols);
  r.d.resize(n_tokens * r.blocks);
  for (size_t t = 0; t < n_tokens; ++t)
    for (size_t b = 0; b < r.blocks; ++b) {
      const uint64_t c0 = b * kBlock, c1 = std::min<uint64_t>(cols, c0 + kBlock);
      float amax = 0.0f;
      for (uint64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[t * cols + c]));
      const float d = amax / 127.0f;
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      r.d[t * r.blocks + b] = d;
      for (uint64_t c = c0; c < c1; ++c) {
        const float v = std::nearbyint(x[t * cols + c] * inv);
        r.q[t * cols + c] = int32_t(std::clamp(v, -127.0f, 127.0f));
      }
    }
  return r;
}

// A weight row's codes (int8/int8g signed, int4 unsigned) and presence, read from the encoded bytes
// as SPEC.md §6 lays them out.
void row_codes(const TensorView& v, uint64_t r, std::vector<int32_t>& code, std::vector<uint8_t>& present) {
  const TensorLayout& L = v.layout;
  code.assign(L.cols, 0);
  present.assign(L.cols, 0);
  const uint8_t* values = v.values();
  auto code_of = [&](uint64_t k) -> int32_t {
    if (L.value_type != ValueType::I4) return int8_t(values[k]);
    return (k % 2 == 0) ? (values[k / 2] & 0x0F) : (values[k / 2] >> 4);
  };
  if (L.encoding == Encoding::Dense) {
    for (uint64_t c = 0; c < L.cols; ++c) {
      code[c] = code_of(r * L.cols + c);
      present[c] = 1;
    }
    return;
  }
  uint64_t k = 0;  // stored values before row r: count the set bits of the rows above
  const uint8_t* bitmap = v.data + L.bitmap_offset;
  for (uint64_t rr = 0; rr <= r; ++rr)
    for (uint64_t c = 0; c < L.cols; ++c) {
      const bool bit = (bitmap[8 * rr * L.words_per_row + c / 8] >> (c % 8)) & 1;
      if (!bit) continue;
      if (rr == r) {
        code[c] = code_of(k);
        present[c] = 1;
      }
      ++k;
    }
}

float f16(uint16_t h) {
  // Via the format library's decoder of a 1×1 dense f16 tensor would be circular; f16 → f32 by hand.
  const uint32_t sign = uint32_t(h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF;
  float f;
  if (e == 0) f = std::ldexp(float(m), -24);
  else if (e == 31) f = m ? NAN : INFINITY;
  else f = std::ldexp(float(m | 0x400), int(e) - 25);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= sign;
  std::memcpy(&f, &u, 4);
  return f;
}

Reference reference_q8(const TensorView& v, const QuantX& qx, size_t n_tokens) {
  const TensorLayout& L = v.layout;
  Reference ref{std::vector<double>(n_tokens * L.rows), std::vector<double>(n_tokens * L.rows)};
  std::vector<int32_t> code;
  std::vector<uint8_t> present;
  const bool int4 = L.value_type == ValueType::I4, int8g = L.value_type == ValueType::I8G;
  for (uint64_t r = 0; r < L.rows; ++r) {
    row_codes(v, r, code, present);
    for (size_t t = 0; t < n_tokens; ++t) {
      double y = 0.0, bound = 0.0;
      for (uint64_t c = 0; c < L.cols; ++c) {
        const double d = qx.d[t * qx.blocks + c / kBlock], q = qx.q[t * L.cols + c];
        if (int4) {
          const uint64_t p = r * L.groups_per_row + c / L.group_size;
          float sf, mf;
          int4_params_f32(v, p, 1, &sf, &mf);  // f16 or int4k parameters
          const double s = sf, m = mf;
          y += d * (s * code[c] * q + m * present[c] * q);
          // A group with a zero code (m = −z·s, integer z) may be summed as dense: an absent
          // element as code z, whose z·s·q and m·q cancel in the exact sum but are rounded.
          const double z = s != 0.0 ? -m / s : 0.0;
          const bool zero_code = z == std::round(z) && z >= 0.0 && z <= 15.0;
          const double c_eff = present[c] || !zero_code ? code[c] : z, p_eff = present[c] || zero_code ? 1.0 : 0.0;
          bound += std::fabs(d) * (std::fabs(s * c_eff * q) + std::fabs(m * p_eff * q));
        } else if (int8g) {
          const double s = f16(v.group_scales()[r * L.groups_per_row + c / L.group_size]);
          y += d * s * code[c] * q;
          bound += std::fabs(d * s * code[c] * q);
        } else {
          const double s = v.row_scales()[r];
          y += d * s * code[c] * q;
          bound += std::fabs(d * s * code[c] * q);
        }
      }
      ref.y[t * L.rows + r] = y;
      ref.bound[t * L.rows + r] = bound;
    }
  }
  return ref;
}

// Runs linear() and counts the outputs outside (chain + 8)·u·B of the reference.
size_t check_q8(Backend& backend, const EncodedWeight& ew, size_t n_tokens, double chain, uint32_t seed,
                bool with_bias = false) {
  TensorView v = ew.view();
  v.two_of_four = v.layout.value_type == ValueType::I4 && is_two_of_four(v);  // as the weight store sets it
  const uint64_t rows = v.layout.rows, cols = v.layout.cols;
  std::vector<float> x = random_activations(n_tokens * cols, seed);
  if (cols > 40) {  // an all-zero block (d = 0) and an outlier, as real activations have
    for (uint64_t c = 0; c < std::min<uint64_t>(cols, 32); ++c) x[c] = 0.0f;
    x[cols - 1] = 40.0f;
  }
  const std::vector<float> bias = random_activations(rows, seed + 1);
  std::vector<float> y(n_tokens * rows, -12345.0f);
  auto w = backend.prepare_weight(v);
  backend.linear(*w, x.data(), n_tokens, with_bias ? bias.data() : nullptr, y.data());
  const Reference ref = reference_q8(v, quantize(x, n_tokens, cols), n_tokens);
  size_t bad = 0;
  for (size_t t = 0; t < n_tokens; ++t)
    for (uint64_t r = 0; r < rows; ++r) {
      const size_t i = t * rows + r;
      const double expect = ref.y[i] + (with_bias ? double(bias[r]) : 0.0);
      const double tol = (chain + 8.0) * kEpsF32 * ref.bound[i] + 2.0 * kEpsF32 * std::fabs(expect);
      if (!(std::fabs(double(y[i]) - expect) <= tol)) {
        if (bad == 0)
          MESSAGE("first mismatch at t=" << t << " r=" << r << ": got " << y[i] << " want " << expect << " tol " << tol);
        ++bad;
      }
    }
  return bad;
}

double fused_chain(uint64_t cols) { return double(cols / kBlock + 24); }

struct Shape {
  uint64_t rows, cols;
};

// f(enc, vt, shape, sparsity) for dense and bitmap, int8, int4 and int8g, every shape and sparsity; dense
// only up to dense_max sparsity (a dense tensor's zeros are stored like any value).
template <typename F, size_t NS, size_t NP>
void for_each_q8_case(const Shape (&shapes)[NS], const double (&sparsities)[NP], double dense_max, F&& f) {
  for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
    for (ValueType vt : {ValueType::I8, ValueType::I4, ValueType::I8G})
      for (const Shape& s : shapes)
        for (double sp : sparsities)
          if (enc == Encoding::Bitmap || sp <= dense_max) f(enc, vt, s, sp);
}

// f(isa, threads, backend) for every ISA this CPU runs, on one and two threads, fused path.
template <typename F>
void for_each_fused_backend(F&& f) {
  for (cpu::Isa isa : cpu_isas())
    for (int threads : {1, 2}) {
      cpu::Options opt;
      opt.isa = isa;
      opt.n_threads = threads;
      opt.linear_path = cpu::LinearPath::Fused;
      auto backend = make_cpu_backend(opt);
      f(isa, threads, *backend);
    }
}

}  // namespace

TEST_CASE("int8 activations: fused kernels match the quantized reference on every ISA, encoding and odd size") {
  const Shape shapes[] = {{1, 1}, {3, 31}, {5, 63}, {65, 65}, {7, 127}, {9, 191}, {4, 576}, {3, 4097}, {2, 5000}, {33, 300}};
  const double sparsities[] = {0.0, 0.5, 0.9, 1.0};
  const uint32_t groups[] = {64, 128, 32, 7, 256, 96};
  uint32_t seed = 900;
  for (cpu::Isa isa : cpu_isas()) {
    cpu::Options opt;
    opt.isa = isa;
    opt.linear_path = cpu::LinearPath::Fused;
    auto backend = make_cpu_backend(opt);
    for_each_q8_case(shapes, sparsities, 0.5, [&](Encoding enc, ValueType vt, const Shape& s, double sp) {
      ++seed;
      const uint32_t g = groups[seed % std::size(groups)];
      const size_t T = 1 + seed % 8;
      const auto w = random_weights(s.rows, s.cols, sp, seed);
      const Int4Params ip = (seed / 2) % 2 ? Int4Params::Coded6 : Int4Params::F16;  // int4k every other int4 case
      const EncodedWeight ew = encode(w, s.rows, s.cols, enc, vt, g, ip);
      CAPTURE(int(ip));
      CAPTURE(isa_name(isa));
      CAPTURE(to_string(enc));
      CAPTURE(to_string(vt));
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      CAPTURE(sp);
      CAPTURE(T);
      CAPTURE(g);
      CHECK(check_q8(*backend, ew, T, fused_chain(s.cols), seed, seed % 3 == 0) == 0);
    });
  }
}

TEST_CASE("int8 activations: int4 codes unpacked ahead in runs of rows (run boundaries, a row longer than a run)") {
  // One thread, so a task holds many rows: 64 x 3000 gives 8-row tasks of 24000 codes, unpacked in
  // runs of <= 8192 codes; 4 x 20000 has rows of more codes than a run. (Bitmap rows, and dense ones
  // for T = 3; dense T = 1 with groups of 128 reads its packed bytes without runs.)
  const Shape shapes[] = {{64, 3000}, {4, 20000}};
  uint32_t seed = 4400;
  for (cpu::Isa isa : cpu_isas()) {
    cpu::Options opt;
    opt.isa = isa;
    opt.n_threads = 1;
    opt.linear_path = cpu::LinearPath::Fused;
    auto backend = make_cpu_backend(opt);
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
      for (const Shape& s : shapes) {
        ++seed;
        const auto w = random_weights(s.rows, s.cols, enc == Encoding::Bitmap ? 0.3 : 0.0, seed);
        const EncodedWeight ew = encode(w, s.rows, s.cols, enc, ValueType::I4, 128);
        for (size_t T : {size_t(1), size_t(3)}) {
          CAPTURE(isa_name(isa));
          CAPTURE(to_string(enc));
          CAPTURE(s.cols);
          CAPTURE(T);
          CHECK(check_q8(*backend, ew, T, fused_chain(s.cols), seed, false) == 0);
        }
      }
  }
}

TEST_CASE("int8 activations: one-token kernels (several rows at once) on every row count, group and run of rows") {
  // Decode's single token has its own kernels for int8 and bitmap int4 (groups of 1, 2 or 4
  // words) that multiply up to 4 rows at once: row counts around 4, rows with no stored value,
  // more rows than a run of widened group scales (256), tasks starting mid-tensor (2 threads).
  const Shape shapes[] = {{1, 576}, {2, 576}, {3, 130}, {5, 64}, {6, 1000}, {7, 63}, {300, 64}, {9, 5000}, {41, 576}};
  const double sparsities[] = {0.0, 0.5, 0.97, 1.0};
  const uint32_t groups[] = {64, 128, 256, 96};
  uint32_t seed = 7100;
  for_each_fused_backend([&](cpu::Isa isa, int threads, Backend& backend) {
    for_each_q8_case(shapes, sparsities, 0.0, [&](Encoding enc, ValueType vt, const Shape& s, double sp) {
      ++seed;
      const uint32_t g = groups[seed % std::size(groups)];
      const auto w = random_weights(s.rows, s.cols, sp, seed);
      const Int4Params ip = (seed / 2) % 2 ? Int4Params::Coded6 : Int4Params::F16;  // int4k every other int4 case
      const EncodedWeight ew = encode(w, s.rows, s.cols, enc, vt, g, ip);
      CAPTURE(int(ip));
      CAPTURE(isa_name(isa));
      CAPTURE(threads);
      CAPTURE(to_string(enc));
      CAPTURE(to_string(vt));
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      CAPTURE(sp);
      CAPTURE(g);
      CHECK(check_q8(backend, ew, 1, fused_chain(s.cols), seed, seed % 2 == 0) == 0);
    });
  });
}

TEST_CASE("int8 activations: dense int4 in groups of 128, 64 and 32 (the one-token even/odd kernel) on every width and row count") {
  // Decode on dense int4 with groups of 128 and an even width multiplies the packed bytes as they
  // lie (low nibbles against the even columns of x, high against the odd): widths with a whole
  // last unit, a last unit of 2..126 columns (whose load must stop at the row's, and the
  // tensor's, last byte), one unit, 1-9 rows (the 4-row step and its rest), tasks starting
  // mid-tensor (2 threads), zeros stored as values; odd widths (rows starting mid-byte) go to the
  // word-by-word kernel. x has an all-zero block and an outlier (check_q8).
  const Shape shapes[] = {{1, 128}, {3, 576}, {5, 130}, {4, 2048}, {9, 1000}, {6, 5632}, {2, 64}, {7, 254}, {8, 129}, {4, 2}};
  uint32_t seed = 9100;
  for_each_fused_backend([&](cpu::Isa isa, int threads, Backend& backend) {
    for (const Shape& s : shapes)
      for (double sp : {0.0, 0.5}) {
        ++seed;
        // Groups of 128 (one a unit), and of 64 and 32 (2 and 4 a unit: int4k's), f16 or int4k parameters.
        const Int4Params ip = seed % 2 ? Int4Params::Coded6 : Int4Params::F16;
        const uint32_t g = 128u >> ((seed / 2) % 3);
        const EncodedWeight ew =
            encode(random_weights(s.rows, s.cols, sp, seed), s.rows, s.cols, Encoding::Dense, ValueType::I4, g, ip);
        CAPTURE(g);
        CAPTURE(int(ip));
        CAPTURE(isa_name(isa));
        CAPTURE(threads);
        CAPTURE(s.rows);
        CAPTURE(s.cols);
        CAPTURE(sp);
        CHECK(check_q8(backend, ew, 1, fused_chain(s.cols), seed, seed % 2 == 0) == 0);
      }
  });
}

TEST_CASE("int8 activations: bitmap int4 groups without a zero code (other packers) keep the presence sums") {
  // Endor's packer writes every int4 group with min = −z·scale (int4_grid), and the AVX-512 kernels
  // then multiply a bitmap word as dense, absent codes = z. A file whose mins are any other f16
  // (SPEC.md §7.3 allows it) must take the presence path, row by row where rows differ: here
  // every third row, or every row, gets one group's min nudged by one f16 step.
  const Shape shapes[] = {{9, 576}, {37, 130}, {300, 256}, {6, 5000}};
  uint32_t seed = 8200;
  for (cpu::Isa isa : cpu_isas())
    for (int threads : {1, 2})
      for (const Shape& s : shapes)
        for (int every : {3, 1})
          for (size_t T : {size_t(1), size_t(3)}) {
            cpu::Options opt;
            opt.isa = isa;
            opt.n_threads = threads;
            opt.linear_path = cpu::LinearPath::Fused;
            auto backend = make_cpu_backend(opt);
            ++seed;
            const uint32_t g = seed % 2 ? 64 : 128;
            EncodedWeight ew = encode(random_weights(s.rows, s.cols, 0.5, seed), s.rows, s.cols, Encoding::Bitmap, ValueType::I4, g);
            const TensorLayout& L = ew.enc.layout;
            size_t nudged = 0;
            for (uint64_t r = 0; r < L.rows; r += every) {
              uint8_t* mins = ew.enc.bytes.data() + L.mins_offset;
              const uint64_t p = r * L.groups_per_row + (r % L.groups_per_row);
              uint16_t h;
              std::memcpy(&h, mins + 2 * p, 2);
              h = uint16_t(h + 1);  // one f16 step further from 0 (from +0: the least subnormal): −m/s no longer an integer
              std::memcpy(mins + 2 * p, &h, 2);
              ++nudged;
            }
            CAPTURE(isa_name(isa));
            CAPTURE(threads);
            CAPTURE(s.rows);
            CAPTURE(s.cols);
            CAPTURE(every);
            CAPTURE(T);
            CHECK(nudged > 0);
            CHECK(check_q8(*backend, ew, T, fused_chain(s.cols), seed, false) == 0);
          }
}

namespace {
// Random weights with exactly 2 of every 4 consecutive columns zero (2:4), each group's pattern
// one of the six at random; with `odd_row` >= 0, that row's first two groups get 1 and 3 values
// instead (the same count per row, no longer 2:4).
std::vector<float> two_of_four_weights(uint64_t rows, uint64_t cols, uint32_t seed, int64_t odd_row = -1) {
  std::vector<float> w = random_weights(rows, cols, 0.0, seed);
  std::mt19937 rng(seed + 7);
  const uint8_t patterns[] = {0x3, 0x5, 0x6, 0x9, 0xA, 0xC};
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c0 = 0; c0 < cols; c0 += 4) {
      uint8_t keep = patterns[rng() % 6];
      if (int64_t(r) == odd_row && c0 < 8) keep = c0 == 0 ? 0x1 : 0x7;
      for (uint64_t c = 0; c < 4; ++c)
        if (!(keep >> c & 1)) w[r * cols + c0 + c] = 0.0f;
    }
  return w;
}
}  // namespace

TEST_CASE("int8 activations: 2:4 int4 rows (the one-token gather path) match the reference; other rows are not taken for 2:4") {
  // The AVX-512 one-token kernel gathers x for 2:4 int4 weights with groups of 128 columns
  // (TensorView::two_of_four, set by prepare_weight after is_two_of_four). Rows around the 4-row
  // step, more rows than a run (256), widths with a 64-column last block (576, 1600, 64) and widths
  // the path does not take (cols not a multiple of 64), 1 and 2 threads.
  const Shape shapes[] = {{1, 128}, {4, 256}, {7, 1024}, {5, 576}, {300, 128}, {9, 5120}, {41, 2048},
                          {6, 1600}, {2, 64}, {3, 4}, {5, 100}};
  uint32_t seed = 9300;
  for_each_fused_backend([&](cpu::Isa isa, int threads, Backend& backend) {
    for (const Shape& s : shapes)
      for (uint32_t g : {128u, 64u}) {
        ++seed;
        const EncodedWeight ew = encode(two_of_four_weights(s.rows, s.cols, seed), s.rows, s.cols, Encoding::Bitmap, ValueType::I4, g);
        CAPTURE(isa_name(isa));
        CAPTURE(threads);
        CAPTURE(s.rows);
        CAPTURE(s.cols);
        CAPTURE(g);
        CHECK(is_two_of_four(ew.view()));
        CHECK(check_q8(backend, ew, 1, fused_chain(s.cols), seed, seed % 2 == 0) == 0);
        CHECK(check_q8(backend, ew, 3, fused_chain(s.cols), seed, false) == 0);
      }
    // Not 2:4: the same count of values per row, one row's groups 1 + 3; and unstructured 50 %.
    for (const Shape& s : {Shape{9, 512}, Shape{6, 1024}}) {
      ++seed;
      const EncodedWeight odd = encode(two_of_four_weights(s.rows, s.cols, seed, int64_t(s.rows / 2)), s.rows, s.cols,
                                       Encoding::Bitmap, ValueType::I4, 128);
      const EncodedWeight loose = encode(random_weights(s.rows, s.cols, 0.5, seed), s.rows, s.cols, Encoding::Bitmap, ValueType::I4, 128);
      CAPTURE(isa_name(isa));
      CAPTURE(s.cols);
      CHECK(odd.enc.layout.nnz == s.rows * s.cols / 2);
      CHECK_FALSE(is_two_of_four(odd.view()));
      CHECK_FALSE(is_two_of_four(loose.view()));
      CHECK(check_q8(backend, odd, 1, fused_chain(s.cols), seed, false) == 0);
    }
  });
}

TEST_CASE("int8 activations: every token count and path computes the same function (prefill multiplies x̂ = d·q)") {
  const cpu::LinearPath paths[] = {cpu::LinearPath::Auto, cpu::LinearPath::RowDecode, cpu::LinearPath::PanelGemm};
  for (cpu::Isa isa : cpu_isas())
    for (cpu::LinearPath path : paths) {
      cpu::Options opt;
      opt.isa = isa;
      opt.linear_path = path;
      auto backend = make_cpu_backend(opt);
      const auto w = random_weights(70, 333, 0.5, 5);
      for (ValueType vt : {ValueType::I8, ValueType::I4, ValueType::I8G})
        for (Encoding enc : {Encoding::Dense, Encoding::Bitmap}) {
          const EncodedWeight ew = encode(w, 70, 333, enc, vt, 64);
          for (size_t T : {size_t(1), size_t(8), size_t(9), size_t(17)}) {
            // Auto: the fused kernels at every T here (blocks of 8 tokens below the GEMM crossover).
            const bool fused = path == cpu::LinearPath::Auto;
            const double chain = fused ? fused_chain(333)
                                 : path == cpu::LinearPath::PanelGemm && cpu::have_onednn() ? 333.0
                                 : double((333 + 7) / 8) + fused_chain(333);
            CAPTURE(isa_name(isa));
            CAPTURE(int(path));
            CAPTURE(to_string(vt));
            CAPTURE(to_string(enc));
            CAPTURE(T);
            CHECK(check_q8(*backend, ew, T, chain, uint32_t(T + 3), T % 2 == 1) == 0);
          }
        }
    }
}

TEST_CASE("int8 activations: linear_group quantizes once and gives what linear() gives, beside an f16 job") {
  const uint64_t cols = 200;
  const uint64_t rows[] = {67, 16, 130, 45};
  const ValueType vts[] = {ValueType::I4, ValueType::F16, ValueType::I8, ValueType::I8G};
  for (cpu::Isa isa : cpu_isas()) {
    cpu::Options opt;
    opt.isa = isa;
    opt.n_threads = 2;
    auto backend = make_cpu_backend(opt);
    std::vector<EncodedWeight> enc;
    std::vector<std::unique_ptr<Weight>> ws;
    for (size_t i = 0; i < std::size(vts); ++i)
      enc.push_back(encode(random_weights(rows[i], cols, 0.5, uint32_t(60 + i)), rows[i], cols, Encoding::Bitmap, vts[i], 64));
    for (const EncodedWeight& e : enc) ws.push_back(backend->prepare_weight(e.view()));
    for (size_t T : {size_t(1), size_t(3), size_t(8)}) {
      const auto x = random_activations(T * cols, uint32_t(T + 70));
      const auto [want, got] = run_group_and_singles(*backend, ws, rows, x, T);
      CAPTURE(isa_name(isa));
      CAPTURE(T);
      for (size_t i = 0; i < std::size(vts); ++i) CHECK(std::memcmp(want[i].data(), got[i].data(), want[i].size() * 4) == 0);
      // And the int8/int4/int8g jobs really are the quantized function.
      for (size_t i : {size_t(0), size_t(2), size_t(3)}) {
        const Reference ref = reference_q8(enc[i].view(), quantize(x, T, cols), T);
        for (size_t j = 0; j < got[i].size(); ++j)
          CHECK(std::fabs(double(got[i][j]) - ref.y[j]) <= (fused_chain(cols) + 8) * kEpsF32 * ref.bound[j]);
      }
    }
  }
}

TEST_CASE("int8 activations are the default for int8/int4/int8g weights; Options::exact keeps f32, and f16 is never quantized") {
  const uint64_t rows = 40, cols = 256;
  const auto w = random_weights(rows, cols, 0.5, 11);
  const auto x = random_activations(cols, 12);
  for (cpu::Isa isa : cpu_isas()) {
    cpu::Options q8_opt, exact_opt;
    q8_opt.isa = exact_opt.isa = isa;
    exact_opt.exact = true;
    auto q8 = make_cpu_backend(q8_opt), exact = make_cpu_backend(exact_opt);
    for (ValueType vt : {ValueType::I8, ValueType::I4, ValueType::I8G, ValueType::F16}) {
      const EncodedWeight ew = encode(w, rows, cols, Encoding::Bitmap, vt, 64);
      auto w1 = q8->prepare_weight(ew.view()), w2 = exact->prepare_weight(ew.view());
      std::vector<float> y1(rows), y2(rows);
      q8->linear(*w1, x.data(), 1, nullptr, y1.data());
      exact->linear(*w2, x.data(), 1, nullptr, y2.data());
      const Reference ref = reference_linear(ew.view(), x, 1);
      size_t differ = 0;
      double err = 0.0, scale = 0.0;
      for (uint64_t r = 0; r < rows; ++r) {
        differ += y1[r] != y2[r];
        err += std::fabs(double(y1[r]) - ref.y[r]);
        scale += ref.bound[r];
      }
      CAPTURE(isa_name(isa));
      CAPTURE(to_string(vt));
      if (vt == ValueType::F16) {
        CHECK(differ == 0);
      } else {
        CHECK(differ > rows / 2);  // quantized: almost every output moves
        CHECK(err < 0.01 * scale);  // by about 2^-8 of the scale of the sum, not more
      }
    }
  }
}

TEST_CASE("int8 activations: the bound sees one activation code off by one") {
  // What a mutation of the quantizer or of one lane's arithmetic would do, at the sizes tested above.
  const uint64_t cols = 576;
  const auto w = random_weights(8, cols, 0.5, 21);
  const auto x = random_activations(cols, 22);
  for (ValueType vt : {ValueType::I8, ValueType::I4, ValueType::I8G}) {
    const EncodedWeight ew = encode(w, 8, cols, Encoding::Bitmap, vt, 64);
    QuantX qx = quantize(x, 1, cols);
    const Reference ref = reference_q8(ew.view(), qx, 1);
    std::vector<float> decoded(8 * cols);
    decode_rows_f32(ew.view(), 0, 8, decoded.data());
    for (uint64_t r = 0; r < 8; ++r) {
      uint64_t c = 0;
      while (c < cols && std::fabs(decoded[r * cols + c]) < 0.25f) ++c;  // a weight of some size
      REQUIRE(c < cols);
      QuantX off = qx;
      off.q[c] += off.q[c] < 127 ? 1 : -1;
      const Reference moved = reference_q8(ew.view(), off, 1);
      CAPTURE(to_string(vt));
      CAPTURE(r);
      CHECK(std::fabs(moved.y[r] - ref.y[r]) > (fused_chain(cols) + 8) * kEpsF32 * ref.bound[r]);
    }
  }
}

TEST_CASE("int8 activations: the vector quantizer gives the scalar reference's codes, scales and sums bit for bit") {
  namespace kd = cpu::detail;
  const uint64_t col_counts[] = {1, 7, 31, 32, 33, 63, 64, 65, 100, 576, 1543};
  const size_t token_counts[] = {1, 2, 3, 8};
  const float inf = std::numeric_limits<float>::infinity();
  uint32_t seed = 100;
  size_t blocks_seen = 0, special_codes = 0;
  for (uint64_t cols : col_counts)
    for (size_t n_tokens : token_counts) {
      const size_t stride = size_t(cols) + 5;  // rows apart by more than cols: nothing past cols is read
      std::vector<float> x = random_activations(n_tokens * stride, ++seed, 2.0f);
      std::mt19937 rng(seed);
      for (size_t t = 0; t < n_tokens; ++t) {
        float* xt = x.data() + t * stride;
        for (size_t c = cols; c < stride; ++c) xt[c] = std::nanf("");  // past cols: must not be read
        // Per block of 32: zero, huge, tiny (a subnormal scale), with NaN, with ±inf, or plain.
        for (uint64_t c0 = 0; c0 < cols; c0 += 32) {
          const uint64_t c1 = std::min<uint64_t>(cols, c0 + 32);
          switch (rng() % 7) {
            case 0: for (uint64_t c = c0; c < c1; ++c) xt[c] = (rng() & 1) ? 0.0f : -0.0f; break;
            case 1: for (uint64_t c = c0; c < c1; ++c) xt[c] *= 1e30f; break;
            case 2: for (uint64_t c = c0; c < c1; ++c) xt[c] *= 1e-42f; break;
            case 3: xt[c0 + rng() % (c1 - c0)] = std::nanf(""); break;
            case 4: xt[c0 + rng() % (c1 - c0)] = (rng() & 1) ? inf : -inf; break;
            case 5: xt[c0 + rng() % (c1 - c0)] = 127.5f * xt[c0]; break;  // codes at ±127 and halfway ties
            default: break;
          }
          ++blocks_seen;
        }
      }
      const size_t bytes = kd::quantized_bytes(n_tokens, cols);
      std::vector<uint8_t> a(bytes + 64, 0xAB), b(bytes + 64, 0xCD);
      void* pa = a.data() + (64 - reinterpret_cast<uintptr_t>(a.data()) % 64) % 64;
      void* pb = b.data() + (64 - reinterpret_cast<uintptr_t>(b.data()) % 64) % 64;
      const kd::QuantizedX qa = kd::quantize_activations(x.data(), stride, n_tokens, cols, pa);
      const kd::QuantizedX qb = kd::quantize_activations_reference(x.data(), stride, n_tokens, cols, pb);
      REQUIRE(qa.q_stride == qb.q_stride);
      REQUIRE(qa.d_stride == qb.d_stride);
      CAPTURE(cols);
      CAPTURE(n_tokens);
      CHECK(std::memcmp(qa.q, qb.q, n_tokens * qa.q_stride) == 0);
      CHECK(std::memcmp(qa.d, qb.d, 4 * n_tokens * qa.d_stride) == 0);
      CHECK(std::memcmp(qa.sums, qb.sums, 4 * n_tokens * qa.d_stride) == 0);
      for (size_t i = 0; i < n_tokens * qa.q_stride; ++i) special_codes += qb.q[i] == 127 || qb.q[i] == -127;
    }
  CHECK(blocks_seen > 500);
  CHECK(special_codes > 1000);  // the clamp's edges were exercised
}
