// The MoE expert cache (expert_cache.h): LRU slots of routed experts read from the slow tiers.
#include "expert_cache.h"

#include <algorithm>

namespace endor::offload {

ExpertCache::ExpertCache(Engine& engine, DiskReader* reader, bool read_into_slots, uint32_t first_slot,
                         uint32_t n_slots, uint64_t slot_bytes, bool keep)
    : engine_(engine), reader_(reader), read_into_slots_(read_into_slots), keep_(keep), first_slot_(first_slot),
      slot_bytes_(slot_bytes), slots_(n_slots) {
  if (n_slots == 0) throw Error("offload: an expert cache needs at least one slot");
  // At least one slot is never waiting for a read (slot() always finds a victim); through a staging
  // ring (CUDA) no more reads are in flight than it has buffers, so completing them in order never waits
  // on a buffer that only a later completion would free.
  max_in_flight_ = n_slots - 1;
  if (reader_ && !read_into_slots_) max_in_flight_ = std::min(max_in_flight_, reader_->n_buffers());
}

ExpertCache::~ExpertCache() {
  try {
    reset();
  } catch (...) {
  }
}

// The slot to (re)use: an empty one, else the least recently used that is not in use, not waiting for
// a read and (protect) not holding an expert the current call has yet to run. -1: none.
int64_t ExpertCache::victim(bool protect) const {
  int64_t best = -1;
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    const Slot& slot = slots_[s];
    if (int64_t(s) == in_use_ || slot.pending) continue;
    if (slot.group < 0) return s;
    if (protect && expected_.count(uint32_t(slot.group))) continue;
    if (best < 0 || slot.last_use < slots_[size_t(best)].last_use) best = s;
  }
  return best;
}

// A guess evicted or dropped before any call used it: its read was wasted.
void ExpertCache::drop_prefetched(Slot& slot) {
  if (!slot.prefetched) return;
  slot.prefetched = false;
  prefetched_unused_ -= 1;
  prefetch_wasted_ += 1;
  prefetch_wasted_bytes_ += slot.bytes;
}

void ExpertCache::issue(uint32_t s, uint32_t group, const ExpertSource& source) {
  Slot& slot = slots_[s];
  if (slot.group >= 0) where_.erase(uint32_t(slot.group));
  drop_prefetched(slot);
  slot.group = group;
  slot.bytes = source.size;
  slot.unused_read = true;
  where_[group] = s;
  fills_[int(source.tier)] += 1;
  bytes_[int(source.tier)] += source.size;
  const uint32_t es = first_slot_ + s;
  if (source.tier != Tier::Disk) {  // CUDA's pinned copy
    engine_.fill(es, source.host, source.size, {});
    return;
  }
  if (!reader_) throw Error("offload internal error: an expert on disk without a reader");
  slot.ticket = read_into_slots_ ? reader_->submit_into(source.offset, source.size, engine_.slot(es), slot_bytes_)
                                 : reader_->submit(source.offset, source.size);
  slot.pending = true;
  pending_.push_back(s);
}

// The read of slot `s` done and its fill queued (a read into the slot needs none).
void ExpertCache::complete_one(uint32_t s) {
  Slot& slot = slots_[s];
  slot.pending = false;
  const DiskReader::Chunk chunk = reader_->wait(slot.ticket);
  if (read_into_slots_) {
    reader_->release(slot.ticket);
    return;
  }
  DiskReader* reader = reader_;
  const DiskReader::Ticket ticket = slot.ticket;
  engine_.fill(first_slot_ + s, chunk.data, chunk.length, [reader, ticket] { reader->release(ticket); });
}

// Completes the reads in flight up to slot s's, in submission order (the staging ring frees in order).
void ExpertCache::complete(uint32_t s) {
  if (!slots_[s].pending) return;
  while (!pending_.empty()) {
    const uint32_t p = pending_.front();
    pending_.pop_front();
    try {
      complete_one(p);
    } catch (...) {
      slots_[p].pending = false;
      drop_prefetched(slots_[p]);
      where_.erase(uint32_t(slots_[p].group));
      slots_[p].group = -1;
      throw;
    }
    if (p == s) return;
  }
}

void ExpertCache::expect(const uint32_t* groups, const ExpertSource* sources, size_t n) {
  expected_.clear();
  expect_order_.clear();
  for (size_t i = 0; i < n; ++i) {
    expected_.insert(groups[i]);
    expect_order_.emplace_back(groups[i], sources[i]);
  }
  cancel_wrong_guesses();
  read_expected();
}

// Guesses this call does not run whose reads have not started yet are dropped (their slots freed): the
// disk reads the call's own experts next instead. Not counted as reads (prefetch_cancelled_).
void ExpertCache::cancel_wrong_guesses() {
  if (prefetched_unused_ == 0 || !reader_) return;
  for (auto it = pending_.begin(); it != pending_.end();) {
    Slot& slot = slots_[*it];
    if (!slot.prefetched || expected_.count(uint32_t(slot.group)) || !reader_->cancel(slot.ticket)) {
      ++it;
      continue;
    }
    where_.erase(uint32_t(slot.group));
    slot.group = -1;
    slot.pending = false;
    slot.prefetched = false;
    slot.unused_read = false;
    prefetched_unused_ -= 1;
    prefetch_cancelled_ += 1;
    fills_[int(Tier::Disk)] -= 1;
    bytes_[int(Tier::Disk)] -= slot.bytes;
    prefetch_reads_ -= 1;
    prefetch_bytes_ -= slot.bytes;
    it = pending_.erase(it);
  }
}

// Starts the reads of the current call's experts not yet cached or read, in its order, while reads may
// be in flight and a slot no expert of the call needs is free. From expect(), and again from each
// slot(): a slot freed by the previous expert's compute takes the next read at once (with two slots,
// one expert reads while the other computes).
void ExpertCache::read_expected() {
  for (const auto& [group, source] : expect_order_) {
    if (!expected_.count(group) || where_.count(group)) continue;
    if (pending_.size() >= max_in_flight_) break;
    const int64_t s = victim(true);
    if (s < 0) break;
    issue(uint32_t(s), group, source);
  }
}

void ExpertCache::prefetch(const uint32_t* groups, const ExpertSource* sources, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (where_.count(groups[i])) continue;
    if (pending_.size() >= max_in_flight_ || 2 * (prefetched_unused_ + 1) > slots_.size()) break;
    const int64_t s = victim(true);
    if (s < 0) break;
    issue(uint32_t(s), groups[i], sources[i]);
    Slot& slot = slots_[size_t(s)];
    slot.prefetched = true;
    slot.last_use = ++tick_;  // as recent as a use: the next call's own reads evict older slots first
    prefetched_unused_ += 1;
    prefetch_reads_ += 1;
    prefetch_bytes_ += sources[i].size;
  }
}

uint32_t ExpertCache::slot(uint32_t group, const ExpertSource& source) {
  if (in_use_ >= 0) engine_.release_slot(first_slot_ + uint32_t(in_use_));
  in_use_ = -1;
  expected_.erase(group);
  uses_ += 1;
  // From here to the compute's wait for the fill, the compute cannot go on: stall (Engine).
  engine_.expert_wait_begin();
  auto it = where_.find(group);
  uint32_t s;
  if (it != where_.end()) {
    s = it->second;
    if (!slots_[s].unused_read) hits_ += 1;
  } else {
    int64_t v = victim(true);
    if (v < 0) v = victim(false);
    if (v < 0) {  // every other slot waits for a read: finish the oldest, then take it
      complete(pending_.front());
      v = victim(false);
    }
    s = uint32_t(v);
    issue(s, group, source);
  }
  complete(s);
  Slot& slot = slots_[s];
  if (slot.prefetched) {
    slot.prefetched = false;
    prefetched_unused_ -= 1;
    prefetch_used_ += 1;
  }
  slot.unused_read = false;
  slot.last_use = ++tick_;
  in_use_ = s;
  read_expected();  // the slot released above may take the call's next read
  engine_.wait_filled(first_slot_ + s);
  engine_.expert_wait_end();
  return first_slot_ + s;
}

void ExpertCache::end_call() {
  if (in_use_ >= 0) engine_.release_slot(first_slot_ + uint32_t(in_use_));
  in_use_ = -1;
  expected_.clear();
  expect_order_.clear();
  if (!keep_) reset();
}

void ExpertCache::reset() {
  for (uint32_t s : pending_) {
    reader_->release(slots_[s].ticket);  // an unread ticket is dropped
    slots_[s].pending = false;
  }
  pending_.clear();
  for (Slot& slot : slots_) {
    drop_prefetched(slot);
    slot.group = -1;
    slot.unused_read = false;
  }
  where_.clear();
}

void ExpertCache::add_stats(OffloadStats& stats) const {
  stats.expert_uses += uses_;
  stats.expert_hits += hits_;
  stats.expert_prefetch_reads += prefetch_reads_;
  stats.expert_prefetch_bytes += prefetch_bytes_;
  stats.expert_prefetch_used += prefetch_used_;
  stats.expert_prefetch_wasted += prefetch_wasted_;
  stats.expert_prefetch_wasted_bytes += prefetch_wasted_bytes_;
  stats.expert_prefetch_cancelled += prefetch_cancelled_;
  for (int t = 0; t < 3; ++t) {
    stats.expert_fills[t] += fills_[t];
    stats.expert_bytes[t] += bytes_[t];
  }
}

}  // namespace endor::offload
