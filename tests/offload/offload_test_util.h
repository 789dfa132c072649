// Shared helpers of the offload tests: synthetic Llama containers with chosen tiers, placements
// with chosen tiers, and a fixed token sequence whose logits are compared bit for bit between an
// all-resident model and a streamed one.
#pragma once

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../runtime/runtime_test_util.h"
#include "endor/offload.h"
#include "endor/runtime.h"

namespace endor::offloadtest {

using test::TempDir;

// A synthetic Llama (runtime_test_util's shape with `layers` blocks, hidden 64, intermediate 256,
// vocab 64, context 64) written with each group's tier from tier_of(group name).
inline nlohmann::json synthetic_config(int layers) {
  nlohmann::json c = test::synthetic_llama_config();
  c["num_hidden_layers"] = layers;
  c["hidden_size"] = 64;
  c["intermediate_size"] = 256;
  c["max_position_embeddings"] = 64;
  return c;
}

inline void write_tiered_container(const std::string& path, const nlohmann::json& config, uint64_t seed,
                                   ValueType vt, const std::function<Tier(const std::string&)>& tier_of) {
  const std::vector<test::SyntheticTensor> tensors = test::synthetic_llama_tensors(config);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ContainerWriter w(path);
  std::string open;
  for (const test::SyntheticTensor& t : tensors) {
    if (t.group != open) {
      if (!open.empty()) w.end_group();
      w.begin_group(t.group, tier_of(t.group));
      open = t.group;
    }
    uint64_t n = 1;
    for (uint64_t d : t.shape) n *= d;
    std::vector<float> values(n);
    for (float& v : values) v = t.shape.size() == 1 ? 1.0f + 0.1f * normal(rng) : 0.1f * normal(rng);
    const bool matrix = t.shape.size() == 2;
    // Matrices of blocks: half of them bitmap-encoded (every other element zero: 2:4), so streamed
    // weights include bitmap indexes; the rest dense.
    const bool bitmap = matrix && t.group.rfind("layers.", 0) == 0 && (t.name.find("proj") != std::string::npos) &&
                        (t.name.find("q_proj") != std::string::npos || t.name.find("up_proj") != std::string::npos);
    if (bitmap)
      for (size_t i = 0; i < values.size(); i += 2) values[i] = 0.0f;
    EncodeOptions eo;
    eo.encoding = bitmap ? Encoding::Bitmap : Encoding::Dense;
    eo.value_type = t.shape.size() == 1 ? ValueType::F32 : vt;
    EncodedTensor e = encode_tensor(values.data(), t.shape, eo);
    TensorInfo info;
    info.name = t.name;
    info.shape = t.shape;
    info.encoding = eo.encoding;
    info.value_type = eo.value_type;
    info.nnz = e.layout.nnz;
    info.group_size = e.layout.group_size;
    info.source_dtype = "F32";
    w.add_tensor(info, e.bytes.data(), e.bytes.size());
  }
  if (!open.empty()) w.end_group();
  w.commit(config, nullptr, {{"tool", "offload tests"}});
}

// A placement of `container` with the tiers tier_of(group name) gives (non-block groups: their
// manifest tier), as place_groups makes from a manifest.
inline Placement placement_with(const ContainerReader& container, bool cuda, uint32_t prefetch,
                                const std::function<Tier(const std::string&)>& tier_of) {
  PlacementRequest r;
  r.groups = group_demands(container.manifest());
  for (GroupDemand& g : r.groups)
    if (g.streamable) g.manifest_tier = tier_of(g.name);
  r.prefetch = prefetch;
  r.cuda = cuda;
  return place_groups(r);
}

// The token sequence every comparison runs: a prefill of `prompt` (all logits), then `steps`
// single-token steps with fixed ids (not sampled, so both runs see the same inputs whatever the
// logits). Returns every logits row, in order.
inline std::vector<float> run_sequence(Model& model, const std::vector<int32_t>& prompt, size_t steps) {
  const uint32_t vocab = model.config().vocab;
  std::unique_ptr<KvCache> cache = model.make_cache(prompt.size() + steps);
  std::vector<float> all, logits;
  model.forward(prompt.data(), prompt.size(), *cache, true, logits);
  all.insert(all.end(), logits.begin(), logits.end());
  for (size_t s = 0; s < steps; ++s) {
    const int32_t id = int32_t((s * 7 + 3) % vocab);
    model.forward(&id, 1, *cache, false, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

inline std::vector<int32_t> prompt_ids(size_t n, uint32_t vocab) {
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = int32_t((i * 13 + 1) % vocab);
  return ids;
}

inline bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline Tier all_disk(const std::string&) { return Tier::Disk; }

}  // namespace endor::offloadtest
