// Placement: memory sizes, tiers from the manifest or from --gpu-mem/--cpu-mem budgets, rings,
// totals, and the one-line errors when a budget cannot work.
#include <doctest/doctest.h>

#include "offload_test_util.h"

using namespace endor;

namespace {

constexpr uint64_t MiB = uint64_t(1) << 20;

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == std::string::npos; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// embed 30 MiB, layers.0..9 of `layer` bytes each (1 MiB of norms resident), head 40 MiB, files.
std::vector<GroupDemand> model_groups(uint64_t layer = 100 * MiB, Tier layer_tier = Tier::Gpu) {
  std::vector<GroupDemand> g;
  g.push_back({"embed", 30 * MiB, 0, Tier::Gpu, false, true});
  for (int i = 0; i < 10; ++i)
    g.push_back({"layers." + std::to_string(i), layer, 1 * MiB, layer_tier, true, true});
  g.push_back({"head", 40 * MiB, 64 * 1024, Tier::Gpu, false, true});
  g.push_back({"files", 5 * MiB, 0, Tier::Cpu, false, false});
  return g;
}

uint64_t slot_of(uint64_t layer) { return (layer + 16 + 4095) / 4096 * 4096; }

}  // namespace

TEST_CASE("memory sizes parse with binary units and reject anything else naming the option") {
  CHECK(parse_memory_size("3G", "--gpu-mem") == (uint64_t(3) << 30));
  CHECK(parse_memory_size("512M", "--gpu-mem") == (uint64_t(512) << 20));
  CHECK(parse_memory_size("1.5G", "--gpu-mem") == (uint64_t(3) << 29));
  CHECK(parse_memory_size("64K", "--cpu-mem") == 65536);
  CHECK(parse_memory_size("4096", "--cpu-mem") == 4096);
  CHECK(parse_memory_size("2GiB", "--cpu-mem") == (uint64_t(2) << 30));
  CHECK(parse_memory_size("2gb", "--cpu-mem") == (uint64_t(2) << 30));
  CHECK(parse_memory_size("1T", "--cpu-mem") == (uint64_t(1) << 40));
  for (const char* bad : {"", "abc", "1.2.3", "-1G", "5X", "1e3", ".", "G", "3 G", "99999999999T"}) {
    const std::string e = error_of([&] { parse_memory_size(bad, "--gpu-mem"); });
    INFO("input: '", bad, "'");
    CHECK(one_line(e));
    CHECK(e.find("--gpu-mem") != std::string::npos);
  }
  CHECK(format_bytes(12) == "12 B");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(uint64_t(3) << 30) == "3.00 GiB");
  CHECK(format_bytes(uint64_t(5) << 40) == "5.00 TiB");
}

TEST_CASE("without budgets the manifest's tiers hold, embed and head always on the device") {
  PlacementRequest r;
  r.groups = model_groups(100 * MiB, Tier::Gpu);
  r.groups[0].manifest_tier = Tier::Disk;  // embed: forced resident
  r.groups[3].manifest_tier = Tier::Cpu;
  r.groups[4].manifest_tier = Tier::Disk;
  r.device_fixed_bytes = 50 * MiB;
  Placement p = place_groups(r);
  CHECK(p.from_manifest);
  CHECK(p.cuda);
  CHECK(p.tiers[0] == Tier::Gpu);
  CHECK(p.tiers[1] == Tier::Gpu);
  CHECK(p.tiers[3] == Tier::Cpu);
  CHECK(p.tiers[4] == Tier::Disk);
  CHECK(p.tiers[11] == Tier::Gpu);
  CHECK(p.tiers[12] == Tier::Cpu);  // files: not loaded, left as it was
  CHECK(p.tier_groups[0] == 10);
  CHECK(p.tier_groups[1] == 1);
  CHECK(p.tier_groups[2] == 1);
  CHECK(p.n_slots == 3);
  CHECK(p.slot_bytes == slot_of(100 * MiB));
  CHECK(p.n_staging == 2);
  CHECK(p.staging_bytes >= 100 * MiB);
  // device: fixed + 10 MiB of norms + 64 KiB + resident groups (embed, 8 layers, head) + 3 slots
  CHECK(p.device_bytes == 50 * MiB + 10 * MiB + 64 * 1024 + 30 * MiB + 8 * 100 * MiB + 40 * MiB + 3 * slot_of(100 * MiB));
  CHECK(p.host_pinned_bytes == 100 * MiB + 2 * p.staging_bytes);

  // All on the device: nothing streams.
  r.groups = model_groups();
  p = place_groups(r);
  CHECK_FALSE(p.streams());
  CHECK(p.n_staging == 0);
  CHECK(p.host_pinned_bytes == 0);

  // The device's free memory is checked against the manifest.
  r.device_capacity = 500 * MiB;
  const std::string e = error_of([&] { place_groups(r); });
  CHECK(one_line(e));
  CHECK(e.find("--gpu-mem") != std::string::npos);

  // The CPU device: gpu and cpu both read in place; disk streams through host slots.
  r = PlacementRequest{};
  r.cuda = false;
  r.groups = model_groups(100 * MiB, Tier::Cpu);
  r.groups[10].manifest_tier = Tier::Disk;
  p = place_groups(r);
  CHECK_FALSE(p.cuda);
  CHECK(p.tiers[0] == Tier::Cpu);
  CHECK(p.tiers[1] == Tier::Cpu);
  CHECK(p.tiers[10] == Tier::Disk);
  CHECK(p.n_slots == 3);
  CHECK(p.host_pinned_bytes == 0);
}

TEST_CASE("a GPU budget keeps a prefix of blocks resident and offloads the rest, never back") {
  PlacementRequest r;
  r.groups = model_groups();
  r.device_fixed_bytes = 50 * MiB;
  const uint64_t must = 50 * MiB + 10 * MiB + 64 * 1024 + 70 * MiB;  // fixed, norms, embed + head
  const uint64_t ring = 3 * slot_of(100 * MiB);

  r.gpu_budget = must + 10 * 100 * MiB;  // everything fits exactly: no streaming
  Placement p = place_groups(r);
  CHECK_FALSE(p.from_manifest);
  CHECK_FALSE(p.streams());
  CHECK(p.tier_groups[0] == 12);
  CHECK(p.device_bytes == must + 1000 * MiB);

  r.gpu_budget = must + ring + 2 * 100 * MiB + 50 * MiB;  // room for 2 blocks beside the ring
  p = place_groups(r);
  REQUIRE(p.streams());
  CHECK(p.n_slots == 3);
  for (int i = 1; i <= 10; ++i) CHECK(p.tiers[i] == (i <= 2 ? Tier::Gpu : Tier::Cpu));
  CHECK(p.tier_bytes[int(Tier::Cpu)] == 8 * 100 * MiB);
  CHECK(p.device_bytes <= *r.gpu_budget);
  CHECK(p.host_pinned_bytes == 8 * 100 * MiB);

  // Blocks of unequal size: once one spilled, a later smaller one stays off the device.
  r.groups[3].bytes = 300 * MiB;
  r.gpu_budget = must + 3 * slot_of(300 * MiB) + 2 * 100 * MiB + 50 * MiB;  // < all 1200 MiB of blocks
  p = place_groups(r);
  CHECK(p.tiers[1] == Tier::Gpu);
  CHECK(p.tiers[2] == Tier::Gpu);
  CHECK(p.tiers[3] == Tier::Cpu);
  CHECK(p.tiers[4] == Tier::Cpu);
  CHECK(p.slot_bytes == slot_of(300 * MiB));

  // A deeper prefetch needs more slots, so fewer blocks stay.
  r.groups = model_groups();
  r.gpu_budget = must + ring + 2 * 100 * MiB + 50 * MiB;
  r.prefetch = 4;
  p = place_groups(r);
  CHECK(p.n_slots == 5);
  CHECK(p.tiers[1] == Tier::Cpu);
}

TEST_CASE("a host budget sends the blocks past it to disk, with a staging ring on top") {
  PlacementRequest r;
  r.groups = model_groups();
  r.device_fixed_bytes = 50 * MiB;
  const uint64_t must = 50 * MiB + 10 * MiB + 64 * 1024 + 70 * MiB;
  r.gpu_budget = must + 3 * slot_of(100 * MiB);  // no block resident
  const uint64_t staging = (100 * MiB + 4095) / 4096 * 4096 + 2 * 4096;
  r.cpu_budget = 4 * 100 * MiB + 10 * MiB;  // 4 blocks pinned, 6 on disk
  Placement p = place_groups(r);
  for (int i = 1; i <= 10; ++i) CHECK(p.tiers[i] == (i <= 4 ? Tier::Cpu : Tier::Disk));
  CHECK(p.n_staging == 2);
  CHECK(p.staging_bytes == staging);
  CHECK(p.host_pinned_bytes == 4 * 100 * MiB + 2 * staging);
  CHECK(p.tier_groups[2] == 6);

  r.cpu_budget = 0;  // every offloaded block on disk
  p = place_groups(r);
  CHECK(p.tier_groups[int(Tier::Disk)] == 10);
  CHECK(p.tier_groups[int(Tier::Cpu)] == 0);
  CHECK(p.host_pinned_bytes == 2 * staging);

  r.prefetch = 3;  // a deeper prefetch: more slots on the device and more staging buffers
  r.gpu_budget = must + 4 * slot_of(100 * MiB);
  p = place_groups(r);
  CHECK(p.n_slots == 4);
  CHECK(p.n_staging == 3);

  // The CPU device: --cpu-mem bounds the in-place blocks; slots and staging come on top.
  r = PlacementRequest{};
  r.cuda = false;
  r.groups = model_groups();
  r.device_fixed_bytes = 50 * MiB;
  r.cpu_budget = 3 * 100 * MiB;
  p = place_groups(r);
  for (int i = 1; i <= 10; ++i) CHECK(p.tiers[i] == (i <= 3 ? Tier::Cpu : Tier::Disk));
  CHECK(p.tiers[0] == Tier::Cpu);
  CHECK(p.tiers[11] == Tier::Cpu);
  CHECK(p.device_bytes == must + 3 * 100 * MiB + 3 * slot_of(100 * MiB) + 2 * staging);
  r.cpu_budget = 0;
  p = place_groups(r);
  CHECK(p.tier_groups[int(Tier::Disk)] == 10);
}

TEST_CASE("budgets that cannot work are one-line errors saying what is needed") {
  PlacementRequest r;
  r.groups = model_groups();
  r.device_fixed_bytes = 50 * MiB;
  r.gpu_budget = 100 * MiB;  // embed + head + fixed alone are 130 MiB
  std::string e = error_of([&] { place_groups(r); });
  CHECK(one_line(e));
  CHECK(e.find("--gpu-mem 100.00 MiB is too small") != std::string::npos);
  CHECK(e.find("embed and head") != std::string::npos);

  r.gpu_budget = 200 * MiB;  // the must-have part fits, the ring of 3 slots does not
  e = error_of([&] { place_groups(r); });
  CHECK(one_line(e));
  CHECK(e.find("--prefetch") != std::string::npos);
  CHECK(e.find("slots") != std::string::npos);

  r.prefetch = 0;
  e = error_of([&] { place_groups(r); });
  CHECK(one_line(e));
  CHECK(e.find("--prefetch") != std::string::npos);

  r = PlacementRequest{};
  r.groups = model_groups();
  r.cuda = false;
  r.gpu_budget = 1 * MiB;
  e = error_of([&] { place_groups(r); });
  CHECK(one_line(e));
  CHECK(e.find("--gpu-mem") != std::string::npos);

}

TEST_CASE("group demands and fixed needs come from the manifest and the config") {
  offloadtest::TempDir dir;
  const nlohmann::json cfg = offloadtest::synthetic_config(3);
  const std::string path = dir.file("m.endor");
  offloadtest::write_tiered_container(path, cfg, 1, ValueType::F16, [](const std::string&) { return Tier::Gpu; });
  auto c = ContainerReader::open(path);
  const std::vector<GroupDemand> d = group_demands(c->manifest());
  REQUIRE(d.size() == 5);
  CHECK(d[0].name == "embed");
  CHECK_FALSE(d[0].streamable);
  CHECK(d[1].name == "layers.0");
  CHECK(d[1].streamable);
  CHECK(d[1].bytes == c->manifest().groups[1].size);
  CHECK(d[1].resident_bytes == 2 * 64 * 4);  // two RMSNorm weights of 64 as f32
  CHECK(d[4].name == "head");
  CHECK(d[4].resident_bytes == 64 * 4);
  for (const GroupDemand& g : d) CHECK(g.loaded);

  const ModelConfig mc = parse_model_config(cfg, path);
  const uint64_t kv_row = 2ull * 3 * (2 * 16) * 4;  // K and V, 3 layers, 2 kv heads x 16, f32
  const uint64_t a = device_fixed_bytes(mc, c->manifest(), 10, 1, false);
  const uint64_t b = device_fixed_bytes(mc, c->manifest(), 20, 1, false);
  CHECK(b - a == 10 * kv_row);
  // CUDA adds workspaces, and the prefill path (more than 8 tokens) its panel buffers.
  CHECK(device_fixed_bytes(mc, c->manifest(), 10, 1, true) > a);
  const uint64_t t8 = device_fixed_bytes(mc, c->manifest(), 10, 8, true);
  const uint64_t t9 = device_fixed_bytes(mc, c->manifest(), 10, 9, true);
  const uint64_t per_token = device_fixed_bytes(mc, c->manifest(), 10, 2, false) - a;
  CHECK(t9 - t8 > per_token);  // 9 tokens: one more token of scratch plus the DecodeGemm buffers

  const std::string text = describe_placement(place_groups(PlacementRequest{d, std::nullopt, std::nullopt, 0,
                                                                            std::nullopt, 2, true}));
  CHECK(text.find("gpu") != std::string::npos);
  CHECK(text.find("manifest") != std::string::npos);
}

TEST_CASE("CPU device: --cpu-mem covers the KV caches first; the cost model takes the longer lane") {
  PlacementRequest r;
  r.groups = model_groups();
  r.cuda = false;
  r.cpu_budget = 350 * MiB;
  const Placement roomy = place_groups(r);
  CHECK(roomy.tier_groups[int(Tier::Disk)] == 7);  // three blocks in place
  r.host_kv_bytes = 60 * MiB;
  const Placement p = place_groups(r);
  CHECK(p.tier_groups[int(Tier::Disk)] == 8);      // the KV caches leave room for two
  CHECK(p.host_kv_bytes == 60 * MiB);
  CHECK(describe_placement(p).find("kv cache: 60.00 MiB") != std::string::npos);

  // 8 disk blocks of 100 MiB at 1 GB/s: 838.9 ms of reads per step. One block computes in 10 ms
  // (2 in place, 8 streamed: 100 ms) + head 5 ms: disk-bound, per token = step / batch.
  CostInputs in;
  in.disk_gbps = 1.0;
  in.block_ms = 10;
  in.block_bytes = 100 * MiB;
  in.head_ms = 5;
  in.batch = 4;
  const CostPrediction disk = predict_step(p, r.groups, in);
  CHECK(disk.read_ms == doctest::Approx(8 * 100.0 * MiB / 1e6));
  CHECK(disk.compute_ms == doctest::Approx(100));
  CHECK(disk.copy_ms == 0);  // the CPU device reads into its slots
  CHECK(disk.step_ms == doctest::Approx(disk.read_ms));
  CHECK(disk.token_ms == doctest::Approx(disk.read_ms / 4));
  CHECK(std::string(disk.bound) == "disk");
  in.block_ms = 200;  // compute now longer than the reads
  const CostPrediction compute = predict_step(p, r.groups, in);
  CHECK(compute.step_ms == doctest::Approx(10 * 200 + 5));
  CHECK(std::string(compute.bound) == "compute");
}
