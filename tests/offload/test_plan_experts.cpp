// The --plan cost model on MoE files packed by expert (cost_model.cpp): expected expert runs, disk
// reads after the LRU cache, bytes per token and the step time under uniform routing, for placements
// from place_groups. The expected values are worked out by hand below, not by the model's code.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "offload_test_util.h"

using namespace endor;

namespace {

constexpr uint64_t MiB = uint64_t(1) << 20;

// embed, then 2 blocks of a 10 MiB dense group and 8 experts of 4 MiB each, head.
std::vector<GroupDemand> moe_groups() {
  std::vector<GroupDemand> g;
  g.push_back({"embed", 30 * MiB, 0, Tier::Cpu, false, true});
  for (uint32_t l = 0; l < 2; ++l) {
    g.push_back({"layers." + std::to_string(l), 10 * MiB, 0, Tier::Cpu, true, true});
    for (uint32_t e = 0; e < 8; ++e) {
      GroupDemand d{"layers." + std::to_string(l) + ".experts." + std::to_string(e), 4 * MiB, 0, Tier::Cpu, false, true};
      d.expert = true;
      d.layer = l;
      d.expert_index = e;
      g.push_back(d);
    }
  }
  g.push_back({"head", 40 * MiB, 0, Tier::Cpu, false, true});
  return g;
}

CostInputs moe_inputs(uint32_t batch) {
  CostInputs in;
  in.disk_gbps = 1.0;  // 1e6 bytes per ms: one expert reads in 4.194304 ms
  in.block_ms = 5;     // a 10 MiB dense group
  in.block_bytes = 10 * MiB;
  in.head_ms = 3;
  in.batch = batch;
  in.n_experts = 8;
  in.top_k = 2;
  in.expert_ms = 1;
  return in;
}

}  // namespace

TEST_CASE("MoE routing: run probability and tokens per expert run under uniform routing") {
  CHECK(expert_run_probability(8, 2, 1) == doctest::Approx(0.25));
  CHECK(expert_run_probability(8, 2, 4) == doctest::Approx(1 - 0.75 * 0.75 * 0.75 * 0.75));
  CHECK(expert_run_probability(128, 8, 8) == doctest::Approx(1 - std::pow(120.0 / 128, 8)));
  CHECK(expert_run_probability(0, 0, 1) == 0);
  CHECK(expert_tokens_per_run(8, 2, 1) == 1);
  CHECK(expert_tokens_per_run(128, 8, 8) == 1);   // 64 token-routes over 51.6 experts
  CHECK(expert_tokens_per_run(8, 2, 16) == 4);    // 32 over 7.92
  CHECK(expert_tokens_per_run(8, 8, 64) == 64);   // every token runs every expert
}

TEST_CASE("--plan with experts: LRU hit rate, reads, bytes per token and the step, cache on and off") {
  PlacementRequest r;
  r.groups = moe_groups();
  r.cuda = false;
  // 20 MiB for both dense groups, 40 MiB left for 64 MiB of experts: a cache of half (4 slots of
  // 4 MiB + 4 KiB), then 5 experts of block 0 in place; 3 of block 0 and all 8 of block 1 on disk.
  r.cpu_budget = 60 * MiB;
  const Placement p = place_groups(r);
  REQUIRE(p.expert_slots == 4);
  REQUIRE(p.expert_cache);
  REQUIRE(p.resident_experts == 5);
  REQUIRE(p.tier_groups[int(Tier::Disk)] == 11);

  const CostPrediction c = predict_step(p, r.groups, moe_inputs(1));
  const double one_read = 4.0 * MiB / 1e6;
  CHECK(c.expert_runs == doctest::Approx(16 * 0.25));
  CHECK(c.expert_disk_runs == doctest::Approx(11 * 0.25));
  CHECK(c.expert_hit_rate == doctest::Approx(4.0 / 11));
  CHECK(c.expert_reads == doctest::Approx(11 * 0.25 * 7 / 11));
  CHECK(c.expert_read_ms == doctest::Approx(1.75 * one_read));
  CHECK(c.expert_compute_ms == doctest::Approx(4));
  // block 0: reads 3 * 0.25 * 7/11 experts (2.0 ms) vs compute 2 ms; block 1: 2 * 7/11 (5.34 ms) vs 2 ms;
  // each + min(one read, one expert) = 1 ms for the first read.
  const double t0 = std::max(3 * 0.25 * 7 / 11 * one_read, 2.0) + 1, t1 = 2 * 7.0 / 11 * one_read + 1;
  CHECK(c.expert_ms == doctest::Approx(t0 + t1));
  CHECK(c.compute_ms == doctest::Approx(10));  // both dense groups in place
  CHECK(c.read_ms == 0);
  CHECK(c.step_ms == doctest::Approx(10 + 3 + t0 + t1));
  CHECK(double(c.disk_bytes) == doctest::Approx(1.75 * 4 * MiB).epsilon(1e-6));
  CHECK(std::string(c.bound) == "compute");

  // Cache off: the same placement reads every routed disk expert.
  r.expert_cache = 0;
  const Placement off = place_groups(r);
  REQUIRE_FALSE(off.expert_cache);
  const CostPrediction o = predict_step(off, r.groups, moe_inputs(1));
  CHECK(o.expert_hit_rate == 0);
  CHECK(o.expert_reads == doctest::Approx(off.tier_groups[int(Tier::Disk)] * 0.25));
  CHECK(o.disk_bytes > c.disk_bytes);

  // A slow disk: the reads set the expert time, the step is disk-bound.
  CostInputs slow = moe_inputs(1);
  slow.disk_gbps = 0.1;
  const CostPrediction s = predict_step(p, r.groups, slow);
  CHECK(s.expert_ms == doctest::Approx(10 * (1.75 * one_read) + 2));
  CHECK(std::string(s.bound) == "disk");
}

TEST_CASE("--plan with experts: a batch runs the union of its tokens' experts; all resident reads nothing") {
  PlacementRequest r;
  r.groups = moe_groups();
  r.cuda = false;
  r.cpu_budget = 60 * MiB;
  const Placement p = place_groups(r);
  const double q = 1 - std::pow(0.75, 4);  // batch 4, top-2 of 8
  const CostPrediction b = predict_step(p, r.groups, moe_inputs(4));
  CHECK(b.expert_runs == doctest::Approx(16 * q));
  CHECK(b.expert_reads == doctest::Approx(11 * q * 7 / 11));
  CHECK(b.token_ms == doctest::Approx(b.step_ms / 4));
  // Per token a batch of 4 reads fewer bytes than 4 single steps (experts shared), not 4x fewer.
  const CostPrediction one = predict_step(p, r.groups, moe_inputs(1));
  CHECK(double(b.disk_bytes) / 4 < double(one.disk_bytes));
  CHECK(double(b.disk_bytes) / 4 > double(one.disk_bytes) / 4);

  PlacementRequest all;
  all.groups = moe_groups();
  all.cuda = false;
  const Placement resident = place_groups(all);
  const CostPrediction a = predict_step(resident, all.groups, moe_inputs(1));
  CHECK(a.disk_bytes == 0);
  CHECK(a.expert_reads == 0);
  CHECK(a.expert_ms == doctest::Approx(4));  // 2 runs of 1 ms in each block
  CHECK(a.step_ms == doctest::Approx(10 + 3 + 4));
}

TEST_CASE("--plan with experts: prefetch reads later blocks' experts behind the previous block's, guesses cost reads") {
  PlacementRequest r;
  r.groups = moe_groups();
  r.cuda = false;
  r.cpu_budget = 60 * MiB;  // as above: 4 cache slots, 3 experts of block 0 and all 8 of block 1 on disk
  const Placement p = place_groups(r);
  REQUIRE(p.expert_cache);
  CostInputs in = moe_inputs(1);
  in.expert_prefetch = true;
  in.expert_prefetch_accuracy = 0.9;
  const CostPrediction c = predict_step(p, r.groups, in);
  const CostPrediction plain = predict_step(p, r.groups, moe_inputs(1));
  const double one_read = 4.0 * MiB / 1e6;
  // Block 0 as without prefetch; block 1's reads (2 * 7/11 experts) and 10 % of them again (wrong
  // guesses) run under block 1's dense part (half the 10 ms of dense compute) and its 2 ms of experts.
  const double t0 = std::max(3 * 0.25 * 7 / 11 * one_read, 2.0) + 1;
  const double reads1 = 2 * 7.0 / 11, read1 = reads1 * one_read;
  CHECK(c.expert_wasted_reads == doctest::Approx(0.1 * reads1));
  CHECK(c.expert_reads == doctest::Approx(1.75 + 0.1 * reads1));
  CHECK(double(c.disk_bytes) == doctest::Approx((1.75 + 0.1 * reads1) * 4 * MiB).epsilon(1e-6));
  CHECK(c.expert_ms == doctest::Approx(t0 + std::max(1.1 * read1, 2.0 + 5) - 5 + 1));
  CHECK(c.step_ms == doctest::Approx(10 + 3 + c.expert_ms));
  CHECK(c.step_ms < plain.step_ms);  // the reads hide under block 1's dense part
  // A slow disk bounds the step: the wrong guesses' reads cost more than the overlap saves.
  in.disk_gbps = 0.1;
  CostInputs slow_plain = moe_inputs(1);
  slow_plain.disk_gbps = 0.1;
  const CostPrediction s = predict_step(p, r.groups, in), sp = predict_step(p, r.groups, slow_plain);
  CHECK(s.expert_ms == doctest::Approx(std::max(3 * 0.25 * 7 / 11 * 10 * one_read, 2.0) + 1 + 1.1 * 10 * read1 - 5 + 1));
  CHECK(s.step_ms > sp.step_ms);
  // The scattered-read rate, when probed, replaces the sequential one for experts.
  CostInputs scattered = moe_inputs(1);
  scattered.expert_disk_gbps = 0.1;
  CHECK(predict_step(p, r.groups, scattered).expert_ms == doctest::Approx(sp.expert_ms));
  // Compute threads on every core: a block's expert compute adds to its reads (2 ms of experts a block).
  CostInputs shared = moe_inputs(1);
  shared.expert_reads_share_cpu = true;
  CHECK(predict_step(p, r.groups, shared).expert_ms == doctest::Approx(3 * 0.25 * 7 / 11 * one_read + 2 + read1 + 2));
  // No cache (--expert-cache 0): nothing to prefetch into; the prediction is the plain one.
  r.expert_cache = 0;
  const Placement off = place_groups(r);
  in.disk_gbps = 1.0;
  CostInputs off_plain = moe_inputs(1);
  CHECK(predict_step(off, r.groups, in).step_ms == doctest::Approx(predict_step(off, r.groups, off_plain).step_ms));
}
