// Internal to runtime/offload: the cache of MoE experts placed in groups of their own
// ("layers.N.experts.E"). The experts off the fast tier (CPU device: disk; CUDA: pinned host or disk)
// are read, when the router picks them, into a fixed set of engine slots (host memory on the CPU
// device, device memory on CUDA); a slot keeps its expert until it is evicted (least recently used),
// so a repeated expert costs no read. Disk reads use their own DiskReader (O_DIRECT; on the CPU device
// straight into the slot). expect() starts the reads of the experts a routed MLP is about to run, in
// its order, while the first ones compute; slot() completes one expert's fill and orders the compute
// after it. Used by the one thread that runs the model.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine.h"

namespace endor::offload {

// Where an expert group's bytes come from.
struct ExpertSource {
  Tier tier = Tier::Disk;          // Cpu (CUDA: pinned copy at `host`) or Disk
  uint64_t offset = 0, size = 0;   // the group's range in the file
  const uint8_t* host = nullptr;   // Cpu tier: the pinned copy
};

class ExpertCache {
 public:
  // Slots first_slot .. first_slot + n_slots of `engine` (allocated by the caller). `reader` (may be
  // null when no expert is on disk) reads disk experts: into the slots when read_into_slots (CPU
  // device), else into its staging ring, then a fill. keep == false: nothing survives end_call().
  ExpertCache(Engine& engine, DiskReader* reader, bool read_into_slots, uint32_t first_slot, uint32_t n_slots,
              uint64_t slot_bytes, bool keep);
  ~ExpertCache();
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  // The experts a routed MLP runs next, in order (sources[i] of groups[i]): reads start for those not
  // cached while slots that hold none of them are free.
  void expect(const uint32_t* groups, const ExpertSource* sources, size_t n);
  // Expert prefetch: the experts the next routed MLP is guessed to run; reads start, behind the current
  // call's, for those not cached while reads may be in flight and slots not wanted by the current
  // call are free (at most half the slots hold unused guesses). Counted apart (add_stats).
  void prefetch(const uint32_t* groups, const ExpertSource* sources, size_t n);
  // The engine slot holding `group` once filled (reading it now when absent); compute queued from now
  // on sees its bytes. The previous slot() is released (its compute was queued before this call).
  uint32_t slot(uint32_t group, const ExpertSource& source);
  // After a routed MLP (its block's release): the last slot is released; without keep the cache is emptied.
  void end_call();
  // Drops every read in flight and forgets every slot's content (an error, or the provider's end).
  void reset();
  void add_stats(OffloadStats& stats) const;

 private:
  struct Slot {
    int64_t group = -1;         // the group it holds (or is being read into it); -1: none
    uint64_t last_use = 0;      // LRU tick of its last slot()
    bool pending = false;       // a disk read was submitted and its fill not queued yet
    bool unused_read = false;   // read for a call and not used yet (its first use is no hit)
    bool prefetched = false;    // read by prefetch() and not used yet
    uint64_t bytes = 0;         // the size of the group it holds
    DiskReader::Ticket ticket = 0;
  };
  int64_t victim(bool protect) const;
  void issue(uint32_t s, uint32_t group, const ExpertSource& source);
  void complete(uint32_t s);
  void complete_one(uint32_t s);
  void drop_prefetched(Slot& slot);
  void read_expected();
  void cancel_wrong_guesses();

  Engine& engine_;
  DiskReader* reader_;
  bool read_into_slots_, keep_;
  uint32_t first_slot_;
  uint64_t slot_bytes_;
  uint32_t max_in_flight_;
  std::vector<Slot> slots_;
  std::unordered_map<uint32_t, uint32_t> where_;  // group -> slot
  std::unordered_set<uint32_t> expected_;         // groups of the current call not yet used
  std::vector<std::pair<uint32_t, ExpertSource>> expect_order_;  // the current call's groups, in order
  std::deque<uint32_t> pending_;                  // slots with a read in flight, in submission order
  int64_t in_use_ = -1;
  uint64_t tick_ = 0;
  uint64_t uses_ = 0, hits_ = 0, fills_[3] = {0, 0, 0}, bytes_[3] = {0, 0, 0};
  uint32_t prefetched_unused_ = 0;  // slots holding a guess not used yet
  uint64_t prefetch_reads_ = 0, prefetch_bytes_ = 0, prefetch_used_ = 0, prefetch_wasted_ = 0;
  uint64_t prefetch_wasted_bytes_ = 0, prefetch_cancelled_ = 0;
};

}  // namespace endor::offload
