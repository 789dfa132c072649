// cuemu's execution engine: fibers and the block scheduler, warp collectives and barriers with
// their divergence checks, the thread orders, kernel launch, the fault handler (guard pages of
// device allocations and fiber stacks), errors, and the kernel coverage record and profile. The
// CUDA runtime API over it (device memory, streams, events, the stream-order check) is in
// cuemu_api.cpp; what the two share is declared in cuemu_state.h.
#include "cuemu_state.h"

#include <boost/context/detail/fcontext.hpp>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace bctx = boost::context::detail;

namespace cuemu {

thread_local uint3 t_threadIdx, t_blockIdx;
thread_local dim3 t_blockDim, t_gridDim;

// ---------------------------------------------------------------- global state
std::recursive_mutex g_mutex;  // registries, streams, events, coverage
thread_local cudaError_t t_last_error = cudaSuccess;

cudaError_t fail(cudaError_t e) {
  t_last_error = e;
  return e;
}

namespace {

std::atomic<uint64_t> g_launches{0};

// ---------------------------------------------------------------- thread order
enum class Order { Forward, Reverse, Shuffle };
struct OrderSetting {
  Order order = Order::Forward;
  uint64_t seed = 1;
};
const OrderSetting& order_setting() {
  static const OrderSetting s = [] {
    OrderSetting o;
    const char* env = std::getenv("CUEMU_ORDER");
    const std::string v = env ? env : "forward";
    if (v == "forward") {
      o.order = Order::Forward;
    } else if (v == "reverse") {
      o.order = Order::Reverse;
    } else if (v.rfind("shuffle", 0) == 0) {
      o.order = Order::Shuffle;
      if (v.size() > 8 && v[7] == ':') o.seed = std::strtoull(v.c_str() + 8, nullptr, 10);
    } else {
      std::fprintf(stderr, "cuemu: CUEMU_ORDER=%s is not forward, reverse or shuffle[:seed]\n", v.c_str());
      std::exit(2);
    }
    return o;
  }();
  return s;
}

// ---------------------------------------------------------------- fibers
enum class St : uint8_t { Ready, BlockBar, WarpWait, Done };

struct Fiber {
  bctx::fcontext_t ctx = nullptr;
  St st = St::Ready;
  uint64_t in = 0, out = 0;  // payload of warp / block collectives
  unsigned mask = 0;
  int op = 0, arg = 0, width = kWarp;
  const char* file = nullptr;  // barrier site
  int line = 0;
  uint3 tid{};
};

constexpr size_t kStackBytes = 64 * 1024;
constexpr unsigned kMaxThreads = 1024;

// Fiber stacks of one OS thread: kMaxThreads stacks, each above a PROT_NONE guard page.
struct StackPool {
  char* base = nullptr;
  size_t page = 0, stride = 0;
  StackPool() {
    page = size_t(sysconf(_SC_PAGESIZE));
    stride = kStackBytes + page;
    void* p = mmap(nullptr, stride * kMaxThreads, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "cuemu: cannot map fiber stacks\n");
      std::abort();
    }
    base = static_cast<char*>(p);
    for (unsigned i = 0; i < kMaxThreads; ++i) mprotect(base + i * stride, page, PROT_NONE);
  }
  ~StackPool() { munmap(base, stride * kMaxThreads); }
  char* top(unsigned i) const { return base + i * stride + stride; }
  bool is_guard(const void* a) const {
    const char* c = static_cast<const char*>(a);
    if (c < base || c >= base + stride * kMaxThreads) return false;
    return size_t(c - base) % stride < page;
  }
};
thread_local StackPool* t_stacks = nullptr;

// Lanes of one warp waiting at some warp collective, and lanes that have exited.
struct WarpState {
  unsigned waiting = 0, done = 0;
};

struct BlockRun {
  std::vector<Fiber> f;
  std::vector<WarpState> warps;
  bctx::fcontext_t sched = nullptr;
  unsigned cur = 0;
  std::vector<unsigned> order;  // the current round's order of threads
  size_t pos = 0;               // position of `cur` in it
  const std::function<void()>* body = nullptr;
  const char* kernel = "";
  std::vector<unsigned char> smem;
  unsigned long long epoch = 0;
};
thread_local BlockRun* t_run = nullptr;
thread_local unsigned long long t_epoch = 0;
thread_local const char* t_kernel = nullptr;  // kernel being run by this OS thread (fault reports)

}  // namespace

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "cuemu: %s", msg.c_str());
  if (t_run)
    std::fprintf(stderr, " [kernel %s, block (%u,%u,%u), thread (%u,%u,%u)]", t_run->kernel, t_blockIdx.x,
                 t_blockIdx.y, t_blockIdx.z, t_threadIdx.x, t_threadIdx.y, t_threadIdx.z);
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
  std::abort();
}

namespace {

// Threads switch to the next ready thread of the current scheduling round directly (one jump per
// switch); the scheduler runs between rounds. Every jump carries the Fiber it came from, whose
// context the receiver stores (kFinished: from a thread that has exited, never resumed).
char kFinished;

void arrived(bctx::transfer_t t) {
  if (t.data == &kFinished) return;
  if (t.data)
    static_cast<Fiber*>(t.data)->ctx = t.fctx;
  else
    t_run->sched = t.fctx;
}

void switch_away(void* from) {
  BlockRun* r = t_run;
  for (size_t p = r->pos + 1; p < r->order.size(); ++p) {
    const unsigned i = r->order[p];
    Fiber& next = r->f[i];
    if (next.st != St::Ready) continue;
    r->pos = p;
    r->cur = i;
    t_threadIdx = next.tid;
    arrived(bctx::jump_fcontext(next.ctx, from));
    return;
  }
  arrived(bctx::jump_fcontext(r->sched, from));
}

void fiber_entry(bctx::transfer_t t) {
  arrived(t);
  BlockRun* r = t_run;
  (*r->body)();
  r = t_run;
  r->f[r->cur].st = St::Done;
  r->warps[r->cur / kWarp].done |= 1u << (r->cur % kWarp);
  switch_away(&kFinished);
  std::abort();  // a finished fiber is never resumed
}

void yield() { switch_away(&t_run->f[t_run->cur]); }

Fiber& self() {
  if (!t_run) die("a device function was called outside a kernel");
  return t_run->f[t_run->cur];
}

const char* op_name(int op) {
  switch (op) {
    case kShflIdx: return "__shfl_sync";
    case kShflUp: return "__shfl_up_sync";
    case kShflDown: return "__shfl_down_sync";
    case kShflXor: return "__shfl_xor_sync";
    case kBallot: return "__ballot_sync";
    default: return "__syncwarp";
  }
}

std::string hex(unsigned m) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", m);
  return b;
}

// The last lane of `mask` to arrive computes every participant's result.
void warp_release(unsigned warp_base, unsigned mask) {
  BlockRun* r = t_run;
  Fiber* lane[kWarp] = {};
  for (int l = 0; l < kWarp; ++l)
    if ((mask >> l) & 1u) lane[l] = &r->f[warp_base + l];
  Fiber& me = self();
  const int op = me.op;
  unsigned ballot = 0;
  if (op == kBallot)
    for (int l = 0; l < kWarp; ++l)
      if (lane[l] && lane[l]->in) ballot |= 1u << l;
  for (int l = 0; l < kWarp; ++l) {
    Fiber* p = lane[l];
    if (!p) continue;
    const int w = p->width, seg = (l / w) * w;
    int src = l;
    switch (op) {
      case kShflIdx: src = seg + (p->arg & (w - 1)); break;
      case kShflUp: src = (l - p->arg >= seg) ? l - p->arg : l; break;
      case kShflDown: src = (l + p->arg < seg + w) ? l + p->arg : l; break;
      case kShflXor: src = ((l ^ p->arg) < seg + w) ? (l ^ p->arg) : l; break;
      default: break;
    }
    if (op == kBallot) {
      p->out = ballot;
    } else if (op != kSyncWarp) {
      if (src < 0 || src >= kWarp || !lane[src])
        die(std::string(op_name(op)) + " on lane " + std::to_string(l) + " reads lane " + std::to_string(src) +
            ", which is not in its mask " + hex(mask) + " (undefined on a GPU)");
      p->out = lane[src]->in;
    }
    if (p != &me) p->st = St::Ready;
  }
  r->warps[warp_base / kWarp].waiting &= ~mask;
}

}  // namespace

// ---------------------------------------------------------------- device-side hooks
uint64_t warp_op(unsigned mask, int op, uint64_t in, int arg, int width) {
  BlockRun* r = t_run;
  Fiber& me = self();
  const unsigned n = unsigned(r->f.size());
  const unsigned warp_base = r->cur / kWarp * kWarp;
  const unsigned nlanes = std::min<unsigned>(kWarp, n - warp_base);
  const unsigned my_lane = r->cur - warp_base;
  if (!((mask >> my_lane) & 1u))
    die(std::string(op_name(op)) + " called by lane " + std::to_string(my_lane) + ", which is not in its mask " +
        hex(mask));
  if (nlanes < kWarp && (mask >> nlanes))
    die(std::string(op_name(op)) + " mask " + hex(mask) + " names lanes past the end of the block");
  me.op = op;
  me.in = in;
  me.arg = arg;
  me.width = width;
  me.mask = mask;
  WarpState& ws = r->warps[warp_base / kWarp];
  const unsigned my_bit = 1u << my_lane;
  if (mask & ws.done) {
    const int l = __builtin_ctz(mask & ws.done);
    die(std::string(op_name(op)) + " mask " + hex(mask) + " names lane " + std::to_string(l) + ", which has exited");
  }
  // Release when every other lane of the mask waits at this same collective. A lane of the mask
  // waiting at another collective that names this lane too can never meet it: a deadlock (or
  // undefined) on a GPU. One waiting at a collective of other lanes will come here later.
  bool all_here = (mask & ~(ws.waiting | my_bit)) == 0;
  if (all_here) {
    for (unsigned rest = mask & ~my_bit; rest; rest &= rest - 1) {
      const Fiber& o = r->f[warp_base + unsigned(__builtin_ctz(rest))];
      if (o.op == op && o.mask == mask && o.width == width) continue;
      if ((o.mask >> my_lane) & 1u)
        die(std::string("lanes of one warp wait at different collectives: ") + op_name(op) + " mask " + hex(mask) +
            " and " + op_name(o.op) + " mask " + hex(o.mask));
      all_here = false;
    }
  }
  if (all_here) {
    warp_release(warp_base, mask);
    return me.out;
  }
  ws.waiting |= my_bit;
  me.st = St::WarpWait;
  yield();
  return self().out;
}

uint64_t block_barrier(uint64_t predicate, const char* file, int line) {
  Fiber& me = self();
  me.in = predicate;
  me.file = file;
  me.line = line;
  me.st = St::BlockBar;
  yield();
  return self().out;
}

void* dynamic_smem() {
  if (!t_run) die("dynamic shared memory used outside a kernel");
  return t_run->smem.data();
}

void poison_shared(void* p, size_t bytes, unsigned long long* epoch) {
  if (!t_run) die("__shared__ variable used outside a kernel");
  if (*epoch == t_run->epoch) return;
  std::memset(p, 0xFF, bytes);  // shared memory starts undefined: reads before writes see NaN / ~0
  *epoch = t_run->epoch;
}

void device_fail(const char* message) { die(message); }

namespace {

void run_block(dim3 grid, dim3 block, uint3 bid, size_t smem_bytes, const char* kernel,
               const std::function<void()>& body, std::mt19937_64& rng) {
  if (!t_stacks) t_stacks = new StackPool();  // lives as long as the OS thread's process
  BlockRun r;
  r.body = &body;
  r.kernel = kernel;
  r.epoch = ++t_epoch;
  r.smem.assign(smem_bytes, 0xFF);
  const unsigned n = block.x * block.y * block.z;
  r.f.resize(n);
  r.warps.assign((n + kWarp - 1) / kWarp, WarpState{});
  BlockRun* outer = t_run;  // a launch from inside a kernel is not supported; keep state sane anyway
  t_run = &r;
  t_blockIdx = bid;
  t_blockDim = block;
  t_gridDim = grid;
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = r.f[i];
    f.tid = uint3{i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
    f.ctx = bctx::make_fcontext(t_stacks->top(i), kStackBytes, fiber_entry);
  }
  std::vector<unsigned>& order = r.order;
  order.resize(n);
  std::iota(order.begin(), order.end(), 0u);
  const Order mode = order_setting().order;
  if (mode == Order::Reverse) std::reverse(order.begin(), order.end());
  for (;;) {
    if (mode == Order::Shuffle) std::shuffle(order.begin(), order.end(), rng);
    bool ran = false;
    for (size_t p = 0; p < n; ++p) {
      Fiber& f = r.f[order[p]];
      if (f.st != St::Ready) continue;
      r.pos = p;
      r.cur = order[p];
      t_threadIdx = f.tid;
      arrived(bctx::jump_fcontext(f.ctx, nullptr));  // the round runs until no thread after it is ready
      ran = true;
      break;
    }
    if (ran) continue;
    unsigned done = 0, at_bar = 0;
    const Fiber* bar = nullptr;
    const Fiber* warp_waiter = nullptr;
    for (const Fiber& f : r.f) {
      done += f.st == St::Done;
      if (f.st == St::BlockBar) {
        ++at_bar;
        if (!bar) bar = &f;
      }
      if (f.st == St::WarpWait && !warp_waiter) warp_waiter = &f;
    }
    if (done == n) break;
    t_threadIdx = (bar ? bar : warp_waiter)->tid;
    if (at_bar + done == n) {
      if (done)
        die("divergent __syncthreads: " + std::to_string(at_bar) + " threads wait at " + bar->file + ":" +
            std::to_string(bar->line) + " but " + std::to_string(done) + " threads of the block have exited");
      uint64_t count = 0;
      for (const Fiber& f : r.f) {
        if (f.line != bar->line || std::strcmp(f.file, bar->file) != 0)
          die(std::string("divergent __syncthreads: threads of one block wait at ") + bar->file + ":" +
              std::to_string(bar->line) + " and at " + f.file + ":" + std::to_string(f.line));
        if ((f.in & 1) != (bar->in & 1))
          die("divergent barriers: __syncthreads and __syncthreads_count/or/and at the same time");
        count += (f.in >> 1) & 1;
      }
      for (Fiber& f : r.f) {
        f.out = count;
        f.st = St::Ready;
      }
      continue;
    }
    if (warp_waiter) {
      t_threadIdx = warp_waiter->tid;
      die(std::string("deadlock: a thread waits at ") + op_name(warp_waiter->op) + " (mask " + hex(warp_waiter->mask) +
          ") while " + std::to_string(at_bar) + " threads wait at __syncthreads" +
          (bar ? std::string(" (") + bar->file + ":" + std::to_string(bar->line) + ")" : std::string()) + " and " +
          std::to_string(done) + " have exited");
    }
    die("deadlock in the block scheduler");
  }
  t_run = outer;
}

// ---------------------------------------------------------------- coverage record
std::set<std::string>& coverage() {
  static auto* s = new std::set<std::string>();
  return *s;
}
void write_coverage() {
  const char* path = std::getenv("CUEMU_COVERAGE");
  if (!path || !*path) return;
  std::string text;
  {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    for (const std::string& s : coverage()) text += s + "\n";
  }
  if (text.empty()) return;
  // One append per process: concurrent test processes add whole blocks of lines.
  FILE* f = std::fopen(path, "a");
  if (!f) {
    std::fprintf(stderr, "cuemu: cannot append the kernel coverage record to %s\n", path);
    return;
  }
  std::setvbuf(f, nullptr, _IOFBF, text.size() + 1);
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

// CUEMU_PROFILE=1: seconds spent in each kernel (and cuBLAS call), printed at exit.
struct ProfileEntry {
  uint64_t launches = 0;
  double seconds = 0.0;
};
std::map<std::string, ProfileEntry>& profile() {
  static auto* m = new std::map<std::string, ProfileEntry>();
  return *m;
}
void print_profile() {
  double total = 0.0;
  for (const auto& [name, e] : profile()) total += e.seconds;
  std::fprintf(stderr, "cuemu profile: %.2f s in emulated device work\n", total);
  for (const auto& [name, e] : profile())
    std::fprintf(stderr, "  %8.3f s %7llu x %s\n", e.seconds, (unsigned long long)e.launches, name.c_str());
}

}  // namespace

bool profiling() {
  static const bool on = [] {
    const char* env = std::getenv("CUEMU_PROFILE");
    if (!env || !*env || *env == '0') return false;
    std::atexit(print_profile);
    return true;
  }();
  return on;
}

void add_profile(const std::string& name, double seconds) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  ProfileEntry& e = profile()[name];
  e.launches += 1;
  e.seconds += seconds;
}

void record_coverage(const std::string& line) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  static const bool registered = [] {
    std::atexit(write_coverage);
    return true;
  }();
  (void)registered;
  coverage().insert(line);
}

// ---------------------------------------------------------------- fault handler
namespace {

// SIGSEGV inside a guard page: an out-of-bounds device access or a fiber stack overflow.
void on_segv(int sig, siginfo_t* info, void*) {
  const char* addr = static_cast<const char*>(info->si_addr);
  char msg[512];
  int len = 0;
  if (t_stacks && t_stacks->is_guard(addr)) {
    len = std::snprintf(msg, sizeof msg, "cuemu: stack overflow of a CUDA thread (%zu KiB stacks)", kStackBytes / 1024);
  } else {
    const Alloc* hit = nullptr;
    uintptr_t user = 0;
    for (const auto& [u, a] : allocs())  // not async-signal-safe; the process ends here anyway
      if (addr >= a.map && addr < a.map + a.map_len) {
        hit = &a;
        user = u;
        break;
      }
    if (hit)
      len = std::snprintf(msg, sizeof msg,
                          "cuemu: out-of-bounds device access %td bytes past the end of an allocation of %zu bytes",
                          addr - reinterpret_cast<const char*>(user) - ptrdiff_t(hit->bytes), hit->bytes);
    else
      len = std::snprintf(msg, sizeof msg, "cuemu: segmentation fault at %p", static_cast<const void*>(addr));
  }
  if (t_run)
    len += std::snprintf(msg + len, sizeof msg - size_t(len), " [kernel %s, block (%u,%u,%u), thread (%u,%u,%u)]",
                         t_run->kernel, t_blockIdx.x, t_blockIdx.y, t_blockIdx.z, t_threadIdx.x, t_threadIdx.y,
                         t_threadIdx.z);
  else if (t_kernel)
    len += std::snprintf(msg + len, sizeof msg - size_t(len), " [in %s]", t_kernel);
  len += std::snprintf(msg + len, sizeof msg - size_t(len), "\n");
  (void)!write(2, msg, size_t(len));
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void install_fault_handler() {
  static const bool done = [] {
    static std::vector<char> alt(1 << 16);
    stack_t ss{};
    ss.ss_sp = alt.data();
    ss.ss_size = alt.size();
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    return true;
  }();
  (void)done;
}

// ---------------------------------------------------------------- launch
cudaError_t launch(dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream, const char* name,
                   const char* signature, const void* args, size_t args_bytes, std::function<void()> body) {
  install_fault_handler();
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > kMaxThreads || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x == 0 ||
      grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    return fail(cudaErrorInvalidConfiguration);
  if (dynamic_smem > 48 * 1024) return fail(cudaErrorInvalidValue);  // above 48 KiB needs an opt-in attribute
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  std::string instance = signature;
  const size_t with = instance.find("K = ");
  instance = with == std::string::npos ? name : instance.substr(with + 4, instance.rfind(']') - with - 4);
  record_coverage(std::string(name) + "\t" + instance);
  {
    // Every argument word that points into a device allocation (pointer members of structs too)
    // counts as a read and write of that allocation by this kernel.
    std::vector<const void*> touched;
    {
      std::lock_guard<std::recursive_mutex> lock(g_mutex);
      for (size_t off = 0; off + sizeof(void*) <= args_bytes; off += alignof(void*)) {
        const void* p;
        std::memcpy(&p, static_cast<const char*>(args) + off, sizeof p);
        if (const auto* a = find_alloc(p, 1)) touched.push_back(reinterpret_cast<const void*>(a->first));
      }
    }
    const std::string what = std::string("kernel ") + name;
    if (touched.empty()) stream_access(stream, what.c_str(), nullptr, 0, nullptr, 0);
    for (const void* p : touched) stream_access(stream, what.c_str(), nullptr, 0, p, 1);
  }

  const uint64_t n_blocks = uint64_t(grid.x) * grid.y * grid.z;
  const OrderSetting& os = order_setting();
  std::mt19937_64 rng(os.seed * 0x9E3779B97F4A7C15ull + g_launches.fetch_add(1));
  std::vector<uint64_t> order;
  if (os.order != Order::Forward) {
    order.resize(n_blocks);
    std::iota(order.begin(), order.end(), uint64_t(0));
    if (os.order == Order::Reverse)
      std::reverse(order.begin(), order.end());
    else
      std::shuffle(order.begin(), order.end(), rng);
  }
  const char* outer = t_kernel;
  t_kernel = name;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < n_blocks; ++i) {
    const uint64_t b = order.empty() ? i : order[i];
    const uint3 bid{unsigned(b % grid.x), unsigned(b / grid.x % grid.y), unsigned(b / (uint64_t(grid.x) * grid.y))};
    run_block(grid, block, bid, dynamic_smem, name, body, rng);
  }
  t_kernel = outer;
  if (profiling()) add_profile(instance, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  check_canaries((std::string("kernel ") + instance).c_str());
  return cudaSuccess;
}

}  // namespace cuemu
