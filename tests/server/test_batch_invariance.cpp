// Batch invariance end to end (issue 37): a sequence's greedy ids through the one batching engine
// (BatchEngine, which endor-infer --prompts and endor-serve drive) equal its ids generated alone
// (generate(), endor-infer -p), bit for bit, whatever arrives with it and in what order, the slot
// count, the prefill chunk and the thread count, on every instruction set this CPU runs. Random
// prompts (token ids), random arrival steps; on the fixtures (tests/fixtures/models) in several weight
// forms (the MoE fixtures too: routed experts), and on SmolLM2 packed from the cached GGUF when it is
// there (scripts/fetch_smollm2.sh; skipped, saying so, when not). Backends with
// cpu::Options::batch_invariant, the front ends' default.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../runtime/runtime_test_util.h"
#include "endor/batch_engine.h"
#include "endor/runtime.h"

using namespace endor;
using endor::test::TempDir;

namespace {

using Ids = std::vector<int32_t>;

std::vector<cpu::Isa> isas() {
  std::vector<cpu::Isa> v{cpu::Isa::Portable};
  if (cpu::cpu_has_avx2()) v.push_back(cpu::Isa::Avx2);
  if (cpu::cpu_has_avx512()) v.push_back(cpu::Isa::Avx512);
  return v;
}
const char* isa_name(cpu::Isa i) { return i == cpu::Isa::Avx512 ? "avx512" : i == cpu::Isa::Avx2 ? "avx2" : "portable"; }

std::unique_ptr<Backend> invariant_backend(cpu::Isa isa, int threads) {
  cpu::Options o;
  o.isa = isa;
  o.n_threads = threads;
  o.batch_invariant = true;
  return make_cpu_backend(o);
}

std::vector<Ids> random_prompts(size_t n, size_t max_len, uint32_t vocab, std::mt19937& rng) {
  std::vector<Ids> prompts(n);
  for (Ids& p : prompts) {
    p.resize(1 + rng() % max_len);
    for (int32_t& id : p) id = int32_t(rng() % vocab);
  }
  return prompts;
}

std::vector<Ids> alone_ids(Model& m, const std::vector<Ids>& prompts, size_t n_new) {
  std::vector<Ids> out;
  GenerationOptions go;
  go.max_new_tokens = n_new;
  go.stop_at_eos = false;
  for (const Ids& p : prompts) {
    Sampler sampler(SamplerOptions{});
    out.push_back(generate(m, p, sampler, go, {}));
  }
  return out;
}

// The prompts through one BatchEngine: they arrive in a random order, a random number at each step
// (at least one when the engine is idle), into `slots` slots with a prefill budget of `chunk`.
std::vector<Ids> engine_ids(Model& m, const std::vector<Ids>& prompts, size_t n_new, size_t slots, size_t chunk,
                            std::mt19937& rng) {
  BatchEngineOptions o;
  o.max_sequences = slots;
  o.prefill_chunk = chunk;
  BatchEngine engine(m, o);
  std::vector<size_t> order(prompts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<Ids> out(prompts.size());
  size_t next = 0;
  while (next < order.size() || !engine.empty()) {
    size_t arrive = rng() % 3;
    if (engine.empty()) arrive = std::max<size_t>(arrive, 1);
    for (; arrive > 0 && next < order.size() && !engine.full(); --arrive, ++next) {
      BatchSequence s;
      s.tag = order[next];
      s.prompt = prompts[order[next]];
      s.max_new_tokens = n_new;
      s.stop_at_eos = false;
      engine.admit(s);
    }
    const BatchStepResult r = engine.step();
    REQUIRE(!r.error);
    for (const BatchToken& t : r.tokens) out[t.tag].push_back(t.id);
  }
  return out;
}

// Every prompt alone on one thread, then through the engine (and generate_batch) at several slot
// counts, chunks and thread counts, on every ISA: the same ids.
void check_invariance(const ContainerReader& container, const std::string& what, size_t n_prompts, size_t max_len,
                      size_t n_new, uint32_t seed, size_t n_configs) {
  std::mt19937 rng(seed);
  for (cpu::Isa isa : isas()) {
    auto one = invariant_backend(isa, 1);
    auto m1 = load_model(container, *one);
    const ModelConfig& c = m1->config();
    const std::vector<Ids> prompts =
        random_prompts(n_prompts, std::min<size_t>(max_len, c.max_positions - n_new), c.vocab, rng);
    const std::vector<Ids> alone = alone_ids(*m1, prompts, n_new);
    auto two = invariant_backend(isa, 2);
    auto m2 = load_model(container, *two);
    const size_t slot_choices[] = {1, 2, 3, 5, 8};
    const size_t chunk_choices[] = {1, 3, 7, 16, 64, SIZE_MAX};
    for (size_t k = 0; k < n_configs; ++k) {
      const size_t slots = slot_choices[rng() % std::size(slot_choices)];
      const size_t chunk = chunk_choices[rng() % std::size(chunk_choices)];
      Model& m = k % 2 ? *m1 : *m2;
      const std::string label = what + ", " + isa_name(isa) + ", " + (k % 2 ? "1 thread" : "2 threads") + ", " +
                                std::to_string(slots) + " slots, prefill chunk " +
                                (chunk == SIZE_MAX ? std::string("unbounded") : std::to_string(chunk));
      CAPTURE(label);
      const std::vector<Ids> got = engine_ids(m, prompts, n_new, slots, chunk, rng);
      for (size_t i = 0; i < prompts.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i] == alone[i]);
      }
    }
    // endor-infer --prompts --batch N: generate_batch, every prompt whole in the step it joins.
    BatchGenerationOptions bo;
    bo.batch = 1 + rng() % 8;
    bo.max_new_tokens = n_new;
    bo.stop_at_eos = false;
    const std::vector<Ids> batched = generate_batch(*m2, prompts, SamplerOptions{}, bo);
    const std::string label = what + ", " + isa_name(isa) + ", generate_batch of " + std::to_string(bo.batch);
    CAPTURE(label);
    CHECK(batched == alone);
  }
}

// Logits, bit for bit: token sequences (teacher forced, no sampling) run alone in one forward()
// (every position's logits), and in a random schedule of forward_batch steps, each taking a random
// subset of the unfinished sequences with a random chunk of each (1 token: a decode row). Every
// chunk's last-row logits equal the alone run's at that position. Greedy ids can agree by margin
// where logits do not; this cannot. Also with the f16 KV cache.
void check_logits(const ContainerReader& container, const std::string& what, size_t n_seqs, size_t max_len,
                  uint32_t seed) {
  std::mt19937 rng(seed);
  for (cpu::Isa isa : isas())
    for (KvDtype kv : {KvDtype::F32, KvDtype::F16}) {
      auto one = invariant_backend(isa, 1);
      auto m1 = load_model(container, *one);
      m1->set_kv_dtype(kv);
      const ModelConfig& c = m1->config();
      const size_t V = c.vocab;
      const std::vector<Ids> seqs = random_prompts(n_seqs, std::min<size_t>(max_len, c.max_positions), c.vocab, rng);
      std::vector<std::vector<float>> alone(n_seqs);
      for (size_t i = 0; i < n_seqs; ++i) {
        auto cache = m1->make_cache(seqs[i].size());
        m1->forward(seqs[i].data(), seqs[i].size(), *cache, true, alone[i]);
      }
      auto two = invariant_backend(isa, 2);
      auto m2 = load_model(container, *two);
      m2->set_kv_dtype(kv);
      std::vector<std::unique_ptr<KvCache>> caches;
      for (const Ids& s : seqs) caches.push_back(m2->make_cache(s.size()));
      std::vector<size_t> done(n_seqs, 0);
      size_t bad = 0, steps = 0, remaining = 0;
      for (const Ids& s : seqs) remaining += s.size();
      std::vector<float> logits;
      while (remaining > 0) {
        std::vector<Model::SequenceStep> batch;
        std::vector<size_t> who;
        for (size_t i = 0; i < n_seqs; ++i) {
          const size_t left = seqs[i].size() - done[i];
          if (left == 0 || rng() % 3 == 0) continue;
          const size_t n = rng() % 2 ? 1 : 1 + rng() % left;
          batch.push_back({seqs[i].data() + done[i], n, caches[i].get()});
          who.push_back(i);
        }
        if (batch.empty()) continue;
        m2->forward_batch(batch.data(), batch.size(), logits);
        ++steps;
        for (size_t k = 0; k < batch.size(); ++k) {
          const size_t i = who[k], row = done[i] + batch[k].n - 1;
          bad += std::memcmp(logits.data() + k * V, alone[i].data() + row * V, V * 4) != 0;
          done[i] += batch[k].n;
          remaining -= batch[k].n;
        }
      }
      const std::string label =
          what + ", " + isa_name(isa) + (kv == KvDtype::F16 ? ", f16 KV" : "") + ", steps " + std::to_string(steps);
      CAPTURE(label);
      CHECK(bad == 0);
    }
}

std::string pack(const TempDir& dir, const std::string& args, const std::string& name) {
  const std::string out = dir.file(name + ".endor");
  const std::string cmd = test::endor_pack() + " " + args + " -o " + out + " >" + dir.file("pack.log") + " 2>&1";
  REQUIRE_MESSAGE(test::run_command(cmd) == 0, test::read_text(dir.file("pack.log")));
  return out;
}

std::string smollm2_gguf() {
  const char* c = std::getenv("ENDOR_CACHE");
  const char* home = std::getenv("HOME");
  const std::string cache = c ? std::string(c) : std::string(home ? home : "") + "/.cache/endor";
  return cache + "/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace

TEST_CASE("batch invariance: the fixtures' greedy ids alone = through the engine, any arrival, slots, chunk, threads, ISA") {
  TempDir dir;
  struct Variant {
    const char* model;
    const char* args;  // endor-pack arguments before the checkpoint
  };
  // Weight forms: f32, f16, bf16, bitmap int8/int8g/int4/int4k (int8 and f16 activations);
  // MHA, GQA, a sliding window, q/k/v biases, q/k norms, OPT's learned positions and LayerNorm.
  const Variant variants[] = {
      {"llama-tiny", "convert --dtype f16"},
      {"llama-tiny", "prune --method magnitude --sparsity 0.5 --quant int8"},
      {"llama-gqa-bf16", "convert --dtype bf16"},
      {"mistral-tiny", "prune --method magnitude --sparsity 0.5 --quant int4"},
      {"qwen2-tiny", "prune --method magnitude --sparsity 0.5 --quant int8g"},
      {"qwen3-tiny", "prune --method magnitude --sparsity 0.5 --quant int4k"},
      {"opt-tiny", "convert --dtype f32"},
      // MoE (issue 39): routing per range of rows that shares a Linear call (docs/moe.md "In a batch").
      {"qwen3-moe-tiny", "prune --method magnitude --sparsity 0.5 --quant int4"},
      {"mixtral-tiny", "convert --dtype f16"},
  };
  uint32_t seed = 1;
  for (const Variant& v : variants) {
    const std::string path = pack(dir, std::string(v.args) + " " + test::fixture_dir(v.model), v.model + std::to_string(seed));
    auto container = ContainerReader::open(path);
    check_logits(*container, std::string(v.model) + " " + v.args, 6, 60, seed);
    check_invariance(*container, std::string(v.model) + " " + v.args, 8, 40, 12, seed++, 4);
  }
}

TEST_CASE("batch invariance: SmolLM2 (the cached GGUF, int8 at 50 %) alone = through the engine") {
  const std::string gguf = smollm2_gguf();
  if (!test::file_exists(gguf)) {
    MESSAGE("SKIPPED: needs " << gguf << " (scripts/fetch_smollm2.sh)");
    return;
  }
  TempDir dir;
  const std::string path = pack(dir, "prune --method magnitude --sparsity 0.5 --quant int8 " + gguf, "smollm2");
  auto container = ContainerReader::open(path);
  check_logits(*container, "SmolLM2 int8 @ 50 %", 3, 16, 36);
  check_invariance(*container, "SmolLM2 int8 @ 50 %", 6, 24, 6, 37, 2);
}
