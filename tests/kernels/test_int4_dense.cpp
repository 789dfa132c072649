// Resident bitmap int4 weights re-encoded at load time as dense int4 (cpu::Options::int4_dense,
// kernels/cpu/int4_dense.h, issue 40): the copy decodes to the same values as the bitmap, the backend
// computes the same function from it (the int8-activation kernels' float bound), keeps batch
// invariance, and refuses what it cannot re-encode exactly; the rule is on, off or auto as documented.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "int4_dense.h"
#include "kernel_test_util.h"

using namespace endor;
using namespace endor::ktest;

namespace {

cpu::Options options_with(cpu::Int4Dense rule, cpu::Isa isa) {
  cpu::Options o;
  o.n_threads = 2;
  o.isa = isa;
  o.int4_dense = rule;
  return o;
}

std::vector<float> decoded(const TensorView& v) {
  std::vector<float> out(v.layout.rows * v.layout.cols);
  cpu::decode_f32(v, out.data(), 1);
  return out;
}

// A bound on |y_dense − y_bitmap| for one token: both multiply the same quantized x by the same
// integer sums, so they differ by their f32 roundings only, each at most (cols/32 + 32)·u·B with
// B = Σ_c |d_b·q_c|·(|S·code_c| + |M_g|): |d·q| ≤ |x| + d/2 (d = amax/127), and |S·code| = |w − M|
// for a stored value as for an absent one (code z, z·S = −M, w = 0).
double pair_bound(const TensorView& v, const std::vector<float>& w, const float* x, uint64_t r) {
  const TensorLayout& L = v.layout;
  double b = 0.0;
  for (uint64_t c = 0; c < L.cols; ++c) {
    float amax = 0.0f;
    for (uint64_t j = c / 32 * 32; j < std::min<uint64_t>(L.cols, c / 32 * 32 + 32); ++j) amax = std::max(amax, std::fabs(x[j]));
    const double m = std::fabs(double(f16_to_f32(v.group_mins()[r * L.groups_per_row + c / L.group_size])));
    b += (std::fabs(double(x[c])) + double(amax) / 254.0) * (std::fabs(double(w[r * L.cols + c]) - m) + m);
  }
  return 2.0 * double(L.cols / 32 + 32) * kEpsF32 * b;
}

}  // namespace

TEST_CASE("int4 dense re-encoding: the copy decodes to the bitmap's values, bit for bit, in groups of 32, 64 and 128") {
  for (uint32_t group : {32u, 64u, 128u})
    for (double sparsity : {0.5, 0.7, 0.0}) {
      const uint64_t rows = 37, cols = 576;
      const auto w = random_weights(rows, cols, sparsity, 11 + group);
      const EncodedWeight ew = encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, group);
      const auto dense = cpu::detail::densify_int4_bitmap(ew.view());
      REQUIRE(dense);
      CHECK(dense->view.layout.encoding == Encoding::Dense);
      CHECK(dense->view.layout.group_size == group);
      const auto a = decoded(ew.view()), b = decoded(dense->view);
      size_t differ = 0;
      for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
      CHECK(differ == 0);
    }
}

TEST_CASE("int4 dense re-encoding: refused where the copy would not be the same function or the dense kernel") {
  const uint64_t rows = 8, cols = 256;
  const auto w = random_weights(rows, cols, 0.5, 3);
  SUBCASE("a group without a zero code") {
    EncodedWeight ew = encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, 128);
    uint16_t* mins = reinterpret_cast<uint16_t*>(ew.enc.bytes.data() + ew.enc.layout.mins_offset);
    uint16_t* scales = reinterpret_cast<uint16_t*>(ew.enc.bytes.data() + ew.enc.layout.scales_offset);
    REQUIRE(f16_to_f32(scales[5]) != 0.0f);
    mins[5] = uint16_t(mins[5] ^ 1);  // −M/S no longer the integer it was
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(ew.view()));
    mins[5] = uint16_t(mins[5] ^ 1);
    CHECK(cpu::detail::densify_int4_bitmap(ew.view()));
  }
  SUBCASE("groups the dense one-token kernel does not take, an odd width, int4k, a dense weight") {
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, 256).view()));
    const auto odd = random_weights(rows, 255, 0.5, 4);
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(encode(odd, rows, 255, Encoding::Bitmap, ValueType::I4, 128).view()));
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, 32, Int4Params::Coded6).view()));
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(encode(w, rows, cols, Encoding::Dense, ValueType::I4, 128).view()));
  }
}

TEST_CASE("int4 dense re-encoding: the rule (off unless ENDOR_INT4_DENSE says on, or auto = AMD with the AVX-512 VNNI kernels; never exact)") {
  cpu::Options o;
  o.int4_dense = cpu::Int4Dense::On;
  CHECK(cpu::detail::int4_dense_enabled(o, "portable"));
  o.exact = true;
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"));
  o.exact = false;
  o.int4_dense = cpu::Int4Dense::Off;
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"));
  o.int4_dense = cpu::Int4Dense::Auto;
  ::unsetenv("ENDOR_INT4_DENSE");  // opt-in: off on every CPU
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"));
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx2+f16c+fma"));
  ::setenv("ENDOR_INT4_DENSE", "auto", 1);
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx2+f16c+fma"));  // only the AVX-512 set
  __builtin_cpu_init();
  const bool amd_vnni = __builtin_cpu_is("amd") && __builtin_cpu_supports("avx512vnni");
  CHECK(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2") == amd_vnni);
  ::setenv("ENDOR_INT4_DENSE", "on", 1);
  CHECK(cpu::detail::int4_dense_enabled(o, "avx2+f16c+fma"));
  ::setenv("ENDOR_INT4_DENSE", "off", 1);
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"));
  ::setenv("ENDOR_INT4_DENSE", "yes", 1);
  CHECK_THROWS_WITH_AS(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"), doctest::Contains("ENDOR_INT4_DENSE"), Error);
  ::unsetenv("ENDOR_INT4_DENSE");
}

TEST_CASE("int4 dense re-encoding: linear() on the re-encoded weight is the bitmap's function, batch-invariant, on every ISA") {
  for (cpu::Isa isa : cpu_isas())
    for (uint32_t group : {64u, 128u}) {
      CAPTURE(isa_name(isa));
      CAPTURE(group);
      const uint64_t rows = 53, cols = 1536;
      const auto w = random_weights(rows, cols, 0.5, 21 + group);
      const EncodedWeight ew = encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, group);
      const auto wq = decoded(ew.view());  // the quantized weights
      auto on = make_cpu_backend(options_with(cpu::Int4Dense::On, isa));
      auto off = make_cpu_backend(options_with(cpu::Int4Dense::Off, isa));
      const TensorView view = ew.view();
      const auto w_on = on->prepare_resident_weight(view), w_off = off->prepare_resident_weight(view);
      CHECK(w_on->layout().encoding == Encoding::Dense);
      CHECK(w_off->layout().encoding == Encoding::Bitmap);
      CHECK(on->prepare_weight(view)->layout().encoding == Encoding::Bitmap);  // a streamed slot is never re-encoded
      const size_t T = 5;
      const auto x = random_activations(T * cols, 7 + group);
      std::vector<float> y_on(T * rows), y_off(T * rows), y_one(rows);
      on->linear(*w_on, x.data(), T, nullptr, y_on.data());
      off->linear(*w_off, x.data(), T, nullptr, y_off.data());
      size_t outside = 0, not_invariant = 0;
      for (size_t t = 0; t < T; ++t) {
        on->linear(*w_on, x.data() + t * cols, 1, nullptr, y_one.data());
        for (uint64_t r = 0; r < rows; ++r) {
          outside += std::fabs(double(y_on[t * rows + r]) - y_off[t * rows + r]) > pair_bound(view, wq, x.data() + t * cols, r);
          not_invariant += std::memcmp(&y_one[r], &y_on[t * rows + r], 4) != 0;
        }
      }
      CHECK(outside == 0);
      CHECK(not_invariant == 0);
      // The bound sees one code off by one in the copy (row 3, at token 0's largest |x|, an even column).
      auto bad = cpu::detail::densify_int4_bitmap(view);
      REQUIRE(bad);
      uint64_t at = 0;
      for (uint64_t c = 0; c < cols; c += 2) at = std::fabs(x[c]) > std::fabs(x[at]) ? c : at;
      uint8_t& byte = bad->bytes.get()[bad->view.layout.values_offset + 3 * cols / 2 + at / 2];
      byte = uint8_t((byte & 0xF0) | ((byte & 0x0F) == 15 ? 14 : (byte & 0x0F) + 1));
      auto w_bad = on->prepare_weight(bad->view);
      on->linear(*w_bad, x.data(), 1, nullptr, y_one.data());
      CHECK(std::fabs(double(y_one[3]) - y_off[3]) > pair_bound(view, wq, x.data(), 3));
    }
}
