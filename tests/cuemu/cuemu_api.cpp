// The CUDA runtime API cuemu provides in place of libcudart: guarded device allocations (front and
// tail canaries, a guard page after each), pinned host memory, streams and events (host-call
// order), the stream-order check (vector clocks: a race on a GPU aborts here whatever order the
// emulation ran it in), copies, memsets and errors. Kernels run in cuemu_runtime.cpp's engine.
#include "cuemu_state.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace cuemu {

// ---------------------------------------------------------------- device memory
namespace {

constexpr size_t kFrontCanary = 256;
constexpr unsigned char kCanary = 0xCD;

std::set<void*>& pinned() {
  static auto* s = new std::set<void*>();
  return *s;
}
std::set<CUstream_st*>& streams() {
  static auto* s = new std::set<CUstream_st*>();
  return *s;
}
std::set<CUevent_st*>& events() {
  static auto* s = new std::set<CUevent_st*>();
  return *s;
}
size_t g_device_live = 0;
size_t page_size() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

size_t device_capacity() {
  static const size_t cap = [] {
    const char* env = std::getenv("CUEMU_DEVICE_MEMORY_MB");
    return (env ? size_t(std::strtoull(env, nullptr, 10)) : size_t(16384)) << 20;
  }();
  return cap;
}

// Canaries before and after one allocation; "" when intact.
std::string damaged(uintptr_t user, const Alloc& a) {
  const unsigned char* u = reinterpret_cast<const unsigned char*>(user);
  for (size_t i = 1; i <= kFrontCanary; ++i)
    if (u[-ptrdiff_t(i)] != kCanary) return std::to_string(i) + " bytes before the start";
  for (size_t i = a.bytes; i < a.rounded; ++i)
    if (u[i] != kCanary) return std::to_string(i - a.bytes) + " bytes past the end";
  return "";
}

bool valid_event(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return e && events().count(e) != 0;
}

uint64_t now_ns() {  // strictly increasing: two records never share a time
  static std::atomic<uint64_t> last{0};
  uint64_t t = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count());
  uint64_t prev = last.load();
  for (;;) {
    const uint64_t next = std::max(t, prev + 1);
    if (last.compare_exchange_weak(prev, next)) return next;
  }
}

}  // namespace

std::map<uintptr_t, Alloc>& allocs() {
  static auto* m = new std::map<uintptr_t, Alloc>();
  return *m;
}
// The allocation holding [p, p+n), or null.
const std::pair<const uintptr_t, Alloc>* find_alloc(const void* p, size_t n) {
  auto& m = allocs();
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(a);
  if (it == m.begin()) return nullptr;
  --it;
  if (a < it->first || a - it->first > it->second.bytes || n > it->second.bytes - (a - it->first)) return nullptr;
  return &*it;
}

void check_canaries(const char* after) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  for (const auto& [user, a] : allocs()) {
    const std::string where = damaged(user, a);
    if (!where.empty())
      die(std::string("out-of-bounds write: a device allocation of ") + std::to_string(a.bytes) + " bytes at " +
          std::to_string(user) + " was written " + where + " (found after " + after + ")");
  }
}

bool valid_stream(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return true;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return streams().count(s) != 0;
}

// ---------------------------------------------------------------- stream-order check
// Happens-before between streams: an operation on stream s takes s's clock (joined with what the
// host has synchronized with) and ticks s; cudaEventRecord copies the clock into the event,
// cudaStreamWaitEvent joins it into the waiting stream, host synchronizations join clocks into
// the host's. Each allocation remembers its last writer and its readers since (stream, tick);
// an access not ordered after them is a race on a GPU, whatever order the emulation ran it in.
namespace {

struct Access {
  const void* stream = nullptr;
  uint64_t tick = 0;
  std::string what;
};
struct History {
  Access write;
  std::map<const void*, Access> reads;  // per stream, the latest
};
VClock g_host_clock;
std::map<const void*, VClock> g_stream_clock;
std::map<uintptr_t, History> g_history;  // by allocation start

void join(VClock& into, const VClock& from) {
  for (const auto& [k, v] : from) {
    uint64_t& x = into[k];
    x = std::max(x, v);
  }
}
bool ordered(const VClock& c, const Access& a) {
  if (!a.stream) return true;
  const auto it = c.find(a.stream);
  return it != c.end() && it->second >= a.tick;
}
std::string stream_name(const void* s) {
  char b[40];
  std::snprintf(b, sizeof b, "stream %p", s);
  return b;
}

}  // namespace

void host_joins_stream(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  join(g_host_clock, g_stream_clock[s]);
}
void host_joins_all() {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  for (const auto& [s, c] : g_stream_clock) join(g_host_clock, c);
}

void stream_access(cudaStream_t stream, const char* what, const void* r, size_t rn, const void* w, size_t wn) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  const bool legacy = stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
  if (legacy) host_joins_all();  // the default stream waits for the others (simplified: all)
  VClock& c = g_stream_clock[stream];
  join(c, g_host_clock);
  const uint64_t tick = ++c[stream];
  auto touch = [&](const void* p, size_t n, bool write) {
    if (!p) return;
    const auto* a = find_alloc(p, n ? n : 1);
    if (!a) return;
    History& h = g_history[a->first];
    auto race = [&](const Access& prev, const char* kind) {
      die(std::string("stream race: ") + what + " on " + stream_name(stream) + (write ? " writes" : " reads") +
          " a device allocation of " + std::to_string(a->second.bytes) + " bytes that " + prev.what + " on " +
          stream_name(prev.stream) + " " + kind + ", with no event wait or synchronization ordering them");
    };
    if (h.write.stream != stream && !ordered(c, h.write)) race(h.write, "wrote");
    if (write)
      for (const auto& [s2, rd] : h.reads)
        if (s2 != stream && !ordered(c, rd)) race(rd, "read");
    Access now{stream, tick, what};
    if (write) {
      h.write = now;
      h.reads.clear();
    } else {
      h.reads[stream] = now;
    }
  };
  touch(r, rn, false);
  touch(w, wn, true);
  if (legacy) join(g_host_clock, c);
}

void forget_history(uintptr_t user) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  g_history.erase(user);
}

bool device_range(const void* p, size_t n) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return find_alloc(p, n) != nullptr;
}

void after_device_work(const char* what) { check_canaries(what); }
}  // namespace cuemu

// ==================================================================== the CUDA runtime API
using namespace cuemu;

namespace {

// Direction checks of a copy: the device side(s) must lie inside one live allocation.
cudaError_t check_copy(const char* fn, void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (n == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice ||
                       (kind == cudaMemcpyDefault && device_range(dst, 1));
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice ||
                       (kind == cudaMemcpyDefault && device_range(src, 1));
  if (dst_dev && !device_range(dst, n)) {
    std::fprintf(stderr, "cuemu: %s: destination [%p, +%zu) is not inside one device allocation\n", fn, dst, n);
    return fail(cudaErrorInvalidValue);
  }
  if (src_dev && !device_range(src, n)) {
    std::fprintf(stderr, "cuemu: %s: source [%p, +%zu) is not inside one device allocation\n", fn, src, n);
    return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "cuemu CPU emulation");
  p->totalGlobalMem = device_capacity();
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = 227 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 1;
  p->l2CacheSize = 1 << 20;
  p->memoryBusWidth = 64;
  p->maxThreadsPerMultiProcessor = 2048;
  p->unifiedAddressing = 1;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *total_bytes = device_capacity();
  *free_bytes = device_capacity() - g_device_live;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  host_joins_all();
  after_device_work("cudaDeviceSynchronize");
  return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return t_last_error; }
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    default: return "unknown error (cuemu)";
  }
}

// ---- memory ----
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  install_fault_handler();
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *ptr = nullptr;
  if (bytes > device_capacity() - g_device_live) return fail(cudaErrorMemoryAllocation);
  Alloc a;
  a.bytes = bytes;
  a.rounded = std::max<size_t>(256, (bytes + 255) / 256 * 256);
  const size_t page = page_size();
  a.map_len = (kFrontCanary + a.rounded + page - 1) / page * page + page;
  void* m = mmap(nullptr, a.map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
  a.map = static_cast<char*>(m);
  char* guard = a.map + a.map_len - page;
  mprotect(guard, page, PROT_NONE);
  char* user = guard - a.rounded;
  std::memset(user - kFrontCanary, kCanary, kFrontCanary);
  std::memset(user, 0xFF, a.bytes);  // device memory starts undefined: NaN / ~0, never zeros
  std::memset(user + a.bytes, kCanary, a.rounded - a.bytes);
  allocs()[reinterpret_cast<uintptr_t>(user)] = a;
  g_device_live += a.bytes;
  *ptr = user;
  return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto it = allocs().find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocs().end()) {
    std::fprintf(stderr, "cuemu: cudaFree(%p): not a live device allocation\n", ptr);
    return fail(cudaErrorInvalidValue);
  }
  const std::string where = damaged(it->first, it->second);
  if (!where.empty())
    die("out-of-bounds write: a device allocation of " + std::to_string(it->second.bytes) + " bytes was written " +
        where + " (found at cudaFree)");
  host_joins_all();  // cudaFree waits for the device
  forget_history(it->first);
  g_device_live -= it->second.bytes;
  munmap(it->second.map, it->second.map_len);
  allocs().erase(it);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  *ptr = std::aligned_alloc(4096, std::max<size_t>(4096, (bytes + 4095) / 4096 * 4096));
  if (!*ptr) return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  pinned().insert(*ptr);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) { return cudaMallocHost(ptr, bytes); }
cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (pinned().erase(ptr) == 0) {
    std::fprintf(stderr, "cuemu: cudaFreeHost(%p): not pinned host memory\n", ptr);
    return fail(cudaErrorInvalidValue);
  }
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (const cudaError_t e = check_copy("cudaMemcpy", dst, src, n, kind)) return e;
  stream_access(nullptr, "cudaMemcpy", src, n, dst, n);
  host_joins_all();
  if (n) std::memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = check_copy("cudaMemcpyAsync", dst, src, n, kind)) return e;
  stream_access(stream, "cudaMemcpyAsync", src, n, dst, n);
  if (n) std::memmove(dst, src, n);
  return cudaSuccess;
}
namespace {
cudaError_t memset_on(void* dst, int value, size_t n, cudaStream_t stream, const char* what) {
  if (n && !device_range(dst, n)) {
    std::fprintf(stderr, "cuemu: %s: [%p, +%zu) is not inside one device allocation\n", what, dst, n);
    return fail(cudaErrorInvalidValue);
  }
  stream_access(stream, what, nullptr, 0, dst, n);
  if (n) std::memset(dst, value, n);
  return cudaSuccess;
}
}  // namespace
cudaError_t cudaMemset(void* dst, int value, size_t n) {
  const cudaError_t e = memset_on(dst, value, n, nullptr, "cudaMemset");
  host_joins_all();
  return e;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  return memset_on(dst, value, n, stream, "cudaMemsetAsync");
}

// ---- streams ----
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *s = new CUstream_st{flags};
  streams().insert(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!s || streams().erase(s) == 0) return fail(cudaErrorInvalidResourceHandle);
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  if (s == nullptr || s == cudaStreamLegacy)
    host_joins_all();
  else
    host_joins_stream(s);
  after_device_work("cudaStreamSynchronize");
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) { return valid_stream(s) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle); }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  if (!valid_stream(s) || !valid_event(e)) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  cuemu::join(cuemu::g_stream_clock[s], e->clock);
  return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data) {
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  if (!fn) return fail(cudaErrorInvalidValue);
  fn(data);  // everything queued before it on the stream has executed
  return cudaSuccess;
}

// ---- events ----
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *e = new CUevent_st{flags, false, 0};
  events().insert(*e);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!e || events().erase(e) == 0) return fail(cudaErrorInvalidResourceHandle);
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!valid_event(e) || !valid_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  e->recorded = true;
  e->t_ns = now_ns();
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  VClock& c = cuemu::g_stream_clock[s];
  cuemu::join(c, cuemu::g_host_clock);
  e->clock = c;
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!valid_event(e)) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  cuemu::join(cuemu::g_host_clock, e->clock);  // the host saw it complete
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!valid_event(e)) return fail(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    cuemu::join(cuemu::g_host_clock, e->clock);
  }
  after_device_work("cudaEventSynchronize");
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!valid_event(a) || !valid_event(b)) return fail(cudaErrorInvalidResourceHandle);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (!a->recorded || !b->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = float(double(int64_t(b->t_ns - a->t_ns)) / 1e6);
  return cudaSuccess;
}

}  // extern "C"
