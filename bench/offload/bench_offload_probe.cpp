// bench_offload_probe: the bandwidths the offloading floor is computed from, measured the way the
// streaming moves bytes. Prints a table, then one "probe: key=value ..." line for scripts
// (bench/offload/run.sh). Never pass/fail.
//   host to device: pinned host memory -> device, cudaMemcpyAsync of --h2d-bytes (default 1 GiB),
//                   best of 5 after a warm-up (CUDA builds with a device; else "n/a").
//   disk:           the decoder-block groups of --container FILE read in execution order through
//                   the DiskReader (O_DIRECT into a 2-buffer ring, buffered where refused), one
//                   request per group, up to --disk-bytes (default 4 GiB): delivered bytes / wall time.
//   host memcpy:    one thread copying 256 MiB (what the CPU device's host slots cost per byte).
// Usage: bench_offload_probe [--container FILE] [--disk-bytes SIZE] [--h2d-bytes SIZE] [--device cpu|cuda|auto]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "endor/offload.h"
#include "endor/runtime.h"

using namespace endor;

namespace {

struct Args {
  std::string container, device = "auto";
  uint64_t disk_bytes = uint64_t(4) << 30, h2d_bytes = uint64_t(1) << 30;
};

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: bench_offload_probe [--container FILE] [--disk-bytes SIZE] [--h2d-bytes SIZE] "
               "[--device cpu|cuda|auto]\n");
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (i + 1 >= argc) usage();
    const std::string v = argv[++i];
    if (s == "--container") a.container = v;
    else if (s == "--device") a.device = v;
    else if (s == "--disk-bytes") a.disk_bytes = parse_memory_size(v, s);
    else if (s == "--h2d-bytes") a.h2d_bytes = parse_memory_size(v, s);
    else usage();
  }
  return a;
}

double memcpy_gbps() {
  const size_t n = size_t(256) << 20;
  std::vector<uint8_t> a(n, 1), b(n, 2);
  double best = 0;
  for (int r = 0; r < 4; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0 && s > 0) best = std::max(best, double(n) / s / 1e9);
    a[r] = b[n - 1 - r];  // keep the copies observable
  }
  return best;
}

struct DiskResult {
  double gbps = 0;
  uint64_t bytes = 0;
  uint64_t groups = 0;
  std::string mode = "n/a";
};

DiskResult disk_probe(const std::string& path, uint64_t limit) {
  auto c = ContainerReader::open(path);
  std::vector<const GroupInfo*> groups;
  uint64_t max_size = 0, total = 0;
  for (const GroupInfo& g : c->manifest().groups) {
    if (g.name.rfind("layers.", 0) != 0 || g.size == 0) continue;
    if (total >= limit) break;
    groups.push_back(&g);
    total += g.size;
    max_size = std::max(max_size, g.size);
  }
  DiskResult r;
  if (groups.empty()) return r;
  DiskReaderOptions o;
  o.n_buffers = 2;
  o.max_request = max_size;
  DiskReader reader(path, o);
  const auto t0 = std::chrono::steady_clock::now();
  size_t submitted = 0;
  for (; submitted < std::min<size_t>(2, groups.size()); ++submitted)
    reader.submit(groups[submitted]->offset, groups[submitted]->size);
  for (size_t i = 0; i < groups.size(); ++i) {
    reader.wait(i);
    reader.release(i);
    if (submitted < groups.size()) {
      reader.submit(groups[submitted]->offset, groups[submitted]->size);
      ++submitted;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.bytes = total;
  r.groups = groups.size();
  r.gbps = double(total) / s / 1e9;
  r.mode = reader.mode();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    std::unique_ptr<Backend> backend = make_backend(a.device, 1);
    std::printf("device: %s\n", backend->name().c_str());
    const std::optional<double> h2d = probe_h2d_gbps(*backend, a.h2d_bytes, 5);
    const double copy = memcpy_gbps();
    DiskResult disk;
    if (!a.container.empty()) disk = disk_probe(a.container, a.disk_bytes);
    std::printf("%-16s %12s  %s\n", "path", "GB/s", "what");
    if (h2d)
      std::printf("%-16s %12.2f  pinned host -> device, %s per copy, best of 5\n", "host to device", *h2d,
                  format_bytes(a.h2d_bytes).c_str());
    else
      std::printf("%-16s %12s  (no CUDA device in this run)\n", "host to device", "n/a");
    if (disk.groups)
      std::printf("%-16s %12.2f  %llu decoder-block groups (%s) of %s, %s\n", "disk", disk.gbps,
                  static_cast<unsigned long long>(disk.groups), format_bytes(disk.bytes).c_str(), a.container.c_str(),
                  disk.mode.c_str());
    else
      std::printf("%-16s %12s  (no --container given)\n", "disk", "n/a");
    std::printf("%-16s %12.2f  one thread, 256 MiB\n", "host memcpy", copy);
    std::printf("probe: h2d_gbps=%.3f disk_gbps=%.3f disk_bytes=%llu disk_direct=%d memcpy_gbps=%.3f\n",
                h2d.value_or(0.0), disk.gbps, static_cast<unsigned long long>(disk.bytes),
                disk.mode == "O_DIRECT" ? 1 : 0, copy);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
