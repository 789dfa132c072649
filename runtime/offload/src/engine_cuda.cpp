// The CUDA engine: device slots filled on a dedicated copy stream, ordered against the backend's
// compute stream with events:
//   fill(s):        copy waits freed[s] (the last release of slot s) -> memcpy -> record filled[s]
//   wait_filled(s): compute waits filled[s]
//   release_slot(s): record freed[s] on compute
// Disk staging buffers go back to the reader from a host function queued after their copy.
// Copy and block times come from timing events, harvested without blocking in collect(); so does the
// compute stream's wait for a routed expert's fill (a pair of events around its cudaStreamWaitEvent: the
// second completes when both the work before it and the fill are done, so their gap is the time the
// stream idled for the expert).
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "engine.h"

#ifdef ENDOR_OFFLOAD_CUDA
#include <cuda_runtime_api.h>

#include "endor/cuda_backend.h"
#endif

namespace endor {

#ifdef ENDOR_OFFLOAD_CUDA
namespace offload {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(std::string("offload: CUDA error: ") + cudaGetErrorString(status) + " (code " +
                std::to_string(int(status)) + ") in " + what);
}

void CUDART_CB run_and_delete(void* p) {
  auto* fn = static_cast<std::function<void()>*>(p);
  try {
    (*fn)();
  } catch (...) {
    // A host function must not throw into the CUDA runtime; releasing a buffer cannot fail.
  }
  delete fn;
}

class CudaEngine final : public Engine {
 public:
  explicit CudaEngine(Backend& backend)
      : backend_(backend),
        device_(cuda::device_ordinal(backend)),
        compute_(static_cast<cudaStream_t>(cuda::compute_stream(backend))) {
    activate();
    check(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags(copy)");
  }

  ~CudaEngine() override {
    cudaSetDevice(device_);
    if (copy_) cudaStreamSynchronize(copy_);
    cudaStreamSynchronize(compute_);
    for (cudaEvent_t e : filled_) cudaEventDestroy(e);
    for (cudaEvent_t e : freed_) cudaEventDestroy(e);
    for (const CopyRecord& c : copies_) {
      cudaEventDestroy(c.start);
      cudaEventDestroy(c.stop);
    }
    for (const BlockRecord& b : blocks_) {
      cudaEventDestroy(b.start);
      cudaEventDestroy(b.end);
      destroy_waits(b);
    }
    destroy_waits(open_);
    if (wait_start_) cudaEventDestroy(wait_start_);
    if (last_end_) cudaEventDestroy(last_end_);
    if (open_.start) cudaEventDestroy(open_.start);
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
    for (void* p : slots_) cudaFree(p);
    if (copy_) cudaStreamDestroy(copy_);
  }

  std::string device() const override { return "cuda"; }

  void allocate_slots(uint32_t n, uint64_t bytes) override {
    activate();
    for (uint32_t s = 0; s < n; ++s) {
      void* p = nullptr;
      const cudaError_t status = cudaMalloc(&p, bytes);
      if (status == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        throw Error("offload: out of device memory allocating slot " + std::to_string(s) + " of " +
                    format_bytes(bytes) + "; lower --gpu-mem or --prefetch");
      }
      check(status, "cudaMalloc(slot)");
      slots_.push_back(p);
      cudaEvent_t filled = nullptr, freed = nullptr;
      check(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming), "cudaEventCreate(filled)");
      filled_.push_back(filled);
      check(cudaEventCreateWithFlags(&freed, cudaEventDisableTiming), "cudaEventCreate(freed)");
      freed_.push_back(freed);
    }
  }
  uint8_t* slot(uint32_t s) override { return static_cast<uint8_t*>(slots_.at(s)); }

  std::unique_ptr<Weight> prepare_at(const TensorView& view, uint8_t* at) override {
    return cuda::make_weight_at(backend_, view, at);
  }

  void* host_alloc(size_t bytes) override {
    activate();
    void* p = nullptr;
    const cudaError_t status = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw Error("offload: cannot pin " + format_bytes(bytes) + " of host memory; lower --cpu-mem");
    }
    check(status, "cudaHostAlloc");
    return p;
  }
  void host_free(void* p) override {
    if (p) cudaFreeHost(p);
  }

  void fill(uint32_t s, const uint8_t* src, uint64_t n, std::function<void()> done) override {
    activate();
    check(cudaStreamWaitEvent(copy_, freed_.at(s), 0), "cudaStreamWaitEvent(copy, freed)");
    CopyRecord rec{event(), event(), n};
    check(cudaEventRecord(rec.start, copy_), "cudaEventRecord(copy start)");
    check(cudaMemcpyAsync(slots_[s], src, n, cudaMemcpyHostToDevice, copy_), "cudaMemcpyAsync(slot)");
    check(cudaEventRecord(rec.stop, copy_), "cudaEventRecord(copy stop)");
    check(cudaEventRecord(filled_[s], copy_), "cudaEventRecord(filled)");
    copies_.push_back(rec);
    if (done) {
      auto* fn = new std::function<void()>(std::move(done));
      const cudaError_t status = cudaLaunchHostFunc(copy_, run_and_delete, fn);
      if (status != cudaSuccess) delete fn;
      check(status, "cudaLaunchHostFunc(release staging)");
    }
    if (copies_.size() > kHarvestAt) harvest();
  }
  void wait_filled(uint32_t s) override {
    check(cudaStreamWaitEvent(compute_, filled_.at(s), 0), "cudaStreamWaitEvent(compute, filled)");
  }
  void release_slot(uint32_t s) override {
    check(cudaEventRecord(freed_.at(s), compute_), "cudaEventRecord(freed)");
  }

  void block_begin(bool follows_block) override {
    activate();
    open_.start = event();
    open_.follows = follows_block;
    check(cudaEventRecord(open_.start, compute_), "cudaEventRecord(block start)");
  }
  void block_end() override {
    if (!open_.start) return;
    open_.end = event();
    check(cudaEventRecord(open_.end, compute_), "cudaEventRecord(block end)");
    blocks_.push_back(open_);
    open_ = BlockRecord{};
    if (blocks_.size() > kHarvestAt) harvest();
  }

  void expert_wait_begin() override {
    if (!open_.start) return;  // outside a block: not timed
    if (!wait_start_) wait_start_ = event();  // (else one begun before an error: recorded again)
    check(cudaEventRecord(wait_start_, compute_), "cudaEventRecord(expert wait start)");
  }
  void expert_wait_end() override {
    if (!wait_start_) return;
    cudaEvent_t end = event();
    check(cudaEventRecord(end, compute_), "cudaEventRecord(expert wait end)");
    open_.waits.push_back({wait_start_, end});
    wait_start_ = nullptr;
  }

  void synchronize() override {
    activate();
    check(cudaStreamSynchronize(copy_), "cudaStreamSynchronize(copy)");
    check(cudaStreamSynchronize(compute_), "cudaStreamSynchronize(compute)");
    harvest();
  }

  void collect(OffloadStats& stats) override {
    harvest();
    stats.copy_s += copy_s_;
    stats.copy_bytes += copy_bytes_;
    stats.compute_s += compute_s_;
    stats.stall_s += stall_s_;
    stats.expert_stall_s += expert_stall_s_;
    copy_s_ = compute_s_ = stall_s_ = expert_stall_s_ = 0;
    copy_bytes_ = 0;
  }

 private:
  static constexpr size_t kHarvestAt = 256;  // records kept before harvesting finished ones

  struct CopyRecord {
    cudaEvent_t start = nullptr, stop = nullptr;
    uint64_t bytes = 0;
  };
  struct BlockRecord {
    cudaEvent_t start = nullptr, end = nullptr;
    bool follows = false;
    std::vector<std::pair<cudaEvent_t, cudaEvent_t>> waits;  // expert waits inside the block
  };
  static void destroy_waits(const BlockRecord& b) {
    for (const auto& w : b.waits) {
      cudaEventDestroy(w.first);
      cudaEventDestroy(w.second);
    }
  }

  void activate() {
    int current = -1;
    check(cudaGetDevice(&current), "cudaGetDevice");
    if (current != device_) check(cudaSetDevice(device_), "cudaSetDevice");
  }
  cudaEvent_t event() {
    if (!pool_.empty()) {
      cudaEvent_t e = pool_.back();
      pool_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cudaEventCreate(timing)");
    return e;
  }
  static bool finished(cudaEvent_t e) {
    const cudaError_t status = cudaEventQuery(e);
    if (status == cudaErrorNotReady) {
      cudaGetLastError();  // not an error: clear it
      return false;
    }
    check(status, "cudaEventQuery");
    return true;
  }
  static float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    return ms;
  }
  // Adds the times of finished records, in order, and recycles their events. Never blocks.
  void harvest() {
    while (!copies_.empty() && finished(copies_.front().stop)) {
      const CopyRecord& c = copies_.front();
      copy_s_ += elapsed_ms(c.start, c.stop) * 1e-3;
      copy_bytes_ += c.bytes;
      pool_.push_back(c.start);
      pool_.push_back(c.stop);
      copies_.pop_front();
    }
    while (!blocks_.empty() && finished(blocks_.front().end)) {
      const BlockRecord& b = blocks_.front();
      double waited = 0;
      for (const auto& w : b.waits) {
        waited += elapsed_ms(w.first, w.second) * 1e-3;
        pool_.push_back(w.first);
        pool_.push_back(w.second);
      }
      compute_s_ += elapsed_ms(b.start, b.end) * 1e-3 - waited;
      stall_s_ += waited;
      expert_stall_s_ += waited;
      if (b.follows && last_end_) stall_s_ += elapsed_ms(last_end_, b.start) * 1e-3;
      if (last_end_) pool_.push_back(last_end_);
      last_end_ = b.end;
      pool_.push_back(b.start);
      blocks_.pop_front();
    }
  }

  Backend& backend_;
  int device_ = 0;
  cudaStream_t compute_ = nullptr;  // the backend's; not owned
  cudaStream_t copy_ = nullptr;
  std::vector<void*> slots_;
  std::vector<cudaEvent_t> filled_, freed_;
  std::deque<CopyRecord> copies_;
  std::deque<BlockRecord> blocks_;
  BlockRecord open_;                // begun, not ended
  cudaEvent_t last_end_ = nullptr;  // end of the last harvested block (stall of the next)
  cudaEvent_t wait_start_ = nullptr;  // an expert wait begun, not ended
  std::vector<cudaEvent_t> pool_;
  double copy_s_ = 0, compute_s_ = 0, stall_s_ = 0, expert_stall_s_ = 0;
  uint64_t copy_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Engine> make_cuda_engine(Backend& backend) {
  if (!is_cuda_backend(backend)) return nullptr;
  return std::make_unique<CudaEngine>(backend);
}

}  // namespace offload

std::optional<double> probe_h2d_gbps(Backend& backend, uint64_t bytes, int repeats) {
  if (!is_cuda_backend(backend) || bytes == 0) return std::nullopt;
  using offload::check;
  check(cudaSetDevice(cuda::device_ordinal(backend)), "cudaSetDevice");
  void* host = nullptr;
  void* dev = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  double best_ms = 0;
  auto cleanup = [&] {
    if (stream) cudaStreamSynchronize(stream);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
    if (dev) cudaFree(dev);
    if (host) cudaFreeHost(host);
  };
  try {
    check(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc(probe)");
    check(cudaMalloc(&dev, bytes), "cudaMalloc(probe)");
    // Non-zero bytes: a copy engine moves zeros no faster, but never time on zeros.
    for (uint64_t i = 0; i < bytes; i += 4096) static_cast<uint8_t*>(host)[i] = uint8_t(i / 4096 * 131 + 7);
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate(probe)");
    check(cudaEventCreate(&start), "cudaEventCreate(probe)");
    check(cudaEventCreate(&stop), "cudaEventCreate(probe)");
    for (int r = 0; r < std::max(1, repeats) + 1; ++r) {  // the first copy is a warm-up
      check(cudaEventRecord(start, stream), "cudaEventRecord(probe)");
      check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync(probe)");
      check(cudaEventRecord(stop, stream), "cudaEventRecord(probe)");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize(probe)");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime(probe)");
      if (r > 0 && (best_ms == 0 || ms < best_ms)) best_ms = ms;
    }
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  return double(bytes) / (best_ms * 1e-3) / 1e9;
}

bool is_cuda_device(const Backend& backend) { return is_cuda_backend(backend); }

std::optional<uint64_t> device_free_bytes(Backend& backend) {
  if (!is_cuda_backend(backend)) return std::nullopt;
  offload::check(cudaSetDevice(cuda::device_ordinal(backend)), "cudaSetDevice");
  size_t free_bytes = 0, total = 0;
  offload::check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  return uint64_t(free_bytes);
}

#else  // no CUDA in this build

bool is_cuda_device(const Backend&) { return false; }
std::optional<uint64_t> device_free_bytes(Backend&) { return std::nullopt; }

namespace offload {
std::unique_ptr<Engine> make_cuda_engine(Backend&) { return nullptr; }
}  // namespace offload

std::optional<double> probe_h2d_gbps(Backend&, uint64_t, int) { return std::nullopt; }

#endif

}  // namespace endor
