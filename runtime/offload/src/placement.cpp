// Tier placement: which layer group lives on the device, in pinned host memory or on disk, from
// the manifest or from run-time budgets. Pure arithmetic over sizes (no device, no file access).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <sstream>

#include "endor/expert_groups.h"
#include "endor/offload.h"

namespace endor {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kWorkspaceBytes = uint64_t(64) << 20;  // cuBLAS workspace, staging of small inputs
constexpr uint64_t kPanelCap = uint64_t(256) << 20;       // the CUDA DecodeGemm panel cap (linear.cpp)
constexpr uint32_t kMaxPrefetch = 64;

uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// Overflow-safe sum for byte counts that come from a validated manifest (each < 2^63).
uint64_t add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
uint64_t mul(uint64_t a, uint64_t b) { return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b; }

}  // namespace

std::vector<GroupDemand> group_demands(const Manifest& m) {
  std::vector<GroupDemand> out;
  out.reserve(m.groups.size());
  for (const GroupInfo& g : m.groups) {
    GroupDemand d;
    d.name = g.name;
    d.bytes = g.size;
    d.manifest_tier = g.tier;
    const GroupName kind = parse_group_name(g.name);
    d.streamable = kind.kind == GroupName::Kind::Block;
    d.expert = kind.kind == GroupName::Kind::Expert;
    d.layer = kind.layer;
    d.expert_index = kind.expert;
    d.loaded = !g.tensors.empty();
    for (uint32_t t : g.tensors) {
      const TensorInfo& info = m.tensors[t];
      if (info.shape.size() == 1) d.resident_bytes = add(d.resident_bytes, mul(info.numel(), 4));
    }
    out.push_back(std::move(d));
  }
  return out;
}

uint64_t device_fixed_bytes(const ModelConfig& c, const Manifest& m, size_t kv_capacity, size_t max_tokens,
                            bool cuda) {
  const uint64_t H = c.hidden, I = std::max(c.intermediate, c.moe_intermediate), V = c.vocab;
  const uint64_t q_dim = uint64_t(c.n_heads) * c.head_dim, kv_dim = uint64_t(c.n_kv_heads) * c.head_dim;
  const uint64_t T = std::max<uint64_t>(max_tokens, 1);
  // The f32 size whatever --kv-dtype says: the CUDA backend keeps f32 caches, and on the CPU device
  // it bounds an f16 cache too (host_kv_bytes carries the exact size there).
  const uint64_t kv = kv_cache_bytes(c.n_layers, std::max<uint64_t>(kv_capacity, 1), kv_dim, KvDtype::F32);
  // Scratch of both architectures (runtime/models): residual, normed, q, attention, projection,
  // three MLP-wide buffers, logits, block keys/values, Qwen3's k before its norm and OPT's
  // word-embedding width, an MoE block's router logits and an expert's gathered input and output rows,
  // all f32.
  const uint64_t moe = c.moe() ? c.n_experts + 2 * H : 0;
  const uint64_t per_token = 4 * H + 2 * q_dim + 3 * I + V + (c.qk_norm ? 3 : 2) * kv_dim + c.word_embed_dim + moe;
  uint64_t fixed = add(kv, mul(mul(T, per_token), 4));
  if (cuda) {
    fixed = add(fixed, kWorkspaceBytes);
    if (T > 8) {  // the DecodeGemm path (linear.cpp): activations converted for cuBLAS + a decoded panel
      uint64_t max_cols = 0, panel = 0;
      for (const TensorInfo& t : m.tensors) {
        if (t.shape.size() != 2) continue;
        max_cols = std::max(max_cols, t.shape[1]);
        const bool in_place = t.encoding == Encoding::Dense &&
                              (t.value_type == ValueType::F16 || t.value_type == ValueType::BF16 ||
                               t.value_type == ValueType::F32);
        if (!in_place)
          panel = std::max(panel, mul(mul(t.shape[0], t.shape[1]), t.value_type == ValueType::F32 ? 4 : 2));
      }
      fixed = add(fixed, add(mul(mul(T, max_cols), 4), std::min(panel, kPanelCap)));
    }
  }
  return fixed;
}

namespace {

// What the device must hold whatever the budgets, and the sizes of the decoder blocks that may stream.
struct Demand {
  uint64_t must = 0;         // fixed needs, every loaded group's 1-D tensors, the non-streamable groups
  uint64_t must_groups = 0;  // the non-streamable groups (embed, head) alone
  uint64_t layers_total = 0, max_layer = 0;  // streamable groups: their sum and the largest
  uint64_t experts_total = 0, max_expert = 0;  // expert groups: their sum and the largest
};

Demand total_demand(const PlacementRequest& r) {
  Demand d;
  d.must = r.device_fixed_bytes;
  for (const GroupDemand& g : r.groups) {
    if (!g.loaded) continue;
    d.must = add(d.must, g.resident_bytes);
    if (g.streamable) {
      d.layers_total = add(d.layers_total, g.bytes);
      d.max_layer = std::max(d.max_layer, g.bytes);
    } else if (g.expert) {
      d.experts_total = add(d.experts_total, g.bytes);
      d.max_expert = std::max(d.max_expert, g.bytes);
    } else {
      d.must_groups = add(d.must_groups, g.bytes);
    }
  }
  d.must = add(d.must, d.must_groups);
  return d;
}

// No budget: the manifest's tiers, with embed, head and gpu-tier blocks resident on this device.
void place_from_manifest(const PlacementRequest& r, Placement& p) {
  const Tier fast = r.cuda ? Tier::Gpu : Tier::Cpu;  // where resident groups live on this device
  p.from_manifest = true;
  for (size_t i = 0; i < r.groups.size(); ++i) {
    const GroupDemand& g = r.groups[i];
    if (!g.loaded) continue;
    if ((!g.streamable && !g.expert) || g.manifest_tier == Tier::Gpu) p.tiers[i] = fast;
    else if (!r.cuda && g.manifest_tier == Tier::Cpu) p.tiers[i] = Tier::Cpu;
  }
}

// Streamable groups (experts: expert groups) placed at `from`, in order, stay there while `room` lasts
// (what they take is taken from it); from the first that does not fit on, they (and every later one)
// go to `to`. Returns the bytes moved to `to`.
uint64_t spill(const PlacementRequest& r, Placement& p, Tier from, uint64_t& room, Tier to, bool experts = false) {
  bool spilled = false;
  uint64_t moved = 0;
  for (size_t i = 0; i < r.groups.size(); ++i) {
    const GroupDemand& g = r.groups[i];
    if (p.tiers[i] != from || !g.loaded || (experts ? !g.expert : !g.streamable)) continue;
    if (!spilled && g.bytes <= room) {
      room -= g.bytes;
      continue;
    }
    spilled = true;
    p.tiers[i] = to;
    moved = add(moved, g.bytes);
  }
  return moved;
}

uint64_t expert_slot_size(const Demand& d) { return round_up(add(d.max_expert, 16), kPage); }

// Expert groups at `from` after the blocks took their share of `room`: all stay when they fit; else the
// expert cache (PlacementRequest::expert_cache) is taken from the room, the experts fill the rest in
// execution order and the others go to `to`, read into the cache when routed to.
void place_experts(const PlacementRequest& r, const Demand& d, Placement& p, Tier from, uint64_t room, Tier to) {
  uint64_t at_from = 0;
  for (size_t i = 0; i < r.groups.size(); ++i)
    if (r.groups[i].loaded && r.groups[i].expert && p.tiers[i] == from) at_from = add(at_from, r.groups[i].bytes);
  if (at_from <= room) return;
  const uint64_t slot = expert_slot_size(d);
  const uint64_t cache = r.expert_cache ? std::min(*r.expert_cache, room) : room / 2;
  p.expert_cache = !(r.expert_cache && *r.expert_cache == 0);
  p.expert_slots = uint32_t(std::min<uint64_t>(std::max<uint64_t>(r.expert_min_slots, cache / slot), UINT32_MAX));
  p.expert_slot_bytes = slot;
  room -= std::min(room, mul(p.expert_slots, slot));
  spill(r, p, from, room, to, true);
}

// The CUDA device under --gpu-mem (or the device's free memory) and --cpu-mem: everything on the GPU when
// it fits; else k + 1 slots are reserved and the blocks past the budget go to pinned host memory, and past
// --cpu-mem to disk.
void place_cuda_budget(const PlacementRequest& r, const Demand& d, uint32_t n_slots, uint64_t slot_size,
                       Placement& p) {
  const std::optional<uint64_t> gpu = r.gpu_budget ? r.gpu_budget : r.device_capacity;
  const std::string budget = r.gpu_budget ? "--gpu-mem " + format_bytes(*r.gpu_budget)
                                          : "the device's free memory (" + format_bytes(gpu ? *gpu : 0) + ")";
  if (gpu && d.must > *gpu)
    throw Error(budget + " is too small: the embed and head groups (" + format_bytes(d.must_groups) +
                ") plus KV cache, activations and norms (" + format_bytes(d.must - d.must_groups) +
                ") need at least " + format_bytes(d.must));
  for (size_t i = 0; i < r.groups.size(); ++i)
    if (r.groups[i].loaded) p.tiers[i] = Tier::Gpu;
  if (!gpu || add(add(d.must, d.layers_total), d.experts_total) <= *gpu) return;
  // The block ring only when the blocks themselves do not fit (with the experts' smallest cache).
  const bool blocks_fit =
      d.experts_total > 0 && add(add(d.must, d.layers_total), mul(r.expert_min_slots, expert_slot_size(d))) <= *gpu;
  const uint64_t ring = blocks_fit ? 0 : mul(n_slots, slot_size);
  if (add(d.must, ring) > *gpu)
    throw Error(budget + " is too small to stream: the embed and head groups, KV cache and activations (" +
                format_bytes(d.must) + ") plus " + std::to_string(n_slots) + " slots of " + format_bytes(slot_size) +
                " (--prefetch " + std::to_string(r.prefetch) + ") need at least " + format_bytes(add(d.must, ring)));
  uint64_t room = *gpu - d.must - ring;
  const uint64_t off_gpu = spill(r, p, Tier::Gpu, room, Tier::Cpu);
  place_experts(r, d, p, Tier::Gpu, room, Tier::Cpu);
  // --cpu-mem bounds the pinned copies of cpu-tier blocks and experts (the staging ring is extra, as
  // in endor-pack's plan); the blocks past it, then the experts past it, are read from disk.
  if (!r.cpu_budget) return;
  uint64_t cpu_room = *r.cpu_budget;
  if (off_gpu > 0) spill(r, p, Tier::Cpu, cpu_room, Tier::Disk);
  spill(r, p, Tier::Cpu, cpu_room, Tier::Disk, true);
}

// CPU device: --cpu-mem bounds the KV caches and the decoder blocks read in place from the
// mapping (the KV caches first: they are always in memory, as are embed, head and
// activations; the host slots and the staging ring are extra); the blocks past it are read
// from disk into the slots.
void place_cpu_budget(const PlacementRequest& r, const Demand& d, Placement& p) {
  for (size_t i = 0; i < r.groups.size(); ++i)
    if (r.groups[i].loaded) p.tiers[i] = Tier::Cpu;
  uint64_t room = *r.cpu_budget > r.host_kv_bytes ? *r.cpu_budget - r.host_kv_bytes : 0;
  spill(r, p, Tier::Cpu, room, Tier::Disk);
  place_experts(r, d, p, Tier::Cpu, room, Tier::Disk);
}

// Totals and rings of the final tiers, and what the device and pinned host memory hold in all (refused
// when the manifest's own tiers do not fit the device).
void account_placement(const PlacementRequest& r, uint32_t n_slots, uint32_t n_staging, Placement& p) {
  uint64_t max_streamed = 0, max_disk = 0, cpu_pinned = 0, max_expert = 0;
  for (size_t i = 0; i < r.groups.size(); ++i) {
    const GroupDemand& g = r.groups[i];
    if (!g.loaded) continue;
    const Tier t = p.tiers[i];
    p.tier_bytes[int(t)] = add(p.tier_bytes[int(t)], g.bytes);
    p.tier_groups[int(t)] += 1;
    const bool streamed = r.cuda ? t != Tier::Gpu : t == Tier::Disk;
    if (g.expert) {
      p.expert_groups += 1;
      p.resident_experts += !streamed;
      if (streamed) max_expert = std::max(max_expert, g.bytes);
    }
    if (streamed && !g.expert) max_streamed = std::max(max_streamed, g.bytes);
    if (t == Tier::Disk) max_disk = std::max(max_disk, g.bytes);
    if (r.cuda && t == Tier::Cpu) cpu_pinned = add(cpu_pinned, g.bytes);
  }
  if (max_streamed > 0) {
    p.n_slots = n_slots;
    p.slot_bytes = round_up(add(max_streamed, 16), kPage);
  }
  if (max_disk > 0) {
    p.n_staging = n_staging;
    p.staging_bytes = round_up(max_disk, kPage) + 2 * kPage;
  }
  if (max_expert == 0) {
    p.expert_slots = 0;  // every expert resident: nothing to cache
  } else if (p.expert_slots == 0) {  // the manifest's tiers: a cache of --expert-cache (default: the fewest slots)
    p.expert_slot_bytes = round_up(add(max_expert, 16), kPage);
    p.expert_cache = !(r.expert_cache && *r.expert_cache == 0);
    const uint64_t asked = r.expert_cache ? *r.expert_cache / p.expert_slot_bytes : 0;
    p.expert_slots = uint32_t(std::min<uint64_t>(std::max<uint64_t>(r.expert_min_slots, asked), UINT32_MAX));
  }
  const uint64_t slots = add(mul(p.n_slots, p.slot_bytes), mul(p.expert_slots, p.expert_slot_bytes));
  const uint64_t staging = mul(p.n_staging, p.staging_bytes);
  p.host_kv_bytes = r.cuda ? 0 : r.host_kv_bytes;
  const Tier resident = r.cuda ? Tier::Gpu : Tier::Cpu;
  p.device_bytes = add(add(r.device_fixed_bytes, p.tier_bytes[int(resident)]), r.cuda ? slots : add(slots, staging));
  for (const GroupDemand& g : r.groups)
    if (g.loaded) p.device_bytes = add(p.device_bytes, g.resident_bytes);
  p.host_pinned_bytes = r.cuda ? add(cpu_pinned, staging) : 0;
  if (r.cuda && p.from_manifest && r.device_capacity && p.device_bytes > *r.device_capacity)
    throw Error("the container's manifest places " + format_bytes(p.device_bytes) +
                " on the GPU (with KV cache and activations), more than the " + format_bytes(*r.device_capacity) +
                " the device has free; give --gpu-mem to offload blocks to host memory");
}

}  // namespace

Placement place_groups(const PlacementRequest& r) {
  if (r.prefetch < 1 || r.prefetch > kMaxPrefetch)
    throw Error("--prefetch " + std::to_string(r.prefetch) + " is outside [1, " + std::to_string(kMaxPrefetch) + "]");
  if (!r.cuda && r.gpu_budget) throw Error("--gpu-mem applies to the CUDA device only (this run uses the CPU)");
  Placement p;
  p.cuda = r.cuda;
  p.tiers.reserve(r.groups.size());
  for (const GroupDemand& g : r.groups) p.tiers.push_back(g.manifest_tier);
  const uint32_t n_slots = r.prefetch + 1;
  const uint32_t n_staging = std::max<uint32_t>(2, r.prefetch);
  const Demand d = total_demand(r);
  if (!r.gpu_budget && !r.cpu_budget)
    place_from_manifest(r, p);
  else if (r.cuda)
    place_cuda_budget(r, d, n_slots, round_up(add(d.max_layer, 16), kPage), p);
  else
    place_cpu_budget(r, d, p);
  account_placement(r, n_slots, n_staging, p);
  return p;
}

std::string describe_placement(const Placement& p) {
  std::ostringstream s;
  const bool cuda = p.cuda;
  s << "placement (" << (p.from_manifest ? "the container's manifest" : "--gpu-mem/--cpu-mem budgets") << "):\n";
  const char* what[3] = {"resident on the device, compressed", cuda ? "pinned host memory" : "read in place (mapping)",
                         "read from disk"};
  for (int t = 0; t < 3; ++t) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-5s %4u groups %12s  (%s)\n", to_string(Tier(t)), p.tier_groups[t],
                  format_bytes(p.tier_bytes[t]).c_str(), what[t]);
    s << line;
  }
  if (p.streams())
    s << "  slots: " << p.n_slots << " x " << format_bytes(p.slot_bytes) << (cuda ? " on the device" : " in host memory")
      << "\n";
  if (p.expert_slots > 0)
    s << "  experts: " << p.resident_experts << " of " << p.expert_groups << " resident; cache " << p.expert_slots << " x "
      << format_bytes(p.expert_slot_bytes) << (p.expert_cache ? " (LRU)" : " (off: read every time)") << "\n";
  if (p.n_staging > 0) s << "  disk staging: " << p.n_staging << " x " << format_bytes(p.staging_bytes) << "\n";
  if (p.host_kv_bytes > 0) s << "  kv cache: " << format_bytes(p.host_kv_bytes) << " (within --cpu-mem, before blocks)\n";
  s << "  " << (cuda ? "device" : "host") << " total " << format_bytes(p.device_bytes);
  if (cuda) s << ", pinned host " << format_bytes(p.host_pinned_bytes);
  s << "\n";
  return s.str();
}

std::optional<DiskIo> parse_disk_io(const std::string& text) {
  if (text == "auto") return DiskIo::Auto;
  if (text == "direct") return DiskIo::Direct;
  if (text == "buffered") return DiskIo::Buffered;
  if (text == "cufile") return DiskIo::CuFile;
  return std::nullopt;
}

OffloadStats OffloadStats::operator-(const OffloadStats& e) const {
  OffloadStats d = *this;
  d.blocks -= e.blocks;
  for (int t = 0; t < 3; ++t) {
    d.fills[t] -= e.fills[t];
    d.bytes[t] -= e.bytes[t];
  }
  d.copy_s -= e.copy_s;
  d.copy_bytes -= e.copy_bytes;
  d.compute_s -= e.compute_s;
  d.stall_s -= e.stall_s;
  d.expert_stall_s -= e.expert_stall_s;
  d.host_wait_s -= e.host_wait_s;
  d.disk -= e.disk;
  d.expert_uses -= e.expert_uses;
  d.expert_hits -= e.expert_hits;
  for (int t = 0; t < 3; ++t) {
    d.expert_fills[t] -= e.expert_fills[t];
    d.expert_bytes[t] -= e.expert_bytes[t];
  }
  d.expert_prefetch_reads -= e.expert_prefetch_reads;
  d.expert_prefetch_bytes -= e.expert_prefetch_bytes;
  d.expert_prefetch_used -= e.expert_prefetch_used;
  d.expert_prefetch_wasted -= e.expert_prefetch_wasted;
  d.expert_prefetch_wasted_bytes -= e.expert_prefetch_wasted_bytes;
  d.expert_prefetch_cancelled -= e.expert_prefetch_cancelled;
  for (size_t g = 0; g < d.expert_counts.size() && g < e.expert_counts.size(); ++g) d.expert_counts[g] -= e.expert_counts[g];
  d.expert_disk -= e.expert_disk;
  return d;
}

}  // namespace endor
