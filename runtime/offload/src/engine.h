// Internal to runtime/offload: what moves a streamed group's bytes into a slot and orders the
// backend's compute against it. The scheduler (streaming.cpp) decides what goes where and when;
// an engine only executes: engine_cpu.cpp (synchronous CPU backend) and engine_cuda.cpp (a copy
// stream ordered by events against the CUDA backend's compute stream).
//
// The contract the scheduler relies on (and tests/offload checks with a simulated engine):
//  - fill(s, ...) lands after every compute queued before the last release_slot(s) has finished;
//  - compute queued after wait_filled(s) sees the bytes of the last fill(s, ...) queued before it;
//  - fills into different slots may land in any order; `done` runs once `src` may be reused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "endor/offload.h"

namespace endor::offload {

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string device() const = 0;

  // Allocates `n` slots of `bytes` each (device memory on CUDA, aligned host memory on the CPU).
  virtual void allocate_slots(uint32_t n, uint64_t bytes) = 0;
  virtual uint8_t* slot(uint32_t s) = 0;
  // A Weight for `view` (whose bytes are in the mapped container) that reads its bytes at `at`,
  // an address inside a slot; the slot's content is undefined until a fill.
  virtual std::unique_ptr<Weight> prepare_at(const TensorView& view, uint8_t* at) = 0;

  // Host memory the engine copies from (pinned on CUDA: cpu-tier groups, disk staging buffers).
  virtual void* host_alloc(size_t bytes) = 0;
  virtual void host_free(void* p) = 0;

  // Queues a copy of n bytes from host `src` into slot s (see the contract above).
  virtual void fill(uint32_t s, const uint8_t* src, uint64_t n, std::function<void()> done) = 0;
  // Compute queued from now on waits for slot s's last fill.
  virtual void wait_filled(uint32_t s) = 0;
  // The compute queued so far is the last use of slot s's present content.
  virtual void release_slot(uint32_t s) = 0;

  // Timing marks around one decoder block's compute: begin after its weights are waited for, end
  // after its last operation is queued. `follows_block`: the previous block ran just before this
  // one (the gap between them counts as stall).
  virtual void block_begin(bool follows_block) = 0;
  virtual void block_end() = 0;
  // Around the wait for an MoE expert's bytes inside a block (ExpertCache::slot): the compute cannot go
  // on until the expert is in its slot. CPU: the host time between the marks (the compute thread is
  // what waits); CUDA: the compute stream's time from before its wait for the fill to after it. Counted
  // as stall (stall_s and expert_stall_s), not as the block's compute.
  virtual void expert_wait_begin() {}
  virtual void expert_wait_end() {}

  // Waits for all queued copies (and, CUDA, the compute stream).
  virtual void synchronize() = 0;
  // Adds finished copies' and blocks' times to `stats` (copy_s, copy_bytes, compute_s, stall_s,
  // expert_stall_s) and forgets them; never blocks.
  virtual void collect(OffloadStats& stats) = 0;
};

std::unique_ptr<Engine> make_cpu_engine(Backend& backend);
// A provider over a given engine (tests drive the scheduler with a simulated asynchronous one).
// Groups stream as on CUDA when engine->device() is "cuda", else as on the CPU device.
std::unique_ptr<StreamingWeights> make_streaming_weights(const ContainerReader& container, Backend& backend,
                                                         const Placement& placement,
                                                         const StreamingOptions& options,
                                                         std::unique_ptr<Engine> engine);
// Null when the build has no CUDA or `backend` is not a CUDA backend.
std::unique_ptr<Engine> make_cuda_engine(Backend& backend);

}  // namespace endor::offload
