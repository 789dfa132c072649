// Tiered offloading (runtime/offload): where each layer group of a container lives at run time,
// and how an offloaded decoder block's compressed bytes reach the compute device before it runs.
//
//   gpu  — resident on the compute device in compressed form (the backend's prepare_weight).
//   cpu  — compressed bytes in pinned host memory (CUDA), copied to a device slot ahead of use.
//   disk — read from the container by a reader thread (O_DIRECT where the file system allows it)
//          into a ring of aligned staging buffers, then copied to a device slot.
// Offloaded blocks pass through a ring of k + 1 device slots (k = prefetch depth): while block i
// computes, blocks i+1..i+k are in flight on a copy stream, ordered by events (CUDA). On the CPU
// device, `gpu` and `cpu` both mean "read in place from the mapped file", and only `disk` groups
// stream (through host slots).
//
// Pieces, each usable alone: memory sizes (parse/format), placement (a pure function of sizes
// and budgets), DiskReader (a reader thread over one file), StreamingWeights (the
// WeightProvider the model calls around each block), bandwidth probes.
//
// Errors: bad input (budgets too small, unreadable or truncated files) throws endor::Error whose
// what() is one line naming the file or the option and what is wrong.
// Thread safety: DiskReader's methods may be called from any thread; StreamingWeights is used
// by the one thread that runs the model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "endor/format.h"
#include "endor/kernels.h"
#include "endor/runtime.h"

namespace endor {

// Memory sizes are read by parse_memory_size and printed by format_bytes (endor/format.h).

// ---- placement -------------------------------------------------------------------------------------
// What one manifest group asks of the machine.
struct GroupDemand {
  std::string name;             // manifest group name ("embed", "layers.0", ..., "head")
  uint64_t bytes = 0;           // compressed bytes: the group's one contiguous range in the file
  uint64_t resident_bytes = 0;  // on the compute device whatever the tier: 1-D tensors as f32
  Tier manifest_tier = Tier::Gpu;
  bool streamable = false;      // a decoder block ("layers.N"); others always stay resident
  bool loaded = true;           // false: not loaded by the model at all (the "files" group)
  // An MoE expert's own group ("layers.N.experts.E", SPEC.md §4.2): not streamed with the blocks but
  // read when the router picks it, into the expert cache (streaming below).
  bool expert = false;
  uint32_t layer = 0, expert_index = 0;  // expert groups: the block and the expert
};

struct PlacementRequest {
  std::vector<GroupDemand> groups;                // in execution order (the manifest's order)
  // --gpu-mem: all the device holds (fixed needs, norms, embed/head, resident blocks, slots).
  // --cpu-mem: the decoder blocks kept in host memory (CUDA: pinned cpu tier; CPU device: read in
  // place), as endor-pack's --cpu-mem; the staging ring (and the CPU device's slots) come on top.
  // Both absent: the manifest's tiers.
  std::optional<uint64_t> gpu_budget, cpu_budget;
  uint64_t device_fixed_bytes = 0;  // KV cache, activations and workspaces on the compute device
  std::optional<uint64_t> device_capacity;  // memory the device has free (checks manifest tiers)
  uint32_t prefetch = 2;            // k >= 1; the slot ring has k + 1 slots
  bool cuda = true;                 // false: the CPU device (only disk groups stream)
  // CPU device: the KV caches of every sequence held at once (part of device_fixed_bytes too).
  // --cpu-mem covers them first: blocks read in place get what is left.
  uint64_t host_kv_bytes = 0;
  // Expert groups (MoE files packed by expert): the expert cache, in the compute device's memory (CPU
  // device: host memory, within --cpu-mem; CUDA: within --gpu-mem). nullopt: half of what the budget
  // leaves for experts once the blocks are placed, when not every expert fits; 0: no cache (every
  // routed expert off the fast tier is read again each time, through expert_min_slots slots).
  std::optional<uint64_t> expert_cache;
  uint32_t expert_min_slots = 2;    // slots an expert cache has at least (a read ahead while one computes)
};

struct Placement {
  std::vector<Tier> tiers;          // per group of the request (unloaded groups: their manifest tier)
  bool cuda = true;                 // made for the CUDA device (else the CPU device)
  bool from_manifest = false;       // no budget given: the manifest's tiers (embed/head forced to gpu)
  uint32_t n_slots = 0;             // slot ring (0 when no group streams)
  uint64_t slot_bytes = 0;          // each slot: the largest streamed group, padded (multiple of 4096)
  uint32_t n_staging = 0;           // disk staging buffers (0 when no group is on disk)
  uint64_t staging_bytes = 0;       // each staging buffer (multiple of 4096)
  uint64_t tier_bytes[3] = {0, 0, 0};   // group bytes per tier (index: Tier)
  uint32_t tier_groups[3] = {0, 0, 0};  // loaded groups per tier
  uint64_t device_bytes = 0;        // what the device holds in all: resident groups, slots, fixed needs
  uint64_t host_pinned_bytes = 0;   // pinned host memory: cpu-tier groups (CUDA) and staging buffers
  uint64_t host_kv_bytes = 0;       // CPU device: KV caches counted against --cpu-mem
  // Expert groups off the fast tier (CPU device: disk; CUDA: cpu or disk) are read into cache slots.
  uint32_t expert_slots = 0;        // 0 when every expert group is resident (or there are none)
  uint64_t expert_slot_bytes = 0;   // each: the largest such expert group, padded (multiple of 4096)
  bool expert_cache = true;         // false: --expert-cache 0 (no reuse across MoE MLP calls)
  uint32_t expert_groups = 0;       // loaded expert groups in all, and of them resident
  uint32_t resident_experts = 0;
  bool streams() const { return n_slots > 0 || expert_slots > 0; }
};

// Decides each group's tier. With a budget, greedy in execution order: embed and head (and every
// group's 1-D tensors, and the fixed needs) on the device first; then, when not everything fits,
// k + 1 slots are reserved and decoder blocks fill the rest of the device budget in order; the
// remaining blocks go to pinned host memory while --cpu-mem lasts, then to disk (--cpu-mem 0: every
// offloaded block on disk). Once a block spills to a slower tier, later blocks stay at that tier
// or slower. An absent budget is unlimited (the GPU's: the device's free memory when known). On
// the CPU device there is no gpu tier: blocks fill --cpu-mem (read in place), then go to disk.
// Throws (one line) when the must-have part does not fit: e.g. "--gpu-mem 1.00 GiB is too small:
// embed and head groups (..) plus KV cache and activations (..) need at least .. ".
// MoE experts in groups of their own come after every block (a token reads each block's dense part
// but top_k of its experts): what the budget leaves once the blocks are placed holds the expert cache
// (expert_cache) and then the experts in execution order; the rest are read when routed to.
Placement place_groups(const PlacementRequest& request);

// The groups of a container as placement demands (sizes from the manifest; 1-D tensors' f32 size).
std::vector<GroupDemand> group_demands(const Manifest& manifest);

// Device memory the model needs besides its weights: KV cache for `kv_capacity` tokens,
// activation scratch for calls of up to `max_tokens` tokens, and (CUDA) the prefill path's
// decoded-panel and converted-activation buffers plus a fixed 64 MiB for cuBLAS and small buffers.
uint64_t device_fixed_bytes(const ModelConfig& config, const Manifest& manifest, size_t kv_capacity,
                            size_t max_tokens, bool cuda);

// Several lines describing a placement ("tier  groups  bytes" and the rings), for --stats.
std::string describe_placement(const Placement& placement);

// ---- disk reader -----------------------------------------------------------------------------------
struct DiskReaderOptions {
  uint32_t n_buffers = 2;         // staging ring size (>= 1)
  uint64_t max_request = 0;       // the largest range one request may ask for (> 0)
  bool direct = true;             // try O_DIRECT; buffered pread where it is refused
  uint32_t alignment = 4096;      // O_DIRECT granularity of offsets, lengths and buffer addresses
  // Staging memory; empty: posix_memalign/free. (CUDA: cudaHostAlloc, so copies out are DMA.)
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void*)> deallocate;
};

struct DiskReaderStats {
  uint64_t reads = 0, bytes = 0;  // requests served and wanted bytes delivered
  uint64_t device_bytes = 0;      // bytes actually read (O_DIRECT widens to the alignment)
  double busy_s = 0;              // time spent inside read calls
  double backpressure_s = 0;      // time the thread waited for a buffer to be released
  DiskReaderStats& operator-=(const DiskReaderStats& e) {  // the counters of an interval
    reads -= e.reads;
    bytes -= e.bytes;
    device_bytes -= e.device_bytes;
    busy_s -= e.busy_s;
    backpressure_s -= e.backpressure_s;
    return *this;
  }
};

// Reads byte ranges of one file, in request order, on its own thread into a ring of staging
// buffers: request t uses buffer t mod n_buffers, and waits until the request that last used it
// has been released (back-pressure). With O_DIRECT, reads are widened to `alignment` and the
// wanted range is trimmed out; where the file system refuses O_DIRECT (tmpfs, some network file
// systems) the reader falls back to buffered pread and mode() says so.
class DiskReader {
 public:
  using Ticket = uint64_t;
  struct Chunk {
    const uint8_t* data = nullptr;  // the first wanted byte; `length` bytes follow
    uint64_t length = 0;
  };

  DiskReader(const std::string& path, const DiskReaderOptions& options);
  ~DiskReader();  // stops the thread (a read in progress finishes; queued ones are dropped)
  DiskReader(const DiskReader&) = delete;
  DiskReader& operator=(const DiskReader&) = delete;

  const std::string& path() const { return path_; }
  uint32_t n_buffers() const { return n_buffers_; }
  // Queues a read of [offset, offset + length); never blocks. Throws when length is 0 or over
  // max_request, or offset + length overflows.
  Ticket submit(uint64_t offset, uint64_t length);
  // The same, read straight into `dst` (dst_bytes long) instead of a staging buffer: no buffer is
  // taken and wait() returns dst. Needs offset and dst aligned to `alignment` and dst_bytes >=
  // length rounded up to it (O_DIRECT reads whole pages); throws otherwise. The reader writes dst
  // until the read ends, even after a release (requests are read one at a time, in order, so a
  // later read into the same memory lands after it).
  Ticket submit_into(uint64_t offset, uint64_t length, uint8_t* dst, uint64_t dst_bytes);
  // Blocks until ticket t is read and returns its bytes, valid until release(t). Throws (one
  // line naming the file) when the read failed (I/O error, the file ends before the range
  // does), or when t was never submitted or is already released. Ticket t - n_buffers must be
  // released first, by this thread or another one (e.g. a CUDA host callback), or t never comes.
  Chunk wait(Ticket t);
  bool ready(Ticket t) const;  // read finished (successfully or not); never blocks
  // Gives ticket t's buffer back to the ring. Callable from any thread (e.g. a CUDA host
  // callback once the copy out of the buffer is done); releasing an unread ticket drops it.
  void release(Ticket t);
  // Drops ticket t if the reader has not started it (then true: nothing of it is read, as release());
  // false when it is being read or done (release() it as usual).
  bool cancel(Ticket t);
  // "O_DIRECT" or "buffered pread (O_DIRECT refused: <reason>)" or "buffered pread (asked)".
  std::string mode() const;
  bool direct() const;
  DiskReaderStats stats() const;

 private:
  struct State;
  std::string path_;
  uint32_t n_buffers_;
  std::unique_ptr<State> state_;
};

// ---- streaming ------------------------------------------------------------------------------------
// How disk groups reach the device: "auto" = cuFile (GPUDirect Storage) when built with it and the
// system has the nvidia-fs driver, else "direct" (O_DIRECT into pinned staging, buffered fallback).
enum class DiskIo { Auto, Direct, Buffered, CuFile };
std::optional<DiskIo> parse_disk_io(const std::string& text);  // "auto", "direct", "buffered", "cufile"
// Whether disk groups can be read with cuFile here: the build found cufile.h, libcufile loads, and
// the system has the nvidia-fs driver (without it cuFile only emulates with POSIX reads, which the
// staged path already does). Otherwise false, and *why (when non-null) says what is missing.
bool cufile_available(std::string* why);

struct StreamingOptions {
  uint32_t prefetch = 2;          // k: blocks in flight ahead of the computing one (>= 1)
  DiskIo disk_io = DiskIo::Auto;
  // MoE: read the experts the next block's router picks on this block's MLP input into the expert
  // cache right after this block's own reads (--expert-prefetch; docs/moe.md). Acts only where experts
  // are read into a cache that keeps them (not --expert-cache 0) and the next block's router is resident.
  bool expert_prefetch = false;
  // Checks every slot fill against the scheduling invariants and throws on a violation (tests).
  bool check_invariants = true;
};

// Traffic and time of the streaming since construction (or the last snapshot difference).
struct OffloadStats {
  uint64_t blocks = 0;               // acquire() calls of decoder blocks
  uint64_t fills[3] = {0, 0, 0};     // slot fills per source tier (cpu, disk; gpu always 0)
  uint64_t bytes[3] = {0, 0, 0};     // bytes moved into slots per source tier
  double copy_s = 0;                 // time the copies into slots took (CUDA: copy-stream events)
  uint64_t copy_bytes = 0;           // bytes of the copies timed in copy_s
  double compute_s = 0;              // time blocks computed (CUDA: compute-stream events)
  double stall_s = 0;                // time compute waited for weights: between consecutive blocks, and
                                     // inside MoE blocks for routed experts (expert_stall_s)
  double expert_stall_s = 0;         // of stall_s: compute waiting for an expert's read (CUDA: the compute
                                     // stream's wait for its fill); not in compute_s
  double host_wait_s = 0;            // host thread blocked waiting for disk reads
  DiskReaderStats disk;              // the reader's own counters (disk groups)
  // MoE experts in groups of their own: runs of an expert (use_expert), those of a cached or resident
  // expert (no read), and the reads into the expert cache per source tier (cpu: CUDA's pinned copies).
  uint64_t expert_uses = 0, expert_hits = 0;
  uint64_t expert_fills[3] = {0, 0, 0}, expert_bytes[3] = {0, 0, 0};
  std::vector<uint64_t> expert_counts;  // runs per manifest group (index: group; 0 for other groups)
  // Expert prefetch (StreamingOptions::expert_prefetch): reads issued for the next block's guessed
  // experts (in expert_fills/expert_bytes too), those a later call used before eviction, and those
  // evicted or dropped unused (the wasted bytes). used + wasted <= reads (the rest are still cached).
  uint64_t expert_prefetch_reads = 0, expert_prefetch_bytes = 0, expert_prefetch_used = 0;
  uint64_t expert_prefetch_wasted = 0, expert_prefetch_wasted_bytes = 0;
  uint64_t expert_prefetch_cancelled = 0;  // guesses the next call did not run, dropped before their read
                                          // started (in none of the counts above)
  DiskReaderStats expert_disk;       // the expert reader's own counters
  OffloadStats operator-(const OffloadStats& earlier) const;
};

// The WeightProvider of an offloading placement. Construct before the model, pass to
// load_model(), keep alive until the model is destroyed.
class StreamingWeights : public WeightProvider {
 public:
  ~StreamingWeights() override = default;
  virtual const Placement& placement() const = 0;
  // Counters so far; finished asynchronous work only unless synchronize() was called first.
  virtual OffloadStats stats() = 0;
  // Waits for every queued copy and read (then stats() is complete).
  virtual void synchronize() = 0;
  // What moves disk groups: "cuFile (GPUDirect Storage)", "O_DIRECT into pinned staging", ...
  virtual std::string disk_path() const = 0;
  virtual std::string device() const = 0;  // "cuda" or "cpu"
};

// A provider for `placement` (from place_groups over group_demands(container.manifest())) on
// `backend` (the CPU backend or one made by make_cuda_backend). The container and the backend
// must outlive it. Allocates the slots, the staging ring and (CUDA) pinned copies of the cpu-tier
// groups; opens the disk reader when a group is on disk.
std::unique_ptr<StreamingWeights> make_streaming_weights(const ContainerReader& container, Backend& backend,
                                                         const Placement& placement,
                                                         const StreamingOptions& options);

// ---- cost model (--plan) -----------------------------------------------------------------------------
// FlexGen's cost model reduced to the CPU device's pipeline (cost_model.cpp has the formula): a
// step is one pass over the decoder blocks for the whole batch; the reader thread's lane (disk
// reads) overlaps the compute thread's lane (staging copies, block compute, head).
struct CostInputs {
  double disk_gbps = 0;      // O_DIRECT sequential reads of the container (probe_disk_read)
  double expert_disk_gbps = 0;  // O_DIRECT reads of scattered expert groups (probe_disk_ranges); 0: disk_gbps
  double copy_gbps = 0;      // host copy bandwidth, counted as read + write bytes (measure_copy_bandwidth_gbps)
  double block_ms = 0;       // one decoder block's Linears at this batch's tokens per step (time_linears)
  uint64_t block_bytes = 0;  // that block's bytes: other blocks' compute scales with their bytes
  double head_ms = 0;        // lm_head at the batch's tokens per step
  uint32_t batch = 1;        // sequences per step (tokens generated per step)
  // MoE (0 for a dense model): each block routes every token to top_k of n_experts, assumed uniform
  // and independent across tokens (no routing counts are stored at pack time); expert_ms is one
  // expert's Linears at expert_tokens_per_run(...) tokens.
  uint32_t n_experts = 0, top_k = 0;
  double expert_ms = 0;
  // Expert prefetch (StreamingOptions::expert_prefetch) where the placement keeps a cache: a share
  // `expert_prefetch_accuracy` of each later block's reads was guessed on the previous block's input and
  // is read behind that block's reads; the wrong guesses are read too (cost_model.cpp). The share is
  // not known before running (uniform routing would make every guess a coin toss): an assumption.
  bool expert_prefetch = false;
  double expert_prefetch_accuracy = 0.9;
  // The compute threads take every core (CPU device, --threads = the cores): the expert reader thread
  // then shares them, and a block's expert compute does not hide under its reads but adds to them
  // (measured on the 2-vCPU bench VM, docs/moe.md).
  bool expert_reads_share_cpu = false;
};
struct CostPrediction {
  double read_ms = 0, copy_ms = 0, compute_ms = 0, head_ms = 0;  // per step
  double step_ms = 0;        // max(read lane, compute lane)
  double token_ms = 0;       // step_ms / batch
  uint64_t disk_bytes = 0;   // read from disk per step
  uint32_t batch = 1;
  const char* bound = "";    // "disk" or "compute": the longer lane
  // Expert groups, per step (expected values under uniform routing): runs, runs of experts placed on
  // disk, the LRU cache's hit rate among those, reads left, and their time (after each block's router:
  // not overlapped with the dense lane; included in step_ms and disk_bytes).
  double expert_runs = 0, expert_disk_runs = 0, expert_hit_rate = 0, expert_reads = 0;
  double expert_read_ms = 0, expert_compute_ms = 0, expert_ms = 0;
  double expert_wasted_reads = 0;  // of expert_reads: the wrong guesses (prefetch), per step
};
CostPrediction predict_step(const Placement& placement, const std::vector<GroupDemand>& groups, const CostInputs& in);
// The probability that a given expert of a block runs in a step of `batch` tokens, each routed to
// top_k of n_experts uniformly: 1 - (1 - top_k/n_experts)^batch.
double expert_run_probability(uint32_t n_experts, uint32_t top_k, uint32_t batch);
// The tokens one expert computes per run in such a step (batch * top_k over the experts that run),
// at least 1: the token count to time an expert's Linears at.
uint32_t expert_tokens_per_run(uint32_t n_experts, uint32_t top_k, uint32_t batch);
// Best wall time (ms) of `repeats` passes of Backend::linear over the 2-D tensors among `tensors`
// (manifest indices), prepared in place from the mapping, with x [n_tokens, in]; a first pass
// warms up (pages the weights in).
double time_linears(const ContainerReader& container, Backend& backend, const std::vector<uint32_t>& tensors,
                    size_t n_tokens, int repeats);

// ---- bandwidth probes (benchmarks, --stats) -------------------------------------------------------
// Sequential reads of [offset, offset + bytes) of `path` through a DiskReader (requests of
// `request` bytes, 2 buffers): delivered bytes per second of wall time, and the reader's mode.
struct DiskProbe {
  double gbps = 0;
  std::string mode;
  uint64_t bytes = 0;
};
DiskProbe probe_disk_read(const std::string& path, uint64_t offset, uint64_t bytes, uint64_t request,
                          bool direct = true);
// Scattered reads of the given [offset, offset + length) ranges of `path`, in the given order, all
// submitted at once into one thread's queue as the expert cache submits a block's routed experts
// (O_DIRECT): delivered bytes per second of wall time. --plan's disk rate for MoE experts (a few MB
// each, scattered over the file), which a sequential probe can overstate on a virtual disk.
DiskProbe probe_disk_ranges(const std::string& path, const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                            bool direct = true);
// True when `backend` is the CUDA backend (false in builds without CUDA).
bool is_cuda_device(const Backend& backend);
// Free memory of the CUDA backend's device (cudaMemGetInfo); nullopt for other backends.
std::optional<uint64_t> device_free_bytes(Backend& backend);
// Host-to-device copy bandwidth from pinned memory (`bytes` per copy, best of `repeats`) on the
// CUDA backend's device; nullopt when `backend` is not a CUDA backend or the build has no CUDA.
std::optional<double> probe_h2d_gbps(Backend& backend, uint64_t bytes, int repeats);

}  // namespace endor
