// StreamingWeights: the WeightProvider of an offloading placement. Decides, block by block, which
// group goes into which slot and when; the Engine executes the copies and the ordering.
//
// Slots: streamed group j (j-th in execution order among the N streamed groups) always lives in
// slot j mod S (S = k + 1), so every Weight of a streamed block is bound once, at load, to its
// slot's address, on both backends. Positions are counted in an endless execution sequence
// (position a is group order[a mod N]); acquiring position a issues the fetches of a+1..a+k, each
// only once its slot's previous occupant has been released (else it waits for a later release:
// this is what keeps the ring correct at the wrap from the last block to the first, where
// a + d and a may share a slot when S does not divide N). A fetch into a slot that already holds
// the group (all streamed groups fit in the slots, or a group is asked for again) copies nothing.
// Any other order of acquires (calibration's forward_block, a new prompt mid-sequence) restarts
// the sequence at the asked group.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include <map>
#include <unordered_map>

#include "endor/expert_groups.h"
#include "engine.h"
#include "expert_cache.h"

namespace endor {
namespace offload {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// memcpy of a large range with a few threads (filling pinned host copies at load).
void parallel_copy(uint8_t* dst, const uint8_t* src, uint64_t n) {
  const unsigned n_threads = n < (uint64_t(64) << 20) ? 1 : std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
  if (n_threads <= 1) {
    std::memcpy(dst, src, n);
    return;
  }
  std::vector<std::thread> threads;
  const uint64_t part = (n + n_threads - 1) / n_threads;
  for (unsigned t = 0; t < n_threads; ++t) {
    const uint64_t begin = std::min<uint64_t>(n, t * part), end = std::min<uint64_t>(n, begin + part);
    if (begin < end) threads.emplace_back([=] { std::memcpy(dst + begin, src + begin, end - begin); });
  }
  for (std::thread& t : threads) t.join();
}

struct GroupState {
  Tier tier = Tier::Gpu;
  bool streamed = false;
  bool expert = false;            // an MoE expert's own group
  bool cached = false;            // an expert group off the fast tier: read into the expert cache
  uint32_t pos = 0;               // index among the streamed groups (execution order)
  uint64_t offset = 0, size = 0;  // the group's range in the file
  uint8_t* host = nullptr;        // CUDA cpu tier: the pinned copy
};

struct SlotState {
  int64_t occupant = -1;    // sequence position last fetched into the slot (-1: none)
  int64_t group = -1;       // group whose bytes are (or are being fetched) there; -1: unknown
};

struct Fetch {
  int64_t position = 0;
  uint32_t group = 0, slot = 0;
  bool copies = false;       // a fill was (or will be) queued; false: the slot already held the group
  bool pending_read = false; // disk: ticket submitted, fill not queued yet
  DiskReader::Ticket ticket = 0;
};

class StreamingWeightsImpl final : public StreamingWeights {
 public:
  StreamingWeightsImpl(const ContainerReader& container, Backend& backend, const Placement& placement,
                       const StreamingOptions& options, std::unique_ptr<Engine> engine);
  ~StreamingWeightsImpl() override;

  std::unique_ptr<Weight> prepare(Backend& backend, const TensorView& view, uint32_t group) override;
  void acquire(uint32_t group) override;
  void release(uint32_t group) override;
  void expect_experts(const uint32_t* groups, size_t n) override;
  void use_expert(uint32_t group, const Weight** weights, size_t n) override;
  bool wants_expert_prefetch(uint32_t next_block) const override;
  void prefetch_experts(const uint32_t* groups, size_t n) override;

  const Placement& placement() const override { return placement_; }
  OffloadStats stats() override;
  void synchronize() override;
  std::string disk_path() const override;
  std::string device() const override { return engine_->device(); }

 private:
  uint32_t slot_of(int64_t position) const { return uint32_t(uint64_t(position) % order_.size() % n_slots_); }
  uint32_t group_at(int64_t position) const { return order_[size_t(uint64_t(position) % order_.size())]; }
  bool slot_free(uint32_t s) const {
    const int64_t occ = slots_[s].occupant;
    return occ < 0 || occ < current_ || (occ == current_ && current_released_);
  }
  void issue(int64_t position);
  void issue_ahead();
  void queue_ready_reads();
  void queue_read_fill(Fetch& f);
  void abandon_window();
  void open_ring(uint64_t max_streamed, uint64_t max_disk);
  std::unique_ptr<DiskReader> open_reader(uint64_t max_request, uint32_t n_staging);
  void open_expert_cache(uint64_t max_disk_expert);
  ExpertSource source_of(uint32_t group) const;
  // expect_groups_/expect_sources_ = those of groups[0, n) that the expert cache serves, in order.
  void collect_cached(const uint32_t* groups, size_t n);
  [[noreturn]] void internal_error(const std::string& what) const;

  const ContainerReader& container_;
  Backend& backend_;
  Placement placement_;
  StreamingOptions options_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<DiskReader> reader_;
  std::vector<GroupState> groups_;
  std::vector<uint32_t> order_;    // streamed groups in execution order
  uint32_t n_slots_ = 0;
  uint64_t slot_bytes_ = 0;
  bool read_into_slots_ = false;   // CPU device: disk reads land in the slots
  std::vector<SlotState> slots_;
  std::deque<Fetch> window_;       // issued fetches of positions > current_, in position order
  int64_t current_ = -1;           // position acquired last
  bool current_released_ = true;
  int64_t max_position_ = -1;      // highest position issued or acquired
  int64_t last_block_group_ = -1;  // group of the block that ran last (stall accounting)
  OffloadStats stats_;
  // Experts read into the cache: their own reader, the cache, the Weights prepare() returned for their
  // tensors (placeholders bound to the first cache slot) and, made when first needed, one per slot.
  std::unique_ptr<DiskReader> expert_reader_;
  std::unique_ptr<ExpertCache> expert_cache_;
  std::unordered_map<const Weight*, const TensorView*> expert_views_;  // placeholder -> its tensor
  std::map<std::pair<const TensorView*, uint32_t>, std::unique_ptr<Weight>> bound_;  // (tensor, slot)
  std::vector<uint64_t> expert_counts_;  // use_expert calls per group
  std::vector<uint32_t> expect_groups_;
  std::vector<ExpertSource> expect_sources_;
};

StreamingWeightsImpl::StreamingWeightsImpl(const ContainerReader& container, Backend& backend,
                                           const Placement& placement, const StreamingOptions& options,
                                           std::unique_ptr<Engine> engine)
    : container_(container), backend_(backend), placement_(placement), options_(options), engine_(std::move(engine)) {
  const Manifest& m = container.manifest();
  if (placement.tiers.size() != m.groups.size())
    throw Error(container.path() + ": the placement has " + std::to_string(placement.tiers.size()) +
                " groups, the container " + std::to_string(m.groups.size()));
  if (options.prefetch < 1) throw Error("--prefetch must be at least 1");
  const bool cuda = engine_->device() == "cuda";
  if (cuda != placement.cuda)
    throw Error(std::string("the placement was made for the ") + (placement.cuda ? "CUDA" : "CPU") +
                " device, the backend is " + backend.name());
  std::string no_cufile;
  if (options.disk_io == DiskIo::CuFile && !cufile_available(&no_cufile)) throw Error("--disk-io cufile: " + no_cufile);

  groups_.resize(m.groups.size());
  uint64_t max_streamed = 0, max_disk = 0, max_expert = 0, max_disk_expert = 0;
  expert_counts_.assign(m.groups.size(), 0);
  for (size_t g = 0; g < m.groups.size(); ++g) {
    GroupState& gs = groups_[g];
    gs.tier = placement.tiers[g];
    gs.offset = m.groups[g].offset;
    gs.size = m.groups[g].size;
    const bool loaded = !m.groups[g].tensors.empty();
    const bool blocks = is_block_group(m.groups[g].name);
    const bool off_fast = cuda ? gs.tier != Tier::Gpu : gs.tier == Tier::Disk;
    gs.expert = is_expert_group(m.groups[g].name);
    gs.streamed = loaded && blocks && off_fast;
    gs.cached = loaded && gs.expert && off_fast;
    if (gs.cached) {
      max_expert = std::max(max_expert, gs.size);
      if (gs.tier == Tier::Disk) max_disk_expert = std::max(max_disk_expert, gs.size);
    }
    if (loaded && !blocks && !gs.expert && gs.tier != (cuda ? Tier::Gpu : Tier::Cpu) && !(gs.tier == Tier::Gpu && !cuda))
      throw Error(container.path() + ": group \"" + m.groups[g].name + "\" must stay resident (tier " +
                  to_string(gs.tier) + " given)");
    if (!gs.streamed) continue;
    gs.pos = uint32_t(order_.size());
    order_.push_back(uint32_t(g));
    max_streamed = std::max(max_streamed, gs.size);
    if (gs.tier == Tier::Disk) max_disk = std::max(max_disk, gs.size);
  }
  if (max_expert > 0 && (placement.expert_slots == 0 || placement.expert_slot_bytes < max_expert))
    throw Error(container.path() + ": the placement has no expert cache for its offloaded experts");
  // cpu tier on CUDA: a pinned copy of each group, so the copies into slots are DMA.
  if (cuda)
    for (GroupState& gs : groups_) {
      if (!(gs.streamed || gs.cached) || gs.tier != Tier::Cpu) continue;
      gs.host = static_cast<uint8_t*>(engine_->host_alloc(gs.size));
      parallel_copy(gs.host, container.bytes() + gs.offset, gs.size);
    }
  read_into_slots_ = !cuda;
  if (!order_.empty()) open_ring(max_streamed, max_disk);
  if (max_expert > 0) open_expert_cache(max_disk_expert);
}

void StreamingWeightsImpl::open_ring(uint64_t max_streamed, uint64_t max_disk) {
  const bool cuda = placement_.cuda;
  n_slots_ = options_.prefetch + 1;
  if (placement_.n_slots != 0 && placement_.n_slots != n_slots_)
    throw Error("the placement was made for --prefetch " + std::to_string(placement_.n_slots - 1) +
                ", the streaming asks for " + std::to_string(options_.prefetch));
  const uint64_t slot_bytes = std::max<uint64_t>(placement_.slot_bytes, (max_streamed + 16 + 4095) / 4096 * 4096);
  engine_->allocate_slots(n_slots_, slot_bytes);
  slot_bytes_ = slot_bytes;
  slots_.assign(n_slots_, SlotState{});
  if (max_disk > 0) reader_ = open_reader(max_disk, placement_.n_staging);
  (void)cuda;
}

std::unique_ptr<DiskReader> StreamingWeightsImpl::open_reader(uint64_t max_request, uint32_t n_staging) {
  DiskReaderOptions ro;
  ro.n_buffers = std::max<uint32_t>(2, n_staging);
  ro.max_request = max_request;
  ro.direct = options_.disk_io != DiskIo::Buffered;
  Engine* engine = engine_.get();
  ro.allocate = [engine](size_t bytes) { return engine->host_alloc(bytes); };
  ro.deallocate = [engine](void* p) { engine->host_free(p); };
  return std::make_unique<DiskReader>(container_.path(), ro);
}

// The expert cache's slots come after the block ring's (engine slots n_slots_ ..), and disk experts have
// a reader of their own, so their reads never queue behind (or hold up) the blocks' staging ring.
void StreamingWeightsImpl::open_expert_cache(uint64_t max_disk_expert) {
  const uint32_t first = n_slots_;
  engine_->allocate_slots(placement_.expert_slots, placement_.expert_slot_bytes);
  if (max_disk_expert > 0) expert_reader_ = open_reader(max_disk_expert, 2);
  expert_cache_ = std::make_unique<ExpertCache>(*engine_, expert_reader_.get(), read_into_slots_, first,
                                                placement_.expert_slots, placement_.expert_slot_bytes,
                                                placement_.expert_cache);
}

StreamingWeightsImpl::~StreamingWeightsImpl() {
  try {
    abandon_window();
    engine_->synchronize();
  } catch (...) {
    // Nothing sensible to do in a destructor; the engine's own destructor waits again.
  }
  expert_cache_.reset();  // drops the expert reads in flight
  expert_reader_.reset();
  reader_.reset();  // before the engine: its staging buffers are the engine's host memory
  for (GroupState& gs : groups_)
    if (gs.host) engine_->host_free(gs.host);
}

void StreamingWeightsImpl::internal_error(const std::string& what) const {
  throw Error(container_.path() + ": offload internal error: " + what);
}

std::unique_ptr<Weight> StreamingWeightsImpl::prepare(Backend& backend, const TensorView& view, uint32_t group) {
  if (&backend != &backend_) throw Error(container_.path() + ": streaming weights were made for another backend");
  if (group >= groups_.size() || !(groups_[group].streamed || groups_[group].cached))
    return backend.prepare_weight(view);
  const GroupState& gs = groups_[group];
  if (!view.info || view.info->offset < gs.offset || view.info->offset + view.info->size > gs.offset + gs.size)
    throw Error(container_.path() + ": a streamed tensor lies outside its group");
  if (gs.cached) {
    // A placeholder bound to the first cache slot (CPU: the mapping, never read through it); use_expert
    // hands out the Weight of the slot the expert is in.
    std::unique_ptr<Weight> w = engine_->device() == "cuda"
                                    ? engine_->prepare_at(view, engine_->slot(n_slots_) + (view.info->offset - gs.offset))
                                    : backend.prepare_weight(view);
    expert_views_[w.get()] = &view;
    return w;
  }
  uint8_t* at = engine_->slot(gs.pos % n_slots_) + (view.info->offset - gs.offset);
  return engine_->prepare_at(view, at);
}

void StreamingWeightsImpl::issue(int64_t position) {
  const uint32_t g = group_at(position), s = slot_of(position);
  if (options_.check_invariants && !slot_free(s))
    internal_error("slot " + std::to_string(s) + " refilled while position " +
                   std::to_string(slots_[s].occupant) + " may still use it");
  GroupState& gs = groups_[g];
  Fetch f;
  f.position = position;
  f.group = g;
  f.slot = s;
  SlotState& slot = slots_[s];
  if (slot.group != int64_t(g)) {
    f.copies = true;
    slot.group = g;
    if (gs.tier == Tier::Disk) {
      f.pending_read = true;
      // Host slots (CPU device): read straight into the slot, no staging copy.
      f.ticket = read_into_slots_ ? reader_->submit_into(gs.offset, gs.size, engine_->slot(s), slot_bytes_)
                                  : reader_->submit(gs.offset, gs.size);
    } else {
      engine_->fill(s, gs.host, gs.size, {});
    }
  }
  slot.occupant = position;
  max_position_ = std::max(max_position_, position);
  window_.push_back(f);
}

// Issues the fetches of the positions after the current one, up to k ahead and never the same
// group twice, in order, stopping at the first whose slot is still in use.
void StreamingWeightsImpl::issue_ahead() {
  const int64_t n = int64_t(order_.size());
  const int64_t last = current_ + std::min<int64_t>(options_.prefetch, n - 1);
  for (int64_t p = window_.empty() ? current_ + 1 : window_.back().position + 1; p <= last; ++p) {
    if (!slot_free(slot_of(p))) break;
    issue(p);
  }
}

void StreamingWeightsImpl::queue_read_fill(Fetch& f) {
  const Clock::time_point t0 = Clock::now();
  const DiskReader::Chunk chunk = reader_->wait(f.ticket);
  stats_.host_wait_s += seconds_since(t0);
  if (read_into_slots_) {  // the bytes are in the slot already
    reader_->release(f.ticket);
    f.pending_read = false;
    return;
  }
  DiskReader* reader = reader_.get();
  const DiskReader::Ticket ticket = f.ticket;
  engine_->fill(f.slot, chunk.data, chunk.length, [reader, ticket] { reader->release(ticket); });
  f.pending_read = false;
}

// Queues the fills of disk reads that have finished, in window order (never blocking).
// A failed read stays pending: its error is raised when its block is acquired.
void StreamingWeightsImpl::queue_ready_reads() {
  for (Fetch& f : window_) {
    if (!f.pending_read || !reader_->ready(f.ticket)) continue;
    try {
      queue_read_fill(f);
    } catch (const Error&) {
    }
  }
}

// Drops every fetch ahead of the current position: pending reads are released unread (their
// slots' content is then unknown); queued fills land and leave their group's bytes in the slot.
// No compute will use an abandoned fetch, so its slot is free again (a later fill into it is
// ordered after the abandoned one: same copy stream).
void StreamingWeightsImpl::abandon_window() {
  for (Fetch& f : window_) {
    if (f.pending_read) {
      reader_->release(f.ticket);
      slots_[f.slot].group = -1;
    }
    if (slots_[f.slot].occupant == f.position) slots_[f.slot].occupant = -1;
  }
  window_.clear();
}

void StreamingWeightsImpl::acquire(uint32_t group) {
  if (!current_released_) internal_error("acquire of a block while another one is held");
  const bool follows = last_block_group_ >= 0 && int64_t(group) == last_block_group_ + 1;
  last_block_group_ = group;
  if (group >= groups_.size() || !groups_[group].streamed) {
    engine_->block_begin(follows);
    return;
  }
  const int64_t n = int64_t(order_.size());
  const int64_t p = groups_[group].pos;
  int64_t a;
  if (current_ >= 0 && (current_ + 1) % n == p) {
    a = current_ + 1;  // in execution order (also from the last block to the first)
  } else {
    // Another order: restart the sequence at this group, after every position used so far.
    abandon_window();
    const int64_t after = max_position_ + 1;
    a = after + ((p - after % n) % n + n) % n;
  }
  // The window holds positions current_+1, current_+2, ... (issue_ahead issues in order).
  if (window_.empty()) {
    issue(a);  // its slot's previous occupant is at most current_, which is released
  } else if (window_.front().position != a) {
    internal_error("fetch window starts at position " + std::to_string(window_.front().position) + ", not " +
                   std::to_string(a));
  }
  current_ = a;
  current_released_ = false;
  Fetch f = window_.front();
  window_.pop_front();
  try {
    issue_ahead();  // reads of the next blocks start before this one is waited for
    if (f.pending_read) queue_read_fill(f);
    queue_ready_reads();
  } catch (...) {
    // A failed read: the block never runs. Leave a consistent state for whatever comes next.
    if (f.pending_read) reader_->release(f.ticket);
    slots_[f.slot].group = -1;
    slots_[f.slot].occupant = -1;
    current_released_ = true;
    abandon_window();
    throw;
  }
  if (f.copies) {
    const GroupState& gs = groups_[group];
    stats_.fills[int(gs.tier)] += 1;
    stats_.bytes[int(gs.tier)] += gs.size;
  }
  engine_->wait_filled(f.slot);
  stats_.blocks += 1;
  engine_->block_begin(follows);
}

ExpertSource StreamingWeightsImpl::source_of(uint32_t group) const {
  const GroupState& gs = groups_[group];
  ExpertSource src;
  src.tier = gs.tier;
  src.offset = gs.offset;
  src.size = gs.size;
  src.host = gs.host;
  return src;
}

void StreamingWeightsImpl::collect_cached(const uint32_t* groups, size_t n) {
  expect_groups_.clear();
  expect_sources_.clear();
  for (size_t i = 0; i < n; ++i) {
    if (groups[i] >= groups_.size() || !groups_[groups[i]].cached) continue;
    expect_groups_.push_back(groups[i]);
    expect_sources_.push_back(source_of(groups[i]));
  }
}

void StreamingWeightsImpl::expect_experts(const uint32_t* groups, size_t n) {
  if (!expert_cache_) return;
  collect_cached(groups, n);
  expert_cache_->expect(expect_groups_.data(), expect_sources_.data(), expect_groups_.size());
}

// Prefetch needs a cache that keeps what it reads past the call (not --expert-cache 0) and the next
// block's router in memory now (its dense group resident, not streamed).
bool StreamingWeightsImpl::wants_expert_prefetch(uint32_t next_block) const {
  return options_.expert_prefetch && expert_cache_ && placement_.expert_cache && next_block < groups_.size() &&
         !groups_[next_block].streamed;
}

void StreamingWeightsImpl::prefetch_experts(const uint32_t* groups, size_t n) {
  if (!expert_cache_ || !options_.expert_prefetch) return;
  collect_cached(groups, n);
  expert_cache_->prefetch(expect_groups_.data(), expect_sources_.data(), expect_groups_.size());
}

// An expert about to run: resident ones are used in place; the others are brought into a cache slot
// and each of their Weights replaced by the one bound to that slot (made the first time it is needed,
// from the slot's bytes: on the CPU device the mapping is never read).
void StreamingWeightsImpl::use_expert(uint32_t group, const Weight** weights, size_t n) {
  if (group >= groups_.size()) return;
  expert_counts_[group] += 1;
  if (!groups_[group].cached) return;
  const GroupState& gs = groups_[group];
  const uint32_t slot = expert_cache_->slot(group, source_of(group));
  for (size_t i = 0; i < n; ++i) {
    auto it = expert_views_.find(weights[i]);
    if (it == expert_views_.end()) continue;  // not a Weight of this provider (e.g. a calibration replacement)
    const TensorView* view = it->second;
    std::unique_ptr<Weight>& bound = bound_[{view, slot}];
    if (!bound) {
      uint8_t* at = engine_->slot(slot) + (view->info->offset - gs.offset);
      if (engine_->device() == "cuda") {
        bound = engine_->prepare_at(*view, at);
      } else {
        TensorView v = *view;
        v.data = at;
        bound = backend_.prepare_weight(v);
      }
    }
    weights[i] = bound.get();
  }
}

void StreamingWeightsImpl::release(uint32_t group) {
  if (expert_cache_) expert_cache_->end_call();
  engine_->block_end();
  if (group >= groups_.size() || !groups_[group].streamed) return;
  if (current_ < 0 || current_released_ || group_at(current_) != group)
    internal_error("release of a block that is not the one held");
  engine_->release_slot(slot_of(current_));
  current_released_ = true;
  issue_ahead();
  queue_ready_reads();
}

OffloadStats StreamingWeightsImpl::stats() {
  engine_->collect(stats_);
  OffloadStats s = stats_;
  if (reader_) s.disk = reader_->stats();
  if (expert_reader_) s.expert_disk = expert_reader_->stats();
  if (expert_cache_) expert_cache_->add_stats(s);
  s.expert_counts = expert_counts_;
  return s;
}

void StreamingWeightsImpl::synchronize() {
  // Pending reads cannot be waited for without queueing their fills (their slots are reserved):
  // queue them, then wait for the engine.
  for (Fetch& f : window_) {
    if (!f.pending_read) continue;
    try {
      queue_read_fill(f);
    } catch (const Error&) {  // a failed prefetch: raised if its block is ever acquired
    }
  }
  engine_->synchronize();
  engine_->collect(stats_);
}

std::string StreamingWeightsImpl::disk_path() const {
  if (!reader_) return "none (no group on disk)";
  const bool cuda = engine_->device() == "cuda";
  return reader_->mode() + (cuda ? " into pinned staging, then copy to the device" : " straight into the host slots");
}

}  // namespace

std::unique_ptr<StreamingWeights> make_streaming_weights(const ContainerReader& container, Backend& backend,
                                                         const Placement& placement,
                                                         const StreamingOptions& options,
                                                         std::unique_ptr<Engine> engine) {
  return std::make_unique<StreamingWeightsImpl>(container, backend, placement, options, std::move(engine));
}

}  // namespace offload

std::unique_ptr<StreamingWeights> make_streaming_weights(const ContainerReader& container, Backend& backend,
                                                         const Placement& placement,
                                                         const StreamingOptions& options) {
  std::unique_ptr<offload::Engine> engine = offload::make_cuda_engine(backend);
  if (!engine) engine = offload::make_cpu_engine(backend);
  return offload::make_streaming_weights(container, backend, placement, options, std::move(engine));
}

}  // namespace endor
