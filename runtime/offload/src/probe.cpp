// Disk bandwidth probe: sequential reads through a DiskReader, as the streaming does.
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "endor/offload.h"

namespace endor {

DiskProbe probe_disk_read(const std::string& path, uint64_t offset, uint64_t bytes, uint64_t request, bool direct) {
  if (bytes == 0 || request == 0) throw Error(path + ": disk probe of 0 bytes");
  DiskReaderOptions options;
  options.n_buffers = 2;
  options.max_request = request;
  options.direct = direct;
  // Buffers touched once before the clock starts, as the streaming's slots are: a first read into
  // fresh pages pays their faults, which is not the disk's time.
  options.allocate = [](size_t bytes) -> void* {
    void* p = nullptr;
    if (::posix_memalign(&p, 4096, bytes ? bytes : 1) != 0) return nullptr;
    std::memset(p, 0, bytes);
    return p;
  };
  options.deallocate = [](void* p) { std::free(p); };
  DiskReader reader(path, options);
  const uint64_t n = (bytes + request - 1) / request;
  auto range = [&](uint64_t i) {
    const uint64_t begin = offset + i * request;
    return std::make_pair(begin, std::min(request, offset + bytes - begin));
  };
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t submitted = 0;
  for (; submitted < std::min<uint64_t>(n, 2); ++submitted) reader.submit(range(submitted).first, range(submitted).second);
  for (uint64_t i = 0; i < n; ++i) {
    reader.wait(i);
    reader.release(i);
    if (submitted < n) {
      reader.submit(range(submitted).first, range(submitted).second);
      ++submitted;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  DiskProbe p;
  p.bytes = bytes;
  p.gbps = s > 0 ? double(bytes) / s / 1e9 : 0;
  p.mode = reader.mode();
  return p;
}

}  // namespace endor
