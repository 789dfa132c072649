// DiskReader: one thread reading byte ranges of a file, in request order, into a ring of aligned
// staging buffers (O_DIRECT where allowed, buffered pread otherwise).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

#include "endor/offload.h"

namespace endor {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

enum class RequestState { Queued, Reading, Done, Failed, Released };

struct Request {
  uint64_t offset = 0, length = 0;
  uint8_t* dst = nullptr;        // submit_into: the caller's memory, else a staging buffer
  RequestState state = RequestState::Queued;
  bool release_pending = false;  // released while being read: free the buffer when the read ends
  const uint8_t* data = nullptr;
  std::string error;
};

// pread until `length` bytes or end of file; returns bytes read, or -errno.
int64_t pread_full(int fd, uint8_t* dst, uint64_t length, uint64_t offset) {
  uint64_t done = 0;
  while (done < length) {
    const size_t want = size_t(std::min<uint64_t>(length - done, uint64_t(1) << 30));
    const ssize_t got = ::pread(fd, dst + done, want, off_t(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return -int64_t(errno);
    }
    if (got == 0) break;  // end of file
    done += uint64_t(got);
  }
  return int64_t(done);
}

}  // namespace

struct DiskReader::State {
  DiskReaderOptions opt;
  uint64_t buffer_bytes = 0;
  int fd_direct = -1, fd_buffered = -1;
  bool direct = false;
  std::string mode;

  struct Buffer {
    void* raw = nullptr;     // what allocate returned
    uint8_t* data = nullptr; // aligned start
    int64_t owner = -1;      // ticket holding it, -1 = free
  };
  std::vector<Buffer> buffers;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Request> requests;  // requests[t - first]
  uint64_t first = 0, next_submit = 0, next_read = 0;
  bool stop = false;
  DiskReaderStats stats;
  std::thread thread;

  Request* find(uint64_t t) { return t >= first && t < next_submit ? &requests[size_t(t - first)] : nullptr; }
  // Released (or already trimmed away) before the reader got to it.
  bool dropped(uint64_t t) {
    const Request* r = find(t);
    return !r || r->state == RequestState::Released;
  }
  void trim() {
    while (!requests.empty() && requests.front().state == RequestState::Released) {
      requests.pop_front();
      ++first;
    }
  }
  void free_buffer_of(uint64_t t) {
    Buffer& b = buffers[size_t(t % buffers.size())];
    if (b.owner == int64_t(t)) b.owner = -1;
  }

  ~State() {
    if (fd_direct >= 0) ::close(fd_direct);
    if (fd_buffered >= 0) ::close(fd_buffered);
    for (Buffer& b : buffers)
      if (b.raw) opt.deallocate ? opt.deallocate(b.raw) : std::free(b.raw);
  }

  // Reads request `rq_copy` into `buf`; sets data or error. Runs unlocked on the reader thread
  // (only this thread changes `direct`, under the lock). Returns false when O_DIRECT was refused
  // at read time (the read was then done buffered).
  bool read(const std::string& path, Request& rq_copy, uint8_t* buf, uint64_t& device_bytes) {
    const uint64_t off = rq_copy.offset, len = rq_copy.length, end = off + len;
    bool direct_ok = true;
    if (direct) {
      const uint64_t a = opt.alignment, start = off / a * a, stop_at = (end + a - 1) / a * a;
      const int64_t got = pread_full(fd_direct, buf, stop_at - start, start);
      if (got == -EINVAL) {
        direct_ok = false;  // opened with O_DIRECT, but the file system refuses the read
      } else if (got < 0) {
        rq_copy.error = path + ": read of bytes [" + std::to_string(off) + ", " + std::to_string(end) +
                        ") failed: " + std::strerror(int(-got));
        return true;
      } else {
        device_bytes = uint64_t(got);
        if (start + uint64_t(got) < end) {
          rq_copy.error = truncated(path, off, end);
          return true;
        }
        rq_copy.data = buf + (off - start);
        return true;
      }
    }
    const int64_t got = pread_full(fd_buffered, buf, len, off);
    if (got < 0) {
      rq_copy.error = path + ": read of bytes [" + std::to_string(off) + ", " + std::to_string(end) +
                      ") failed: " + std::strerror(int(-got));
      return direct_ok;
    }
    device_bytes = uint64_t(got);
    if (uint64_t(got) < len) {
      rq_copy.error = truncated(path, off, end);
      return direct_ok;
    }
    rq_copy.data = buf;
    return direct_ok;
  }

  std::string truncated(const std::string& path, uint64_t off, uint64_t end) const {
    struct stat st {};
    const std::string size = ::fstat(fd_buffered, &st) == 0 ? std::to_string(st.st_size) : std::string("?");
    return path + ": truncated: bytes [" + std::to_string(off) + ", " + std::to_string(end) +
           ") wanted but the file ends at " + size;
  }

  void run(const std::string& path) {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || next_read < next_submit; });
      if (stop) return;
      if (next_read < first) next_read = first;  // dropped and trimmed before they were read
      const uint64_t t = next_read;
      if (t >= next_submit) continue;
      if (dropped(t)) {
        ++next_read;
        continue;
      }
      Buffer& b = buffers[size_t(t % buffers.size())];
      uint8_t* const into = find(t)->dst;
      if (!into && b.owner != -1) {
        const Clock::time_point t0 = Clock::now();
        cv.wait(lock, [&] { return stop || b.owner == -1 || dropped(t); });
        stats.backpressure_s += seconds_since(t0);
        if (stop) return;
        if (dropped(t)) {
          ++next_read;
          continue;
        }
      }
      if (!into) b.owner = int64_t(t);
      Request copy = *find(t);
      find(t)->state = RequestState::Reading;
      ++next_read;
      lock.unlock();
      uint64_t device_bytes = 0;
      const Clock::time_point t0 = Clock::now();
      const bool direct_ok = read(path, copy, into ? into : b.data, device_bytes);
      const double busy = seconds_since(t0);
      lock.lock();
      if (!direct_ok) {  // buffered from now on
        direct = false;
        mode = "buffered pread (O_DIRECT read refused: " + std::string(std::strerror(EINVAL)) + ")";
      }
      stats.busy_s += busy;
      stats.device_bytes += device_bytes;
      Request& rq = *find(t);  // references into a deque survive push_back; t is not trimmed while Reading
      rq.data = copy.data;
      rq.error = copy.error;
      if (rq.error.empty()) {
        stats.reads += 1;
        stats.bytes += rq.length;
      }
      if (rq.release_pending) {
        rq.state = RequestState::Released;
        free_buffer_of(t);
        trim();
      } else {
        rq.state = rq.error.empty() ? RequestState::Done : RequestState::Failed;
      }
      cv.notify_all();
    }
  }
};

DiskReader::DiskReader(const std::string& path, const DiskReaderOptions& options)
    : path_(path), n_buffers_(options.n_buffers), state_(std::make_unique<State>()) {
  State& s = *state_;
  s.opt = options;
  if (options.n_buffers < 1) throw Error(path + ": disk reader needs at least one staging buffer");
  if (options.max_request == 0) throw Error(path + ": disk reader needs a maximum request size");
  const uint64_t a = options.alignment;
  if (a == 0 || (a & (a - 1)) != 0) throw Error(path + ": disk reader alignment must be a power of two");
  if (options.max_request > (uint64_t(1) << 46)) throw Error(path + ": disk reader request size is too large");
  s.buffer_bytes = (options.max_request + 2 * a + a - 1) / a * a;

  s.fd_buffered = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (s.fd_buffered < 0) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  if (options.direct) {
    s.fd_direct = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (s.fd_direct >= 0) {
      s.direct = true;
      s.mode = "O_DIRECT";
    } else {
      s.mode = "buffered pread (O_DIRECT refused: " + std::string(std::strerror(errno)) + ")";
    }
  } else {
    s.mode = "buffered pread (asked)";
  }

  s.buffers.resize(options.n_buffers);
  for (State::Buffer& b : s.buffers) {
    const size_t bytes = size_t(s.buffer_bytes + a);  // room to align a misaligned allocation
    if (options.allocate) {
      b.raw = options.allocate(bytes);
    } else if (::posix_memalign(&b.raw, size_t(a), bytes) != 0) {
      b.raw = nullptr;
    }
    if (!b.raw) throw Error(path + ": cannot allocate " + format_bytes(bytes) + " of disk staging memory");
    const uintptr_t p = reinterpret_cast<uintptr_t>(b.raw);
    b.data = reinterpret_cast<uint8_t*>((p + a - 1) / a * a);
  }
  try {
    s.thread = std::thread([this] { state_->run(path_); });
  } catch (const std::system_error& e) {
    throw Error(path + ": cannot start the disk reader thread (" + e.what() + ")");
  }
}

DiskReader::~DiskReader() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

DiskReader::Ticket DiskReader::submit(uint64_t offset, uint64_t length) {
  State& s = *state_;
  if (length == 0) throw Error(path_ + ": disk read of 0 bytes at " + std::to_string(offset));
  if (length > s.opt.max_request)
    throw Error(path_ + ": disk read of " + std::to_string(length) + " bytes exceeds the staging buffer size " +
                std::to_string(s.opt.max_request));
  if (offset > UINT64_MAX - length - 2 * uint64_t(s.opt.alignment) || offset + length > uint64_t(INT64_MAX))
    throw Error(path_ + ": disk read range at " + std::to_string(offset) + " overflows");
  std::lock_guard<std::mutex> lock(s.mu);
  Request r;
  r.offset = offset;
  r.length = length;
  s.requests.push_back(std::move(r));
  const Ticket t = s.next_submit++;
  s.cv.notify_all();
  return t;
}

DiskReader::Ticket DiskReader::submit_into(uint64_t offset, uint64_t length, uint8_t* dst, uint64_t dst_bytes) {
  State& s = *state_;
  const uint64_t a = s.opt.alignment;
  if (length == 0) throw Error(path_ + ": disk read of 0 bytes at " + std::to_string(offset));
  if (offset % a != 0 || reinterpret_cast<uintptr_t>(dst) % a != 0)
    throw Error(path_ + ": a disk read into given memory needs an offset and an address aligned to " + std::to_string(a));
  if (offset > UINT64_MAX - length - 2 * a || offset + length > uint64_t(INT64_MAX))
    throw Error(path_ + ": disk read range at " + std::to_string(offset) + " overflows");
  if (dst_bytes < (length + a - 1) / a * a)
    throw Error(path_ + ": disk read of " + std::to_string(length) + " bytes does not fit the " +
                std::to_string(dst_bytes) + " bytes given");
  std::lock_guard<std::mutex> lock(s.mu);
  Request r;
  r.offset = offset;
  r.length = length;
  r.dst = dst;
  s.requests.push_back(std::move(r));
  const Ticket t = s.next_submit++;
  s.cv.notify_all();
  return t;
}

bool DiskReader::ready(Ticket t) const {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  const Request* r = s.find(t);
  return r && (r->state == RequestState::Done || r->state == RequestState::Failed);
}

DiskReader::Chunk DiskReader::wait(Ticket t) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (t >= s.next_submit) throw Error(path_ + ": disk read ticket " + std::to_string(t) + " was never submitted");
  auto state_of = [&]() { return s.find(t) ? s.find(t)->state : RequestState::Released; };
  if (state_of() == RequestState::Released)
    throw Error(path_ + ": disk read ticket " + std::to_string(t) + " was already released");
  s.cv.wait(lock, [&] {
    const RequestState st = state_of();
    return s.stop || st == RequestState::Done || st == RequestState::Failed || st == RequestState::Released;
  });
  const Request* r = s.find(t);
  if (!r || r->state == RequestState::Released)
    throw Error(path_ + ": disk read ticket " + std::to_string(t) + " was released while waited for");
  if (r->state == RequestState::Failed) throw Error(r->error);
  if (r->state != RequestState::Done) throw Error(path_ + ": the disk reader stopped");
  return {r->data, r->length};
}

void DiskReader::release(Ticket t) {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    Request* r = s.find(t);
    if (!r || r->state == RequestState::Released) return;
    if (r->state == RequestState::Reading) {
      r->release_pending = true;
      return;
    }
    const bool held_buffer = r->state == RequestState::Done || r->state == RequestState::Failed;
    r->state = RequestState::Released;
    if (held_buffer) s.free_buffer_of(t);
    s.trim();
  }
  s.cv.notify_all();
}

bool DiskReader::cancel(Ticket t) {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    Request* r = s.find(t);
    if (!r || r->state != RequestState::Queued) return false;
    r->state = RequestState::Released;
    s.trim();
  }
  s.cv.notify_all();
  return true;
}

std::string DiskReader::mode() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->mode;
}

bool DiskReader::direct() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->direct;
}

DiskReaderStats DiskReader::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

}  // namespace endor
