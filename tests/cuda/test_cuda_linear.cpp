// linear() on the GPU, every path (Fused, DecodeGemm with large and with one-row panels, Auto),
// encoding, value type (int8g included), int4/int8g group size and token count, checked two ways:
//
// 1. Exact arithmetic. Weights whose decoded values are multiples of 1/32 below 8 in magnitude
//    with ≤ 7 significant bits (exact in f16 and bf16 too, see exact_weights), activations and
//    biases that are multiples of 1/8 with |x| ≤ 1/2: every product is a multiple of 2^-8 below 4,
//    every partial sum over ≤ 4097 columns a multiple of 2^-8 below 2^15 — 23 significant bits,
//    exact in f32 in any order, also after the f16/bf16 rounding the DecodeGemm path applies. So
//    the GPU must return the exact result bit for bit: any indexing, nibble-order, scale, group,
//    transposition, panel-offset or bias slip shows.
//
// 2. Random values with a derived bound, against the double-precision reference built on
//    decode_rows_f32 and against the CPU backend. With u = 2^-24, A = Σ_c |W[r,c]·x[t,c]|:
//    Fused — every decoded weight equals the reference's; each thread sums its products with
//      FMAs, then the sums are added: previous kernels (fused_linear.cu) ≤ ceil(in/32) products a
//      lane and 5 butterfly additions; 16-byte kernels (fused_linear16.cu) dense ≤ C·ceil(in/(256·C))
//      products (C ≤ 32 columns a chunk: ≤ in/256 + 32) then 5 butterfly and 7 cross-warp additions,
//      bitmap ≤ 32·ceil(in/1024) ≤ ceil(in/32) + 31 products and 5 additions. One bound covers all:
//                                                     |err| ≤ (ceil(in/32) + 32 + 13)·u·A
//    DecodeGemm, f32 weights (pedantic f32 GEMM, cuBLAS's order unknown): (in + 6)·u·A
//    DecodeGemm, 16-bit: x rounded to the weight's 16-bit type (relative u_x = 2^-11 for f16,
//      2^-8 for bf16, plus 2^-25 absolute in the f16 subnormal range), int8/int8g/int4 weights
//      rounded to f16 (u_w = 2^-11, else 0); products of 16-bit values are exact in f32; the tensor-core
//      accumulation is allowed 2u per addition (it may truncate rather than round):
//        |err| ≤ (u_x + u_w + u_x·u_w)·A + 2^-25·(Σ|W| + 2·Σ|x|) + (in + 6)·2u·(1.01·A)
//    Bias: one more rounding of the sum, 2u·|y|.
//    The CPU backend is held to (in + 6)·u·A (its loosest path, oneDNN); GPU and CPU may then
//    differ by the sum of the two bounds.
#include "cuda_test_util.h"

using namespace endor;
using namespace endor::cudatest;

namespace {

struct Shape {
  uint64_t rows, cols;
};
const ValueType kValueTypes[] = {ValueType::F16, ValueType::BF16, ValueType::F32,
                                 ValueType::I8,  ValueType::I4,   ValueType::I8G};
const size_t kTokenCounts[] = {1, 2, 3, 8, 9, 17, 64};
const uint32_t kGroupSizes[] = {1, 7, 32, 128};
// The edge-shape cases' group sizes: int4 32/64/128; int8g also 48 (a multiple of the 16-column
// chunk but not of 32: the 16-byte dense form, the bitmap kernel's per-column groups) and 7 (odd:
// the element-wise dense form).
const uint32_t kEdgeGroups[] = {32, 64, 128};
const uint32_t kEdgeGroupsInt8g[] = {32, 64, 128, 48, 7};
uint32_t edge_group(ValueType vt, size_t counter) {
  return vt == ValueType::I8G ? kEdgeGroupsInt8g[counter % std::size(kEdgeGroupsInt8g)]
                              : kEdgeGroups[counter % std::size(kEdgeGroups)];
}

const char* path_name(cuda::LinearPath p) {
  switch (p) {
    case cuda::LinearPath::Fused: return "fused";
    case cuda::LinearPath::DecodeGemm: return "decode-gemm";
    default: return "auto";
  }
}

std::unique_ptr<Backend> gpu_backend(cuda::LinearPath path, size_t panel_bytes = 0,
                                     cuda::FusedKernel kernel = cuda::FusedKernel::Wide16) {
  cuda::Options opt;
  opt.linear_path = path;
  opt.gemm_panel_bytes = panel_bytes;
  opt.fused_kernel = kernel;
  return make_cuda_backend(opt);
}

// The path linear() takes (Auto: T ≤ fused_max_tokens = 8 is Fused).
bool takes_fused(cuda::LinearPath path, size_t n_tokens) {
  return path == cuda::LinearPath::Fused || (path == cuda::LinearPath::Auto && n_tokens <= 8);
}

// The derived bound of the file comment for one output (without the bias term).
double gpu_bound(cuda::LinearPath path, ValueType vt, uint64_t cols, size_t n_tokens, double abs_products,
                 double w_abs_sum, double x_abs_sum) {
  if (takes_fused(path, n_tokens)) return (double((cols + 31) / 32) + 45.0) * kU * abs_products;
  if (vt == ValueType::F32) return (double(cols) + 6.0) * kU * abs_products;
  const double u_x = vt == ValueType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double u_w = (vt == ValueType::I8 || vt == ValueType::I8G || vt == ValueType::I4) ? std::ldexp(1.0, -11) : 0.0;
  return (u_x + u_w + u_x * u_w) * abs_products + std::ldexp(1.0, -25) * (w_abs_sum + 2.0 * x_abs_sum) +
         (double(cols) + 6.0) * 2.0 * kU * 1.01 * abs_products;
}

double cpu_bound(uint64_t cols, double abs_products) { return (double(cols) + 6.0) * kU * abs_products; }

struct Outcome {
  size_t checked = 0, beyond_reference = 0, beyond_cpu = 0;
  double worst = 0.0;  // largest |err| / bound against the reference
};

// Runs y = x·Wᵀ (+ b) on `gpu` and on a CPU backend, and checks the sampled rows against the
// double reference with the derived bound.
Outcome check_random(Backend& gpu, Backend& cpu, cuda::LinearPath path, const EncodedWeight& ew, size_t n_tokens,
                     bool with_bias, uint32_t seed, size_t n_random_rows = 256) {
  const TensorView v = ew.view();
  const uint64_t rows = v.layout.rows, cols = v.layout.cols;
  const std::vector<float> x = random_normal(n_tokens * cols, seed);
  const std::vector<float> bias = random_normal(rows, seed + 1);

  auto w = gpu.prepare_weight(v);
  DeviceFloats dx(gpu, x), dbias(gpu, bias), dy(gpu, n_tokens * rows);
  gpu.linear(*w, dx.get(), n_tokens, with_bias ? dbias.get() : nullptr, dy.get());
  const std::vector<float> y = dy.download();

  auto cw = cpu.prepare_weight(v);
  std::vector<float> y_cpu(n_tokens * rows);
  cpu.linear(*cw, x.data(), n_tokens, with_bias ? bias.data() : nullptr, y_cpu.data());

  const LinearReference ref = reference_linear(v, x, n_tokens, rows_to_check(rows, n_random_rows, seed));
  Outcome o;
  for (size_t t = 0; t < n_tokens; ++t)
    for (size_t i = 0; i < ref.rows.size(); ++i) {
      const uint64_t r = ref.rows[i];
      const double expect = ref.y[t][i] + (with_bias ? double(bias[r]) : 0.0);
      const double bias_term = with_bias ? 2.0 * kU * std::fabs(expect) : 0.0;
      const double tol = gpu_bound(path, v.layout.value_type, cols, n_tokens, ref.abs[t][i], ref.w_abs_sum[i],
                                   ref.x_abs_sum[t]) + bias_term + 1e-30;
      const double got = y[t * rows + r];
      const double err = std::fabs(got - expect);
      o.worst = std::max(o.worst, err / tol);
      ++o.checked;
      if (!(err <= tol)) {
        if (o.beyond_reference == 0)
          MESSAGE("first output beyond the bound: t=" << t << " row=" << r << " got " << got << " want " << expect
                                                      << " tol " << tol);
        ++o.beyond_reference;
      }
      const double tol_cpu = tol + cpu_bound(cols, ref.abs[t][i]) + bias_term;
      if (!(std::fabs(got - double(y_cpu[t * rows + r])) <= tol_cpu)) ++o.beyond_cpu;
    }
  return o;
}

}  // namespace

GPU_TEST_CASE("cuda linear: exactly representable products and sums come out exact on every path") {
  REQUIRE_GPU();
  struct Config {
    cuda::LinearPath path;
    size_t panel_bytes;  // DecodeGemm: 4 KiB forces panels of one or a few rows
    const char* name;
    cuda::FusedKernel kernel = cuda::FusedKernel::Wide16;
  };
  const Config configs[] = {{cuda::LinearPath::Fused, 0, "fused"},
                            {cuda::LinearPath::Fused, 0, "fused, previous kernels", cuda::FusedKernel::WarpPerRow},
                            {cuda::LinearPath::DecodeGemm, 0, "decode-gemm"},
                            {cuda::LinearPath::DecodeGemm, 4096, "decode-gemm, 4 KiB panels"},
                            {cuda::LinearPath::Auto, 0, "auto"}};
  const Shape shapes[] = {{1, 1}, {3, 63}, {65, 127}, {127, 65}, {5, 4097}, {33, 4096}, {300, 200}, {4097, 3}};
  size_t counter = 0;
  for (const Config& cfg : configs) {
    auto gpu = gpu_backend(cfg.path, cfg.panel_bytes, cfg.kernel);
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
      for (ValueType vt : kValueTypes)
        for (const Shape& s : shapes)
          for (double sp : {0.0, 0.5, 0.9}) {
            if (enc == Encoding::Dense && sp > 0.0) continue;  // exact_weights never makes a 0 itself
            ++counter;
            const size_t T = kTokenCounts[counter % std::size(kTokenCounts)];
            const uint32_t g = kGroupSizes[counter % std::size(kGroupSizes)];
            const uint32_t seed = uint32_t(1000 + counter);
            CAPTURE(cfg.name);
            CAPTURE(to_string(enc));
            CAPTURE(to_string(vt));
            CAPTURE(s.rows);
            CAPTURE(s.cols);
            CAPTURE(sp);
            CAPTURE(T);
            CAPTURE(g);
            const auto wf = exact_weights(s.rows, s.cols, sp, vt, g, seed);
            const EncodedWeight ew = encode(wf, s.rows, s.cols, enc, vt, g);
            const TensorView v = ew.view();
            // The construction's promise, checked on what the format actually decodes.
            std::vector<float> decoded(s.rows * s.cols);
            decode_rows_f32(v, 0, s.rows, decoded.data());
            bool representable = true;
            for (float d : decoded) representable &= std::fabs(d) < 8.0f && std::ldexp(d, 5) == std::trunc(std::ldexp(d, 5));
            REQUIRE(representable);

            const std::vector<float> x = random_eighths(T * s.cols, seed, 4);
            const std::vector<float> bias = random_eighths(s.rows, seed + 1, 8);
            auto w = gpu->prepare_weight(v);
            DeviceFloats dx(*gpu, x), dbias(*gpu, bias), dy(*gpu, T * s.rows);
            gpu->linear(*w, dx.get(), T, dbias.get(), dy.get());
            const std::vector<float> y = dy.download();
            size_t inexact = 0;
            for (size_t t = 0; t < T; ++t)
              for (uint64_t r = 0; r < s.rows; ++r) {
                double sum = bias[r];
                for (uint64_t c = 0; c < s.cols; ++c) sum += double(decoded[r * s.cols + c]) * double(x[t * s.cols + c]);
                if (double(y[t * s.rows + r]) != sum) {
                  if (inexact == 0) MESSAGE("t=" << t << " row=" << r << ": got " << y[t * s.rows + r] << " want " << sum);
                  ++inexact;
                }
              }
            CHECK(inexact == 0);
          }
  }
}

// Edge shapes, exact arithmetic (as above): rows fewer than a fused block (8) and one more than it,
// columns on both sides of 64, the fused tile (1024) and the index block (4096), whole rows
// without a stored value, 0 % and 100 % sparsity, int4 groups of 32, 64 and 128 columns (int8g
// also 48 and 7), every token count 1..8 of the fused kernel, and DecodeGemm with panels of a few rows.
GPU_TEST_CASE("cuda linear: edge shapes — short rows, empty rows, 0/100 %, groups 32/64/128 (int8g 48, 7), T 1..8") {
  REQUIRE_GPU();
  const Shape shapes[] = {{1, 64}, {7, 65}, {9, 1023}, {2, 1025}, {3, 4095}, {6, 4096}, {9, 4097}, {5, 63}};
  size_t counter = 0;
  struct Config {
    cuda::LinearPath path;
    size_t panel_bytes;
    cuda::FusedKernel kernel;
  };
  for (const auto& [path, panel, kernel] : {Config{cuda::LinearPath::Fused, 0, cuda::FusedKernel::Wide16},
                                            Config{cuda::LinearPath::Fused, 0, cuda::FusedKernel::WarpPerRow},
                                            Config{cuda::LinearPath::DecodeGemm, 4096, cuda::FusedKernel::Wide16}}) {
    auto gpu = gpu_backend(path, panel, kernel);
    for (ValueType vt : kValueTypes)
      for (const Shape& s : shapes)
        for (double sp : {0.0, 0.5, 1.0}) {
          ++counter;
          const Encoding enc = sp == 0.0 && counter % 2 ? Encoding::Dense : Encoding::Bitmap;
          const size_t T = 1 + counter % 8;
          const uint32_t g = edge_group(vt, counter);
          const uint32_t seed = uint32_t(5000 + counter);
          CAPTURE(path_name(path));
          CAPTURE(int(kernel));
          CAPTURE(to_string(enc));
          CAPTURE(to_string(vt));
          CAPTURE(s.rows);
          CAPTURE(s.cols);
          CAPTURE(sp);
          CAPTURE(T);
          CAPTURE(g);
          auto wf = exact_weights(s.rows, s.cols, sp, vt, g, seed);
          if (enc == Encoding::Bitmap)  // every third row (from row 1) stores nothing at all
            for (uint64_t r = 1; r < s.rows; r += 3) std::fill(wf.begin() + r * s.cols, wf.begin() + (r + 1) * s.cols, 0.0f);
          const EncodedWeight ew = encode(wf, s.rows, s.cols, enc, vt, g);
          const TensorView v = ew.view();
          std::vector<float> decoded(s.rows * s.cols);
          decode_rows_f32(v, 0, s.rows, decoded.data());
          bool representable = true;
          for (float d : decoded) representable &= std::fabs(d) < 8.0f && std::ldexp(d, 5) == std::trunc(std::ldexp(d, 5));
          REQUIRE(representable);
          const std::vector<float> x = random_eighths(T * s.cols, seed, 4);
          const std::vector<float> bias = random_eighths(s.rows, seed + 1, 8);
          auto w = gpu->prepare_weight(v);
          DeviceFloats dx(*gpu, x), dbias(*gpu, bias), dy(*gpu, T * s.rows);
          gpu->linear(*w, dx.get(), T, counter % 2 ? dbias.get() : nullptr, dy.get());
          const std::vector<float> y = dy.download();
          size_t inexact = 0;
          for (size_t t = 0; t < T; ++t)
            for (uint64_t r = 0; r < s.rows; ++r) {
              double sum = counter % 2 ? double(bias[r]) : 0.0;
              for (uint64_t c = 0; c < s.cols; ++c) sum += double(decoded[r * s.cols + c]) * double(x[t * s.cols + c]);
              inexact += double(y[t * s.rows + r]) != sum;
            }
          CHECK(inexact == 0);
        }
  }
}

// The 16-byte kernels (fused_linear16.cu), exact arithmetic as above, on the shapes that pick each of
// their forms: dense rows whose byte length is a multiple of 16 (the 16-byte form: 64, 96, 1024, 2048,
// 4128 and 4160 columns for every type, int4 groups of 32/64/128) and rows that are not (100, 1000:
// the element-wise form for f16/int8/int4); row counts that leave the last block partly idle
// (dense blocks own 1, 2 or 4 rows, bitmap blocks 2, 4 or 8); bitmap rows of one to five 1024-column
// steps, with empty rows, at 0, 50, 70 and 100 % sparsity; every token count 1..8; int8g also in
// groups of 48 and 7.
GPU_TEST_CASE("cuda linear: 16-byte kernels — both forms, partial blocks, 0/50/70/100 %, groups 32/64/128, T 1..8") {
  REQUIRE_GPU();
  const Shape shapes[] = {{3, 64}, {5, 96}, {9, 1024}, {2, 2048}, {4, 4160}, {3, 4128}, {17, 256}, {6, 100}, {3, 1000}};
  auto gpu = gpu_backend(cuda::LinearPath::Fused);
  size_t counter = 0;
  for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
    for (ValueType vt : kValueTypes)
      for (const Shape& s : shapes)
        for (double sp : {0.0, 0.5, 0.7, 1.0}) {
          if (enc == Encoding::Dense && sp > 0.0) continue;
          ++counter;
          const size_t T = 1 + counter % 8;
          const uint32_t g = edge_group(vt, counter);
          const uint32_t seed = uint32_t(7000 + counter);
          CAPTURE(to_string(enc));
          CAPTURE(to_string(vt));
          CAPTURE(s.rows);
          CAPTURE(s.cols);
          CAPTURE(sp);
          CAPTURE(T);
          CAPTURE(g);
          auto wf = exact_weights(s.rows, s.cols, sp, vt, g, seed);
          if (enc == Encoding::Bitmap && s.rows > 2)  // row 1 stores nothing
            std::fill(wf.begin() + s.cols, wf.begin() + 2 * s.cols, 0.0f);
          const EncodedWeight ew = encode(wf, s.rows, s.cols, enc, vt, g);
          const TensorView v = ew.view();
          std::vector<float> decoded(s.rows * s.cols);
          decode_rows_f32(v, 0, s.rows, decoded.data());
          const std::vector<float> x = random_eighths(T * s.cols, seed, 4);
          const std::vector<float> bias = random_eighths(s.rows, seed + 1, 8);
          auto w = gpu->prepare_weight(v);
          DeviceFloats dx(*gpu, x), dbias(*gpu, bias), dy(*gpu, T * s.rows);
          const bool with_bias = counter % 2 == 0;
          gpu->linear(*w, dx.get(), T, with_bias ? dbias.get() : nullptr, dy.get());
          const std::vector<float> y = dy.download();
          size_t inexact = 0;
          for (size_t t = 0; t < T; ++t)
            for (uint64_t r = 0; r < s.rows; ++r) {
              double sum = with_bias ? double(bias[r]) : 0.0;
              for (uint64_t c = 0; c < s.cols; ++c) sum += double(decoded[r * s.cols + c]) * double(x[t * s.cols + c]);
              if (double(y[t * s.rows + r]) != sum) {
                if (inexact == 0) MESSAGE("t=" << t << " row=" << r << ": got " << y[t * s.rows + r] << " want " << sum);
                ++inexact;
              }
            }
          CHECK(inexact == 0);
        }
}

// The 16-byte kernels on random values against the reference and the CPU backend, in both the
// 16-byte and the element-wise dense forms and at 50 / 70 % bitmap sparsity, and the previous
// kernels on the same weights (the comparison benchmark's baseline stays correct).
GPU_TEST_CASE("cuda linear: 16-byte and previous fused kernels on random values, T 1..8") {
  REQUIRE_GPU();
  auto cpu = make_exact_cpu_backend(0);
  const Shape shapes[] = {{37, 4096}, {11, 2080}, {7, 1000}};
  size_t counter = 0;
  for (cuda::FusedKernel kernel : {cuda::FusedKernel::Wide16, cuda::FusedKernel::WarpPerRow}) {
    auto gpu = gpu_backend(cuda::LinearPath::Fused, 0, kernel);
    for (const Shape& s : shapes)
      for (ValueType vt : kValueTypes)
        for (const auto& [enc, sp] : {std::pair{Encoding::Dense, 0.0}, std::pair{Encoding::Bitmap, 0.5},
                                      std::pair{Encoding::Bitmap, 0.7}}) {
          ++counter;
          const size_t T = 1 + counter % 8;
          const uint32_t g = kGroupSizes[2 + counter % 2];  // 32 or 128
          CAPTURE(int(kernel));
          CAPTURE(to_string(enc));
          CAPTURE(to_string(vt));
          CAPTURE(s.rows);
          CAPTURE(s.cols);
          CAPTURE(sp);
          CAPTURE(T);
          const auto w = random_weights(s.rows, s.cols, sp, uint32_t(900 + counter));
          const Int4Params ip = (counter / 3) % 2 ? Int4Params::Coded6 : Int4Params::F16;  // int4k: every other
          CAPTURE(int(ip));
          const EncodedWeight ew = encode(w, s.rows, s.cols, enc, vt, g, ip);
          const Outcome o = check_random(*gpu, *cpu, cuda::LinearPath::Fused, ew, T, counter % 2 == 1, uint32_t(counter));
          CAPTURE(o.worst);
          CHECK(o.beyond_reference == 0);
          CHECK(o.beyond_cpu == 0);
        }
  }
}

// Dense int4's 16-byte kernel has one instance per parameter format (f16 or int4k's codes, a template
// parameter) and per token bucket (1, 2, 4, 8 accumulators; 8 or 4 rows a block): every one of them.
GPU_TEST_CASE("cuda linear: dense int4 and int4k, every 16-byte kernel instance, T 1..8") {
  REQUIRE_GPU();
  auto cpu = make_exact_cpu_backend(0);
  auto gpu = gpu_backend(cuda::LinearPath::Fused);
  uint32_t seed = 4000;
  for (Int4Params ip : {Int4Params::F16, Int4Params::Coded6})
    for (uint32_t g : {32u, 128u})
      for (size_t T : {1, 2, 3, 5, 8}) {
        CAPTURE(int(ip));
        CAPTURE(g);
        CAPTURE(T);
        const auto w = random_weights(21, 2048, 0.0, ++seed);
        const EncodedWeight ew = encode(w, 21, 2048, Encoding::Dense, ValueType::I4, g, ip);
        const Outcome o = check_random(*gpu, *cpu, cuda::LinearPath::Fused, ew, T, T % 2 == 1, seed);
        CAPTURE(o.worst);
        CHECK(o.beyond_reference == 0);
        CHECK(o.beyond_cpu == 0);
      }
}

// Dense and bitmap int8g through every 16-byte kernel instance (1, 2, 4, 8 accumulators) in groups
// of 16, 32 and 64 (the 16-byte dense form; the bitmap kernel's one-scale-a-lane walk), 48 (dense
// 16-byte form, bitmap per-column groups) and 7, 33 (the element-wise dense form, per-column
// groups), on random values against the reference and the CPU backend, T 1..8.
GPU_TEST_CASE("cuda linear: int8g, every fused kernel instance and group path, T 1..8") {
  REQUIRE_GPU();
  auto cpu = make_exact_cpu_backend(0);
  uint32_t seed = 4500;
  for (cuda::FusedKernel kernel : {cuda::FusedKernel::Wide16, cuda::FusedKernel::WarpPerRow}) {
    auto gpu = gpu_backend(cuda::LinearPath::Fused, 0, kernel);
    for (const auto& [enc, sp] : {std::pair{Encoding::Dense, 0.0}, std::pair{Encoding::Bitmap, 0.5}})
      for (uint32_t g : {16u, 32u, 48u, 64u, 7u, 33u})
        for (size_t T : {1, 2, 3, 5, 8}) {
          ++seed;
          if (kernel == cuda::FusedKernel::WarpPerRow && T != 1 && T != 8) continue;  // its 1- and 8-token buckets
          CAPTURE(int(kernel));
          CAPTURE(to_string(enc));
          CAPTURE(g);
          CAPTURE(T);
          const auto w = random_weights(13, 2096, sp, seed);  // 2096 = 131 chunks of 16: a ragged warp
          const EncodedWeight ew = encode(w, 13, 2096, enc, ValueType::I8G, g);
          const Outcome o = check_random(*gpu, *cpu, cuda::LinearPath::Fused, ew, T, T % 2 == 1, seed);
          CAPTURE(o.worst);
          CHECK(o.checked == T * 13);
          CHECK(o.beyond_reference == 0);
          CHECK(o.beyond_cpu == 0);
        }
  }
}

GPU_TEST_CASE("cuda linear: random values within the derived bound, every path, encoding, type and shape") {
  REQUIRE_GPU();
  auto cpu = make_exact_cpu_backend(0);
  const Shape shapes[] = {{1, 1}, {3, 3}, {65, 127}, {127, 65}, {3, 4097}, {65, 4097}, {4097, 3}, {2, 8193}};
  size_t counter = 0;
  for (cuda::LinearPath path : {cuda::LinearPath::Fused, cuda::LinearPath::DecodeGemm, cuda::LinearPath::Auto}) {
    auto gpu = gpu_backend(path);
    for (Encoding enc : {Encoding::Dense, Encoding::Bitmap})
      for (ValueType vt : kValueTypes)
        for (const Shape& s : shapes)
          for (double sp : {0.0, 0.5, 0.9, 1.0}) {
            if (enc == Encoding::Dense && sp > 0.5) continue;
            ++counter;
            const size_t T = kTokenCounts[counter % std::size(kTokenCounts)];
            const uint32_t g = kGroupSizes[counter % std::size(kGroupSizes)];
            const bool with_bias = counter % 3 == 0;
            CAPTURE(path_name(path));
            CAPTURE(to_string(enc));
            CAPTURE(to_string(vt));
            CAPTURE(s.rows);
            CAPTURE(s.cols);
            CAPTURE(sp);
            CAPTURE(T);
            CAPTURE(g);
            CAPTURE(with_bias);
            const auto w = random_weights(s.rows, s.cols, sp, uint32_t(counter));
            const Int4Params ip = (counter / 2) % 2 ? Int4Params::Coded6 : Int4Params::F16;  // int4k: every other
            CAPTURE(int(ip));
            const EncodedWeight ew = encode(w, s.rows, s.cols, enc, vt, g, ip);
            const Outcome o = check_random(*gpu, *cpu, path, ew, T, with_bias, uint32_t(counter) * 7);
            CAPTURE(o.worst);
            CHECK(o.beyond_reference == 0);
            CHECK(o.beyond_cpu == 0);
          }
  }
}

GPU_TEST_CASE("cuda linear: every token count 1..17, 33, 64 on every path and value type") {
  REQUIRE_GPU();
  auto cpu = make_exact_cpu_backend(0);
  const uint64_t rows = 127, cols = 4097;
  const auto w = random_weights(rows, cols, 0.5, 21);
  std::vector<size_t> token_counts;
  for (size_t t = 1; t <= 17; ++t) token_counts.push_back(t);
  token_counts.push_back(33);
  token_counts.push_back(64);
  for (cuda::LinearPath path : {cuda::LinearPath::Fused, cuda::LinearPath::DecodeGemm, cuda::LinearPath::Auto}) {
    auto gpu = gpu_backend(path);
    for (ValueType vt : kValueTypes) {
      const EncodedWeight ew = encode(w, rows, cols, Encoding::Bitmap, vt, 64);
      for (size_t T : token_counts) {
        CAPTURE(path_name(path));
        CAPTURE(to_string(vt));
        CAPTURE(T);
        const Outcome o = check_random(*gpu, *cpu, path, ew, T, T % 2 == 1, uint32_t(T));
        CAPTURE(o.worst);
        CHECK(o.beyond_reference == 0);
        CHECK(o.beyond_cpu == 0);
      }
    }
  }
}

GPU_TEST_CASE("cuda linear: 11008 x 4096 and 4096 x 11008 weights at 50 %, T 1, 8, 64 (sampled rows)") {
  REQUIRE_GPU();
  auto cpu = make_exact_cpu_backend(0);
  auto gpu = gpu_backend(cuda::LinearPath::Auto);
  const Shape shapes[] = {{11008, 4096}, {4096, 11008}};
  uint32_t seed = 300;
  for (const Shape& s : shapes) {
    const auto w = random_weights(s.rows, s.cols, 0.5, ++seed);
    for (ValueType vt : kValueTypes) {
      const EncodedWeight ew = encode(w, s.rows, s.cols, Encoding::Bitmap, vt, vt == ValueType::I8G ? 32 : 128);
      for (size_t T : {size_t(1), size_t(8), size_t(64)}) {
        CAPTURE(s.rows);
        CAPTURE(s.cols);
        CAPTURE(to_string(vt));
        CAPTURE(T);
        const Outcome o = check_random(*gpu, *cpu, cuda::LinearPath::Auto, ew, T, true, ++seed, 64);
        CAPTURE(o.worst);
        CHECK(o.checked == T * 67);
        CHECK(o.beyond_reference == 0);
        CHECK(o.beyond_cpu == 0);
      }
    }
    // Dense f16 goes to cuBLAS in place (no decode) for T > 8 and through the fused kernel for T ≤ 8.
    const EncodedWeight dense = encode(w, s.rows, s.cols, Encoding::Dense, ValueType::F16);
    for (size_t T : {size_t(1), size_t(64)}) {
      CAPTURE(T);
      const Outcome o = check_random(*gpu, *cpu, cuda::LinearPath::Auto, dense, T, false, ++seed, 64);
      CHECK(o.beyond_reference == 0);
      CHECK(o.beyond_cpu == 0);
    }
  }
}

TEST_CASE("cuda linear: the fused bound is tight enough to see one wrong weight (host arithmetic, no device)") {
  // A weight differing from the true one in a single element by δ changes y by |δ·x_c|. With
  // 2500 stored values per row the bound is ~ (157 + 6)·u·A ≈ 1e-5·A while one element's share
  // of A is ~ A/2500: a swap of two values or a lost nibble is hundreds of bounds away.
  const auto w = random_weights(4, 5000, 0.5, 3);
  const EncodedWeight ew = encode(w, 4, 5000, Encoding::Bitmap, ValueType::F16);
  const std::vector<float> x = random_normal(5000, 4);
  const LinearReference ref = reference_linear(ew.view(), x, 1, {0, 1, 2, 3});
  for (size_t i = 0; i < 4; ++i)
    CHECK(gpu_bound(cuda::LinearPath::Fused, ValueType::F16, 5000, 1, ref.abs[0][i], ref.w_abs_sum[i],
                    ref.x_abs_sum[0]) < ref.abs[0][i] / 25000);
}
