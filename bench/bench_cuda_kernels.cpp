// bench_cuda_kernels: CUDA weight-kernel throughput against the measured device bandwidth. Prints
// tables (never pass/fail): cudaMemcpy device-to-device GB/s (read + write); then per weight
// shape (4096×4096, 11008×4096, 28672×8192) and value type, bitmap-encoded at 50 % sparsity: the
// whole-tensor decode rate (compressed bytes read + dense bytes written, per second) into the
// type the DecodeGemm path multiplies in, the fused decode+GEMV time for 1 and 8 tokens with its
// effective GB/s (compressed bytes / time), and the prefill path (decode panels + cuBLAS) for 64
// tokens; and the same GEMV on the dense f16 weight (cuBLAS, and the fused kernel) for reference.
//
// Every timing is the median of --iters runs, each after overwriting a buffer twice the L2 size,
// so the weight is read from device memory as it is when a model's layers stream through.
// Usage: bench_cuda_kernels [--quick] [--iters N]   (--quick: skip 28672×8192)
// Without a CUDA device it prints "no CUDA device (<reason>)" and exits 0.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "endor/cuda_backend.h"
#include "endor/format.h"
#include "endor/kernels.h"

using namespace endor;

namespace {

struct Args {
  bool quick = false;
  int iters = 20;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--quick") {
      a.quick = true;
    } else if (s == "--iters" && i + 1 < argc) {
      a.iters = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_cuda_kernels [--quick] [--iters N]\n");
      std::exit(2);
    }
  }
  return a;
}

// ±U(1e-3, 1), each element zeroed with probability 1/2 (xorshift: 235M elements in a few seconds).
std::vector<float> half_sparse_weights(uint64_t rows, uint64_t cols, uint64_t seed) {
  std::vector<float> w(rows * cols);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& v : w) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const float mag = 1e-3f + float(s >> 40) * (0.999f / float(1ull << 24));
    v = (s & 1) ? 0.0f : ((s & 2) ? mag : -mag);
  }
  return w;
}

struct Shape {
  uint64_t rows, cols;
};

struct ValueCase {
  ValueType vt;
  const char* name;
  size_t dense_bytes;  // element size of the dense type decode writes (the GEMM's type)
};

double gbps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }

std::unique_ptr<Backend> backend_with(cuda::LinearPath path) {
  cuda::Options opt;
  opt.linear_path = path;
  return make_cuda_backend(opt);
}

int run(const Args& args) {
  std::string why;
  if (!cuda_device_available(&why)) {
    std::printf("no CUDA device (%s)\n", why.c_str());
    return 0;
  }
  auto fused = backend_with(cuda::LinearPath::Fused);
  auto gemm = backend_with(cuda::LinearPath::DecodeGemm);
  const cuda::DeviceInfo info = cuda::device_info(*fused);
  std::printf("device: %s (sm_%d%d, %d SMs, %.1f GiB, L2 %.0f MiB)\n", info.name.c_str(), info.cc_major, info.cc_minor,
              info.sm_count, double(info.global_bytes) / double(1ull << 30), double(info.l2_bytes) / double(1 << 20));
  const double copy_gbps = cuda::measure_d2d_copy_gbps(*fused, size_t(1) << 30);
  std::printf("cudaMemcpy device-to-device, 1 GiB: %.0f GB/s (read + write)\n\n", copy_gbps);

  const ValueCase values[] = {{ValueType::F16, "f16", 2},
                              {ValueType::BF16, "bf16", 2},
                              {ValueType::F32, "f32", 4},
                              {ValueType::I8, "int8", 2},
                              {ValueType::I4, "int4 g128", 2},
                              {ValueType::I8G, "int8g g32", 2}};
  std::vector<Shape> shapes = {{4096, 4096}, {11008, 4096}};
  if (!args.quick) shapes.push_back({28672, 8192});

  std::printf("Bitmap at 50 %% sparsity. decode: compressed read + dense written (f16; bf16/f32 for those types);\n"
              "GEMV: effective GB/s = compressed bytes / time; %% = of the device-to-device copy rate.\n\n");
  std::printf("%-12s %-10s %9s %7s | %9s %8s %5s | %9s %8s %5s | %9s | %10s\n", "shape", "values", "MB", "vs f16",
              "decode ms", "GB/s", "%", "GEMV1 us", "GB/s", "%", "GEMV8 us", "T=64 ms");
  for (const Shape& s : shapes) {
    const std::vector<float> w = half_sparse_weights(s.rows, s.cols, s.rows + s.cols);
    const double dense_f16_bytes = double(s.rows * s.cols * 2);
    float* x = fused->alloc(64 * s.cols);
    float* y = fused->alloc(64 * s.rows);
    {
      std::vector<float> hx(64 * s.cols);
      for (size_t i = 0; i < hx.size(); ++i) hx[i] = float(int(i % 17) - 8) / 8.0f;
      fused->upload(x, hx.data(), hx.size());
      fused->synchronize();
    }
    char shape_name[32];
    std::snprintf(shape_name, sizeof shape_name, "%llux%llu", (unsigned long long)s.rows, (unsigned long long)s.cols);

    for (const ValueCase& vc : values) {
      EncodeOptions opt;
      opt.encoding = Encoding::Bitmap;
      opt.value_type = vc.vt;
      opt.group_size = vc.vt == ValueType::I4 ? 128 : vc.vt == ValueType::I8G ? 32 : 0;
      const EncodedTensor enc = encode_tensor(w.data(), {s.rows, s.cols}, opt);
      TensorView view;
      view.layout = enc.layout;
      view.data = enc.bytes.data();
      const double compressed = double(enc.layout.total_bytes);

      // Both backends share the device; x and y belong to `fused`. Each timing waits for its own
      // work, so the two backends' streams never overlap on y.
      auto wf = fused->prepare_weight(view);
      auto wg = gemm->prepare_weight(view);
      void* out = cuda::alloc_bytes(*fused, s.rows * s.cols * vc.dense_bytes);
      const double decode_ms = cuda::time_device_ms(
          *fused,
          [&] {
            if (vc.vt == ValueType::F32)
              cuda::decode_to_f32(*fused, *wf, static_cast<float*>(out));
            else if (vc.vt == ValueType::BF16)
              cuda::decode_to_bf16(*fused, *wf, static_cast<uint16_t*>(out));
            else
              cuda::decode_to_f16(*fused, *wf, static_cast<uint16_t*>(out));
          },
          args.iters, true);
      cuda::free_bytes(*fused, out);
      const double decode_rate = gbps(compressed + double(s.rows * s.cols * vc.dense_bytes), decode_ms);
      const double gemv1_ms =
          cuda::time_device_ms(*fused, [&] { fused->linear(*wf, x, 1, nullptr, y); }, args.iters, true);
      const double gemv8_ms =
          cuda::time_device_ms(*fused, [&] { fused->linear(*wf, x, 8, nullptr, y); }, args.iters, true);
      const double prefill_ms =
          cuda::time_device_ms(*gemm, [&] { gemm->linear(*wg, x, 64, nullptr, y); }, std::min(args.iters, 10), true);
      std::printf("%-12s %-10s %9.1f %6.1f%% | %9.3f %8.0f %4.0f%% | %9.1f %8.0f %4.0f%% | %9.1f | %10.3f\n", shape_name,
                  vc.name, compressed / 1e6, 100.0 * compressed / dense_f16_bytes, decode_ms, decode_rate,
                  100.0 * decode_rate / copy_gbps, gemv1_ms * 1e3, gbps(compressed, gemv1_ms),
                  100.0 * gbps(compressed, gemv1_ms) / copy_gbps, gemv8_ms * 1e3, prefill_ms);
      std::fflush(stdout);
    }

    // The dense f16 weight: cuBLAS GEMV in place (DecodeGemm path, no decode) and the fused kernel.
    EncodeOptions dense_opt;
    dense_opt.encoding = Encoding::Dense;
    dense_opt.value_type = ValueType::F16;
    const EncodedTensor dense = encode_tensor(w.data(), {s.rows, s.cols}, dense_opt);
    TensorView dv;
    dv.layout = dense.layout;
    dv.data = dense.bytes.data();
    auto dg = gemm->prepare_weight(dv);
    auto df = fused->prepare_weight(dv);
    const double cublas1_ms = cuda::time_device_ms(*gemm, [&] { gemm->linear(*dg, x, 1, nullptr, y); }, args.iters, true);
    const double fused1_ms = cuda::time_device_ms(*fused, [&] { fused->linear(*df, x, 1, nullptr, y); }, args.iters, true);
    const double cublas64_ms = cuda::time_device_ms(*gemm, [&] { gemm->linear(*dg, x, 64, nullptr, y); }, 10, true);
    std::printf("%-12s %-10s %9.1f %6.1f%% | %9s %8s %5s | %9.1f %8.0f %4.0f%% | %9s | %10.3f   (cuBLAS GEMV)\n",
                shape_name, "dense f16", dense_f16_bytes / 1e6, 100.0, "-", "-", "-", cublas1_ms * 1e3,
                gbps(dense_f16_bytes, cublas1_ms), 100.0 * gbps(dense_f16_bytes, cublas1_ms) / copy_gbps, "-",
                cublas64_ms);
    std::printf("%-12s %-10s %9.1f %6.1f%% | %9s %8s %5s | %9.1f %8.0f %4.0f%% | %9s | %10s   (fused kernel)\n",
                shape_name, "dense f16", dense_f16_bytes / 1e6, 100.0, "-", "-", "-", fused1_ms * 1e3,
                gbps(dense_f16_bytes, fused1_ms), 100.0 * gbps(dense_f16_bytes, fused1_ms) / copy_gbps, "-", "-");
    std::printf("\n");
    fused->free(x);
    fused->free(y);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
