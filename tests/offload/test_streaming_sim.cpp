// The streaming scheduler against a simulated asynchronous engine with CUDA's semantics: a copy
// stream and a compute stream of queued operations, events whose waits bind to the latest record
// at the time of the wait, and host functions. Operations run in random interleavings allowed by
// the waits; each block's compute reads its slot and compares it with the group's bytes in the
// file. This checks the ordering the CUDA engine (engine_cuda.cpp) implements one-to-one with
// cudaStreamWaitEvent / cudaEventRecord / cudaLaunchHostFunc: no slot is refilled while a block
// may still read it, no block reads stale or partial bytes, no staging buffer is reused before its
// copy ran — at the wrap from the last block to the first, with deferred prefetches, restarts in
// another order, and disk reads finishing at arbitrary times.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "engine.h"
#include "offload_test_util.h"

using namespace endor;
using namespace endor::offloadtest;

namespace {

// Runs its two queues on its own thread, as a GPU would, with random pauses between operations,
// so the host side (and the real disk reader thread) meet every kind of timing.
class SimEngine final : public offload::Engine {
 public:
  struct Log {
    uint64_t fills = 0, checks = 0, bad_checks = 0, ops = 0;
    std::vector<uint32_t> fill_slots;  // slot of each fill, in queue order
  };

  SimEngine(uint64_t seed, Log& log) : rng_(seed), log_(log) {
    worker_ = std::thread([this] { work(); });
  }
  ~SimEngine() override {
    drain();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
    for (void* p : host_) std::free(p);
  }

  std::string device() const override { return "cuda"; }
  void allocate_slots(uint32_t n, uint64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    slots_.assign(n, std::vector<uint8_t>(bytes, 0xAB));
    for (uint32_t s = 0; s < n; ++s) {
      filled_.push_back(new_event());
      freed_.push_back(new_event());
    }
  }
  uint8_t* slot(uint32_t s) override { return slots_.at(s).data(); }
  std::unique_ptr<Weight> prepare_at(const TensorView&, uint8_t*) override { return nullptr; }
  void* host_alloc(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    host_.push_back(std::malloc(bytes ? bytes : 1));
    return host_.back();
  }
  void host_free(void* p) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (void*& h : host_)
      if (h == p) {
        std::free(h);
        h = nullptr;
      }
  }

  void fill(uint32_t s, const uint8_t* src, uint64_t n, std::function<void()> done) override {
    std::lock_guard<std::mutex> lock(mu_);
    copy_.push_back(wait_op(freed_[s]));
    Op f;
    f.kind = Op::Fill;
    f.slot = s;
    f.src = src;
    f.n = n;
    copy_.push_back(f);
    copy_.push_back(record_op(filled_[s]));
    if (done) {
      Op h;
      h.kind = Op::Host;
      h.fn = std::move(done);
      copy_.push_back(h);
    }
    log_.fills += 1;
    log_.fill_slots.push_back(s);
    cv_.notify_all();
  }
  void wait_filled(uint32_t s) override { push_compute(wait_op_locked(filled_[s])); }
  void release_slot(uint32_t s) override { push_compute(record_op_locked(freed_[s])); }
  void block_begin(bool) override {}
  void block_end() override {}
  void synchronize() override { drain(); }
  void collect(OffloadStats&) override {}

  // The block's compute: reads slot s and compares it with `want` (the group's bytes in the file).
  void compute_reads(uint32_t s, const uint8_t* want, uint64_t n) {
    Op c;
    c.kind = Op::Check;
    c.slot = s;
    c.src = want;
    c.n = n;
    push_compute(c);
  }
  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    const bool done = idle_cv_.wait_for(lock, std::chrono::seconds(60), [&] { return copy_.empty() && compute_.empty(); });
    REQUIRE(done);  // a deadlock between the streams shows here
  }
  Log log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }

 private:
  struct Op {
    enum Kind { Wait, Record, Fill, Host, Check } kind = Wait;
    int event = 0;
    uint64_t generation = 0;
    uint32_t slot = 0;
    const uint8_t* src = nullptr;
    uint64_t n = 0;
    std::function<void()> fn;
  };
  struct Event {
    uint64_t recorded = 0, completed = 0;
  };

  int new_event() {
    events_.push_back({});
    return int(events_.size() - 1);
  }
  // cudaStreamWaitEvent: waits for the record current at the time of the call (none: no wait).
  Op wait_op(int e) {
    Op o;
    o.kind = Op::Wait;
    o.event = e;
    o.generation = events_[size_t(e)].recorded;
    return o;
  }
  Op record_op(int e) {
    Op o;
    o.kind = Op::Record;
    o.event = e;
    o.generation = ++events_[size_t(e)].recorded;
    return o;
  }
  struct Pending {  // an op whose event generation is taken under the lock when queued
    bool record;
    int event;
  };
  Pending wait_op_locked(int e) { return {false, e}; }
  Pending record_op_locked(int e) { return {true, e}; }
  void push_compute(const Pending& p) {
    std::lock_guard<std::mutex> lock(mu_);
    compute_.push_back(p.record ? record_op(p.event) : wait_op(p.event));
    cv_.notify_all();
  }
  void push_compute(Op op) {
    std::lock_guard<std::mutex> lock(mu_);
    compute_.push_back(std::move(op));
    cv_.notify_all();
  }
  bool ready(const std::deque<Op>& q) const {
    if (q.empty()) return false;
    const Op& o = q.front();
    return o.kind != Op::Wait || events_[size_t(o.event)].completed >= o.generation;
  }
  void run(std::deque<Op>& q) {
    Op o = std::move(q.front());
    q.pop_front();
    log_.ops += 1;
    switch (o.kind) {
      case Op::Wait: break;
      case Op::Record: events_[size_t(o.event)].completed = std::max(events_[size_t(o.event)].completed, o.generation); break;
      case Op::Fill: std::memcpy(slots_[o.slot].data(), o.src, o.n); break;
      case Op::Host: o.fn(); break;  // DiskReader::release: takes only the reader's own lock
      case Op::Check:
        log_.checks += 1;
        if (std::memcmp(slots_[o.slot].data(), o.src, o.n) != 0) log_.bad_checks += 1;
        break;
    }
  }
  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || ready(copy_) || ready(compute_); });
      if (stop_) return;
      const bool a = ready(copy_), b = ready(compute_);
      run(a && (!b || rng_() % 2) ? copy_ : compute_);
      if (copy_.empty() && compute_.empty()) idle_cv_.notify_all();
      // A random pause now and then, so the host runs ahead of the queues or falls behind them.
      const unsigned pause = rng_() % 8 == 0 ? unsigned(rng_() % 200) : 0;
      if (pause) {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(pause));
        lock.lock();
      }
    }
  }

  std::mt19937_64 rng_;
  Log& log_;
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  bool stop_ = false;
  std::vector<std::vector<uint8_t>> slots_;
  std::vector<int> filled_, freed_;
  std::vector<Event> events_;
  std::deque<Op> copy_, compute_;
  std::vector<void*> host_;
  std::thread worker_;
};

struct Run {
  std::vector<uint32_t> streamed;  // group ids in execution order
};

// Drives acquire/compute/release as the model does, for `calls` forward passes over every block,
// with random restarts (a block asked for out of order) when `restarts` is set.
SimEngine::Log drive(const ContainerReader& c, const Placement& p, uint32_t k, uint64_t seed, int calls, bool restarts) {
  SimEngine::Log log;
  auto backend = make_cpu_backend(1);
  auto engine = std::make_unique<SimEngine>(seed, log);
  SimEngine* sim = engine.get();
  StreamingOptions o;
  o.prefetch = k;
  auto weights = offload::make_streaming_weights(c, *backend, p, o, std::move(engine));
  const Manifest& m = c.manifest();
  std::vector<uint32_t> blocks, streamed;
  for (uint32_t g = 0; g < m.groups.size(); ++g)
    if (m.groups[g].name.rfind("layers.", 0) == 0) {
      blocks.push_back(g);
      if (p.tiers[g] != Tier::Gpu) streamed.push_back(g);
    }
  std::mt19937_64 rng(seed ^ 0x5bd1e995);
  auto run_block = [&](uint32_t g) {
    weights->acquire(g);
    for (size_t j = 0; j < streamed.size(); ++j)
      if (streamed[j] == g)
        sim->compute_reads(uint32_t(j % (k + 1)), c.bytes() + m.groups[g].offset, m.groups[g].size);
    weights->release(g);
  };
  for (int call = 0; call < calls; ++call) {
    if (restarts && rng() % 3 == 0) {
      for (int i = 0, n = int(rng() % 4); i < n; ++i) run_block(blocks[rng() % blocks.size()]);
    }
    for (uint32_t g : blocks) run_block(g);
  }
  weights->synchronize();
  weights.reset();
  return log;
}

}  // namespace

TEST_CASE("streaming scheduler: simulated asynchronous copies never race the compute") {
  TempDir dir;
  for (int layers : {3, 4, 5, 7}) {
    const std::string path = dir.file("m" + std::to_string(layers) + ".endor");
    write_tiered_container(path, synthetic_config(layers), uint64_t(layers), ValueType::F16,
                           [](const std::string&) { return Tier::Gpu; });
    auto c = ContainerReader::open(path);
    const std::vector<std::function<Tier(const std::string&)>> tierings = {
        [](const std::string&) { return Tier::Cpu; },
        [](const std::string&) { return Tier::Disk; },
        [](const std::string& g) { return (g.back() - '0') % 2 ? Tier::Disk : Tier::Cpu; },
        [](const std::string& g) { return g == "layers.0" ? Tier::Gpu : ((g.back() - '0') % 3 ? Tier::Cpu : Tier::Disk); },
    };
    for (size_t t = 0; t < tierings.size(); ++t)
      for (uint32_t k = 1; k <= uint32_t(layers); ++k)
        for (uint64_t seed = 1; seed <= 3; ++seed) {
          CAPTURE(layers);
          CAPTURE(t);
          CAPTURE(k);
          CAPTURE(seed);
          const Placement p = placement_with(*c, true, k, tierings[t]);
          const bool restarts = seed == 3;
          const SimEngine::Log log = drive(*c, p, k, seed * 1000 + t * 10 + k, 6, restarts);
          CHECK(log.bad_checks == 0);
          CHECK(log.checks > 0);
          CHECK(log.fills > 0);
        }
  }
}

TEST_CASE("streaming scheduler: blocks i+1..i+k are in flight while block i computes") {
  TempDir dir;
  const std::string path = dir.file("m.endor");
  write_tiered_container(path, synthetic_config(6), 3, ValueType::F16, [](const std::string&) { return Tier::Gpu; });
  auto c = ContainerReader::open(path);
  for (uint32_t k = 1; k <= 4; ++k) {
    CAPTURE(k);
    SimEngine::Log log;
    auto backend = make_cpu_backend(1);
    auto engine = std::make_unique<SimEngine>(k, log);
    StreamingOptions o;
    o.prefetch = k;
    auto weights = offload::make_streaming_weights(*c, *backend, placement_with(*c, true, k, [](const std::string&) {
      return Tier::Cpu;
    }), o, std::move(engine));
    // Groups: embed = 0, layers.0..5 = 1..6. Acquiring layers.0 queues its fill and k more.
    weights->acquire(1);
    CHECK(log.fills == 1 + k);
    for (uint32_t i = 0; i <= k; ++i) CHECK(log.fill_slots[i] == i);
    weights->release(1);
    // Each later block in order adds the fetch k ahead (at the wrap to the next pass it may wait
    // for a slot still in use).
    for (uint32_t g = 2; g <= 6; ++g) {
      weights->acquire(g);
      CHECK(log.fills >= std::min<uint64_t>(g + k, 6));
      CHECK(log.fills <= g + k);
      weights->release(g);
    }
    weights->synchronize();
  }
}
