// int8g weights (format 1.2, SPEC.md §6.8: int8 codes, one f16 scale S per (row, group)) through
// the weight kernels themselves (weight_kernels.h) of every instruction set this CPU runs, on the
// shapes their loops have edges at: dense and bitmap, groups of 32 (Q8_0's), 64, 128, other
// multiples of 32 and sizes that are not (the portable fallback), 0 %, 50 % and 100 % sparsity, rows shorter
// than a group and widths that are not multiples of 64, 1..8 tokens, row ranges starting mid-tensor
// and a y stride wider than the rows.
//
//   decode_rows   bit-identical to decode_rows_f32 (q·S is exact in f32: nothing may round)
//   dot_rows      |y − Σ_c W·x| ≤ (⌈cols/8⌉ + 6)·u·Σ_c |W·x| (test_linear.cpp's bound, W decoded)
//   dot_rows_q8   the int8-activation formula of weight_kernels.h written out in double from the
//                 QuantizedX the kernel was given, y = Σ_b d_b·Σ_g S_g·Σ_{c∈b∩g} q_w·q, within
//                 (cols/32 + 24 + 8)·u·Σ_c |d_b·S_g·q_w·q| (test_int8_activations.cpp's bound)
//
// Scales are the encoder's (S = f16(amax/127) ≥ 0) or, in one case, rewritten to what a file may
// also hold: negative, −0, subnormal and the largest finite f16.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "kernel_test_util.h"
#include "weight_kernels.h"

using namespace endor;
using namespace endor::ktest;
namespace kd = endor::cpu::detail;

namespace {

struct Shape {
  uint64_t rows, cols;
};
// Rows shorter than every group (20), than a word (63), widths off 64 (100, 130, 1000), whole
// words (576 = SmolLM2's width), a width past the 4096-column index block (4097).
const Shape kShapes[] = {{1, 1}, {3, 20}, {5, 63}, {4, 100}, {9, 130}, {7, 576}, {3, 1000}, {2, 4097}};
// 32/64/128: the one-token kernels; 96, 256: other multiples of 32 (per-row block-scale tables);
// 48, 24: not multiples of 32 (the int8-activation product takes the portable kernel).
const uint32_t kGroups[] = {32, 64, 128, 96, 256, 48, 24};
const double kSparsities[] = {0.0, 0.5, 1.0};

EncodedWeight encode_int8g(const std::vector<float>& w, uint64_t rows, uint64_t cols, Encoding enc, uint32_t g) {
  return encode(w, rows, cols, enc, ValueType::I8G, g);
}

// Overwrites some group scales with values a file may hold beside the encoder's: every third
// negated, and one each of −0, the least subnormal, a negative subnormal and ±65504.
void exotic_scales(EncodedWeight& ew) {
  const TensorLayout& L = ew.enc.layout;
  uint8_t* s = ew.enc.bytes.data() + L.scales_offset;
  const uint64_t n = L.rows * L.groups_per_row;
  auto set = [&](uint64_t p, uint16_t h) { std::memcpy(s + 2 * (p % n), &h, 2); };
  for (uint64_t p = 0; p < n; p += 3) {
    uint16_t h;
    std::memcpy(&h, s + 2 * p, 2);
    set(p, uint16_t(h ^ 0x8000));
  }
  set(1, 0x8000);
  set(4, 0x0001);
  set(5, 0x8003);
  set(7, 0x7BFF);
  set(8, 0xFBFF);
}

std::vector<float> reference_decode(const TensorView& v) {
  std::vector<float> out(v.layout.rows * v.layout.cols);
  decode_rows_f32(v, 0, v.layout.rows, out.data());
  return out;
}

// decode_rows of all rows and of the rows from the middle on: bit-identical to the reference.
bool decode_matches(const kd::WeightKernels& k, const TensorView& v) {
  const uint64_t rows = v.layout.rows, cols = v.layout.cols;
  const std::vector<float> ref = reference_decode(v);
  std::vector<float> got(rows * cols, 777.0f);
  k.decode_rows(v, 0, rows, got.data());
  bool same = std::memcmp(got.data(), ref.data(), got.size() * 4) == 0;
  const uint64_t r0 = rows / 2;
  std::vector<float> tail((rows - r0) * cols, 777.0f);
  k.decode_rows(v, r0, rows, tail.data());
  same = same && std::memcmp(tail.data(), ref.data() + r0 * cols, tail.size() * 4) == 0;
  return same;
}

// y = W·x of n_tokens tokens through k.dot_rows over rows [r0, rows) into a y of stride rows + 3
// (the kernel writes only its rows: the rest must keep the sentinel); outputs outside the bound.
size_t dot_rows_bad(const kd::WeightKernels& k, const TensorView& v, size_t n_tokens, uint32_t seed) {
  const uint64_t rows = v.layout.rows, cols = v.layout.cols, r0 = rows / 3;
  const size_t ys = rows + 3;
  const std::vector<float> x = random_activations(n_tokens * cols, seed);
  std::vector<float> y(n_tokens * ys, -12345.0f);
  k.dot_rows(v, r0, rows, x.data(), cols, n_tokens, y.data(), ys);
  const Reference ref = reference_linear(v, x, n_tokens);
  const double chain = double((cols + 7) / 8);
  size_t bad = 0;
  for (size_t t = 0; t < n_tokens; ++t)
    for (uint64_t r = 0; r < ys; ++r) {
      const float got = y[t * ys + r];
      if (r < r0 || r >= rows) {
        bad += got != -12345.0f;
        continue;
      }
      const size_t i = t * rows + r;
      const double tol = (chain + 6.0) * kEpsF32 * ref.bound[i];
      if (!(std::fabs(double(got) - ref.y[i]) <= tol)) {
        if (bad == 0) MESSAGE("dot_rows: first mismatch at t=" << t << " r=" << r << ": got " << got << " want " << ref.y[i] << " tol " << tol);
        ++bad;
      }
    }
  return bad;
}

// The f16 scale S of (r, c) in f32, by hand (the kernels' own conversion is what is under test).
double scale_at(const TensorView& v, uint64_t r, uint64_t c) {
  const uint16_t h = v.group_scales()[r * v.layout.groups_per_row + c / v.layout.group_size];
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double mag = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(m | 0x400), e - 25);
  return (h & 0x8000) ? -mag : mag;
}

// The row's int8 codes at their columns (0 where absent), from the bytes as SPEC.md §6.5 lays them out.
std::vector<int32_t> row_codes(const TensorView& v, uint64_t r) {
  const TensorLayout& L = v.layout;
  std::vector<int32_t> code(L.cols, 0);
  const uint8_t* values = v.values();
  if (L.encoding == Encoding::Dense) {
    for (uint64_t c = 0; c < L.cols; ++c) code[c] = int8_t(values[r * L.cols + c]);
    return code;
  }
  uint64_t k = 0;
  const uint8_t* bitmap = v.data + L.bitmap_offset;
  for (uint64_t rr = 0; rr <= r; ++rr)
    for (uint64_t c = 0; c < L.cols; ++c)
      if ((bitmap[8 * rr * L.words_per_row + c / 8] >> (c % 8)) & 1) {
        if (rr == r) code[c] = int8_t(values[k]);
        ++k;
      }
  return code;
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

// The int8-activation product through k.dot_rows_q8 over rows [r0, rows), stride rows + 3, against
// the formula in double from the same QuantizedX; outputs outside the bound (or written outside).
size_t dot_rows_q8_bad(const kd::WeightKernels& k, const TensorView& v, size_t n_tokens, uint32_t seed) {
  const uint64_t rows = v.layout.rows, cols = v.layout.cols, r0 = rows / 3;
  const size_t ys = rows + 3;
  std::vector<float> x = random_activations(n_tokens * cols, seed);
  if (cols > 40) {  // an all-zero block (d = 0) and an outlier, as real activations have
    for (uint64_t c = 0; c < 32; ++c) x[c] = 0.0f;
    x[cols - 1] = 40.0f;
  }
  const size_t bytes = (kd::quantized_bytes(n_tokens, cols) + 63) / 64 * 64;
  std::unique_ptr<void, AlignedFree> storage(std::aligned_alloc(64, bytes));
  const kd::QuantizedX qx = kd::quantize_activations(x.data(), cols, n_tokens, cols, storage.get());
  std::vector<float> y(n_tokens * ys, -12345.0f);
  k.dot_rows_q8(v, r0, rows, qx, n_tokens, y.data(), ys);
  const double chain = double(cols / 32 + 24);
  size_t bad = 0;
  for (uint64_t r = 0; r < ys; ++r) {
    if (r < r0 || r >= rows) {
      for (size_t t = 0; t < n_tokens; ++t) bad += y[t * ys + r] != -12345.0f;
      continue;
    }
    const std::vector<int32_t> code = row_codes(v, r);
    for (size_t t = 0; t < n_tokens; ++t) {
      const kd::QuantizedX xt = qx.token(t);
      double want = 0.0, bound = 0.0;
      for (uint64_t c = 0; c < cols; ++c) {
        const double term = double(xt.d[c / 32]) * scale_at(v, r, c) * double(code[c]) * double(xt.q[c]);
        want += term;
        bound += std::fabs(term);
      }
      const float got = y[t * ys + r];
      const double tol = (chain + 8.0) * kEpsF32 * bound;
      if (!(std::fabs(double(got) - want) <= tol)) {
        if (bad == 0) MESSAGE("dot_rows_q8: first mismatch at t=" << t << " r=" << r << ": got " << got << " want " << want << " tol " << tol);
        ++bad;
      }
    }
  }
  return bad;
}

std::vector<cpu::Isa> kernel_isas() { return cpu_isas(); }

}  // namespace

TEST_CASE("int8g kernels: decode_rows, dot_rows and dot_rows_q8 on every ISA, encoding, group size, sparsity and width") {
  uint32_t seed = 12000;
  size_t cases = 0;
  for (cpu::Isa isa : kernel_isas()) {
    const kd::WeightKernels& k = kd::select_kernels(isa);
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
      for (uint32_t g : kGroups)
        for (const Shape& s : kShapes)
          for (double sp : kSparsities) {
            if (enc == Encoding::Dense && sp > 0.5) continue;  // dense stores zeros like any value
            ++seed;
            const size_t T = 1 + seed % kd::kMaxFusedTokens;  // 1..8 across cases
            const EncodedWeight ew = encode_int8g(random_weights(s.rows, s.cols, sp, seed), s.rows, s.cols, enc, g);
            const TensorView v = ew.view();
            CAPTURE(isa_name(isa));
            CAPTURE(to_string(enc));
            CAPTURE(g);
            CAPTURE(s.rows);
            CAPTURE(s.cols);
            CAPTURE(sp);
            CAPTURE(T);
            CHECK(decode_matches(k, v));
            CHECK(dot_rows_bad(k, v, T, seed) == 0);
            CHECK(dot_rows_q8_bad(k, v, T, seed) == 0);
            ++cases;
          }
  }
  CHECK(cases > 0);
}

TEST_CASE("int8g kernels: every token count 1..8 at groups of 32, 64, 128 and 96 on a wide row") {
  // The fused loops keep one accumulator per token: each count is its own instantiation.
  uint32_t seed = 13000;
  for (cpu::Isa isa : kernel_isas()) {
    const kd::WeightKernels& k = kd::select_kernels(isa);
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
      for (uint32_t g : {32u, 64u, 128u, 96u}) {
        ++seed;
        const EncodedWeight ew = encode_int8g(random_weights(6, 1600, enc == Encoding::Bitmap ? 0.5 : 0.0, seed), 6, 1600, enc, g);
        for (size_t T = 1; T <= kd::kMaxFusedTokens; ++T) {
          CAPTURE(isa_name(isa));
          CAPTURE(to_string(enc));
          CAPTURE(g);
          CAPTURE(T);
          CHECK(dot_rows_bad(k, ew.view(), T, seed + uint32_t(T)) == 0);
          CHECK(dot_rows_q8_bad(k, ew.view(), T, seed + uint32_t(T)) == 0);
        }
      }
  }
}

TEST_CASE("int8g kernels: negative, −0, subnormal and extreme f16 scales") {
  // An absent bitmap element is +0 in the reference decode whatever the sign of its group's scale;
  // a stored code 0 under a negative scale is −0 (q·S): decode must reproduce both bit for bit.
  uint32_t seed = 14000;
  for (cpu::Isa isa : kernel_isas()) {
    const kd::WeightKernels& k = kd::select_kernels(isa);
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
      for (uint32_t g : {32u, 64u, 128u, 96u, 48u})
        for (const Shape& s : {Shape{9, 130}, Shape{5, 576}}) {
          ++seed;
          EncodedWeight ew = encode_int8g(random_weights(s.rows, s.cols, 0.5, seed), s.rows, s.cols, enc, g);
          exotic_scales(ew);
          const size_t T = 1 + seed % 3;
          CAPTURE(isa_name(isa));
          CAPTURE(to_string(enc));
          CAPTURE(g);
          CAPTURE(s.cols);
          CHECK(decode_matches(k, ew.view()));
          CHECK(dot_rows_bad(k, ew.view(), T, seed) == 0);
          CHECK(dot_rows_q8_bad(k, ew.view(), T, seed) == 0);
        }
  }
}

TEST_CASE("int8g kernels: the q8 bound sees one weight code off by one") {
  // What a kernel taking a wrong code (or dropping a column) would do, at a width tested above: the
  // portable kernel on a tensor with one code of row 1 moved by one, against the unchanged formula.
  const uint64_t rows = 4, cols = 576;
  EncodedWeight ew = encode_int8g(random_weights(rows, cols, 0.0, 31), rows, cols, Encoding::Dense, 32);
  const std::vector<float> before = reference_decode(ew.view());  // q·S, exact
  std::vector<float> x = random_activations(cols, 32);
  const size_t bytes = (kd::quantized_bytes(1, cols) + 63) / 64 * 64;
  std::unique_ptr<void, AlignedFree> storage(std::aligned_alloc(64, bytes));
  const kd::QuantizedX qx = kd::quantize_activations(x.data(), cols, 1, cols, storage.get());
  uint64_t c = 0;  // the column of the largest activation code
  for (uint64_t i = 0; i < cols; ++i)
    if (std::abs(qx.q[i]) > std::abs(qx.q[c])) c = i;
  const TensorLayout& L = ew.enc.layout;
  uint8_t* code = ew.enc.bytes.data() + L.values_offset + 1 * cols + c;
  *code = uint8_t(int8_t(*code) > 0 ? int8_t(*code) - 1 : int8_t(*code) + 1);
  std::vector<float> y(rows, 0.0f);
  kd::portable_kernels().dot_rows_q8(ew.view(), 1, 2, qx, 1, y.data(), rows);
  double want = 0.0, bound = 0.0;
  for (uint64_t i = 0; i < cols; ++i) {
    const double term = double(qx.d[i / 32]) * double(before[cols + i]) * double(qx.q[i]);
    want += term;
    bound += std::fabs(term);
  }
  CHECK(std::fabs(double(y[1]) - want) > (double(cols / 32 + 24) + 8.0) * kEpsF32 * bound);
}

TEST_CASE("int8g: embed and decode_f32 are bit-exact on every ISA, with exotic scales") {
  // The token embedding may be int8g (--quant-head int8g): Backend::embed decodes its rows.
  const uint64_t rows = 37, cols = 200;
  const std::vector<int32_t> ids = {0, 36, 5, 5, 17, 1, 35};
  uint32_t seed = 15000;
  for (cpu::Isa isa : kernel_isas())
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
      for (uint32_t g : {32u, 64u, 96u, 48u}) {
        ++seed;
        EncodedWeight ew = encode_int8g(random_weights(rows, cols, 0.5, seed), rows, cols, enc, g);
        exotic_scales(ew);
        const std::vector<float> ref = reference_decode(ew.view());
        cpu::Options opt;
        opt.isa = isa;
        auto backend = make_cpu_backend(opt);
        auto table = backend->prepare_weight(ew.view());
        std::vector<float> out(ids.size() * cols, 5.0f), want;
        backend->embed(*table, ids.data(), ids.size(), out.data());
        for (int32_t id : ids) want.insert(want.end(), ref.begin() + id * cols, ref.begin() + (id + 1) * cols);
        std::vector<float> all(rows * cols, 5.0f);
        cpu::decode_f32(ew.view(), all.data(), 2, isa);
        CAPTURE(isa_name(isa));
        CAPTURE(to_string(enc));
        CAPTURE(g);
        CHECK(std::memcmp(out.data(), want.data(), want.size() * 4) == 0);
        CHECK(std::memcmp(all.data(), ref.data(), ref.size() * 4) == 0);
      }
}

TEST_CASE("int8g: prepare_weight refuses a group size of 0") {
  const uint64_t rows = 37, cols = 200;
  const EncodedWeight ew = encode_int8g(random_weights(rows, cols, 0.5, 41), rows, cols, Encoding::Bitmap, 32);
  for (cpu::Isa isa : kernel_isas()) {
    cpu::Options opt;
    opt.isa = isa;
    auto backend = make_cpu_backend(opt);
    TensorView broken = ew.view();
    broken.layout.group_size = 0;
    CAPTURE(isa_name(isa));
    CHECK_THROWS_WITH_AS(backend->prepare_weight(broken), doctest::Contains("group size 0"), Error);
  }
}
