// bench_prefill: the CPU linear paths at prefill token counts. Per weight form (bitmap int4 / int4k /
// int8 / f16 at 50 % sparsity, dense int4 / int8 / f16), shape and token count T, the time of one
// Backend::linear call on each path (fused in chunks of 8 tokens, row-decode, panel-gemm, and what
// Auto picks), as process CPU ms per token — on a shared machine the steadier figure; run with
// OMP_WAIT_POLICY=passive so barrier spins are not counted — and wall ms per token. Rounds are
// interleaved (round r times every form, T and path once); the table gives the median over rounds.
// Prints measurements only (never pass/fail); where Auto's token thresholds in kernels/cpu/linear.cpp
// come from.
//
// Usage: bench_prefill [--threads N] [--rounds R] [--shapes smollm2|1b|all] [--tokens 1,8,16,...]
//                      [--forms int4,int4k,int8,f16,dint4,dint8,df16,int8g,dint8g]
// (int8g, dint8g: bitmap / dense int8g in groups of 32, Q8_0's grid; not in the default forms.)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "endor/format.h"
#include "endor/kernels.h"

using namespace endor;

namespace {

struct Form {
  const char* name;
  Encoding enc;
  ValueType vt;
  Int4Params ip;
  uint32_t group;
};
const Form kForms[] = {
    {"int4", Encoding::Bitmap, ValueType::I4, Int4Params::F16, 128},
    {"int4k", Encoding::Bitmap, ValueType::I4, Int4Params::Coded6, 32},
    {"int8", Encoding::Bitmap, ValueType::I8, Int4Params::F16, 0},
    {"f16", Encoding::Bitmap, ValueType::F16, Int4Params::F16, 0},
    {"dint4", Encoding::Dense, ValueType::I4, Int4Params::F16, 128},
    {"dint8", Encoding::Dense, ValueType::I8, Int4Params::F16, 0},
    {"df16", Encoding::Dense, ValueType::F16, Int4Params::F16, 0},
    {"int8g", Encoding::Bitmap, ValueType::I8G, Int4Params::F16, 32},
    {"dint8g", Encoding::Dense, ValueType::I8G, Int4Params::F16, 32},
};

struct Shape {
  uint64_t rows, cols;  // [out, in]
};

struct Args {
  int threads = 0;
  int rounds = 3;
  std::string shapes = "all";
  std::vector<size_t> tokens = {1, 8, 9, 15, 16, 24, 32, 48, 64, 96, 128};
  std::vector<std::string> forms = {"int4", "int4k", "int8", "f16", "dint4", "dint8", "df16"};
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--threads" && i + 1 < argc) a.threads = std::atoi(argv[++i]);
    else if (s == "--rounds" && i + 1 < argc) a.rounds = std::max(1, std::atoi(argv[++i]));
    else if (s == "--shapes" && i + 1 < argc) a.shapes = argv[++i];
    else if (s == "--tokens" && i + 1 < argc) {
      a.tokens.clear();
      for (const std::string& t : split(argv[++i])) a.tokens.push_back(size_t(std::max(1, std::atoi(t.c_str()))));
    } else if (s == "--forms" && i + 1 < argc) a.forms = split(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_prefill [--threads N] [--rounds R] [--shapes smollm2|1b|all] "
                           "[--tokens 1,8,...] [--forms int4,int4k,int8,f16,dint4,dint8,df16]\n");
      std::exit(2);
    }
  }
  return a;
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// One warm-up call, then calls until min_seconds of wall time (at least 2): per call {wall, cpu}.
std::pair<double, double> time_call(const std::function<void()>& call, double min_seconds) {
  using clock = std::chrono::steady_clock;
  call();
  size_t n = 0;
  const double c0 = process_cpu_seconds();
  const auto t0 = clock::now();
  double wall = 0;
  while (n < 2 || wall < min_seconds) {
    call();
    ++n;
    wall = std::chrono::duration<double>(clock::now() - t0).count();
  }
  return {wall / double(n), (process_cpu_seconds() - c0) / double(n)};
}

std::vector<float> random_sparse(uint64_t rows, uint64_t cols, double sparsity, uint32_t seed) {
  std::vector<float> w(rows * cols);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (float& v : w) {
    v = d(rng);
    if (v == 0.0f) v = 1e-3f;
    if (u(rng) < sparsity) v = 0.0f;
  }
  return w;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) try {
  const Args args = parse_args(argc, argv);
  const int threads = args.threads > 0 ? args.threads : omp_get_max_threads();
  std::vector<Shape> shapes;
  if (args.shapes == "smollm2" || args.shapes == "all") shapes.insert(shapes.end(), {{1536, 576}, {576, 1536}});
  if (args.shapes == "1b" || args.shapes == "all") shapes.insert(shapes.end(), {{5632, 2048}, {2048, 5632}});
  if (shapes.empty()) throw Error("--shapes: smollm2, 1b or all");

  const cpu::LinearPath paths[] = {cpu::LinearPath::Fused, cpu::LinearPath::RowDecode, cpu::LinearPath::PanelGemm,
                                   cpu::LinearPath::Auto};
  const char* path_names[] = {"fused", "row-decode", "panel", "auto"};
  std::vector<std::unique_ptr<Backend>> backends;
  for (cpu::LinearPath p : paths) {
    cpu::Options o;
    o.n_threads = threads;
    o.linear_path = p;
    backends.push_back(make_cpu_backend(o));
  }

  std::printf("# bench_prefill — CPU linear paths at prefill token counts\n");
  std::printf("cpu: %s | simd: %s | threads: %d | oneDNN: %s | rounds: %d | load average at start: %s\n\n",
              cpu_model().c_str(), cpu::simd_level(), threads, cpu::have_onednn() ? "yes" : "no", args.rounds,
              load_average().c_str());

  // Every (shape, form) weight, encoded once; each weight is small enough to stay in the last-level
  // cache between calls, as a small model's do (the paths' arithmetic is what differs).
  struct Item {
    Shape shape;
    const Form* form;
    EncodedTensor enc;
    std::vector<std::unique_ptr<Weight>> w;  // one per backend
  };
  std::vector<Item> items;
  for (const Shape& s : shapes) {
    const std::vector<float> sparse = random_sparse(s.rows, s.cols, 0.5, 11);
    const std::vector<float> dense = random_sparse(s.rows, s.cols, 0.0, 12);
    for (const std::string& fname : args.forms) {
      const Form* f = nullptr;
      for (const Form& k : kForms)
        if (fname == k.name) f = &k;
      if (!f) throw Error("--forms: unknown form '" + fname + "'");
      EncodeOptions opt;
      opt.encoding = f->enc;
      opt.value_type = f->vt;
      opt.int4_params = f->ip;
      if (f->group) opt.group_size = f->group;
      Item it{s, f, encode_tensor((f->enc == Encoding::Bitmap ? sparse : dense).data(), {s.rows, s.cols}, opt), {}};
      items.push_back(std::move(it));
    }
  }
  for (Item& it : items) {
    TensorView v;
    v.layout = it.enc.layout;
    v.data = it.enc.bytes.data();
    for (auto& b : backends) it.w.push_back(b->prepare_weight(v));
  }

  const size_t np = std::size(paths), nt = args.tokens.size();
  // samples[item][t][path] = per-round {wall, cpu} seconds per call
  std::vector<std::vector<std::vector<std::vector<std::pair<double, double>>>>> samples(
      items.size(), std::vector<std::vector<std::vector<std::pair<double, double>>>>(
                        nt, std::vector<std::vector<std::pair<double, double>>>(np)));
  const size_t max_t = *std::max_element(args.tokens.begin(), args.tokens.end());
  uint64_t max_dim = 0;
  for (const Shape& s : shapes) max_dim = std::max({max_dim, s.rows, s.cols});
  std::vector<float> x(max_t * max_dim), y(max_t * max_dim);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(float(i) * 0.37f);
  for (int round = 0; round < args.rounds; ++round) {
    for (size_t i = 0; i < items.size(); ++i)
      for (size_t ti = 0; ti < nt; ++ti)
        for (size_t pi = 0; pi < np; ++pi) {
          // Reverse the path order every other round: a load change hits each path alike.
          const size_t p = round % 2 ? np - 1 - pi : pi;
          const size_t T = args.tokens[ti];
          samples[i][ti][p].push_back(time_call(
              [&] { backends[p]->linear(*items[i].w[p], x.data(), T, nullptr, y.data()); }, 0.05));
        }
    std::fprintf(stderr, "round %d/%d done, load %s\n", round + 1, args.rounds, load_average().c_str());
  }

  std::printf("ms per token (one linear call / T), median over rounds: CPU time of all threads (wall).\n"
              "best = the fastest forced path by CPU time.\n\n");
  std::printf("| shape out x in | weight | T | fused | row-decode | panel | auto | best |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---|\n");
  for (size_t i = 0; i < items.size(); ++i)
    for (size_t ti = 0; ti < nt; ++ti) {
      const double T = double(args.tokens[ti]);
      std::string cells;
      double best = 1e30;
      size_t best_p = 0;
      for (size_t p = 0; p < np; ++p) {
        std::vector<double> wall, cpu;
        for (const auto& s : samples[i][ti][p]) {
          wall.push_back(s.first);
          cpu.push_back(s.second);
        }
        const double c = median(cpu) / T * 1e3, w = median(wall) / T * 1e3;
        char cell[64];
        std::snprintf(cell, sizeof cell, " %.4f (%.4f) |", c, w);
        cells += cell;
        if (p + 1 < np && c < best) best = c, best_p = p;
      }
      std::printf("| %llux%llu | %s | %zu |%s %s |\n", (unsigned long long)items[i].shape.rows,
                  (unsigned long long)items[i].shape.cols, items[i].form->name, args.tokens[ti], cells.c_str(),
                  path_names[best_p]);
    }
  std::printf("\nload average at end: %s\n", load_average().c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
