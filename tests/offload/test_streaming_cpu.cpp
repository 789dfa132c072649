// Streaming on the CPU device: blocks on the disk tier come through the reader and host slots;
// logits equal the all-resident model's bit for bit, for every prefetch depth, mixed tiers, the
// block-level API in any order (calibration), and the fixture architectures packed by endor-pack.
#include <doctest/doctest.h>

#include <cmath>
#include <deque>

#include "offload_test_util.h"

using namespace endor;
using namespace endor::offloadtest;

namespace {

// Fills the slot ring makes for `positions` acquires of n streamed groups in execution order with
// k + 1 slots (group p always in slot p mod (k+1); a fill only when the slot holds another group),
// and the fills of the prefetches issued past the last acquire.
std::pair<uint64_t, uint64_t> expected_fills(uint64_t positions, uint32_t n, uint32_t k) {
  std::vector<int64_t> content(k + 1, -1);
  uint64_t fills = 0, trailing = 0;
  const uint64_t ahead = std::min<uint64_t>(k, n - 1);
  for (uint64_t a = 0; a < positions + ahead; ++a) {
    const int64_t p = int64_t(a % n);
    int64_t& c = content[size_t(p % (k + 1))];
    if (c != p) {
      (a < positions ? fills : trailing) += 1;
      c = p;
    }
  }
  return {fills, trailing};
}

std::vector<float> resident_logits(const ContainerReader& c, const std::vector<int32_t>& prompt, size_t steps) {
  auto backend = make_cpu_backend(1);
  auto model = load_model(c, *backend);
  return run_sequence(*model, prompt, steps);
}

struct Streamed {
  std::vector<float> logits;
  OffloadStats stats;
};

Streamed streamed_logits(const ContainerReader& c, const Placement& p, uint32_t prefetch, DiskIo io,
                         const std::vector<int32_t>& prompt, size_t steps) {
  auto backend = make_cpu_backend(1);
  StreamingOptions o;
  o.prefetch = prefetch;
  o.disk_io = io;
  auto weights = make_streaming_weights(c, *backend, p, o);
  Streamed s;
  {
    auto model = load_model(c, *backend, weights.get());
    s.logits = run_sequence(*model, prompt, steps);
  }
  weights->synchronize();
  s.stats = weights->stats();
  return s;
}

}  // namespace

TEST_CASE("cpu streaming: disk-tier blocks give the resident logits exactly, for every prefetch depth") {
  TempDir dir;
  const nlohmann::json cfg = synthetic_config(5);
  const std::string path = dir.file("m.endor");
  write_tiered_container(path, cfg, 11, ValueType::F16, [](const std::string&) { return Tier::Gpu; });
  auto c = ContainerReader::open(path);
  const std::vector<int32_t> prompt = prompt_ids(6, 64);
  const size_t steps = 7;
  const std::vector<float> want = resident_logits(*c, prompt, steps);
  const uint64_t layer_bytes = c->manifest().groups[1].size;

  for (uint32_t k = 1; k <= 5; ++k) {
    for (DiskIo io : {DiskIo::Auto, DiskIo::Buffered}) {
      CAPTURE(k);
      const Placement p = placement_with(*c, false, k, all_disk);
      REQUIRE(p.tier_groups[int(Tier::Disk)] == 5);
      const Streamed s = streamed_logits(*c, p, k, io, prompt, steps);
      CHECK(bit_equal(s.logits, want));
      // 8 forward calls x 5 blocks; with k + 1 >= 5 slots every block stays after its first fetch.
      CHECK(s.stats.blocks == 8 * 5);
      const auto [fills, trailing] = expected_fills(8 * 5, 5, k);
      if (k + 1 >= 5) CHECK(fills == 5);
      if (k == 1) CHECK(fills == 8 * 5);
      CHECK(s.stats.fills[int(Tier::Disk)] == fills);
      CHECK(s.stats.bytes[int(Tier::Disk)] == fills * layer_bytes);
      // The reader also counts the prefetches issued after the last block. On the CPU device the
      // reads land in the host slots: nothing is copied.
      CHECK(s.stats.disk.bytes == (fills + trailing) * layer_bytes);
      CHECK(s.stats.copy_bytes == 0);
      CHECK(s.stats.fills[int(Tier::Cpu)] == 0);
    }
  }
}

TEST_CASE("cpu streaming: 2:4 int4 weights are marked from the file's bytes, and a streamed weight keeps the mark") {
  // write_tiered_container's bitmap matrices keep every other column: 2:4. The weight store checks
  // that (is_two_of_four) and marks the view the backend gets (the AVX-512 one-token kernel's
  // gather path); a streamed weight is prepared before its slot holds the bytes, so the mark must
  // come with the view, and its logits stay bit-equal to the resident model's.
  struct Recorder final : WeightProvider {
    bool hide = false;  // hand the backend the view unmarked (the expand path)
    size_t int4_bitmaps = 0, marked = 0;
    std::deque<TensorView> views;
    std::unique_ptr<Weight> prepare(Backend& backend, const TensorView& view, uint32_t) override {
      if (view.layout.value_type == ValueType::I4 && view.layout.encoding == Encoding::Bitmap) {
        ++int4_bitmaps;
        marked += view.two_of_four;
      }
      if (!hide) return backend.prepare_weight(view);
      views.push_back(view);
      views.back().two_of_four = false;
      return backend.prepare_weight(views.back());
    }
    void acquire(uint32_t) override {}
    void release(uint32_t) override {}
  };
  TempDir dir;
  const nlohmann::json cfg = synthetic_config(3);
  const std::string path = dir.file("m.endor");
  write_tiered_container(path, cfg, 13, ValueType::I4, [](const std::string&) { return Tier::Gpu; });
  auto c = ContainerReader::open(path);
  const std::vector<int32_t> prompt = prompt_ids(5, 64);
  const size_t steps = 6;
  auto run = [&](Recorder& rec) {
    auto backend = make_cpu_backend(1);
    auto model = load_model(*c, *backend, &rec);
    return run_sequence(*model, prompt, steps);
  };
  Recorder marked, hidden;
  hidden.hide = true;
  const std::vector<float> want = run(marked), unmarked = run(hidden);
  CHECK(marked.int4_bitmaps == 2 * 3);  // q_proj and up_proj of each block
  CHECK(marked.marked == marked.int4_bitmaps);
  CHECK(bit_equal(resident_logits(*c, prompt, steps), want));
  const Streamed s = streamed_logits(*c, placement_with(*c, false, 1, all_disk), 1, DiskIo::Auto, prompt, steps);
  CHECK(s.stats.fills[int(Tier::Disk)] > 0);
  CHECK(bit_equal(s.logits, want));
  // Unmarked, the same function by the expand path: close, and on AVX-512 rounded differently (so
  // the comparisons above did see the gather path).
  REQUIRE(unmarked.size() == want.size());
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, double(std::fabs(unmarked[i] - want[i])));
    scale = std::max(scale, double(std::fabs(want[i])));
  }
  CHECK(worst <= 1e-4 * scale);
  if (cpu::cpu_has_avx512()) CHECK_FALSE(bit_equal(unmarked, want));
}

TEST_CASE("cpu streaming: mixed tiers, fixed ids through generate(), and calibration-style block access") {
  TempDir dir;
  const nlohmann::json cfg = synthetic_config(6);
  const std::string path = dir.file("m.endor");
  write_tiered_container(path, cfg, 12, ValueType::F32, [](const std::string&) { return Tier::Gpu; });
  auto c = ContainerReader::open(path);
  const std::vector<int32_t> prompt = prompt_ids(9, 64);

  auto odd_on_disk = [](const std::string& g) { return (g.back() - '0') % 2 ? Tier::Disk : Tier::Cpu; };
  const Placement p = placement_with(*c, false, 2, odd_on_disk);
  CHECK(p.tier_groups[int(Tier::Disk)] == 3);
  const Streamed s = streamed_logits(*c, p, 2, DiskIo::Auto, prompt, 5);
  CHECK(bit_equal(s.logits, resident_logits(*c, prompt, 5)));

  // generate() twice in a row (a second prompt starts mid-sequence of the ring).
  auto backend = make_cpu_backend(1);
  auto ref_model = load_model(*c, *backend);
  StreamingOptions o;
  o.prefetch = 1;
  auto weights = make_streaming_weights(*c, *backend, placement_with(*c, false, 1, all_disk), o);
  auto model = load_model(*c, *backend, weights.get());
  for (int round = 0; round < 2; ++round) {
    SamplerOptions so;
    Sampler a(so), b(so);
    GenerationOptions go;
    go.max_new_tokens = 6 + round;
    go.stop_at_eos = false;
    const std::vector<int32_t> p2 = prompt_ids(4 + round, 64);
    CHECK(generate(*model, p2, a, go, {}) == generate(*ref_model, p2, b, go, {}));
  }

  // The block-level API in any order: each call gives the resident model's result.
  const size_t n = 5;
  std::vector<float> h_ref(n * 64), h(n * 64);
  ref_model->embed(prompt.data(), n, h_ref.data());
  model->embed(prompt.data(), n, h.data());
  CHECK(h == h_ref);
  size_t hook_calls = 0;
  for (uint32_t layer : {3u, 0u, 5u, 5u, 1u, 4u, 2u}) {
    ref_model->forward_block(layer, h_ref.data(), n, {});
    model->forward_block(layer, h.data(), n, [&](uint32_t l, const std::string&, const float*, size_t, size_t) {
      CHECK(l == layer);
      ++hook_calls;
    });
    CHECK(bit_equal(h, h_ref));
  }
  CHECK(hook_calls == 7 * 7);
  std::vector<float> la, lb;
  ref_model->head(h_ref.data(), n, la);
  model->head(h.data(), n, lb);
  CHECK(bit_equal(la, lb));
}

TEST_CASE("cpu streaming: every fixture architecture packed with disk tiers gives the resident logits") {
  TempDir dir;
  for (const char* fixture : {"opt-tiny", "opt-postln-proj", "llama-tiny", "llama-gqa-bf16", "qwen2-tiny", "qwen3-tiny",
                              "mistral-tiny", "qwen3-moe-tiny", "mixtral-tiny"}) {
    CAPTURE(fixture);
    const std::string resident = dir.file(std::string(fixture) + ".endor");
    const std::string on_disk = dir.file(std::string(fixture) + "-disk.endor");
    const std::string src = test::fixture_dir(fixture);
    REQUIRE(test::run_command(test::endor_pack() + " prune " + src + " -o " + resident +
                              " --sparsity 0.5 --quant int4 >/dev/null 2>&1") == 0);
    REQUIRE(test::run_command(test::endor_pack() + " prune " + src + " -o " + on_disk +
                              " --sparsity 0.5 --quant int4 --gpu-mem 0 --cpu-mem 0 >/dev/null 2>&1") == 0);
    auto a = ContainerReader::open(resident);
    auto b = ContainerReader::open(on_disk);
    PlacementRequest r;
    r.groups = group_demands(b->manifest());
    r.cuda = false;
    r.prefetch = 1;
    const Placement p = place_groups(r);  // the manifest's tiers: every block on disk
    CHECK(p.from_manifest);
    uint32_t offloadable = 0;  // the blocks, and an MoE file's experts (groups of their own)
    for (const GroupDemand& g : r.groups) offloadable += g.streamable || g.expert;
    CHECK(offloadable >= 2);
    CHECK(p.tier_groups[int(Tier::Disk)] == offloadable);
    const std::vector<int32_t> prompt = prompt_ids(10, 512);
    const Streamed s = streamed_logits(*b, p, 1, DiskIo::Auto, prompt, 4);
    CHECK(bit_equal(s.logits, resident_logits(*a, prompt, 4)));
  }
}
