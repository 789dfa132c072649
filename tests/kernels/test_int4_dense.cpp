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

bool vector_cpu() { return cpu::detail::int4_dense_impl::avx512_vnni_cpu(); }

}  // namespace

// Code (r, c) of a copy, read as int4_dense.h lays it out.
uint8_t copy_code(const uint8_t* copy, uint64_t cols, uint64_t r, uint64_t c) {
  const uint8_t* row = copy + r * cpu::detail::dense_codes_row_bytes(cols);
  const uint64_t wi = c / 64, b = c % 64, words = (cols + 63) / 64;
  if (wi % 2 == 1) return row[wi / 2 * 64 + b] >> 4;
  if (wi + 1 == words && words % 2 == 1) return row[wi / 2 * 64 + b / 2] >> (4 * (b & 1)) & 15;
  return row[wi / 2 * 64 + b] & 15;
}

TEST_CASE("int4 dense re-encoding: the copy holds the stored codes and the zero codes, in groups of 64, 128 and 256") {
  for (uint32_t group : {64u, 128u, 256u})
    for (uint64_t cols : {576u, 1000u, 1001u, 127u})  // 1000, 1001: the last word ends inside; 127: one pair
      for (double sparsity : {0.5, 0.7, 0.0}) {
        CAPTURE(group);
        CAPTURE(cols);
        CAPTURE(sparsity);
        const uint64_t rows = 37;
        const auto w = random_weights(rows, cols, sparsity, 11 + group);
        const EncodedWeight ew = encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, group);
        const TensorView v = ew.view();
        const auto copy = cpu::detail::densify_int4_bitmap(v);
        REQUIRE(copy);
        // Present columns: the stored code (values in row-major order); absent: z with z·S + M = 0.
        size_t wrong = 0, past_row = 0;
        uint64_t k = 0;
        for (uint64_t r = 0; r < rows; ++r) {
          for (uint64_t c = 0; c < cols; ++c) {
            const uint64_t g = r * v.layout.groups_per_row + c / group;
            const uint8_t q = copy_code(copy.get(), cols, r, c);
            if (v.bitmap()[r * v.layout.words_per_row + c / 64] >> (c % 64) & 1) {
              wrong += q != (v.values()[k / 2] >> (4 * (k & 1)) & 15);
              ++k;
            } else {
              wrong += float(q) * f16_to_f32(v.group_scales()[g]) + f16_to_f32(v.group_mins()[g]) != 0.0f;
            }
          }
          for (uint64_t c = cols; c < (cols + 63) / 64 * 64; ++c) past_row += copy_code(copy.get(), cols, r, c) != 0;
        }
        CHECK(k == v.layout.nnz);
        CHECK(wrong == 0);
        CHECK(past_row == 0);
        if (!vector_cpu()) continue;  // the AVX-512 re-encoding: the same bytes
        const auto vec = cpu::detail::densify_int4_bitmap(v, true);
        REQUIRE(vec);
        CHECK(std::memcmp(vec.get(), copy.get(), rows * cpu::detail::dense_codes_row_bytes(cols)) == 0);
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
  SUBCASE("groups of part of a word, int4k, a dense weight, a 2:4 weight") {
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, 32).view()));
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, 32, Int4Params::Coded6).view()));
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(encode(w, rows, cols, Encoding::Dense, ValueType::I4, 128).view()));
    const EncodedWeight ew = encode(w, rows, cols, Encoding::Bitmap, ValueType::I4, 128);
    TensorView two_of_four = ew.view();
    two_of_four.two_of_four = true;  // the 2:4 kernel's own order
    CHECK_FALSE(cpu::detail::densify_int4_bitmap(two_of_four));
  }
}

TEST_CASE("int4 dense re-encoding: the rule (on by default where the AVX-512 or AVX2 kernels run; off by option or ENDOR_INT4_DENSE=off; never exact)") {
  cpu::Options o;
  ::unsetenv("ENDOR_INT4_DENSE");
  CHECK(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"));
  CHECK(cpu::detail::int4_dense_enabled(o, "avx2+f16c+fma"));  // its kernels sum a copy as the bitmap too
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "portable"));  // the reference reads the bitmap alone
  o.exact = true;
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"));
  o.exact = false;
  o.int4_dense = cpu::Int4Dense::Off;
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"));
  o.int4_dense = cpu::Int4Dense::Auto;
  for (const char* on : {"on", "auto"}) {
    ::setenv("ENDOR_INT4_DENSE", on, 1);
    CHECK(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"));
    CHECK(cpu::detail::int4_dense_enabled(o, "avx2+f16c+fma"));
    CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "portable"));
  }
  ::setenv("ENDOR_INT4_DENSE", "off", 1);
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"));
  CHECK_FALSE(cpu::detail::int4_dense_enabled(o, "avx2+f16c+fma"));
  ::setenv("ENDOR_INT4_DENSE", "yes", 1);
  CHECK_THROWS_WITH_AS(cpu::detail::int4_dense_enabled(o, "avx512-vbmi2"), doctest::Contains("ENDOR_INT4_DENSE"), Error);
  ::unsetenv("ENDOR_INT4_DENSE");
  CHECK(cpu::detail::int4_dense_memory_allows(1 << 20));  // a MiB: any machine that runs the tests
  if (cpu::detail::int4_dense_impl::mem_available() != UINT64_MAX)  // /proc/meminfo read
    CHECK_FALSE(cpu::detail::int4_dense_memory_allows(uint64_t(1) << 60));
}

TEST_CASE("int4 dense re-encoding: linear() with the copy gives the bitmap's results bit for bit, alone and in batches of every size") {
  ::unsetenv("ENDOR_INT4_DENSE");
  for (cpu::Isa isa : cpu_isas())
    for (uint32_t group : {64u, 128u, 256u})
      for (uint64_t cols : {1536u, 1000u, 1001u, 576u}) {
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
        const bool copied = isa != cpu::Isa::Portable;  // the rule (cpu_isas: the sets this CPU runs)
        CHECK(w_on->layout().encoding == Encoding::Bitmap);  // every other path reads the bitmap
        CHECK((w_on->copy_bytes() == rows * cpu::detail::dense_codes_row_bytes(cols)) == copied);
        CHECK(w_off->copy_bytes() == 0);
        CHECK(on->prepare_weight(view)->copy_bytes() == 0);  // a streamed slot is never copied
        for (size_t T : {size_t(1), size_t(2), size_t(5), size_t(8), size_t(9), size_t(40)}) {
          CAPTURE(T);
          const auto x = random_activations(T * cols, 7 + group + unsigned(T));
          std::vector<float> y_on(T * rows), y_off(T * rows);
          on->linear(*w_on, x.data(), T, nullptr, y_on.data());
          off->linear(*w_off, x.data(), T, nullptr, y_off.data());
          CHECK(std::memcmp(y_on.data(), y_off.data(), y_on.size() * sizeof(float)) == 0);
          // Each token alone (the one-token kernel, from the copy) against the bitmap's batch.
          std::vector<float> y_one(rows);
          size_t differ = 0;
          for (size_t t = 0; t < T; ++t) {
            on->linear(*w_on, x.data() + t * cols, 1, nullptr, y_one.data());
            differ += std::memcmp(y_one.data(), y_off.data() + t * rows, rows * sizeof(float)) != 0;
          }
          CHECK(differ == 0);
        }
        if (!copied) continue;
        // The comparison sees one code off by one in the copy (row 3, at x's largest |x|): the copy is read.
        auto bad = cpu::detail::densify_int4_bitmap(view, vector_cpu());
        REQUIRE(bad);
        const auto x = random_activations(cols, 99);
        uint64_t at = 0;
        for (uint64_t c = 0; c < cols; ++c) at = std::fabs(x[c]) > std::fabs(x[at]) ? c : at;
        const uint64_t wi = at / 64, words = (cols + 63) / 64;
        const bool high = wi % 2 == 1 || (wi + 1 == words && words % 2 == 1 && at % 2 == 1);
        const uint64_t byte_at = wi / 2 * 64 + (wi + 1 == words && words % 2 == 1 ? at % 64 / 2 : at % 64);
        uint8_t& byte = bad.get()[3 * cpu::detail::dense_codes_row_bytes(cols) + byte_at];
        const uint8_t q = high ? byte >> 4 : byte & 15, q2 = q == 15 ? 14 : q + 1;
        byte = high ? uint8_t((byte & 0x0F) | q2 << 4) : uint8_t((byte & 0xF0) | q2);
        TensorView bad_view = view;
        bad_view.dense_codes = bad.get();
        std::vector<float> y_bad(rows), y_off(rows);
        on->linear(*on->prepare_weight(bad_view), x.data(), 1, nullptr, y_bad.data());
        off->linear(*w_off, x.data(), 1, nullptr, y_off.data());
        CHECK(y_bad[3] != y_off[3]);
        CHECK(std::memcmp(y_bad.data(), y_off.data(), 3 * sizeof(float)) == 0);
      }
  MESSAGE("instruction sets compared: ", cpu_isas().size(), " (the copy read by every one but the portable)");
}
