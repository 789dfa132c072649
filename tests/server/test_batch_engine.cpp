// The one batching engine (endor/batch_engine.h) on the sample model (samples/kjv-llama, packed
// here): driven as endor-infer --prompts drives it (generate_batch) and as endor-serve's scheduler
// drives it (serve::Scheduler, chunked prefill), the same prompts get the same greedy ids, which are
// also generate()'s of each prompt alone; the engine's decode-first steps, prefill budget,
// cache-size rule and KV accounting, step by step.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "../runtime/runtime_test_util.h"
#include "endor/batch_engine.h"
#include "endor/runtime.h"
#include "endor/serve_scheduler.h"
#include "endor/tokenizer.h"

using namespace endor;
using endor::test::TempDir;

namespace {

// Lengths from 1 to over 100 tokens, so that a prefill budget of a few tokens splits most of them.
const std::vector<std::string> kPrompts = {
    "In the beginning God created",
    "And the LORD spake unto Moses, saying, Speak unto the children of Israel, and say unto them",
    "Blessed",
    "Then Jesus said unto his disciples,",
    "And it came to pass in those days, that there went out a decree from Caesar Augustus, that all the world "
    "should be taxed. And all went to be taxed, every one into his own city. And Joseph also went up from "
    "Galilee, out of the city of Nazareth, into Judaea, unto the city of David, which is called Bethlehem",
    "The LORD is my shepherd; I shall not want. He maketh me to lie down",
    "For God so loved",
};
constexpr size_t kNew = 12;

struct Sample {
  TempDir dir;
  std::unique_ptr<ContainerReader> container;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::vector<std::vector<int32_t>> prompts;
};

// The sample at 50 % magnitude + int8 (the bitmap kernels, int8 activations), on one CPU thread.
std::unique_ptr<Sample> load_sample() {
  auto s = std::make_unique<Sample>();
  const std::string path = s->dir.file("m.endor");
  const std::string sample = std::string(ENDOR_SOURCE_DIR) + "/samples/kjv-llama";
  const auto r = test::run_capture(
      test::endor_pack() + " prune --method magnitude --sparsity 0.5 --quant int8 " + sample + " -o " + path, s->dir);
  INFO("endor-pack stderr: ", r.err);
  REQUIRE(r.status == 0);
  s->container = ContainerReader::open(path);
  s->tokenizer = std::make_unique<Tokenizer>(
      Tokenizer::from_json(*s->container->file("tokenizer.json"), "tokenizer.json"));
  s->backend = make_backend("cpu", 1);
  s->model = load_model(*s->container, *s->backend);
  for (const std::string& p : kPrompts) s->prompts.push_back(s->tokenizer->encode(p, true));
  return s;
}

// endor-serve's path: every prompt submitted at once to a Scheduler (greedy, EOS ignored, kNew
// tokens), each job's ids collected from its updates until it finishes.
std::vector<std::vector<int32_t>> serve_ids(Sample& s, size_t parallel, size_t prefill_chunk) {
  serve::SchedulerOptions options;
  options.parallel = parallel;
  options.prefill_chunk = prefill_chunk;
  options.ctx = s.model->config().max_positions;
  serve::Scheduler scheduler(*s.model, *s.tokenizer, options);
  std::vector<std::shared_ptr<serve::Job>> jobs;
  for (const auto& p : s.prompts) {
    serve::JobSpec spec;
    spec.prompt = p;
    spec.max_tokens = kNew;
    spec.ignore_eos = true;
    jobs.push_back(scheduler.submit(spec));
  }
  std::vector<std::vector<int32_t>> ids(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    for (;;) {
      serve::Job::Update u = jobs[i]->take(std::chrono::milliseconds(200));
      ids[i].insert(ids[i].end(), u.ids.begin(), u.ids.end());
      if (u.finish) {
        CHECK(*u.finish == "length");
        CHECK(u.n_generated == kNew);
        break;
      }
      REQUIRE(std::chrono::steady_clock::now() < deadline);
    }
  }
  return ids;
}

}  // namespace

TEST_CASE("one engine, two front ends: generate_batch and endor-serve's scheduler give the same greedy ids") {
  std::unique_ptr<Sample> s = load_sample();
  REQUIRE(s->prompts[4].size() > 64);  // the long prompt takes several chunks below
  GenerationOptions alone_options;
  alone_options.max_new_tokens = kNew;
  alone_options.stop_at_eos = false;
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : s->prompts) {
    Sampler sampler(SamplerOptions{});
    alone.push_back(generate(*s->model, p, sampler, alone_options, {}));
    REQUIRE(alone.back().size() == kNew);
  }
  // endor-infer's path: generate_batch, 3 sequences at a time, each prompt prefilled whole.
  BatchGenerationOptions batch_options;
  batch_options.batch = 3;
  batch_options.max_new_tokens = kNew;
  batch_options.stop_at_eos = false;
  const auto cli = generate_batch(*s->model, s->prompts, SamplerOptions{}, batch_options);
  REQUIRE(cli.size() == s->prompts.size());
  // endor-serve's path at its default chunk (256: every prompt here whole), and at chunks of 5 and
  // 16 tokens (prompts prefilled over several steps while other slots decode).
  for (size_t chunk : {size_t(256), size_t(16), size_t(5)}) {
    CAPTURE(chunk);
    const auto served = serve_ids(*s, 3, chunk);
    for (size_t i = 0; i < s->prompts.size(); ++i) {
      CAPTURE(i);
      CHECK(cli[i] == alone[i]);
      CHECK(served[i] == cli[i]);
    }
  }
}

TEST_CASE("batch engine: decode-first steps, the prefill budget, the cache-size rule and KV accounting") {
  std::unique_ptr<Sample> s = load_sample();
  const ModelConfig& c = s->model->config();
  const uint64_t kv_dim = uint64_t(c.n_kv_heads) * c.head_dim;
  // The formula, by hand for this model: keys and values, 6 layers, 4 kv heads of 32, f32.
  CHECK(kv_cache_bytes(c.n_layers, 10, kv_dim, KvDtype::F32) == 2ull * 6 * 10 * 128 * 4);
  CHECK(kv_cache_bytes(c.n_layers, 10, kv_dim, KvDtype::F16) == 2ull * 6 * 10 * 128 * 2);
  CHECK(kv_cache_bytes(1u << 20, uint64_t(1) << 40, uint64_t(1) << 20, KvDtype::F32) == UINT64_MAX);
  // The rule: prompt + new - 1 (the last token is never fed back), 0 new as 1, at most ctx.
  CHECK(kv_capacity_for(10, 5, 256) == 14);
  CHECK(kv_capacity_for(10, 0, 256) == 10);
  CHECK(kv_capacity_for(10, 1, 256) == 10);
  CHECK(kv_capacity_for(250, 100, 256) == 256);
  CHECK(kv_capacity_for(256, 1, 256) == 256);
  CHECK(kv_capacity_for(3, SIZE_MAX, 256) == 256);

  BatchEngineOptions options;
  options.max_sequences = 2;
  options.prefill_chunk = 4;
  BatchEngine engine(*s->model, options);
  CHECK(engine.options().ctx == c.max_positions);
  const std::vector<int32_t>& short_prompt = s->prompts[2];  // "Blessed": 2 tokens with BOS
  const std::vector<int32_t>& long_prompt = s->prompts[1];
  REQUIRE(short_prompt.size() <= 4);
  REQUIRE(long_prompt.size() > 8);
  BatchSequence a;
  a.tag = 7;
  a.prompt = short_prompt;
  a.max_new_tokens = 20;
  a.stop_at_eos = false;
  engine.admit(a);
  CHECK_THROWS_AS(engine.admit(a), Error);  // the tag is taken
  CHECK(engine.kv_bytes() == kv_cache_bytes(c.n_layers, kv_capacity_for(a.prompt.size(), 20, c.max_positions), kv_dim,
                                            KvDtype::F32));
  BatchStepResult r = engine.step();
  REQUIRE(r.tokens.size() == 1);
  CHECK(!r.decode_only);
  CHECK(r.tokens[0].tag == 7);

  BatchSequence b;
  b.tag = 9;
  b.prompt = long_prompt;
  b.max_new_tokens = 3;
  b.stop_at_eos = false;
  engine.admit(b);
  CHECK(engine.full());
  CHECK_THROWS_AS(engine.admit(BatchSequence{}), Error);
  CHECK(engine.kv_bytes() == kv_cache_bytes(c.n_layers, kv_capacity_for(a.prompt.size(), 20, c.max_positions), kv_dim,
                                            KvDtype::F32) +
                                 kv_cache_bytes(c.n_layers, kv_capacity_for(b.prompt.size(), 3, c.max_positions),
                                                kv_dim, KvDtype::F32));
  // The long prompt takes ceil(n / 4) steps of the 4-token budget; sequence 7 decodes in every one
  // of them (decode first), and 9's first token comes with its last chunk.
  const size_t chunks = (long_prompt.size() + 3) / 4;
  size_t a_tokens = 1;
  for (size_t i = 0; i < chunks; ++i) {
    CAPTURE(i);
    r = engine.step();
    CHECK(!r.decode_only);
    REQUIRE(!r.tokens.empty());
    CHECK(r.tokens[0].tag == 7);
    CHECK(r.tokens[0].n_generated == ++a_tokens);
    CHECK(r.tokens.size() == (i + 1 == chunks ? 2u : 1u));
  }
  CHECK(r.tokens.back().tag == 9);
  CHECK(r.tokens.back().n_generated == 1);
  // Both decode now; 9 leaves at its third token (MaxTokens), and its cache with it.
  for (size_t n = 2; n <= 3; ++n) {
    r = engine.step();
    CHECK(r.decode_only);
    REQUIRE(r.tokens.size() == 2);
    CHECK(r.tokens[1].n_generated == n);
  }
  CHECK(r.tokens[1].finish == StopReason::MaxTokens);
  CHECK(!r.tokens[0].finish);
  CHECK(engine.size() == 1);
  CHECK(engine.kv_bytes() == kv_cache_bytes(c.n_layers, kv_capacity_for(a.prompt.size(), 20, c.max_positions), kv_dim,
                                            KvDtype::F32));
  CHECK(engine.release(7));
  CHECK(!engine.release(7));
  CHECK(engine.empty());
  CHECK(engine.kv_bytes() == 0);
  CHECK(engine.step().tokens.empty());  // nothing admitted: no forward call
  CHECK(engine.stats().n_steps == 1 + chunks + 2);
  CHECK(engine.stats().n_decode_steps == 2);
  CHECK(engine.stats().n_generated == a_tokens + 2 + 3);
  CHECK(engine.stats().max_active == 2);
}

TEST_CASE("batch engine: a sequence ends at an end token or at its cache's end") {
  std::unique_ptr<Sample> s = load_sample();
  const std::vector<int32_t>& prompt = s->prompts[0];
  Sampler sampler(SamplerOptions{});
  GenerationOptions go;
  go.max_new_tokens = 4;
  go.stop_at_eos = false;
  const std::vector<int32_t> ids = generate(*s->model, prompt, sampler, go, {});
  REQUIRE(ids.size() == 4);
  // The stop id below must first come third, and no EOS before it.
  REQUIRE(ids[0] != ids[2]);
  REQUIRE(ids[1] != ids[2]);
  const std::vector<int32_t>& eos = s->model->config().eos_token_ids;
  for (size_t i = 0; i < 3; ++i) REQUIRE(std::find(eos.begin(), eos.end(), ids[i]) == eos.end());

  BatchEngine engine(*s->model, BatchEngineOptions{});
  // The third greedy token named as a stop id: the sequence ends there with Eos.
  BatchSequence a;
  a.tag = 1;
  a.prompt = prompt;
  a.max_new_tokens = 100;
  a.stop_ids = {ids[2]};
  engine.admit(a);
  // A ctx of prompt + 2 tokens: two tokens fed back at most, so the third ends it with Context.
  BatchEngineOptions small;
  small.ctx = prompt.size() + 2;
  BatchEngine tight(*s->model, small);
  BatchSequence b = a;
  b.stop_ids.clear();
  tight.admit(b);
  std::vector<int32_t> got_a, got_b;
  std::optional<StopReason> end_a, end_b;
  while (!engine.empty() || !tight.empty()) {
    for (BatchEngine* e : {&engine, &tight}) {
      for (const BatchToken& t : e->step().tokens) {
        (e == &engine ? got_a : got_b).push_back(t.id);
        if (t.finish) (e == &engine ? end_a : end_b) = t.finish;
      }
    }
  }
  CHECK(got_a == std::vector<int32_t>(ids.begin(), ids.begin() + 3));
  CHECK(end_a == StopReason::Eos);
  CHECK(got_b == std::vector<int32_t>(ids.begin(), ids.begin() + 3));
  CHECK(end_b == StopReason::Context);
}
