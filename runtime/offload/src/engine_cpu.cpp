// The CPU engine: host slots, synchronous copies (the CPU backend computes synchronously, so a
// released slot is free at once), wall-clock timing of blocks and copies.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine.h"

namespace endor::offload {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void* aligned_alloc_or_throw(size_t bytes, const char* what) {
  void* p = nullptr;
  if (::posix_memalign(&p, 4096, bytes ? bytes : 1) != 0 || !p)
    throw Error(std::string("cannot allocate ") + format_bytes(bytes) + " of " + what);
  return p;
}

class CpuEngine final : public Engine {
 public:
  explicit CpuEngine(Backend& backend) : backend_(backend) {}
  ~CpuEngine() override {
    for (void* p : slots_) std::free(p);
  }

  std::string device() const override { return "cpu"; }

  void allocate_slots(uint32_t n, uint64_t bytes) override {
    for (uint32_t s = 0; s < n; ++s) {
      slots_.push_back(aligned_alloc_or_throw(bytes, "host slot memory"));
      std::memset(slots_.back(), 0, bytes);
    }
  }
  uint8_t* slot(uint32_t s) override { return static_cast<uint8_t*>(slots_.at(s)); }

  std::unique_ptr<Weight> prepare_at(const TensorView& view, uint8_t* at) override {
    // The CPU backend checks a bitmap's index when preparing: put it where the weight will read
    // it. The rest of the slot is filled before the block runs.
    if (view.layout.encoding == Encoding::Bitmap)
      std::memcpy(at + view.layout.index_offset, view.data + view.layout.index_offset, view.layout.index_bytes);
    TensorView v = view;
    v.data = at;
    return backend_.prepare_weight(v);
  }

  void* host_alloc(size_t bytes) override { return aligned_alloc_or_throw(bytes, "staging memory"); }
  void host_free(void* p) override { std::free(p); }

  void fill(uint32_t s, const uint8_t* src, uint64_t n, std::function<void()> done) override {
    const Clock::time_point t0 = Clock::now();
    std::memcpy(slot(s), src, n);
    copy_s_ += seconds_between(t0, Clock::now());
    copy_bytes_ += n;
    if (done) done();
  }
  void wait_filled(uint32_t) override {}
  void release_slot(uint32_t) override {}

  void block_begin(bool follows_block) override {
    block_start_ = Clock::now();
    block_waits_s_ = 0;
    if (follows_block && have_last_end_) stall_s_ += seconds_between(last_end_, block_start_);
  }
  void block_end() override {
    last_end_ = Clock::now();
    have_last_end_ = true;
    compute_s_ += seconds_between(block_start_, last_end_) - block_waits_s_;
  }
  void expert_wait_begin() override { wait_start_ = Clock::now(); }
  void expert_wait_end() override {
    const double s = seconds_between(wait_start_, Clock::now());
    block_waits_s_ += s;
    stall_s_ += s;
    expert_stall_s_ += s;
  }

  void synchronize() override {}
  void collect(OffloadStats& stats) override {
    stats.copy_s += copy_s_;
    stats.copy_bytes += copy_bytes_;
    stats.compute_s += compute_s_;
    stats.stall_s += stall_s_;
    stats.expert_stall_s += expert_stall_s_;
    copy_s_ = compute_s_ = stall_s_ = expert_stall_s_ = 0;
    copy_bytes_ = 0;
  }

 private:
  Backend& backend_;
  std::vector<void*> slots_;
  Clock::time_point block_start_, last_end_, wait_start_;
  bool have_last_end_ = false;
  double block_waits_s_ = 0;  // expert waits inside the open block (not its compute)
  double copy_s_ = 0, compute_s_ = 0, stall_s_ = 0, expert_stall_s_ = 0;
  uint64_t copy_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(Backend& backend) { return std::make_unique<CpuEngine>(backend); }

}  // namespace endor::offload
