// Resident bitmap int4 weights re-encoded at load time as dense int4 (cpu::Options::int4_dense,
// kernels/cpu/int4_dense.h, issue 40): the copy decodes to the same values as the bitmap (the vector
// re-encoding writes the scalar one's bytes), the backend computes the bitmap's results from it bit
// for bit at every token count, and refuses what it cannot re-encode exactly; the rule is as
// documented.
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

bool vector_cpu() { return cpu::detail::int4_dense_impl::avx512_vnni_cpu(); }

}  // namespace

TEST_CASE("int4 dense re-encoding: the copy decodes to the bitmap's values, bit for bit, in groups of 64, 128 and 256") {
  for (uint32_t group : {64u, 128u, 256u})
    for (uint64_t cols : {576u, 1000u})  // 1000: the last word ends inside (40 columns)
      for (double sparsity : {0.5, 0.7, 0.0}) {
        CAPTURE(group);
        CAPTURE(cols);
        const uint64_t rows = 37;
        const auto w = random_weights(rows, cols, sparsity, 11 + group);
        const EncodedWeight ew = encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, group);
        const auto dense = cpu::detail::densify_int4_bitmap(ew.view());
        REQUIRE(dense);
        CHECK(dense->view.layout.encoding == Encoding::Dense);
        CHECK(dense->view.layout.group_size == group);
        CHECK(dense->view.sums_as_bitmap);
        const auto a = decoded(ew.view()), b = decoded(dense->view);
        size_t differ = 0;
        for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
        CHECK(differ == 0);
        if (!vector_cpu()) continue;  // the AVX-512 re-encoding: the same bytes
        const auto v = cpu::detail::densify_int4_bitmap(ew.view(), true);
        REQUIRE(v);
        CHECK(std::memcmp(v->bytes.get(), dense->bytes.get(), dense->view.layout.total_bytes) == 0);
      }
  if (!vector_cpu()) MESSAGE("no AVX-512 VNNI/VBMI2 on this CPU: the vector re-encoding was not checked");
}

TEST_CASE("int4 dense re-encoding: refused where the copy would not be the same function") {
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
  SUBCASE("groups of part of a word, an odd width, int4k, a dense weight, a 2:4 weight") {
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, 32).view()));
    const auto odd = random_weights(rows, 255, 0.5, 4);
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(encode(odd, rows, 255, Encoding::Bitmap, ValueType::I4, 128).view()));
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, 32, Int4Params::Coded6).view()));
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(encode(w, rows, cols, Encoding::Dense, ValueType::I4, 128).view()));
    const EncodedWeight ew = encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, 128);
    TensorView two_of_four = ew.view();
    two_of_four.two_of_four = true;  // the 2:4 kernel's own order
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(two_of_four));
  }
}

TEST_CASE("int4 dense re-encoding: the rule (on by default where the AVX-512 VNNI kernels run; off by option or ENDOR_INT4_DENSE=off; never exact)") {
  cpu::Options o;
  ::unsetenv("ENDOR_INT4_DENSE");
  CHECK(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2") == vector_cpu());
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx2+f16c+fma"));  // only the AVX-512 set sums a copy as the bitmap
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "portable"));
  o.exact = true;
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"));
  o.exact = false;
  o.int4_dense = cpu::Int4Dense::Off;
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"));
  o.int4_dense = cpu::Int4Dense::Auto;
  for (const char* on : {"on", "auto"}) {
    ::setenv("ENDOR_INT4_DENSE", on, 1);
    CHECK(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2") == vector_cpu());
    CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx2+f16c+fma"));
  }
  ::setenv("ENDOR_INT4_DENSE", "off", 1);
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"));
  ::setenv("ENDOR_INT4_DENSE", "yes", 1);
  CHECK_THROWS_WITH_AS(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"), doctest::Contains("ENDOR_INT4_DENSE"), Error);
  ::unsetenv("ENDOR_INT4_DENSE");
  CHECK(cpu::detail::int4_dense_memory_allows(1 << 20));  // a MiB: any machine that runs the tests
  CHECK_FALSE(cpu::detail::int4_dense_memory_allows(uint64_t(1) << 60));
}

TEST_CASE("int4 dense re-encoding: linear() on the copy gives the bitmap's results bit for bit, at every token count") {
  ::unsetenv("ENDOR_INT4_DENSE");
  for (cpu::Isa isa : cpu_isas())
    for (uint32_t group : {64u, 128u, 256u})
      for (uint64_t cols : {1536u, 1000u}) {
        CAPTURE(isa_name(isa));
        CAPTURE(group);
        CAPTURE(cols);
        const uint64_t rows = 53;
        const auto w = random_weights(rows, cols, 0.5, 21 + group);
        const EncodedWeight ew = encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, group);
        auto on = make_cpu_backend(options_with(cpu::Int4Dense::Auto, isa));
        auto off = make_cpu_backend(options_with(cpu::Int4Dense::Off, isa));
        const TensorView view = ew.view();
        const auto w_on = on->prepare_resident_weight(view), w_off = off->prepare_resident_weight(view);
        const bool copied = isa == cpu::Isa::Avx512 && vector_cpu();  // the rule, on this CPU
        CHECK((w_on->layout().encoding == Encoding::Dense) == copied);
        CHECK(w_off->layout().encoding == Encoding::Bitmap);
        CHECK(on->prepare_weight(view)->layout().encoding == Encoding::Bitmap);  // a streamed slot is never re-encoded
        for (size_t T : {size_t(1), size_t(2), size_t(5), size_t(8), size_t(9), size_t(40)}) {
          CAPTURE(T);
          const auto x = random_activations(T * cols, 7 + group + unsigned(T));
          std::vector<float> y_on(T * rows), y_off(T * rows);
          on->linear(*w_on, x.data(), T, nullptr, y_on.data());
          off->linear(*w_off, x.data(), T, nullptr, y_off.data());
          CHECK(std::memcmp(y_on.data(), y_off.data(), y_on.size() * sizeof(float)) == 0);
        }
        if (!copied) continue;
        // The comparison sees one code off by one in the copy (row 3, at x's largest |x|, an even column).
        auto bad = cpu::detail::densify_int4_bitmap(view, true);
        REQUIRE(bad);
        const auto x = random_activations(cols, 99);
        uint64_t at = 0;
        for (uint64_t c = 0; c < cols; c += 2) at = std::fabs(x[c]) > std::fabs(x[at]) ? c : at;
        uint8_t& byte = bad->bytes.get()[bad->view.layout.values_offset + 3 * cols / 2 + at / 2];
        byte = uint8_t((byte & 0xF0) | ((byte & 0x0F) == 15 ? 14 : (byte & 0x0F) + 1));
        std::vector<float> y_bad(rows), y_off(rows);
        on->linear(*on->prepare_weight(bad->view), x.data(), 1, nullptr, y_bad.data());
        off->linear(*w_off, x.data(), 1, nullptr, y_off.data());
        CHECK(y_bad[3] != y_off[3]);
        CHECK(std::memcmp(y_bad.data(), y_off.data(), 3 * sizeof(float)) == 0);
      }
  if (!vector_cpu()) MESSAGE("no AVX-512 VNNI/VBMI2 on this CPU: no weight was re-encoded, so only the bitmap path ran");
}
