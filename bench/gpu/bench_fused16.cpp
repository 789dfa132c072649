// bench_fused16: the one-token kernel table of issue 26 (bench/gpu/device.sh runs it). Prints a
// table and, with --json FILE, one JSON record a row; never pass/fail.
//
// For each weight shape (4096×4096, 11008×4096, 4096×11008, 14336×4096, 128256×4096) and stored form
// (bitmap f16/bf16/int8/int4 g128 at 50 % and 70 % sparsity, int8g g32 at 50 %; dense f16/bf16/int8/
// int4 g128/int8g g32): the
// fused product for T = 1 (and T = 8) by the 16-byte kernels (cuda::FusedKernel::Wide16) and the
// previous ones (WarpPerRow), and per shape cuBLAS's GEMV on the dense f16 weight. Effective GB/s =
// the weight's stored bytes / time; % = of the device-to-device copy rate (read + write).
//
// Two timings a row:
//   us         steady state: back-to-back launches over a ring of copies of the weight, at least
//              4× the L2 size in all, so each launch reads its weight from device memory (as the
//              layers of a model do one after the other); the time a launch, median of 5 rounds.
//   us_single  one launch after the L2 is overwritten (bench_cuda_kernels' method, the
//              2026-11-26 H200 table): adds the launch latency and the write-back of the dirty
//              flush buffer, which dominate small weights.
//
// Usage: bench_fused16 [--json FILE] [--iters N] [--deadline SECONDS] [--shapes 4096x4096,...]
// Without a CUDA device it prints "no CUDA device (<reason>)" and exits 0.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "endor/cuda_backend.h"
#include "endor/format.h"
#include "endor/kernels.h"

using namespace endor;

namespace {

struct Shape {
  uint64_t rows, cols;
};

struct Args {
  std::string json;
  int iters = 10;
  double deadline_s = 1e9;
  std::vector<Shape> shapes = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {14336, 4096}, {128256, 4096}};
};

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: bench_fused16 [--json FILE] [--iters N] [--deadline SECONDS] [--shapes RxC,...]\n");
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (i + 1 >= argc) usage();
    if (s == "--json") {
      a.json = argv[++i];
    } else if (s == "--iters") {
      a.iters = std::max(1, std::atoi(argv[++i]));
    } else if (s == "--deadline") {
      a.deadline_s = std::atof(argv[++i]);
    } else if (s == "--shapes") {
      a.shapes.clear();
      std::stringstream ss(argv[++i]);
      std::string item;
      while (std::getline(ss, item, ',')) {
        unsigned long long r = 0, c = 0;
        if (std::sscanf(item.c_str(), "%llux%llu", &r, &c) != 2 || r == 0 || c == 0) usage();
        a.shapes.push_back({r, c});
      }
    } else {
      usage();
    }
  }
  return a;
}

// Random weights: ±U(1e-3, 1), each element zero with probability `sparsity` (xorshift, fast for
// the 525 M elements of the 128256×4096 head).
std::vector<float> random_weights(uint64_t rows, uint64_t cols, double sparsity, uint64_t seed) {
  std::vector<float> w(rows * cols);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  const uint64_t zero_below = uint64_t(sparsity * double(1u << 16));
  for (float& v : w) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const float mag = 1e-3f + float(s >> 40) * (0.999f / float(1ull << 24));
    v = ((s >> 8) & 0xFFFF) < zero_below ? 0.0f : ((s & 2) ? mag : -mag);
  }
  return w;
}

struct Form {
  Encoding enc;
  ValueType vt;
  double sparsity;
  const char* values;
};

const Form kForms[] = {
    {Encoding::Bitmap, ValueType::F16, 0.5, "f16"},  {Encoding::Bitmap, ValueType::BF16, 0.5, "bf16"},
    {Encoding::Bitmap, ValueType::I8, 0.5, "int8"},  {Encoding::Bitmap, ValueType::I4, 0.5, "int4"},
    {Encoding::Bitmap, ValueType::I8G, 0.5, "int8g"},  // int8g in groups of 32 (llama.cpp's Q8_0 grid)
    {Encoding::Bitmap, ValueType::F16, 0.7, "f16"},  {Encoding::Bitmap, ValueType::BF16, 0.7, "bf16"},
    {Encoding::Bitmap, ValueType::I8, 0.7, "int8"},  {Encoding::Bitmap, ValueType::I4, 0.7, "int4"},
    {Encoding::Dense, ValueType::F16, 0.0, "f16"},   {Encoding::Dense, ValueType::BF16, 0.0, "bf16"},
    {Encoding::Dense, ValueType::I8, 0.0, "int8"},   {Encoding::Dense, ValueType::I4, 0.0, "int4"},
    {Encoding::Dense, ValueType::I8G, 0.0, "int8g"},
};

std::unique_ptr<Backend> backend_with(cuda::LinearPath path, cuda::FusedKernel kernel) {
  cuda::Options opt;
  opt.linear_path = path;
  opt.fused_kernel = kernel;
  return make_cuda_backend(opt);
}

struct Timing {
  double us = 0, us_single = 0;
};

// See the file comment: ring = copies of the weight, `b` the backend whose kernels run.
Timing time_kernel(Backend& b, const std::vector<std::unique_ptr<Weight>>& ring, const float* x, size_t n_tokens,
                   float* y, int iters) {
  Timing t;
  const size_t launches = std::max<size_t>(2 * ring.size(), 16);
  const double ring_ms = cuda::time_device_ms(
      b,
      [&] {
        for (size_t i = 0; i < launches; ++i) b.linear(*ring[i % ring.size()], x, n_tokens, nullptr, y);
      },
      5, false);
  t.us = ring_ms * 1e3 / double(launches);
  t.us_single = 1e3 * cuda::time_device_ms(b, [&] { b.linear(*ring[0], x, n_tokens, nullptr, y); }, iters, true);
  return t;
}

int run(const Args& args) {
  std::string why;
  if (!cuda_device_available(&why)) {
    std::printf("no CUDA device (%s)\n", why.c_str());
    return 0;
  }
  const auto t_start = std::chrono::steady_clock::now();
  auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(); };
  auto wide = backend_with(cuda::LinearPath::Fused, cuda::FusedKernel::Wide16);
  auto prev = backend_with(cuda::LinearPath::Fused, cuda::FusedKernel::WarpPerRow);
  auto gemm = backend_with(cuda::LinearPath::DecodeGemm, cuda::FusedKernel::Wide16);
  const cuda::DeviceInfo info = cuda::device_info(*wide);
  const double copy_gbps = cuda::measure_d2d_copy_gbps(*wide, size_t(1) << 30);
  std::printf("device: %s (sm_%d%d, %d SMs, %.1f GiB, L2 %.0f MiB)\n", info.name.c_str(), info.cc_major, info.cc_minor,
              info.sm_count, double(info.global_bytes) / double(1ull << 30), double(info.l2_bytes) / double(1 << 20));
  std::printf("cudaMemcpy device-to-device, 1 GiB: %.0f GB/s (read + write)\n\n", copy_gbps);
  FILE* json = args.json.empty() ? nullptr : std::fopen(args.json.c_str(), "w");
  if (!args.json.empty() && !json) {
    std::fprintf(stderr, "error: cannot write %s\n", args.json.c_str());
    return 1;
  }
  if (json)
    std::fprintf(json, "{\"record\": \"device\", \"device\": \"%s\", \"sm_count\": %d, \"l2_bytes\": %zu, \"copy_gbps\": %.1f}\n",
                 info.name.c_str(), info.sm_count, info.l2_bytes, copy_gbps);

  std::printf("us: steady-state time a launch (ring of copies > 4x L2); single: one launch after an L2 flush.\n"
              "GB/s = stored bytes / us; %% = of the copy rate. new = 16-byte kernels, prev = warp-per-row.\n\n");
  std::printf("%-12s %-6s %-5s %4s %9s | %8s %7s %5s %9s | %8s %7s %5s | %8s %8s\n", "shape", "layout", "value", "sp%",
              "MB", "new us", "GB/s", "%", "single", "prev us", "GB/s", "%", "new T=8", "prev T=8");
  bool stopped = false;
  for (const Shape& s : args.shapes) {
    if (stopped) break;
    char shape_name[32];
    std::snprintf(shape_name, sizeof shape_name, "%llux%llu", (unsigned long long)s.rows, (unsigned long long)s.cols);
    float* x = wide->alloc(8 * s.cols);
    float* y = wide->alloc(8 * s.rows);
    {
      std::vector<float> hx(8 * s.cols);
      for (size_t i = 0; i < hx.size(); ++i) hx[i] = float(int(i % 17) - 8) / 8.0f;
      wide->upload(x, hx.data(), hx.size());
    }
    std::vector<float> w;
    double w_sparsity = -1.0;
    auto emit = [&](const char* layout, const char* values, double sp, const char* kernel, size_t tokens, double bytes,
                    double us, double us_single) {
      if (!json) return;
      const double g = bytes / (us * 1e3);
      std::fprintf(json,
                   "{\"record\": \"kernel\", \"shape\": \"%s\", \"layout\": \"%s\", \"values\": \"%s\", \"sparsity\": %.2f, "
                   "\"kernel\": \"%s\", \"tokens\": %zu, \"bytes\": %.0f, \"us\": %.3f, \"us_single\": %.3f, "
                   "\"effective_gbps\": %.1f, \"pct_copy\": %.1f}\n",
                   shape_name, layout, values, sp, kernel, tokens, bytes, us, us_single, g, 100.0 * g / copy_gbps);
      std::fflush(json);
    };
    for (const Form& f : kForms) {
      if (elapsed_s() > args.deadline_s) {
        std::printf("deadline (%.0f s) reached: stopping\n", args.deadline_s);
        stopped = true;
        break;
      }
      if (w_sparsity != f.sparsity) {
        w = random_weights(s.rows, s.cols, f.sparsity, s.rows * 7 + s.cols + uint64_t(f.sparsity * 100));
        w_sparsity = f.sparsity;
      }
      EncodeOptions opt;
      opt.encoding = f.enc;
      opt.value_type = f.vt;
      opt.group_size = f.vt == ValueType::I4 ? 128 : f.vt == ValueType::I8G ? 32 : 0;
      const EncodedTensor enc = encode_tensor(w.data(), {s.rows, s.cols}, opt);
      TensorView view;
      view.layout = enc.layout;
      view.data = enc.bytes.data();
      const double bytes = double(enc.layout.total_bytes);
      const size_t n_copies =
          std::clamp<size_t>(size_t(std::ceil(4.0 * double(info.l2_bytes) / bytes)), 1, 64);
      std::vector<std::unique_ptr<Weight>> ring;
      for (size_t i = 0; i < n_copies; ++i) ring.push_back(wide->prepare_weight(view));
      const Timing tn = time_kernel(*wide, ring, x, 1, y, args.iters);
      const Timing tp = time_kernel(*prev, ring, x, 1, y, args.iters);
      const Timing tn8 = time_kernel(*wide, ring, x, 8, y, 3);
      const Timing tp8 = time_kernel(*prev, ring, x, 8, y, 3);
      const char* layout = f.enc == Encoding::Bitmap ? "bitmap" : "dense";
      const double gn = bytes / (tn.us * 1e3), gp = bytes / (tp.us * 1e3);
      std::printf("%-12s %-6s %-5s %4.0f %9.1f | %8.1f %7.0f %4.0f%% %9.1f | %8.1f %7.0f %4.0f%% | %8.1f %8.1f\n",
                  shape_name, layout, f.values, 100 * f.sparsity, bytes / 1e6, tn.us, gn, 100 * gn / copy_gbps,
                  tn.us_single, tp.us, gp, 100 * gp / copy_gbps, tn8.us, tp8.us);
      std::fflush(stdout);
      emit(layout, f.values, f.sparsity, "wide16", 1, bytes, tn.us, tn.us_single);
      emit(layout, f.values, f.sparsity, "warp_per_row", 1, bytes, tp.us, tp.us_single);
      emit(layout, f.values, f.sparsity, "wide16", 8, bytes, tn8.us, tn8.us_single);
      emit(layout, f.values, f.sparsity, "warp_per_row", 8, bytes, tp8.us, tp8.us_single);
      if (f.enc == Encoding::Dense && f.vt == ValueType::F16) {  // cuBLAS GEMV on the same dense f16 weight
        const Timing tc = time_kernel(*gemm, ring, x, 1, y, args.iters);
        const double gc = bytes / (tc.us * 1e3);
        std::printf("%-12s %-6s %-5s %4s %9.1f | %8.1f %7.0f %4.0f%% %9.1f |   (cuBLAS GEMV, dense f16)\n", shape_name,
                    "dense", "f16", "0", bytes / 1e6, tc.us, gc, 100 * gc / copy_gbps, tc.us_single);
        emit("dense", "f16", 0.0, "cublas", 1, bytes, tc.us, tc.us_single);
      }
    }
    wide->free(x);
    wide->free(y);
    std::printf("\n");
  }
  if (json) std::fclose(json);
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
