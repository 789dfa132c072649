// The --plan cost model: per-step time of a placement from measured bandwidths and kernel times.
//
// FlexGen's model, reduced to this runtime's one pipeline on the CPU device. A step is one pass
// over the decoder blocks for every sequence of the batch. A disk block costs the reader thread
// its read (bytes / disk bandwidth) and the compute thread the copy out of the staging buffer
// (2 · bytes / copy bandwidth: read + write) plus the block's compute; the reader runs ahead
// (prefetch), also across the wrap from the last block to the next step's first, so in steady
// state the step takes the longer of the two lanes (the CPU device reads into its slots: no copy):
//   step = max(Σ_disk read_b, Σ_disk (copy_b + compute_b) + Σ_in-place compute_b + head).
// Block compute scales with the block's bytes from the block measured (all blocks of a container
// share shapes and codec); attention and norms are left out (short contexts).
//
// MoE experts in groups of their own (layers.N.experts.E) are not in those lanes: a block's router
// decides them, so their reads start after the dense part of the block and overlap only the
// block's own expert compute. Under uniform routing each expert of a block runs in a step with
// probability q = 1 - (1 - k/E)^batch; a resident expert is computed in place; a disk expert is
// found in the LRU cache with probability h = slots / (experts on disk) (an LRU of C slots over N
// equally likely items holds the requested one with probability C/N), else read at the rate of
// scattered expert-sized reads (expert_disk_gbps). The reads of a block are queued at once after its
// router and each expert computes as soon as its own bytes are in (the cache's slot()), so per block
//   t_block = max(reads_b / disk, runs_b · expert_ms) + min(one read, expert_ms)
// (the first read has nothing to overlap), and step = max(read lane, compute lane) + Σ_blocks t_block.
// With expert prefetch (a share a of each later block's reads guessed and queued behind the previous
// block's reads, the 1 - a wrong guesses read as well), the disk no longer waits for each router: from
// the first block's router on it reads every later block's experts back to back while the later
// blocks' dense parts and experts compute. Then
//   experts = t_block(first) + max(Σ_later reads_b · (2 - a) / disk, Σ_later (runs_b · expert_ms)
//             + dense_later) - dense_later + min(one read, expert_ms)
// where dense_later is the later blocks' share of the dense compute (it was in the compute lane and
// is now hidden under the reads where the disk bounds). A batch changes only q (the union of its
// tokens' experts: n_experts · q distinct experts a block) and the tokens per expert run. Where the
// compute threads take every core (expert_reads_share_cpu), the reader thread competes with them and
// the expert compute adds to the reads instead of hiding under them: t_block = reads_b / disk +
// runs_b · expert_ms, and the later blocks' reads under prefetch take their compute along.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <vector>

#include "endor/offload.h"

namespace endor {

double expert_run_probability(uint32_t n_experts, uint32_t top_k, uint32_t batch) {
  if (n_experts == 0) return 0;
  const double p = std::min(1.0, double(top_k) / double(n_experts));
  return 1.0 - std::pow(1.0 - p, double(std::max<uint32_t>(batch, 1)));
}

uint32_t expert_tokens_per_run(uint32_t n_experts, uint32_t top_k, uint32_t batch) {
  const double runs = double(n_experts) * expert_run_probability(n_experts, top_k, batch);
  if (runs <= 0) return 1;
  return std::max<uint32_t>(1, uint32_t(std::lround(double(std::max<uint32_t>(batch, 1)) * top_k / runs)));
}

namespace {

// The expert groups' share of a step (see the header comment); fills p's expert_* fields.
void predict_experts(const Placement& placement, const std::vector<GroupDemand>& groups, const CostInputs& in,
                     CostPrediction& p) {
  const double q = expert_run_probability(in.n_experts, in.top_k, p.batch);
  const Tier fast = placement.cuda ? Tier::Gpu : Tier::Cpu;
  uint64_t on_disk = 0;
  for (size_t g = 0; g < groups.size() && g < placement.tiers.size(); ++g)
    if (groups[g].loaded && groups[g].expert && placement.tiers[g] != fast) ++on_disk;
  const double h = placement.expert_cache && on_disk > 0
                       ? std::min(1.0, double(placement.expert_slots) / double(on_disk)) : 0.0;
  p.expert_hit_rate = h;
  struct Block {
    double runs = 0, reads = 0, read_ms = 0, one_read_ms = 0, bytes = 0;
  };
  std::map<uint32_t, Block> blocks;
  double disk_bytes = 0;
  for (size_t g = 0; g < groups.size() && g < placement.tiers.size(); ++g) {
    const GroupDemand& d = groups[g];
    if (!d.loaded || !d.expert) continue;
    Block& b = blocks[d.layer];
    b.runs += q;
    if (placement.tiers[g] == fast) continue;
    p.expert_disk_runs += q;
    const double rate = in.expert_disk_gbps > 0 ? in.expert_disk_gbps : in.disk_gbps;
    const double one = rate > 0 ? double(d.bytes) / (rate * 1e6) : 0;
    b.reads += q * (1 - h);
    b.read_ms += q * (1 - h) * one;
    b.one_read_ms = std::max(b.one_read_ms, one);
    b.bytes += q * (1 - h) * double(d.bytes);
    disk_bytes += q * (1 - h) * double(d.bytes);
  }
  // Prefetch needs a cache that keeps reads past a call, and at least two blocks.
  const bool prefetch = in.expert_prefetch && placement.expert_cache && blocks.size() > 1;
  const double a = std::clamp(in.expert_prefetch_accuracy, 0.0, 1.0);
  double later_reads = 0, later_read_ms = 0, later_compute = 0, later_first = 0, later_bytes = 0;
  bool first = true;
  for (const auto& [layer, b] : blocks) {
    const double compute = b.runs * in.expert_ms;
    const double first_read = b.reads > 0 ? std::min(b.one_read_ms, in.expert_ms) : 0;
    p.expert_runs += b.runs;
    p.expert_reads += b.reads;
    p.expert_read_ms += b.read_ms;
    p.expert_compute_ms += compute;
    if (!prefetch || first) {
      p.expert_ms += in.expert_reads_share_cpu ? b.read_ms + compute : std::max(b.read_ms, compute) + first_read;
    } else {
      later_reads += b.reads;
      later_read_ms += b.read_ms;
      later_bytes += b.bytes;
      later_compute += compute;
      later_first = std::max(later_first, first_read);
    }
    first = false;
  }
  if (prefetch) {
    const double wrong = (1 - a) * later_reads;  // the wrong guesses, read as well
    const double dense_later = p.compute_ms * double(blocks.size() - 1) / double(blocks.size());
    const double reads_ms = later_read_ms * (2 - a) + (in.expert_reads_share_cpu ? later_compute : 0);
    p.expert_wasted_reads = wrong;
    p.expert_reads += wrong;
    p.expert_read_ms += later_read_ms * (1 - a);
    p.expert_ms += std::max(reads_ms, later_compute + dense_later) - dense_later + later_first;
    disk_bytes += (1 - a) * later_bytes;
  }
  p.disk_bytes += uint64_t(std::llround(disk_bytes));
}

}  // namespace

CostPrediction predict_step(const Placement& placement, const std::vector<GroupDemand>& groups,
                            const CostInputs& in) {
  CostPrediction p;
  p.batch = std::max<uint32_t>(1, in.batch);
  const double per_byte_ms = in.block_bytes > 0 ? in.block_ms / double(in.block_bytes) : 0;
  double cpu_lane = 0;
  for (size_t g = 0; g < groups.size() && g < placement.tiers.size(); ++g) {
    const GroupDemand& d = groups[g];
    if (!d.loaded || !d.streamable) continue;
    const double compute = per_byte_ms * double(d.bytes);
    p.compute_ms += compute;
    if (placement.tiers[g] == Tier::Disk) {
      p.read_ms += in.disk_gbps > 0 ? double(d.bytes) / (in.disk_gbps * 1e6) : 0;
      // The CPU device reads straight into its slots; CUDA copies from staging (not modelled
      // further here: --plan is the CPU device's).
      if (placement.cuda) p.copy_ms += in.copy_gbps > 0 ? 2.0 * double(d.bytes) / (in.copy_gbps * 1e6) : 0;
      p.disk_bytes += d.bytes;
    }
  }
  p.head_ms = in.head_ms;
  cpu_lane = p.compute_ms + p.copy_ms + p.head_ms;
  predict_experts(placement, groups, in, p);
  p.step_ms = std::max(p.read_ms, cpu_lane) + p.expert_ms;
  p.token_ms = p.step_ms / p.batch;
  p.bound = p.read_ms + p.expert_read_ms >= cpu_lane + p.expert_compute_ms ? "disk" : "compute";
  return p;
}

double time_linears(const ContainerReader& container, Backend& backend, const std::vector<uint32_t>& tensors,
                    size_t n_tokens, int repeats) {
  const Manifest& m = container.manifest();
  struct Item {
    std::unique_ptr<Weight> w;
    float* y = nullptr;
  };
  std::vector<Item> items;
  uint64_t max_in = 0;
  for (uint32_t t : tensors) {
    const TensorInfo& info = m.tensors.at(t);
    if (info.shape.size() != 2) continue;
    Item it;
    it.w = backend.prepare_weight(container.tensor(info));
    it.y = backend.alloc(n_tokens * it.w->out_features());
    max_in = std::max<uint64_t>(max_in, it.w->in_features());
    items.push_back(std::move(it));
  }
  if (items.empty()) return 0;
  std::vector<float> host(n_tokens * max_in);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  float* x = backend.alloc(host.size());
  backend.upload(x, host.data(), host.size());
  double best = 0;
  for (int r = 0; r <= std::max(1, repeats); ++r) {  // r = 0 warms up (first touch of the mapping)
    const auto t0 = std::chrono::steady_clock::now();
    for (Item& it : items) backend.linear(*it.w, x, n_tokens, nullptr, it.y);
    backend.synchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r == 1 || (r > 1 && ms < best)) best = ms;
  }
  backend.free(x);
  for (Item& it : items) backend.free(it.y);
  return best;
}

}  // namespace endor
