// The CUDA streaming executor: blocks from pinned host memory (cpu tier) and from disk (reader ->
// pinned staging -> copy stream) give the all-resident CUDA logits bit for bit — prefill of more
// than 8 tokens (decoded panels + cuBLAS from a slot) and single-token decode (fused kernels from
// a slot) — for every prefetch depth, mixed tiers, every fixture architecture, and the block API in
// any order; plus stats and the bandwidth probe; and generate() sampling on the device (greedy ids
// equal the CPU backend's, sampled ids the host sampler's); MoE experts read from pinned host memory and
// disk into the expert cache's device slots (resident logits, the CPU device's cache counts). Without a
// CUDA device every test returns at once and one line "no CUDA device: skipping N GPU tests (...)"
// marks the binary skipped for ctest.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>

#include "endor/cuda_backend.h"
#include "offload_test_util.h"

using namespace endor;
using namespace endor::offloadtest;

namespace {

int& gpu_test_count() {
  static int n = 0;
  return n;
}
struct GpuTestRegistration {
  GpuTestRegistration() { ++gpu_test_count(); }
};
bool gpu_available(std::string* why = nullptr) {
  static std::string reason;
  static const bool ok = cuda_device_available(&reason);
  if (why) *why = reason;
  return ok;
}
#define GPU_TEST_CASE(name)                                                         \
  static const GpuTestRegistration DOCTEST_ANONYMOUS(endor_offload_gpu_test_reg_); \
  TEST_CASE(name)
#define REQUIRE_GPU() \
  if (!gpu_available()) return

std::vector<float> resident_logits(const ContainerReader& c, const std::vector<int32_t>& prompt, size_t steps) {
  auto backend = make_cuda_backend(0);
  auto model = load_model(c, *backend);
  return run_sequence(*model, prompt, steps);
}

struct Streamed {
  std::vector<float> logits;
  OffloadStats stats;
};

// `steps` tokens of `prompt` on `backend`, its weights streamed as placement p says; the counters at the end.
Streamed run_streamed(Backend& backend, const ContainerReader& c, const Placement& p, uint32_t prefetch,
                      const std::vector<int32_t>& prompt, size_t steps) {
  StreamingOptions o;
  o.prefetch = prefetch;
  auto weights = make_streaming_weights(c, backend, p, o);
  Streamed s;
  {
    auto model = load_model(c, backend, weights.get());
    s.logits = run_sequence(*model, prompt, steps);
  }
  weights->synchronize();
  s.stats = weights->stats();
  return s;
}

Streamed streamed_logits(const ContainerReader& c, const Placement& p, uint32_t prefetch,
                         const std::vector<int32_t>& prompt, size_t steps) {
  auto backend = make_cuda_backend(0);
  return run_streamed(*backend, c, p, prefetch, prompt, steps);
}

// A placement of an MoE container packed by expert: each group's tier from tier_of (embed and head stay
// on the device), an expert cache of `cache` bytes (0: off), prefetch 1.
Placement moe_placement(const ContainerReader& c, bool cuda, const std::function<Tier(const GroupDemand&)>& tier_of,
                        uint64_t cache) {
  PlacementRequest r;
  r.groups = group_demands(c.manifest());
  for (GroupDemand& g : r.groups)
    if (g.streamable || g.expert) g.manifest_tier = tier_of(g);
  r.cuda = cuda;
  r.prefetch = 1;
  r.expert_cache = cache;
  return place_groups(r);
}

// On the exact CPU backend (f32 activations, as the CUDA backend's fused kernels), so both route alike.
Streamed cpu_streamed(const ContainerReader& c, const Placement& p, const std::vector<int32_t>& prompt, size_t steps) {
  auto backend = make_exact_cpu_backend(1);
  return run_streamed(*backend, c, p, 1, prompt, steps);
}

// The ids of a generation whose every token is picked by the host sampler from forward()'s
// downloaded logits (what generate() did before it sampled on the backend).
std::vector<int32_t> host_sampled_ids(Model& model, const std::vector<int32_t>& prompt, const SamplerOptions& so,
                                      size_t n) {
  const uint32_t vocab = model.config().vocab;
  Sampler sampler(so);
  std::unique_ptr<KvCache> cache = model.make_cache(prompt.size() + n);
  std::vector<float> logits;
  model.forward(prompt.data(), prompt.size(), *cache, false, logits);
  std::vector<int32_t> ids = {sampler.sample(logits.data(), vocab)};
  while (ids.size() < n) {
    model.forward(&ids.back(), 1, *cache, false, logits);
    ids.push_back(sampler.sample(logits.data(), vocab));
  }
  return ids;
}

}  // namespace

TEST_CASE("offload cuda: device availability") {
  std::string why;
  if (!gpu_available(&why)) {
    std::printf("no CUDA device: skipping %d GPU tests (%s)\n", gpu_test_count(), why.c_str());
    std::fflush(stdout);
    return;
  }
  auto b = make_cuda_backend(0);
  std::printf("CUDA device: %s; running %d GPU offload tests\n", b->name().c_str(), gpu_test_count());
  CHECK(is_cuda_device(*b));
  CHECK(device_free_bytes(*b).value_or(0) > 0);
}

GPU_TEST_CASE("offload cuda: cpu- and disk-tier blocks give the resident logits exactly, every prefetch depth") {
  REQUIRE_GPU();
  TempDir dir;
  const std::string path = dir.file("m.endor");
  write_tiered_container(path, synthetic_config(5), 31, ValueType::F16, [](const std::string&) { return Tier::Gpu; });
  auto c = ContainerReader::open(path);
  const std::vector<int32_t> prompt = prompt_ids(12, 64);  // > 8 tokens: the DecodeGemm path
  const size_t steps = 6;
  const std::vector<float> want = resident_logits(*c, prompt, steps);
  const std::vector<std::function<Tier(const std::string&)>> tierings = {
      [](const std::string&) { return Tier::Cpu; },
      [](const std::string&) { return Tier::Disk; },
      [](const std::string& g) { return g == "layers.1" ? Tier::Gpu : ((g.back() - '0') % 2 ? Tier::Cpu : Tier::Disk); },
  };
  for (size_t t = 0; t < tierings.size(); ++t)
    for (uint32_t k = 1; k <= 5; ++k) {
      CAPTURE(t);
      CAPTURE(k);
      const Placement p = placement_with(*c, true, k, tierings[t]);
      REQUIRE(p.streams());
      const Streamed s = streamed_logits(*c, p, k, prompt, steps);
      CHECK(bit_equal(s.logits, want));
      CHECK(s.stats.blocks == 7 * (p.tier_groups[int(Tier::Cpu)] + p.tier_groups[int(Tier::Disk)]));
      CHECK(s.stats.copy_bytes > 0);
      CHECK(s.stats.copy_s > 0);
      CHECK(s.stats.compute_s > 0);
    }
}

GPU_TEST_CASE("offload cuda: every fixture architecture, f16 and int4 at 50 %, streamed equals resident") {
  REQUIRE_GPU();
  TempDir dir;
  for (const char* fixture :
       {"opt-tiny", "opt-postln-proj", "llama-tiny", "llama-gqa-bf16", "llama3-rope", "qwen2-tiny", "qwen3-tiny", "mistral-tiny"}) {
    for (const char* pack : {"convert --dtype f16", "prune --method magnitude --sparsity 0.5 --quant int4",
                             "prune --method magnitude --sparsity 0.5 --quant int4 --quant-head int4"}) {
      // The int4 embedding/head (device embed and lm_head on int4 rows): one tied, one untied model.
      if (std::string(pack).find("quant-head") != std::string::npos && std::string(fixture) != "llama-tiny" &&
          std::string(fixture) != "qwen2-tiny")
        continue;
      CAPTURE(fixture);
      CAPTURE(pack);
      const std::string out = dir.file("m.endor");
      REQUIRE(test::run_command(test::endor_pack() + " " + pack + " " + test::fixture_dir(fixture) + " -o " + out +
                                " >/dev/null 2>&1") == 0);
      auto c = ContainerReader::open(out);
      const std::vector<int32_t> prompt = prompt_ids(11, 512);
      const std::vector<float> want = resident_logits(*c, prompt, 4);
      for (Tier tier : {Tier::Cpu, Tier::Disk}) {
        const Placement p = placement_with(*c, true, 1, [tier](const std::string&) { return tier; });
        CHECK(bit_equal(streamed_logits(*c, p, 1, prompt, 4).logits, want));
      }
      // The GPU against the CPU backend on the same container. With the default (Auto) path the
      // prefill rows go through cuBLAS with activations rounded to the weight's 16-bit type
      // (tests/cuda/test_cuda_linear.cpp bounds it), and the decode steps attend over the K/V those
      // prefill rows wrote, so they inherit that rounding: every row gets the prefill bound. (A
      // decode-only bound of 1e-4 failed under emulation, by up to 3.6e-3 of 3.) With every
      // linear on the fused f32 kernels, rows differ from the CPU in summation order only.
      auto cpu = make_exact_cpu_backend(1);
      auto cpu_model = load_model(*c, *cpu);
      const std::vector<float> ref = run_sequence(*cpu_model, prompt, 4);
      REQUIRE(ref.size() == want.size());
      cuda::Options fused_only;
      fused_only.linear_path = cuda::LinearPath::Fused;
      auto fused_backend = make_cuda_backend(fused_only);
      const std::vector<float> fused = run_sequence(*load_model(*c, *fused_backend), prompt, 4);
      REQUIRE(fused.size() == ref.size());
      double worst_auto = 0, worst_fused = 0, scale = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        worst_auto = std::max(worst_auto, std::abs(double(ref[i]) - double(want[i])));
        worst_fused = std::max(worst_fused, std::abs(double(ref[i]) - double(fused[i])));
        scale = std::max(scale, std::abs(double(ref[i])));
      }
      INFO("max |logit| ", scale, ", auto path max diff ", worst_auto, ", fused path max diff ", worst_fused);
      CHECK(worst_fused <= 1e-4 * std::max(1.0, scale));
      // Weights kept in bf16 (the bf16 fixture's tied embedding / lm_head when only blocks are
      // quantized) multiply bf16-rounded activations: 8 bits of mantissa (f16: 11), a looser bound.
      const bool bf16 = std::string(fixture).find("bf16") != std::string::npos;
      CHECK(worst_auto <= (bf16 ? 1e-1 : 2e-2) * std::max(1.0, scale));
    }
  }
}

GPU_TEST_CASE("offload cuda: MoE fixtures give transformers' logits (1e-4 relative) and greedy ids; streamed equals resident") {
  // Qwen3-MoE (5 experts, top-3) and Mixtral (4, top-2) in f32 on the CUDA backend: the router's
  // logits come to the host, the experts run on the device (Backend linear/copy/scale/add/silu_mul).
  // Every Linear on the fused f32 kernels: the logits differ from transformers' in summation order only.
  REQUIRE_GPU();
  TempDir dir;
  for (const char* fixture : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    CAPTURE(fixture);
    const std::string fx = test::fixture_dir(fixture);
    const std::string out = dir.file(std::string(fixture) + ".endor");
    REQUIRE(test::run_command(test::endor_pack() + " convert --dtype f32 " + fx + " -o " + out + " >/dev/null 2>&1") == 0);
    auto c = ContainerReader::open(out);
    const nlohmann::json ref = test::read_json(fx + "/reference.json");
    cuda::Options fused_only;
    fused_only.linear_path = cuda::LinearPath::Fused;
    auto gpu = make_cuda_backend(fused_only);
    auto model = load_model(*c, *gpu);
    for (size_t i = 0; i < ref["prompts"].size(); ++i) {
      const std::vector<int32_t> ids = ref["prompts"][i]["ids"].get<std::vector<int32_t>>();
      const test::NpyMatrix want = test::read_npy_f32(fx + "/logits_orig_p" + std::to_string(i) + ".npy");
      auto cache = model->make_cache(ids.size());
      std::vector<float> got;
      model->forward(ids.data(), ids.size(), *cache, true, got);
      REQUIRE(got.size() == want.data.size());
      double worst = 0, scale = 0;
      for (size_t k = 0; k < got.size(); ++k) {
        worst = std::max(worst, std::abs(double(got[k]) - double(want.data[k])));
        scale = std::max(scale, std::abs(double(want.data[k])));
      }
      INFO("prompt ", i, ": max |dlogit| ", worst, " of max |logit| ", scale);
      CHECK(worst <= 1e-4 * std::max(1.0, scale));
    }
    const std::vector<int32_t> greedy_ref = ref["greedy"]["new_tokens"].get<std::vector<int32_t>>();
    Sampler greedy(SamplerOptions{});
    GenerationOptions go;
    go.max_new_tokens = greedy_ref.size();
    go.stop_at_eos = false;
    CHECK(generate(*model, ref["prompts"][0]["ids"].get<std::vector<int32_t>>(), greedy, go, nullptr) == greedy_ref);
    // The default backend, blocks streamed from host RAM or disk: the resident logits bit for bit.
    const std::vector<int32_t> prompt = prompt_ids(11, 512);
    const std::vector<float> resident = resident_logits(*c, prompt, 4);
    for (Tier tier : {Tier::Cpu, Tier::Disk}) {
      const Placement p = placement_with(*c, true, 1, [tier](const std::string&) { return tier; });
      CHECK(bit_equal(streamed_logits(*c, p, 1, prompt, 4).logits, resident));
    }
  }
}

GPU_TEST_CASE("offload cuda: MoE experts off the GPU (pinned host, disk) decoded on the device: resident logits, CPU's counts") {
  // Attention, router and the hot experts (expert 0 of each block) on the GPU; the other experts in
  // pinned host memory (odd) or on disk (even), read when routed into the expert cache's device slots
  // and computed there in their compressed form. Also every block and expert off the GPU. The logits
  // equal the all-resident CUDA run's bit for bit; the cache's uses, hits and reads equal the CPU
  // device's with the same experts off its fast tier (same routing on these fixtures).
  REQUIRE_GPU();
  TempDir dir;
  auto expert_tier = [](const GroupDemand& g) {
    return g.expert_index == 0 ? Tier::Gpu : g.expert_index % 2 ? Tier::Cpu : Tier::Disk;
  };
  const std::function<Tier(const GroupDemand&)> tierings[] = {
      [&](const GroupDemand& g) { return g.expert ? expert_tier(g) : Tier::Gpu; },
      [&](const GroupDemand& g) { return g.expert ? (g.expert_index % 2 ? Tier::Disk : Tier::Cpu) : (g.layer % 2 ? Tier::Cpu : Tier::Disk); },
  };
  for (const char* fixture : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    CAPTURE(fixture);
    const std::string out = dir.file(std::string(fixture) + ".endor");
    REQUIRE(test::run_command(test::endor_pack() + " prune --method magnitude --sparsity 0.5 --quant int4 " +
                              test::fixture_dir(fixture) + " -o " + out + " >/dev/null 2>&1") == 0);
    auto c = ContainerReader::open(out);
    const std::vector<int32_t> prompt = prompt_ids(11, 512);
    const size_t steps = 4;
    const std::vector<float> resident = resident_logits(*c, prompt, steps);
    for (size_t t = 0; t < std::size(tierings); ++t)
      for (const uint64_t cache : {uint64_t(1) << 20, uint64_t(0)}) {
        CAPTURE(t);
        CAPTURE(cache);
        const Placement p = moe_placement(*c, true, tierings[t], cache);
        REQUIRE(p.expert_slots >= 2);
        REQUIRE(p.expert_cache == (cache > 0));
        const Streamed s = streamed_logits(*c, p, 1, prompt, steps);
        CHECK(bit_equal(s.logits, resident));
        const OffloadStats& d = s.stats;
        const uint64_t from_cpu = d.expert_fills[int(Tier::Cpu)], from_disk = d.expert_fills[int(Tier::Disk)];
        CHECK(from_cpu > 0);
        CHECK(from_disk > 0);
        CHECK(from_cpu + from_disk + d.expert_hits == d.expert_uses);
        CHECK(d.expert_disk.reads == from_disk);
        CHECK(d.expert_stall_s >= 0);
        CHECK(d.stall_s >= d.expert_stall_s);
        if (cache == 0) CHECK(d.expert_hits == 0);
        // The CPU device with the same experts off its fast tier (there: on disk).
        const Placement cpu_p = moe_placement(
            *c, false, [&](const GroupDemand& g) { return g.expert && tierings[t](g) != Tier::Gpu ? Tier::Disk : Tier::Cpu; },
            cache);
        const Streamed cpu = cpu_streamed(*c, cpu_p, prompt, steps);
        CHECK(d.expert_uses == cpu.stats.expert_uses);
        CHECK(d.expert_hits == cpu.stats.expert_hits);
        CHECK(from_cpu + from_disk == cpu.stats.expert_fills[int(Tier::Disk)]);
        CHECK(d.expert_counts == cpu.stats.expert_counts);
      }
  }
}

GPU_TEST_CASE("offload cuda: generate() samples on the device: the host sampler's ids; greedy gives the CPU's") {
  REQUIRE_GPU();
  TempDir dir;
  for (const char* fixture : {"llama-tiny", "qwen2-tiny", "qwen3-tiny", "opt-tiny"}) {
    CAPTURE(fixture);
    const std::string out = dir.file(std::string(fixture) + ".endor");
    REQUIRE(test::run_command(test::endor_pack() + " convert --dtype f16 " + test::fixture_dir(fixture) + " -o " + out +
                              " >/dev/null 2>&1") == 0);
    auto c = ContainerReader::open(out);
    // Every Linear on the fused f32 kernels: the logits differ from the exact CPU backend's in
    // summation order only (the test above bounds them), far below these fixtures' top-2 gaps.
    cuda::Options fused_only;
    fused_only.linear_path = cuda::LinearPath::Fused;
    auto gpu = make_cuda_backend(fused_only);
    auto model = load_model(*c, *gpu);
    auto cpu = make_exact_cpu_backend(1);
    auto cpu_model = load_model(*c, *cpu);
    const std::vector<int32_t> prompt = prompt_ids(7, model->config().vocab);
    GenerationOptions go;
    go.max_new_tokens = 12;
    go.stop_at_eos = false;
    const SamplerOptions greedy;
    Sampler a(greedy), b(greedy);
    const std::vector<int32_t> ids = generate(*model, prompt, a, go, {});
    REQUIRE(ids.size() == 12);
    CHECK(ids == generate(*cpu_model, prompt, b, go, {}));
    CHECK(ids == host_sampled_ids(*model, prompt, greedy, 12));
    // Sampled: the device's picks are the host sampler's on the same logits, draw for draw (top-k
    // off keeps the whole 512-token vocabulary, within the device's 1024 candidates).
    SamplerOptions top_k_p, full;
    top_k_p.temperature = 0.7f;
    top_k_p.top_k = 40;
    top_k_p.top_p = 0.9f;
    top_k_p.seed = 5;
    full.temperature = 1.0f;
    full.seed = 9;
    for (const SamplerOptions& so : {top_k_p, full}) {
      Sampler s(so);
      const std::vector<int32_t> sampled = generate(*model, prompt, s, go, {});
      CHECK(sampled == host_sampled_ids(*model, prompt, so, 12));
      CHECK(sampled != ids);  // the draws matter
    }
  }
}

GPU_TEST_CASE("offload cuda: the block API in any order, stats, and the host-to-device probe") {
  REQUIRE_GPU();
  TempDir dir;
  const std::string path = dir.file("m.endor");
  write_tiered_container(path, synthetic_config(6), 32, ValueType::F32, [](const std::string&) { return Tier::Gpu; });
  auto c = ContainerReader::open(path);
  auto backend = make_cuda_backend(0);
  auto ref_model = load_model(*c, *backend);
  StreamingOptions o;
  o.prefetch = 2;
  auto weights = make_streaming_weights(*c, *backend, placement_with(*c, true, 2, all_disk), o);
  {
    auto model = load_model(*c, *backend, weights.get());
    const std::vector<int32_t> prompt = prompt_ids(10, 64);
    const size_t n = prompt.size();
    std::vector<float> h_ref(n * 64), h(n * 64);
    ref_model->embed(prompt.data(), n, h_ref.data());
    model->embed(prompt.data(), n, h.data());
    for (uint32_t layer : {4u, 0u, 5u, 5u, 1u, 3u, 2u}) {
      ref_model->forward_block(layer, h_ref.data(), n, {});
      model->forward_block(layer, h.data(), n, {});
      CHECK(bit_equal(h, h_ref));
    }
    // Generation in order: per forward pass every block moves once (6 blocks, 3 slots). The first
    // generate() follows the block calls (what their prefetches left in the slots depends on timing);
    // the second one starts in order and is counted.
    SamplerOptions so;
    GenerationOptions go;
    go.max_new_tokens = 5;
    go.stop_at_eos = false;
    OffloadStats before;
    for (int round = 0; round < 2; ++round) {
      Sampler a(so), b(so);
      weights->synchronize();
      before = weights->stats();
      CHECK(generate(*model, prompt, a, go, {}) == generate(*ref_model, prompt, b, go, {}));
    }
    weights->synchronize();
    const OffloadStats d = weights->stats() - before;
    CHECK(d.blocks == 5 * 6);
    CHECK(d.fills[int(Tier::Disk)] == 5 * 6);
    CHECK(d.bytes[int(Tier::Disk)] == 5 * 6 * c->manifest().groups[1].size);
    CHECK(d.disk.bytes >= d.bytes[int(Tier::Disk)]);
    CHECK(d.copy_s > 0);
    CHECK(d.stall_s >= 0);
  }
  const std::optional<double> gbps = probe_h2d_gbps(*backend, uint64_t(64) << 20, 3);
  REQUIRE(gbps.has_value());
  CHECK(*gbps > 1.0);
  auto cpu = make_exact_cpu_backend(1);
  CHECK_FALSE(probe_h2d_gbps(*cpu, 1 << 20, 1).has_value());
}

GPU_TEST_CASE("offload cuda: endor-infer --gpu-mem streams blocks, same ids; a budget too small is one line") {
  REQUIRE_GPU();
  TempDir dir;
  const std::string model = dir.file("m.endor");
  write_tiered_container(model, synthetic_config(8), 33, ValueType::F16, [](const std::string&) { return Tier::Gpu; });
  const std::string infer = test::endor_infer() + " " + model + " --device cuda --ids \"1 5 9 13 17 21 25 29 33 37\" -n 8 "
                            "--temperature 0 --ignore-eos";
  const auto resident = test::run_capture(infer, dir);
  REQUIRE(resident.status == 0);
  // Budget: everything but the blocks, 3 slots, and room for 2 of the 8 blocks.
  auto c = ContainerReader::open(model);
  const ModelConfig cfg = parse_model_config(c->manifest().config, model);
  uint64_t must = device_fixed_bytes(cfg, c->manifest(), 10 + 8 - 1, 10, true), layer = 0;
  for (const GroupDemand& g : group_demands(c->manifest())) {
    must += g.resident_bytes + (g.streamable || !g.loaded ? 0 : g.bytes);
    if (g.streamable) layer = std::max(layer, g.bytes);
  }
  const uint64_t budget = must + 3 * ((layer + 16 + 4095) / 4096 * 4096) + 2 * layer + 100;
  for (const std::string& extra :
       std::vector<std::string>{"", " --cpu-mem 0", " --cpu-mem " + std::to_string(3 * layer) + " --prefetch 1"}) {
    CAPTURE(extra);
    const auto r = test::run_capture(infer + " --stats --gpu-mem " + std::to_string(budget) + extra, dir);
    INFO("stderr: ", r.err);
    REQUIRE(r.status == 0);
    CHECK(r.out == resident.out);
    CHECK(r.err.find("offload-summary: device=cuda") != std::string::npos);
  }
  const auto small = test::run_capture(infer + " --gpu-mem 1M", dir);
  CHECK(small.status == 1);
  CHECK(small.err.rfind("error: " + model + ": --gpu-mem 1.00 MiB is too small", 0) == 0);
  CHECK(small.err.find('\n') == small.err.size() - 1);
}
