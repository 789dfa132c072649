// MoE experts in groups of their own (issue 39): placement puts the blocks' dense parts first and the
// experts after them; experts on the disk tier are read (O_DIRECT) into the expert cache only when
// routed to, and the logits equal the all-resident model's bit for bit, with the cache on or off.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>

#include "endor/expert_groups.h"
#include "offload_test_util.h"

using namespace endor;
using namespace endor::offloadtest;

namespace {

struct MoeRun {
  std::vector<float> logits;
  OffloadStats stats;
};

// Greedy decoding: the prompt, then `steps` tokens, each the previous step's argmax; every step's logits.
std::vector<float> run_greedy(Model& model, const std::vector<int32_t>& prompt, size_t steps,
                              std::vector<int32_t>& ids) {
  const uint32_t V = model.config().vocab;
  std::unique_ptr<KvCache> cache = model.make_cache(prompt.size() + steps + 1);
  std::vector<float> all, logits;
  model.forward(prompt.data(), prompt.size(), *cache, true, logits);
  for (size_t s = 0;; ++s) {
    all.insert(all.end(), logits.begin(), logits.end());
    const float* last = logits.data() + logits.size() - V;
    ids.push_back(int32_t(std::max_element(last, last + V) - last));
    if (s == steps) break;
    model.forward(&ids.back(), 1, *cache, false, logits);
  }
  return all;
}

MoeRun run_moe(const ContainerReader& c, const Placement* p, const std::vector<int32_t>& prompt, size_t steps,
               bool expert_prefetch = true, std::vector<int32_t>* greedy_ids = nullptr) {
  auto backend = make_cpu_backend(1);
  std::unique_ptr<StreamingWeights> weights;
  if (p) {
    StreamingOptions o;
    o.prefetch = 1;
    o.expert_prefetch = expert_prefetch;
    weights = make_streaming_weights(c, *backend, *p, o);
  }
  MoeRun r;
  {
    auto model = load_model(c, *backend, weights.get());
    r.logits = greedy_ids ? run_greedy(*model, prompt, steps, *greedy_ids) : run_sequence(*model, prompt, steps);
  }
  if (weights) {
    weights->synchronize();
    r.stats = weights->stats();
  }
  return r;
}

// Every block's dense part read in place, every expert on disk (tiers given as a manifest's), with an
// expert cache of `cache` bytes.
Placement experts_on_disk(const ContainerReader& c, uint64_t cache) {
  PlacementRequest r;
  r.groups = group_demands(c.manifest());
  for (GroupDemand& g : r.groups) g.manifest_tier = g.expert ? Tier::Disk : Tier::Cpu;
  r.cuda = false;
  r.prefetch = 1;
  r.expert_cache = cache;
  return place_groups(r);
}

uint64_t sum_of(const std::vector<uint64_t>& v) { return std::accumulate(v.begin(), v.end(), uint64_t(0)); }

// Steps of forward_batch over `prompts` together: the first prefills every prompt (one range of rows
// each), the next ones decode one token each, its greedy id; per step the last rows' logits and the
// provider's counters of that step.
struct BatchTrace {
  std::vector<std::vector<float>> logits;  // per step: [prompts, vocab]
  std::vector<OffloadStats> stats;         // per step
};

BatchTrace run_steps(Model& model, StreamingWeights& weights, const std::vector<std::vector<int32_t>>& prompts,
                     size_t steps) {
  const size_t V = model.config().vocab;
  std::vector<std::unique_ptr<KvCache>> caches;
  for (const auto& p : prompts) caches.push_back(model.make_cache(p.size() + steps));
  std::vector<int32_t> last(prompts.size());
  BatchTrace t;
  for (size_t s = 0; s < steps; ++s) {
    std::vector<Model::SequenceStep> batch;
    for (size_t k = 0; k < prompts.size(); ++k)
      batch.push_back(s == 0 ? Model::SequenceStep{prompts[k].data(), prompts[k].size(), caches[k].get()}
                             : Model::SequenceStep{&last[k], 1, caches[k].get()});
    weights.synchronize();
    const OffloadStats before = weights.stats();
    std::vector<float> logits;
    model.forward_batch(batch.data(), batch.size(), logits);
    weights.synchronize();
    t.stats.push_back(weights.stats() - before);
    for (size_t k = 0; k < prompts.size(); ++k) {
      const float* row = logits.data() + k * V;
      last[k] = int32_t(std::max_element(row, row + V) - row);
    }
    t.logits.push_back(std::move(logits));
  }
  return t;
}

BatchTrace run_steps_on_disk(const ContainerReader& c, const Placement& p,
                             const std::vector<std::vector<int32_t>>& prompts, size_t steps) {
  auto backend = make_cpu_backend(1);
  StreamingOptions o;
  o.prefetch = 1;
  auto weights = make_streaming_weights(c, *backend, p, o);
  auto model = load_model(c, *backend, weights.get());
  return run_steps(*model, *weights, prompts, steps);
}

// The expert groups one step ran (expert_counts > 0).
std::set<uint32_t> experts_run(const OffloadStats& s) {
  std::set<uint32_t> g;
  for (size_t i = 0; i < s.expert_counts.size(); ++i)
    if (s.expert_counts[i] > 0) g.insert(uint32_t(i));
  return g;
}

// `fixture` packed at int4 @ 50 % into `dir` and opened.
std::unique_ptr<ContainerReader> pack_int4_50(const TempDir& dir, const std::string& fixture) {
  const std::string path = dir.file(fixture + ".endor");
  REQUIRE(test::run_command(test::endor_pack() + " prune " + test::fixture_dir(fixture) + " -o " + path +
                            " --sparsity 0.5 --quant int4 >/dev/null 2>&1") == 0);
  return ContainerReader::open(path);
}

}  // namespace

TEST_CASE("experts: the packer gives each expert a group of its own, after its block's dense part") {
  TempDir dir;
  const std::string path = dir.file("q.endor");
  REQUIRE(test::run_command(test::endor_pack() + " convert " + test::fixture_dir("qwen3-moe-tiny") + " -o " + path +
                            " >/dev/null 2>&1") == 0);
  auto c = ContainerReader::open(path);
  const Manifest& m = c->manifest();
  const ModelConfig cfg = parse_model_config(m.config, path);
  std::vector<std::string> names;
  for (const GroupInfo& g : m.groups) names.push_back(g.name);
  REQUIRE(names.size() == 3 + cfg.n_layers * (1 + cfg.n_experts));  // embed, blocks + experts, head, files
  CHECK(names[1] == "layers.0");
  CHECK(names[2] == "layers.0.experts.0");
  CHECK(names[1 + cfg.n_experts] == "layers.0.experts." + std::to_string(cfg.n_experts - 1));
  for (const GroupInfo& g : m.groups) {
    const GroupName kind = parse_group_name(g.name);
    for (uint32_t t : g.tensors) {
      const std::string& name = m.tensors[t].name;
      if (kind.kind == GroupName::Kind::Expert)
        CHECK(name.find(".experts." + std::to_string(kind.expert) + ".") != std::string::npos);
      else
        CHECK(name.find(".experts.") == std::string::npos);
    }
  }
  CHECK(parse_group_name("layers.12.experts.3").kind == GroupName::Kind::Expert);
  CHECK(parse_group_name("layers.12").kind == GroupName::Kind::Block);
  CHECK(parse_group_name("layers.x").kind == GroupName::Kind::Other);
  CHECK(parse_group_name("layers.1.experts.").kind == GroupName::Kind::Other);
  CHECK(parse_group_name("layers.1.experts.2.x").kind == GroupName::Kind::Other);
  CHECK(expert_of_tensor("model.layers.3.block_sparse_moe.experts.12.w3.weight") == 12);
  CHECK(expert_of_tensor("model.layers.3.mlp.gate.weight") == -1);
}

TEST_CASE("experts: a budget keeps every block's dense part first, then the cache, then experts in order") {
  PlacementRequest r;
  r.cuda = false;
  r.prefetch = 1;
  auto add = [&](const std::string& name, uint64_t bytes) {
    GroupDemand d;
    d.name = name;
    d.bytes = bytes;
    d.manifest_tier = Tier::Cpu;
    const GroupName k = parse_group_name(name);
    d.streamable = k.kind == GroupName::Kind::Block;
    d.expert = k.kind == GroupName::Kind::Expert;
    r.groups.push_back(d);
  };
  add("embed", 1000);
  for (int l = 0; l < 2; ++l) {
    add("layers." + std::to_string(l), 10000);
    for (int e = 0; e < 4; ++e) add("layers." + std::to_string(l) + ".experts." + std::to_string(e), 5000);
  }
  add("head", 1000);
  // 20000 for both dense parts, then one 8192-byte cache slot pair (2 x 8192) and 1 expert of 5000.
  r.cpu_budget = 20000 + 2 * 8192 + 5000;
  r.expert_cache = 2 * 8192;
  Placement p = place_groups(r);
  CHECK(p.tiers[1] == Tier::Cpu);
  CHECK(p.tiers[6] == Tier::Cpu);                         // layers.1's dense part before any expert
  CHECK(p.tiers[2] == Tier::Cpu);                         // layers.0.experts.0: the one expert that fits
  for (size_t i : {3, 4, 5, 7, 8, 9, 10}) CHECK(p.tiers[i] == Tier::Disk);
  CHECK(p.expert_slots == 2);
  CHECK(p.expert_slot_bytes == 8192);
  CHECK(p.expert_groups == 8);
  CHECK(p.resident_experts == 1);
  CHECK(p.expert_cache);
  // 0: the cache is off, but its two slots (one reads while one computes) still come out of the budget.
  r.expert_cache = 0;
  p = place_groups(r);
  CHECK_FALSE(p.expert_cache);
  CHECK(p.expert_slots == 2);
  CHECK(p.resident_experts == 1);
  // Without --expert-cache: half of what the blocks leave (here 2 slots of 8192 from 39000; the
  // remaining 22616 hold 4 experts in place).
  r.expert_cache.reset();
  r.cpu_budget = 20000 + 39000;
  p = place_groups(r);
  CHECK(p.expert_slots == 2);
  CHECK(p.resident_experts == 4);
  // Everything fits: no cache.
  r.cpu_budget = 100000;
  r.expert_cache.reset();
  p = place_groups(r);
  CHECK(p.expert_slots == 0);
  CHECK(p.tier_groups[int(Tier::Disk)] == 0);
}

TEST_CASE("experts: routed reads from disk give the resident logits bit for bit, with the cache on and off") {
  TempDir dir;
  for (const char* fixture : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    CAPTURE(fixture);
    const std::unique_ptr<ContainerReader> c = pack_int4_50(dir, fixture);
    const ModelConfig cfg = parse_model_config(c->manifest().config, c->path());
    const std::vector<int32_t> prompt = prompt_ids(9, uint32_t(cfg.vocab));
    const size_t steps = 6;
    const MoeRun resident = run_moe(*c, nullptr, prompt, steps);
    uint64_t block_bytes = 0, n_experts = 0, expert_bytes = 0;
    for (const GroupDemand& g : group_demands(c->manifest())) {
      if (g.streamable) block_bytes += g.bytes;
      if (g.expert) n_experts += 1, expert_bytes += g.bytes;
    }
    REQUIRE(n_experts == cfg.n_layers * cfg.n_experts);
    // Every block's dense part in memory, every expert on disk; the cache holds all (on), or none (off).
    for (const bool cache_on : {true, false}) {
      CAPTURE(cache_on);
      const Placement p = experts_on_disk(*c, cache_on ? 64 * 8192 : 0);
      REQUIRE(p.tier_groups[int(Tier::Disk)] == n_experts);
      REQUIRE(p.expert_slots >= 2);
      const MoeRun s = run_moe(*c, &p, prompt, steps);
      CHECK(bit_equal(s.logits, resident.logits));
      // Each run of an off-tier expert is a cache lookup; a lookup is a hit or a read, and reads are
      // exactly the disk fills, each of one expert group.
      const uint64_t uses = s.stats.expert_uses;
      CHECK(uses == sum_of(s.stats.expert_counts));
      CHECK(uses >= uint64_t(steps + 1) * cfg.n_layers * cfg.top_k);  // each call runs top_k experts at least
      CHECK(s.stats.expert_fills[int(Tier::Disk)] + s.stats.expert_hits == uses);
      CHECK(s.stats.expert_disk.reads == s.stats.expert_fills[int(Tier::Disk)]);
      CHECK(s.stats.bytes[int(Tier::Disk)] == 0);  // no block streamed
      // The compute's waits for expert reads are counted (their exact time cannot be asserted): present
      // whenever an off-tier expert ran, and part of the stall.
      CHECK(s.stats.expert_stall_s > 0);
      CHECK(s.stats.stall_s >= s.stats.expert_stall_s);
      if (cache_on) {
        // 64 slots hold every expert: each is read at most once, every later run is a hit.
        CHECK(s.stats.expert_fills[int(Tier::Disk)] <= n_experts);
        CHECK(s.stats.expert_hits > 0);
      } else {
        CHECK(s.stats.expert_hits == 0);
        CHECK(s.stats.expert_fills[int(Tier::Disk)] == uses);
      }
      // Decode reads only routed experts: each step runs top_k experts a block (and no more).
      CHECK(s.stats.expert_disk.bytes <= s.stats.expert_fills[int(Tier::Disk)] * p.expert_slot_bytes);
    }
    // A small cache (2 slots) still gives the same logits: evictions while a prefill runs many experts.
    Placement two = experts_on_disk(*c, 0);
    two.expert_cache = true;
    REQUIRE(two.expert_slots == 2);
    const MoeRun s2 = run_moe(*c, &two, prompt, steps);
    CHECK(bit_equal(s2.logits, resident.logits));
    CHECK(s2.stats.expert_fills[int(Tier::Disk)] + s2.stats.expert_hits == s2.stats.expert_uses);
    // And under a --cpu-mem budget that holds the dense parts and a few experts.
    const uint64_t kv = kv_cache_bytes(cfg.n_layers, prompt.size() + steps, uint64_t(cfg.n_kv_heads) * cfg.head_dim,
                                       KvDtype::F32);
    PlacementRequest r;
    r.groups = group_demands(c->manifest());
    r.cuda = false;
    r.prefetch = 1;
    r.host_kv_bytes = kv;
    r.cpu_budget = kv + block_bytes + expert_bytes * 3 / 4;  // the cache's 2 slots, then experts in place
    r.expert_cache = 0;
    const Placement budget = place_groups(r);
    CHECK(budget.tier_groups[int(Tier::Disk)] > 0);
    CHECK(budget.resident_experts > 0);
    CHECK(bit_equal(run_moe(*c, &budget, prompt, steps).logits, resident.logits));
  }
}

TEST_CASE("experts: a batched decode step reads each routed expert once for all its sequences; logits as alone") {
  // Every expert on disk and no cache: each step's reads are exactly its expert runs. Decoding K
  // sequences together, one MoE call per block serves the decode rows, so a step reads the DISTINCT
  // experts its sequences chose (the union of what each runs alone), not their sum.
  TempDir dir;
  for (const char* fixture : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    CAPTURE(fixture);
    const std::unique_ptr<ContainerReader> c = pack_int4_50(dir, fixture);
    const ModelConfig cfg = parse_model_config(c->manifest().config, c->path());
    std::vector<std::vector<int32_t>> prompts;
    for (size_t k = 0; k < 5; ++k) {
      std::vector<int32_t> p = prompt_ids(3 + 2 * k, uint32_t(cfg.vocab));
      for (int32_t& id : p) id = int32_t((uint32_t(id) + 37 * k) % cfg.vocab);
      prompts.push_back(p);
    }
    const size_t steps = 6;
    const Placement p = experts_on_disk(*c, 0);
    REQUIRE_FALSE(p.expert_cache);
    const BatchTrace batch = run_steps_on_disk(*c, p, prompts, steps);
    std::vector<BatchTrace> alone;
    for (const auto& prompt : prompts) alone.push_back(run_steps_on_disk(*c, p, {prompt}, steps));
    const size_t V = cfg.vocab;
    uint64_t sum_alone = 0, distinct = 0;
    for (size_t s = 1; s < steps; ++s) {  // the decode steps
      CAPTURE(s);
      std::set<uint32_t> all;
      for (size_t k = 0; k < prompts.size(); ++k) {
        CAPTURE(k);
        CHECK(std::memcmp(batch.logits[s].data() + k * V, alone[k].logits[s].data(), V * sizeof(float)) == 0);
        const std::set<uint32_t> mine = experts_run(alone[k].stats[s]);
        CHECK(mine.size() == size_t(cfg.n_layers) * cfg.top_k);
        CHECK(alone[k].stats[s].expert_fills[int(Tier::Disk)] == mine.size());
        sum_alone += mine.size();
        all.insert(mine.begin(), mine.end());
      }
      const OffloadStats& d = batch.stats[s];
      CHECK(experts_run(d) == all);
      for (uint32_t g : all) CHECK(d.expert_counts[g] == 1);  // one run serves every row routed to it
      CHECK(d.expert_fills[int(Tier::Disk)] == all.size());
      CHECK(d.expert_disk.reads == all.size());
      // Per step (OffloadStats::operator-): the step's own wait for expert reads, within its stall.
      CHECK(d.expert_stall_s >= 0);
      CHECK(d.expert_stall_s <= d.stall_s + 1e-12);
      distinct += all.size();
    }
    // The sequences shared experts (else the counts above could not tell a union from a sum).
    INFO("expert reads over the decode steps: ", distinct, " batched, ", sum_alone, " alone in all");
    CHECK(distinct < sum_alone);
    // The prefill step: every prompt's rows route on their own, the logits are each prompt's alone.
    for (size_t k = 0; k < prompts.size(); ++k)
      CHECK(std::memcmp(batch.logits[0].data() + k * V, alone[k].logits[0].data(), V * sizeof(float)) == 0);
  }
}

TEST_CASE("experts: endor-infer --stats reports the time compute waited for expert reads, within the stall") {
  TempDir dir;
  const std::string path = dir.file("q.endor");
  REQUIRE(test::run_command(test::endor_pack() + " prune " + test::fixture_dir("qwen3-moe-tiny") + " -o " + path +
                            " --sparsity 0.5 --quant int4 >/dev/null 2>&1") == 0);
  // --cpu-mem 10K: every block and every expert on disk, no cache: each routed expert is read.
  const auto r = test::run_capture(test::endor_infer() + " " + path + " --device cpu --threads 1 --ids \"1 5 9 13\" -n 6 "
                                   "--temperature 0 --ignore-eos --stats --cpu-mem 10K --expert-cache 0", dir);
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find("; compute waited for expert reads ") != std::string::npos);
  // key=value of the first line that starts with `line`; -1 when absent.
  auto value = [&](const std::string& line, const std::string& key) {
    const size_t at = r.err.find(line);
    if (at == std::string::npos) return -1.0;
    const size_t end = r.err.find('\n', at);
    const size_t k = r.err.find(" " + key + "=", at);
    if (k == std::string::npos || k > end) return -1.0;
    return std::stod(r.err.substr(k + key.size() + 2));
  };
  const double expert_stall = value("expert-summary:", "stall_ms");
  const double stall = value("offload-summary:", "stall_ms");
  CHECK(value("expert-summary:", "reads") > 0);
  CHECK(expert_stall >= 0);  // present (an absent key reads -1)
  CHECK(stall >= expert_stall);
}

TEST_CASE("experts: prefetch of the next block's experts keeps logits and greedy ids; its counters add up") {
  CHECK_FALSE(StreamingOptions{}.expert_prefetch);  // off unless asked for (docs/moe.md, NOTES)
  TempDir dir;
  for (const char* fixture : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    CAPTURE(fixture);
    const std::unique_ptr<ContainerReader> c = pack_int4_50(dir, fixture);
    const ModelConfig cfg = parse_model_config(c->manifest().config, c->path());
    const std::vector<int32_t> prompt = prompt_ids(9, uint32_t(cfg.vocab));
    const size_t steps = 12;
    std::vector<int32_t> ids_resident;
    const MoeRun resident = run_moe(*c, nullptr, prompt, steps, true, &ids_resident);
    REQUIRE(ids_resident.size() == steps + 1);
    const uint64_t slot_bytes = experts_on_disk(*c, 64 * 8192).expert_slot_bytes;
    // Every expert on disk; a cache of every expert, and one of a few slots (guesses evict and are evicted).
    for (const uint32_t slots : {64u, 5u}) {
      CAPTURE(slots);
      const Placement p = experts_on_disk(*c, slots * slot_bytes);
      REQUIRE(p.expert_cache);
      std::vector<int32_t> ids_off, ids_on;
      const MoeRun off = run_moe(*c, &p, prompt, steps, false, &ids_off);
      const MoeRun on = run_moe(*c, &p, prompt, steps, true, &ids_on);
      CHECK(bit_equal(off.logits, resident.logits));
      CHECK(bit_equal(on.logits, resident.logits));
      CHECK(ids_on == ids_resident);
      CHECK(ids_off == ids_resident);
      CHECK(on.stats.expert_counts == off.stats.expert_counts);  // the same experts run, as often
      CHECK(off.stats.expert_prefetch_reads == 0);
      const OffloadStats& s = on.stats;
      CHECK(s.expert_prefetch_reads > 0);
      CHECK(s.expert_prefetch_used > 0);  // the tiny fixtures' next router mostly agrees
      CHECK(s.expert_prefetch_used + s.expert_prefetch_wasted <= s.expert_prefetch_reads);
      CHECK(s.expert_prefetch_bytes >= s.expert_prefetch_reads * 4096);
      CHECK(s.expert_prefetch_wasted_bytes <= s.expert_prefetch_bytes);
      CHECK((s.expert_prefetch_wasted == 0) == (s.expert_prefetch_wasted_bytes == 0));
      // A use is a hit, the first use of a read of its own call, or the first use of a guess: the reads
      // no call used are the guesses that were never used.
      const uint64_t reads = s.expert_fills[int(Tier::Disk)];
      CHECK(reads == s.expert_disk.reads);
      CHECK(s.expert_uses == s.expert_hits + (reads - s.expert_prefetch_reads) + s.expert_prefetch_used);
      CHECK(off.stats.expert_uses == off.stats.expert_hits + off.stats.expert_fills[int(Tier::Disk)]);
      if (slots == 64) {
        // Nothing is evicted: every guess is used later or still cached; no read is repeated.
        CHECK(s.expert_prefetch_wasted == 0);
        CHECK(reads <= uint64_t(cfg.n_layers) * cfg.n_experts);
      }
    }
    // No cache (--expert-cache 0): nothing survives a call, so nothing is guessed.
    const Placement none = experts_on_disk(*c, 0);
    REQUIRE_FALSE(none.expert_cache);
    std::vector<int32_t> ids_none;
    const MoeRun n = run_moe(*c, &none, prompt, steps, true, &ids_none);
    CHECK(ids_none == ids_resident);
    CHECK(n.stats.expert_prefetch_reads == 0);
  }
}
