// Disk bandwidth probes through a DiskReader, as the streaming reads: sequential ranges (blocks), and
// scattered ranges submitted at once (routed experts).
#include <algorithm>
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

DiskProbe probe_disk_ranges(const std::string& path, const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                            bool direct) {
  if (ranges.empty()) throw Error(path + ": disk probe of no ranges");
  uint64_t max_request = 0, bytes = 0;
  for (const auto& [offset, length] : ranges) {
    if (length == 0) throw Error(path + ": disk probe of 0 bytes");
    max_request = std::max(max_request, length);
    bytes += length;
  }
  DiskReaderOptions options;
  options.n_buffers = 1;  // reads go into `dst`, touched before the clock starts
  options.max_request = max_request;
  options.direct = direct;
  const uint64_t a = options.alignment, slot = (max_request + 2 * a) / a * a;
  std::vector<void*> slots(ranges.size(), nullptr);
  for (void*& p : slots) {
    if (::posix_memalign(&p, size_t(a), size_t(slot)) != 0) p = nullptr;
    if (!p) {
      for (void* q : slots) std::free(q);
      throw Error(path + ": cannot allocate the disk probe's buffers");
    }
    std::memset(p, 0, size_t(slot));
  }
  DiskProbe p;
  try {
    DiskReader reader(path, options);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<DiskReader::Ticket> tickets;
    for (size_t i = 0; i < ranges.size(); ++i) {
      const uint64_t begin = ranges[i].first / a * a;  // submit_into wants an aligned offset
      tickets.push_back(reader.submit_into(begin, ranges[i].first + ranges[i].second - begin,
                                           static_cast<uint8_t*>(slots[i]), slot));
    }
    for (DiskReader::Ticket t : tickets) {
      reader.wait(t);
      reader.release(t);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    p.bytes = bytes;
    p.gbps = s > 0 ? double(bytes) / s / 1e9 : 0;
    p.mode = reader.mode();
  } catch (...) {
    for (void* q : slots) std::free(q);
    throw;
  }
  for (void* q : slots) std::free(q);
  return p;
}

}  // namespace endor
