// bench_kernels: CPU weight-kernel throughput against the measured memory bandwidth. Prints
// tables (never pass/fail): STREAM-like read/copy bandwidth; per weight shape and encoding the
// whole-tensor decode rate, the fused decode+GEMV time, its effective GB/s of compressed bytes
// and ratio to the bandwidth floor, the row-decode and decompress-then-dense alternatives; and a
// token-count sweep of the linear paths (where prefill should switch to the panel GEMM).
//
// Weights are replicated into a working set larger than the last-level cache (--ws-mib) and the
// calls rotate through the copies, so every GEMV reads its bytes from DRAM as decode does on a
// real model. Usage: bench_kernels [--threads N] [--ws-mib M] [--quick] [--compute-only] [--probe VT ENC CALLS]
// [--stream ROUNDS [--sparsity S] [--shape RxC]] [--rows [--tokens T] [--kernel-only] [--reps N]] [--only TEXT]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "endor/format.h"
#include "endor/kernels.h"
#include "weight_kernels.h"  // (kernels/cpu) --rows --kernel-only calls the int8-activation kernel itself

using namespace endor;

namespace {

struct Args {
  int threads = 0;
  size_t ws_mib = 2048;
  bool quick = false;
  bool compute_only = false;
  // --probe VT ENC CALLS: only run CALLS single-thread fused GEMVs on a 64 x 4096 weight, or the
  // --shape one (for instruction counting under `valgrind --tool=callgrind` or `perf record`; see
  // bench/RESULTS.md).
  std::string probe_vt, probe_enc;
  int probe_calls = 0;
  // --stream ROUNDS: only the streaming T=1 fused GEMV of a 5632 x 2048 weight (a 1B model's
  // gate/up shape, --sparsity S, default 0.5) per encoding, in interleaved rounds, with the read
  // bandwidth probed each round.
  int stream_rounds = 0;
  double stream_sparsity = 0.5;  // --sparsity S: of the --stream weight
  uint64_t stream_rows = 5632, stream_cols = 2048;  // --shape RxC: of the --stream (or --probe) weight
  bool shape_given = false;
  // --rows: only single-thread T=1 fused GEMV time per row on SmolLM2-135M's decoder shapes
  // (576 -> 576/192/1536, 1536 -> 576), weights in cache: the compute cost per row that bounds
  // decode of a model this small (its 3.3-bit decoder weights fit the last-level cache).
  bool rows = false;
  // --tokens T (with --rows): T tokens a call (1-8, the fused kernels' range), the figure ns per row
  // per token; a batched decode step multiplies its weights by T tokens at once.
  int row_tokens = 1;
  // --kernel-only (with --rows): int8-activation forms time the dot_rows_q8 kernel alone, x quantized
  // once beforehand (linear() quantizes x each call: per token and column, not per row, and on
  // short rows a visible share); other forms are skipped.
  bool kernel_only = false;
  // --reps N (with --rows): best of N timed windows (default 7); more find the quiet moments of a
  // shared machine.
  int row_reps = 7;
  // --only TEXT: --stream and --rows measure only the encodings whose label contains TEXT (e.g.
  // "int8": int8 and int8g), so that a few can be compared in more rounds on a shared machine.
  std::string only;
};

// "RxC" -> rows, cols; false (and both left as they were) when it is not that form.
bool parse_shape(const char* s, uint64_t& rows, uint64_t& cols) {
  unsigned long long r = 0, c = 0;
  if (std::sscanf(s, "%llux%llu", &r, &c) != 2 || r == 0 || c == 0) return false;
  rows = r;
  cols = c;
  return true;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--threads" && i + 1 < argc) a.threads = std::atoi(argv[++i]);
    else if (s == "--ws-mib" && i + 1 < argc) a.ws_mib = size_t(std::atoll(argv[++i]));
    else if (s == "--quick") a.quick = true;
    else if (s == "--rows") a.rows = true;
    else if (s == "--only" && i + 1 < argc) a.only = argv[++i];
    else if (s == "--tokens" && i + 1 < argc) a.row_tokens = std::clamp(std::atoi(argv[++i]), 1, 8);
    else if (s == "--kernel-only") a.kernel_only = true;
    else if (s == "--reps" && i + 1 < argc) a.row_reps = std::max(1, std::atoi(argv[++i]));
    else if (s == "--compute-only") a.compute_only = true;
    else if (s == "--stream" && i + 1 < argc) a.stream_rounds = std::atoi(argv[++i]);
    else if (s == "--sparsity" && i + 1 < argc) a.stream_sparsity = std::atof(argv[++i]);
    else if (s == "--shape" && i + 1 < argc && parse_shape(argv[i + 1], a.stream_rows, a.stream_cols)) {
      a.shape_given = true;
      ++i;
    }
    else if (s == "--probe" && i + 3 < argc) {
      a.probe_vt = argv[++i];
      a.probe_enc = argv[++i];
      a.probe_calls = std::atoi(argv[++i]);
    }
    else {
      std::fprintf(stderr, "usage: bench_kernels [--threads N] [--ws-mib M] [--quick] [--compute-only] [--probe VT ENC CALLS] [--stream ROUNDS [--sparsity S] [--shape RxC]] [--rows [--tokens T] [--kernel-only] [--reps N]] [--only TEXT]\n");
      std::exit(2);
    }
  }
  return a;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

// n copies of one encoded blob at 4096-byte aligned offsets (as a container lays out groups).
// Their views say whether an int4 tensor is 2:4, as the runtime's weight store does.
class Replicas {
 public:
  Replicas(const EncodedTensor& enc, size_t ws_bytes) : layout_(enc.layout) {
    TensorView v;
    v.layout = enc.layout;
    v.data = enc.bytes.data();
    two_of_four_ = enc.layout.value_type == ValueType::I4 && is_two_of_four(v);
    stride_ = (enc.bytes.size() + 4095) / 4096 * 4096;
    n_ = std::clamp<size_t>(ws_bytes / stride_ + 1, 1, 4096);
    mem_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, n_ * stride_)));
    if (!mem_) throw Error("bench: out of memory for the working set");
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < int64_t(n_); ++i) std::memcpy(mem_.get() + size_t(i) * stride_, enc.bytes.data(), enc.bytes.size());
  }
  size_t size() const { return n_; }
  TensorView view(size_t i) const {
    TensorView v;
    v.layout = layout_;
    v.data = mem_.get() + (i % n_) * stride_;
    v.two_of_four = two_of_four_;
    return v;
  }

 private:
  TensorLayout layout_;
  bool two_of_four_ = false;
  size_t stride_ = 0, n_ = 0;
  std::unique_ptr<uint8_t, FreeDeleter> mem_;
};

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Mean wall seconds per call: one warm-up pass over the copies (at most ~1 s), then calls until at
// least one full pass and min_seconds have elapsed. cpu_per_call (optional): process CPU seconds
// per call, all threads — on a shared machine the steadier figure (time slices given to other
// processes are not counted; run with OMP_WAIT_POLICY=passive so barrier spins are not either).
double seconds_per_call(size_t n_copies, const std::function<void(size_t)>& call, double min_seconds = 0.4,
                        size_t max_calls = 1u << 20, double* cpu_per_call = nullptr) {
  using clock = std::chrono::steady_clock;
  const auto w0 = clock::now();
  for (size_t i = 0; i < n_copies; ++i) {
    call(i);
    if (std::chrono::duration<double>(clock::now() - w0).count() > 1.0) break;
  }
  size_t calls = 0;
  const double c0 = process_cpu_seconds();
  const auto t0 = clock::now();
  double elapsed = 0;
  while (calls < max_calls && (calls < n_copies || elapsed < min_seconds)) {
    call(calls++);
    elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  }
  if (cpu_per_call) *cpu_per_call = (process_cpu_seconds() - c0) / double(calls);
  return elapsed / double(calls);
}

// Seconds of CPU time this thread spent in `call`, per call (robust to other processes sharing
// the cores: time slices given to them are not counted).
double cpu_seconds_per_call(const std::function<void()>& call, double min_seconds = 0.03, int reps = 7) {
  auto now = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  call();  // warm caches and tables
  double best = 1e30;
  for (int rep = 0; rep < reps; ++rep) {  // best of reps: other processes still pollute caches
    size_t calls = 0;
    const double t0 = now();
    double elapsed = 0;
    while (calls < 3 || elapsed < min_seconds) {
      call();
      ++calls;
      elapsed = now() - t0;
    }
    best = std::min(best, elapsed / double(calls));
  }
  return best;
}

std::vector<float> random_sparse(uint64_t rows, uint64_t cols, double sparsity, uint32_t seed) {
  std::vector<float> w(rows * cols);
  const int64_t n_rows = int64_t(rows);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n_rows; ++r) {
    std::mt19937 rng(seed + uint32_t(r));
    std::normal_distribution<float> d(0.0f, 0.02f);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (uint64_t c = 0; c < cols; ++c) {
      float v = d(rng);
      if (v == 0.0f) v = 1e-3f;
      w[uint64_t(r) * cols + c] = u(rng) < sparsity ? 0.0f : v;
    }
  }
  return w;
}

// 2:4: of every 4 consecutive weights of random_sparse(…, 0, seed) the 2 of smallest magnitude
// zeroed (magnitude pruning's N:M rule).
std::vector<float> random_two_of_four(uint64_t rows, uint64_t cols, uint32_t seed) {
  std::vector<float> w = random_sparse(rows, cols, 0.0, seed);
  for (uint64_t i = 0; i + 4 <= w.size(); i += 4) {
    int order[4] = {0, 1, 2, 3};
    std::sort(order, order + 4, [&](int a, int b) { return std::fabs(w[i + a]) < std::fabs(w[i + b]); });
    w[i + order[0]] = w[i + order[1]] = 0.0f;
  }
  return w;
}

// The group size every table here encodes with: int4 128 (Endor's default), int8g 32 (Q8_0's grid,
// the int8g default), none for the others.
uint32_t bench_group_size(ValueType vt) {
  return vt == ValueType::I4 ? 128 : vt == ValueType::I8G ? 32 : 0;
}

struct Config {
  Encoding enc;
  ValueType vt;
  const char* label;
};

std::unique_ptr<Backend> backend_with(int threads, cpu::LinearPath path, cpu::Isa isa = cpu::Isa::Auto,
                                      cpu::GemmImpl gemm = cpu::GemmImpl::Auto) {
  cpu::Options o;
  o.n_threads = threads;
  o.linear_path = path;
  o.isa = isa;
  o.gemm = gemm;
  return make_cpu_backend(o);
}

}  // namespace

// The --probe workload: a 64 x 4096 weight (or --shape's) at 50 % sparsity, `calls` fused T=1 GEMVs.
int run_probe(const Args& args) {
  const auto vt = parse_value_type(args.probe_vt);
  const auto enc = parse_encoding(args.probe_enc);
  if (!vt || !enc) throw Error("--probe: unknown value type or encoding");
  const uint64_t rows = args.shape_given ? args.stream_rows : 64, cols = args.shape_given ? args.stream_cols : 4096;
  const std::vector<float> w = random_sparse(rows, cols, 0.5, 1);
  EncodeOptions opt;
  opt.encoding = *enc;
  opt.value_type = *vt;
  opt.group_size = bench_group_size(*vt);
  const EncodedTensor e = encode_tensor(w.data(), {rows, cols}, opt);
  TensorView v;
  v.layout = e.layout;
  v.data = e.bytes.data();
  auto b = backend_with(1, cpu::LinearPath::Fused);
  auto wt = b->prepare_weight(v);
  std::vector<float> x(cols, 1.0f), y(rows);
  for (int i = 0; i < args.probe_calls; ++i) b->linear(*wt, x.data(), 1, nullptr, y.data());
  std::printf("probe %s %s: %d calls, y[0] = %g\n", args.probe_vt.c_str(), args.probe_enc.c_str(), args.probe_calls,
              double(y[0]));
  return 0;
}

// The --rows workload: per encoding and shape, thread CPU ns per fused GEMV row and token (best of
// --reps, 7) at --tokens T (default 1), each weight small enough to stay in L2 after the first call.
int run_rows(const Args& args) {
  struct Shape {
    uint64_t rows, cols;
    const char* what;
  };
  const Shape shapes[] = {{576, 576, "q/o 576x576"}, {192, 576, "k/v 192x576"}, {1536, 576, "gate/up 1536x576"},
                          {576, 1536, "down 576x1536"}};
  struct RowConfig {
    Encoding enc;
    ValueType vt;
    double sparsity;
    bool exact;
    const char* label;
    bool resident = false;  // prepare_resident_weight: a bitmap int4 weight's dense copy of its codes
  };
  // sparsity -1: 2:4 (random_two_of_four).
  const RowConfig configs[] = {{Encoding::Bitmap, ValueType::I4, 0.5, false, "int4 bitmap @50%"},
                               {Encoding::Bitmap, ValueType::I4, 0.5, false, "int4 bmp copy @50%", true},
                               {Encoding::Bitmap, ValueType::I4, -1.0, false, "int4 bitmap 2:4"},
                               {Encoding::Dense, ValueType::I4, 0.0, false, "int4 dense"},
                               {Encoding::Bitmap, ValueType::I8, 0.5, false, "int8 bitmap @50%"},
                               {Encoding::Dense, ValueType::I8, 0.0, false, "int8 dense"},
                               {Encoding::Bitmap, ValueType::I8G, 0.5, false, "int8g g32 bmp @50%"},
                               {Encoding::Dense, ValueType::I8G, 0.0, false, "int8g g32 dense"},
                               {Encoding::Bitmap, ValueType::I8, 0.5, true, "int8 bmp exact"},
                               {Encoding::Bitmap, ValueType::I8G, 0.5, true, "int8g g32 bmp exact"},
                               {Encoding::Bitmap, ValueType::F16, 0.5, false, "f16 bitmap @50%"},
                               {Encoding::Dense, ValueType::F16, 0.0, false, "f16 dense"}};
  const size_t nt = size_t(args.row_tokens);
  std::printf("single-thread fused T=%zu GEMV%s, weights in cache, ns per row per token (best of %d); load %s\n", nt,
              args.kernel_only ? " (dot_rows_q8 alone)" : "", args.row_reps, load_average().c_str());
  std::printf("%-19s", "encoding");
  for (const Shape& s : shapes) std::printf(" %18s", s.what);
  std::printf("\n");
  for (const RowConfig& c : configs) {
    if (std::string(c.label).find(args.only) == std::string::npos) continue;
    if (args.kernel_only && (c.exact || c.resident || !cpu::detail::int8_activation_weight(c.vt))) continue;
    std::printf("%-19s", c.label);
    for (const Shape& s : shapes) {
      const std::vector<float> w = c.sparsity < 0 ? random_two_of_four(s.rows, s.cols, 7) : random_sparse(s.rows, s.cols, c.sparsity, 7);
      EncodeOptions opt;
      opt.encoding = c.enc;
      opt.value_type = c.vt;
      opt.group_size = bench_group_size(c.vt);
      const EncodedTensor e = encode_tensor(w.data(), {s.rows, s.cols}, opt);
      TensorView v;
      v.layout = e.layout;
      v.data = e.bytes.data();
      v.two_of_four = c.vt == ValueType::I4 && is_two_of_four(v);
      cpu::Options o;
      o.n_threads = 1;
      o.linear_path = cpu::LinearPath::Fused;
      o.exact = c.exact;  // f32 activations (the dot_rows path) rather than int8 ones
      auto b = make_cpu_backend(o);
      auto wt = c.resident ? b->prepare_resident_weight(v) : b->prepare_weight(v);
      if (c.resident && wt->copy_bytes() == 0) {
        std::printf(" %18s", "no copy");  // this CPU's kernels read no copy (ENDOR_INT4_DENSE, int4_dense.h)
        continue;
      }
      std::vector<float> x(nt * s.cols), y(nt * s.rows);
      std::mt19937 rng(3);
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (float& xi : x) xi = d(rng);
      double sec = 0;
      if (args.kernel_only) {
        namespace kd = cpu::detail;
        std::unique_ptr<uint8_t, FreeDeleter> storage(static_cast<uint8_t*>(
            std::aligned_alloc(64, (kd::quantized_bytes(nt, s.cols) + 63) / 64 * 64)));
        const kd::QuantizedX qx = kd::quantize_activations(x.data(), s.cols, nt, s.cols, storage.get());
        const kd::WeightKernels& k = kd::select_kernels(cpu::Isa::Auto);
        sec = cpu_seconds_per_call([&] { k.dot_rows_q8(v, 0, s.rows, qx, nt, y.data(), s.rows); }, 0.03, args.row_reps);
      } else {
        sec = cpu_seconds_per_call([&] { b->linear(*wt, x.data(), nt, nullptr, y.data()); }, 0.03, args.row_reps);
      }
      std::printf(" %18.2f", 1e9 * sec / double(s.rows * nt));
    }
    std::printf("\n");
  }
  return 0;
}

// The --stream workload: per round, the read bandwidth, then for each encoding the mean wall time
// of fused T=1 GEMVs rotating through copies (every call reads from DRAM). Prints one line per
// round and encoding: ns per weight, compressed GB/s, and that as a fraction of the round's read
// bandwidth (the per-kernel form of bench_decode's achieved/floor).
int run_stream(const Args& args) {
  const int threads = args.threads > 0 ? args.threads : omp_get_max_threads();
  omp_set_num_threads(threads);
  const size_t ws_bytes = args.ws_mib << 20;
  const uint64_t rows = args.stream_rows, cols = args.stream_cols;
  const std::vector<float> w = random_sparse(rows, cols, args.stream_sparsity, 1);
  const Config configs[] = {{Encoding::Dense, ValueType::F16, "dense f16"},
                            {Encoding::Dense, ValueType::F16, "dense f16 exact"},
                            {Encoding::Bitmap, ValueType::F16, "bitmap f16"},
                            {Encoding::Bitmap, ValueType::F16, "bitmap f16 exact"},
                            {Encoding::Bitmap, ValueType::I8, "bitmap int8"},
                            {Encoding::Bitmap, ValueType::I8, "bitmap int8 exact"},
                            {Encoding::Bitmap, ValueType::I8G, "bitmap int8g g32"},
                            {Encoding::Bitmap, ValueType::I8G, "bitmap int8g exact"},
                            {Encoding::Dense, ValueType::I8, "dense int8"},
                            {Encoding::Dense, ValueType::I8G, "dense int8g g32"},
                            {Encoding::Bitmap, ValueType::I4, "bitmap int4 g128"},
                            {Encoding::Bitmap, ValueType::I4, "bitmap int4 exact"},
                            {Encoding::Bitmap, ValueType::I4, "bitmap int4 2:4"},
                            {Encoding::Bitmap, ValueType::I4, "bitmap int4 copy"},
                            {Encoding::Dense, ValueType::I4, "dense int4 g128"}};
  // "copy": each replica prepared once as a resident weight (the CPU backend's dense copy of its codes,
  // kernels/cpu/int4_dense.h), so the calls read the copies; the others are prepared call by call.
  // "exact": f32 activations (cpu::Options::exact); the others int8/int4 take int8 activations,
  // f16 ones f16 activations where the rows are wide enough (kHalfXMinCols, 4097 columns).
  auto is_exact = [](const Config& c) { return std::string(c.label).find("exact") != std::string::npos; };
  std::vector<std::unique_ptr<Replicas>> reps;
  for (const Config& c : configs) {
    if (std::string(c.label).find(args.only) == std::string::npos) {
      reps.push_back(nullptr);
      continue;
    }
    EncodeOptions opt;
    opt.encoding = c.enc;
    opt.value_type = c.vt;
    opt.group_size = bench_group_size(c.vt);
    const bool nm = std::string(c.label).find("2:4") != std::string::npos;
    reps.push_back(std::make_unique<Replicas>(
        encode_tensor(nm ? random_two_of_four(rows, cols, 1).data() : w.data(), {rows, cols}, opt), ws_bytes / 4));
  }
  auto b = backend_with(threads, cpu::LinearPath::Fused);
  cpu::Options exact_options;
  exact_options.n_threads = threads;
  exact_options.linear_path = cpu::LinearPath::Fused;
  exact_options.exact = true;
  auto b_exact = make_cpu_backend(exact_options);
  std::vector<float> x(cols, 1.0f), y(rows);
  std::printf("stream: %llu x %llu, %.0f %% sparse, T=1 fused, %d threads, %zu MiB per encoding\n",
              (unsigned long long)rows, (unsigned long long)cols, 100 * args.stream_sparsity, threads, args.ws_mib / 4);
  for (int round = 0; round < args.stream_rounds; ++round) {
    const double bw = cpu::measure_read_bandwidth_gbps(ws_bytes / 4, threads);
    for (size_t k = 0; k < reps.size(); ++k) {
      if (!reps[k]) continue;  // not --only's
      const Replicas& r = *reps[k];
      double bytes = double(r.view(0).layout.total_bytes);
      Backend& be = is_exact(configs[k]) ? *b_exact : *b;
      std::vector<std::unique_ptr<Weight>> resident;
      if (std::string(configs[k].label).find("copy") != std::string::npos) {
        for (size_t i = 0; i < r.size(); ++i) resident.push_back(be.prepare_resident_weight(r.view(i)));
        if (resident[0]->copy_bytes() == 0) {
          std::printf("round %d  %-18s no copy on this CPU's kernels\n", round, configs[k].label);
          continue;
        }
        // What a call reads: the copy, the scales and mins, not the bitmap and the stored values.
        const TensorLayout& L = r.view(0).layout;
        bytes = double(resident[0]->copy_bytes() + L.scales_bytes + L.mins_bytes);
      }
      const double s = seconds_per_call(r.size(), [&](size_t i) {
        if (!resident.empty()) return be.linear(*resident[i % resident.size()], x.data(), 1, nullptr, y.data());
        const auto wt = be.prepare_weight(r.view(i));
        be.linear(*wt, x.data(), 1, nullptr, y.data());
      });
      std::printf("round %d  %-18s %.3f ns/w  %5.2f GB/s  %.2f of read %.1f GB/s\n", round, configs[k].label,
                  1e9 * s / double(rows * cols), bytes / s / 1e9, bytes / s / 1e9 / bw, bw);
    }
  }
  return 0;
}

int main(int argc, char** argv) try {
  const Args args = parse_args(argc, argv);
  if (args.probe_calls > 0) return run_probe(args);
  if (args.stream_rounds > 0) return run_stream(args);
  if (args.rows) return run_rows(args);
  const int threads = args.threads > 0 ? args.threads : omp_get_max_threads();
  omp_set_num_threads(threads);
  const size_t ws_bytes = args.ws_mib << 20;

  std::printf("# bench_kernels — CPU weight kernels vs memory bandwidth\n");
  std::printf("simd: %s | threads: %d | oneDNN: %s | working set: %zu MiB | load average at start: %s\n\n",
              cpu::simd_level(), threads, cpu::have_onednn() ? "yes" : "no", args.ws_mib, load_average().c_str());

  const double read_bw = args.compute_only ? 0.0 : cpu::measure_read_bandwidth_gbps(ws_bytes, threads);
  const double copy_bw = args.compute_only ? 0.0 : cpu::measure_copy_bandwidth_gbps(ws_bytes, threads);
  if (!args.compute_only) std::printf("## Memory bandwidth (STREAM-like, %zu MiB, all threads, best of 5)\n\n", args.ws_mib);
  std::printf("| test | GB/s |\n|---|---:|\n| read (sum) | %.1f |\n| copy (read+write) | %.1f |\n\n", read_bw,
              copy_bw);

  const Config configs[] = {
      {Encoding::Bitmap, ValueType::F16, "bitmap f16"},   {Encoding::Bitmap, ValueType::BF16, "bitmap bf16"},
      {Encoding::Bitmap, ValueType::F32, "bitmap f32"},   {Encoding::Bitmap, ValueType::I8, "bitmap int8"},
      {Encoding::Bitmap, ValueType::I4, "bitmap int4 g128"}, {Encoding::Dense, ValueType::F16, "dense f16"},
      {Encoding::Dense, ValueType::BF16, "dense bf16"},   {Encoding::Dense, ValueType::F32, "dense f32"},
      {Encoding::Dense, ValueType::I8, "dense int8"},     {Encoding::Dense, ValueType::I4, "dense int4 g128"},
      {Encoding::Bitmap, ValueType::I8G, "bitmap int8g g32"}, {Encoding::Dense, ValueType::I8G, "dense int8g g32"},
  };
  {
    // Single-thread compute cost, in cache: what one core can decode-and-multiply when memory is
    // not the limit. Compressed GB/s per core above (read bandwidth / threads) means the fused
    // kernel can keep up with memory on all cores.
    const uint64_t rows = 64, cols = 4096;
    const std::vector<float> w = random_sparse(rows, cols, 0.5, 7);
    std::vector<float> x(cols), y(rows * 8), xt(8 * cols);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i));
    for (size_t i = 0; i < xt.size(); ++i) xt[i] = std::cos(float(i));
    std::vector<float> out(rows * cols);
    auto one_avx2 = backend_with(1, cpu::LinearPath::Fused);
    auto one_port = backend_with(1, cpu::LinearPath::Fused, cpu::Isa::Portable);
    std::printf("## Single-thread compute cost (thread CPU time, 64 x 4096 weight in L2, 50 %% sparse)\n\n");
    std::printf("ns/w = CPU nanoseconds per weight element (rows x cols); GB/s = compressed bytes per CPU second "
                "of one core; T=8: fused with 8 tokens.\n\n");
    std::printf("| weight | bits/w | %s fused T=1 ns/w | GB/s/core | T=8 ns/w/token | decode ns/w | portable fused ns/w |\n",
                cpu::simd_level());
    std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
    // All measurements round-robin, best of several rounds: a load change on the shared machine
    // then hits every configuration alike instead of one of them.
    std::vector<EncodedTensor> encs;
    std::vector<std::unique_ptr<Weight>> ws;
    std::vector<TensorView> views;
    for (const Config& c : configs) {
      EncodeOptions opt;
      opt.encoding = c.enc;
      opt.value_type = c.vt;
      opt.group_size = bench_group_size(c.vt);
      encs.push_back(encode_tensor(w.data(), {rows, cols}, opt));
    }
    for (const EncodedTensor& e : encs) {
      TensorView v;
      v.layout = e.layout;
      v.data = e.bytes.data();
      views.push_back(v);
      ws.push_back(one_avx2->prepare_weight(v));
    }
    const size_t nc = std::size(configs);
    std::vector<std::function<void()>> calls;
    for (size_t i = 0; i < nc; ++i) {
      calls.push_back([&, i] { one_avx2->linear(*ws[i], x.data(), 1, nullptr, y.data()); });
      calls.push_back([&, i] { one_avx2->linear(*ws[i], xt.data(), 8, nullptr, y.data()); });
      calls.push_back([&, i] { cpu::decode_f32(views[i], out.data(), 1); });
      calls.push_back([&, i] { one_port->linear(*ws[i], x.data(), 1, nullptr, y.data()); });
    }
    std::vector<double> best(calls.size(), 1e30);
    for (int round = 0; round < 5; ++round)
      for (size_t j = 0; j < calls.size(); ++j) best[j] = std::min(best[j], cpu_seconds_per_call(calls[j], 0.01, 1));
    const double n = double(rows * cols);
    for (size_t i = 0; i < nc; ++i) {
      const double bytes = double(encs[i].layout.total_bytes);
      const double f1 = best[4 * i], f8 = best[4 * i + 1], dec = best[4 * i + 2], fp = best[4 * i + 3];
      std::printf("| %s | %.2f | %.3f | %.1f | %.3f | %.3f | %.3f |\n", configs[i].label, bytes * 8 / n,
                  f1 / n * 1e9, bytes / f1 * 1e-9, f8 / n / 8 * 1e9, dec / n * 1e9, fp / n * 1e9);
    }
    std::printf("\n");

    // Path cost per token count, one thread, CPU time: where prefill should leave the fused path.
    const uint64_t prow = 512;
    const std::vector<float> pw = random_sparse(prow, cols, 0.5, 8);
    auto one_row = backend_with(1, cpu::LinearPath::RowDecode);
    auto one_panel = backend_with(1, cpu::LinearPath::PanelGemm);
    auto one_builtin = backend_with(1, cpu::LinearPath::PanelGemm, cpu::Isa::Auto, cpu::GemmImpl::Builtin);
    std::printf("## Single-thread path cost vs token count (thread CPU time, %llu x %llu, 50 %% sparse)\n\n",
                (unsigned long long)prow, (unsigned long long)cols);
    std::printf("ns per weight element per token; panel = decode to f32 + %s; builtin = own GEMM.\n\n",
                cpu::have_onednn() ? "oneDNN matmul" : "built-in GEMM");
    std::printf("| weight | T | fused | row-decode | panel | builtin |\n|---|---:|---:|---:|---:|---:|\n");
    for (ValueType vt : {ValueType::I4, ValueType::F16}) {
      EncodeOptions opt;
      opt.encoding = Encoding::Bitmap;
      opt.value_type = vt;
      opt.group_size = bench_group_size(vt);
      const EncodedTensor enc = encode_tensor(pw.data(), {prow, cols}, opt);
      TensorView v;
      v.layout = enc.layout;
      v.data = enc.bytes.data();
      auto pwt = one_avx2->prepare_weight(v);
      for (size_t T : {size_t(1), size_t(4), size_t(8), size_t(16), size_t(32), size_t(64), size_t(256)}) {
        std::vector<float> xs(T * cols), ys(T * prow);
        for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(float(i));
        const double per = double(prow * cols * T) * 1e-9;
        auto cost = [&](Backend& b) {
          return cpu_seconds_per_call([&] { b.linear(*pwt, xs.data(), T, nullptr, ys.data()); }, 0.02, 3) / per;
        };
        const double f = T <= 64 ? cost(*one_avx2) : -1;
        std::printf("| bitmap %s | %zu | %s | %.3f | %.3f | %.3f |\n", to_string(vt), T,
                    f < 0 ? "-" : std::to_string(f).substr(0, 5).c_str(), cost(*one_row), cost(*one_panel),
                    cost(*one_builtin));
      }
    }
    std::printf("\n");
  }
  if (args.compute_only) return 0;

  struct Shape {
    uint64_t rows, cols;
  };
  std::vector<Shape> shapes = {{4096, 4096}, {11008, 4096}};
  if (args.quick) shapes.resize(1);

  auto fused = backend_with(threads, cpu::LinearPath::Fused);
  auto fused_portable = backend_with(threads, cpu::LinearPath::Fused, cpu::Isa::Portable);
  auto row_decode = backend_with(threads, cpu::LinearPath::RowDecode);

  for (const Shape& s : shapes) {
    const uint64_t numel = s.rows * s.cols;
    const std::vector<float> w = random_sparse(s.rows, s.cols, 0.5, 1234);
    std::vector<float> x(s.cols), y(s.rows);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i));
    std::vector<float> scratch(numel);  // decompress-then-dense target
    TensorLayout dense_f32 = compute_layout({s.rows, s.cols}, Encoding::Dense, ValueType::F32, 0, numel);
    TensorView scratch_view;
    scratch_view.layout = dense_f32;
    scratch_view.data = reinterpret_cast<const uint8_t*>(scratch.data());
    auto scratch_weight = fused->prepare_weight(scratch_view);

    std::printf("## %llu x %llu weight, 50 %% sparse (bitmap) / same values stored dense, T = 1\n\n",
                (unsigned long long)s.rows, (unsigned long long)s.cols);
    std::printf("Decode: whole tensor to f32 (cpu::decode_f32); GB/s counted on the f32 output and on the "
                "compressed input.\nGEMV: fused = decode in registers + multiply (Backend::linear, Fused); "
                "floor = compressed bytes / read bandwidth; ratio = floor / fused time (1.0 = at bandwidth); "
                "row-decode = per-thread decode of 4 rows + dense dots; decompress+dense = decode_f32 into an "
                "f32 scratch, then dense f32 GEMV.\n\n");
    std::printf("| weight | MiB | bits/w | decode ms | out GB/s | in GB/s | fused ms | eff GB/s | ratio | "
                "fused CPU ms | portable fused ms | row-decode ms | decompress+dense ms | vs dense f16 |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    double dense_f16_ms = 0;
    struct Row {
      const char* label;
      double mib, bits, dec_ms, out_gbps, in_gbps, fused_ms, eff_gbps, ratio, fused_cpu_ms, port_ms, row_ms, dd_ms;
    };
    std::vector<Row> rows_out;
    std::vector<std::string> u16_lines;  // cpu::decode_u16 (f16/bf16 only)
    for (const Config& c : configs) {
      EncodeOptions opt;
      opt.encoding = c.enc;
      opt.value_type = c.vt;
      opt.group_size = bench_group_size(c.vt);
      const EncodedTensor enc = encode_tensor(w.data(), {s.rows, s.cols}, opt);
      const double bytes = double(enc.layout.total_bytes);
      Replicas reps(enc, ws_bytes);
      std::vector<std::unique_ptr<Weight>> weights;
      for (size_t i = 0; i < reps.size(); ++i) weights.push_back(fused->prepare_weight(reps.view(i)));

      const double dec_s = seconds_per_call(
          reps.size(), [&](size_t i) { cpu::decode_f32(reps.view(i), scratch.data(), threads); }, 0.3, 16);
      double fused_cpu_s = 0;
      const double fused_s = seconds_per_call(
          reps.size(), [&](size_t i) { fused->linear(*weights[i % weights.size()], x.data(), 1, nullptr, y.data()); },
          0.4, 1u << 20, &fused_cpu_s);
      const double port_s = seconds_per_call(
          reps.size(),
          [&](size_t i) { fused_portable->linear(*weights[i % weights.size()], x.data(), 1, nullptr, y.data()); },
          0.2, 8);
      const double row_s = seconds_per_call(
          reps.size(), [&](size_t i) { row_decode->linear(*weights[i % weights.size()], x.data(), 1, nullptr, y.data()); });
      const double dd_s = seconds_per_call(
          reps.size(),
          [&](size_t i) {
            cpu::decode_f32(reps.view(i), scratch.data(), threads);
            fused->linear(*scratch_weight, x.data(), 1, nullptr, y.data());
          },
          0.3, 16);
      if (c.vt == ValueType::F16 || c.vt == ValueType::BF16) {
        uint16_t* out16 = reinterpret_cast<uint16_t*>(scratch.data());
        const double u16_s = seconds_per_call(
            reps.size(), [&](size_t i) { cpu::decode_u16(reps.view(i), out16, threads); }, 0.3, 16);
        char line[160];
        std::snprintf(line, sizeof line, "| %s | %.2f | %.1f | %.1f |\n", c.label, u16_s * 1e3,
                      double(numel) * 2 / u16_s * 1e-9, bytes / u16_s * 1e-9);
        u16_lines.push_back(line);
      }
      const double floor_s = bytes / (read_bw * 1e9);
      Row r{c.label,
            bytes / (1 << 20),
            bytes * 8 / double(numel),
            dec_s * 1e3,
            double(numel) * 4 / dec_s * 1e-9,
            bytes / dec_s * 1e-9,
            fused_s * 1e3,
            bytes / fused_s * 1e-9,
            floor_s / fused_s,
            fused_cpu_s * 1e3,
            port_s * 1e3,
            row_s * 1e3,
            dd_s * 1e3};
      if (c.enc == Encoding::Dense && c.vt == ValueType::F16) dense_f16_ms = r.fused_ms;
      rows_out.push_back(r);
    }
    for (const Row& r : rows_out)
      std::printf("| %s | %.1f | %.2f | %.2f | %.1f | %.1f | %.3f | %.1f | %.2f | %.3f | %.2f | %.3f | %.2f | %.2fx |\n",
                  r.label, r.mib, r.bits, r.dec_ms, r.out_gbps, r.in_gbps, r.fused_ms, r.eff_gbps, r.ratio,
                  r.fused_cpu_ms, r.port_ms, r.row_ms, r.dd_ms, dense_f16_ms / r.fused_ms);
    std::printf("\ncpu::decode_u16 (whole tensor to its own 16-bit values):\n\n");
    std::printf("| weight | ms | out GB/s | in GB/s |\n|---|---:|---:|---:|\n");
    for (const std::string& l : u16_lines) std::printf("%s", l.c_str());
    std::printf("\n");
  }

  // ---- token-count sweep: which path for which T ----
  {
    const uint64_t rows = 4096, cols = 4096;
    const std::vector<float> w = random_sparse(rows, cols, 0.5, 99);
    std::printf("## Linear paths vs token count T (4096 x 4096, 50 %% sparse), ms per call\n\n");
    std::printf("fused re-reads the weight every %zu tokens; panel-gemm decodes 16 MiB row panels to f32 and "
                "calls %s; builtin = the library's own blocked GEMM.\n\n",
                size_t(8), cpu::have_onednn() ? "oneDNN matmul" : "the built-in GEMM");
    std::printf("| weight | T | fused | row-decode | panel-gemm | panel builtin | auto | best GFLOP/s |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    auto panel = backend_with(threads, cpu::LinearPath::PanelGemm);
    auto builtin = backend_with(threads, cpu::LinearPath::PanelGemm, cpu::Isa::Auto, cpu::GemmImpl::Builtin);
    auto autob = backend_with(threads, cpu::LinearPath::Auto);
    const std::vector<size_t> token_counts =
        args.quick ? std::vector<size_t>{1, 8, 32} : std::vector<size_t>{1, 2, 4, 8, 16, 32, 64, 128, 512};
    for (ValueType vt : {ValueType::I4, ValueType::F16}) {
      EncodeOptions opt;
      opt.encoding = Encoding::Bitmap;
      opt.value_type = vt;
      opt.group_size = bench_group_size(vt);
      const EncodedTensor enc = encode_tensor(w.data(), {rows, cols}, opt);
      Replicas reps(enc, ws_bytes);
      std::vector<std::unique_ptr<Weight>> weights;
      for (size_t i = 0; i < reps.size(); ++i) weights.push_back(fused->prepare_weight(reps.view(i)));
      for (size_t T : token_counts) {
        std::vector<float> x(T * cols), y(T * rows);
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(float(i));
        auto time_ms = [&](Backend& b, bool enabled) {
          if (!enabled) return -1.0;
          return 1e3 * seconds_per_call(
                           reps.size(),
                           [&](size_t i) { b.linear(*weights[i % weights.size()], x.data(), T, nullptr, y.data()); },
                           0.2, 64);
        };
        const double f = time_ms(*fused, T <= 64), rd = time_ms(*row_decode, T <= 128), pg = time_ms(*panel, true),
                     bi = time_ms(*builtin, T <= 128), au = time_ms(*autob, true);
        double best = 1e30;
        for (double t : {f, rd, pg, bi})
          if (t > 0) best = std::min(best, t);
        auto cell = [](double t) { return t < 0 ? std::string("-") : std::to_string(t).substr(0, 6); };
        std::printf("| bitmap %s | %zu | %s | %s | %s | %s | %s | %.1f |\n", to_string(vt), T, cell(f).c_str(),
                    cell(rd).c_str(), cell(pg).c_str(), cell(bi).c_str(), cell(au).c_str(),
                    2.0 * double(rows * cols * T) / (best * 1e-3) * 1e-9);
      }
    }
    std::printf("\n");
  }
  std::printf("load average at end: %s\n", load_average().c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
