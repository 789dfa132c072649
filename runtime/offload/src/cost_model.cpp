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
#include <algorithm>
#include <chrono>
#include <vector>

#include "endor/offload.h"

namespace endor {

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
  p.step_ms = std::max(p.read_ms, cpu_lane);
  p.token_ms = p.step_ms / p.batch;
  p.bound = p.read_ms >= cpu_lane ? "disk" : "compute";
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
