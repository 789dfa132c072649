// The runtime on small synthetic containers written here (no fixtures, no packer): loading errors,
// KV-cache consistency, context limits, perplexity windows, .npy output, backend choice.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "endor/runtime.h"
#include "runtime_test_util.h"

using namespace endor;
using endor::test::TempDir;

namespace {

// One thread: these models are tiny, and OpenMP barriers on a busy shared machine cost more than
// the work. (The KV-cache test below also runs with two threads.)
struct Loaded {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ContainerReader> reader;
  std::unique_ptr<Model> model;
  explicit Loaded(const std::string& path, int n_threads = 1) : backend(make_cpu_backend(n_threads)) {
    reader = ContainerReader::open(path);
    model = load_model(*reader, *backend);
  }
};

std::string load_error(const std::string& path) {
  try {
    Loaded l(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

// Full-sequence logits of `ids` in one forward pass from an empty cache.
std::vector<float> full_logits(Model& m, const std::vector<int32_t>& ids) {
  auto cache = m.make_cache(ids.size());
  std::vector<float> logits;
  m.forward(ids.data(), ids.size(), *cache, true, logits);
  return logits;
}

// Logits of `ids` through one cache: the first `prompt` tokens in one forward pass (all their
// logits), then one token per pass.
std::vector<float> incremental_logits(Model& m, const std::vector<int32_t>& ids, size_t prompt) {
  auto cache = m.make_cache(ids.size());
  std::vector<float> logits, all;
  m.forward(ids.data(), prompt, *cache, true, logits);
  all = logits;
  for (size_t t = prompt; t < ids.size(); ++t) {
    m.forward(&ids[t], 1, *cache, false, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

}  // namespace

TEST_CASE("a missing tensor or a shape disagreeing with config.json is one clear error") {
  TempDir dir;
  const nlohmann::json cfg = test::synthetic_llama_config();
  auto tensors = test::synthetic_llama_tensors(cfg);

  auto no_up = tensors;
  no_up.erase(std::remove_if(no_up.begin(), no_up.end(),
                             [](const auto& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; }),
              no_up.end());
  test::write_synthetic_container(dir.file("missing.endor"), cfg, no_up, 1);
  std::string e = load_error(dir.file("missing.endor"));
  CHECK(e.find(dir.file("missing.endor")) == 0);
  CHECK(e.find("missing tensor") != std::string::npos);
  CHECK(e.find("layers.1.mlp.up_proj.weight") != std::string::npos);
  CHECK(e.find('\n') == std::string::npos);

  auto bad_k = tensors;
  for (auto& t : bad_k)
    if (t.name == "model.layers.0.self_attn.k_proj.weight") t.shape = {32, 32};  // config: 2·8 rows
  test::write_synthetic_container(dir.file("shape.endor"), cfg, bad_k, 1);
  e = load_error(dir.file("shape.endor"));
  CHECK(e.find("model.layers.0.self_attn.k_proj.weight") != std::string::npos);
  CHECK(e.find("[32, 32]") != std::string::npos);
  CHECK(e.find("[16, 32]") != std::string::npos);

  nlohmann::json gpt2 = cfg;
  gpt2["architectures"] = {"GPT2LMHeadModel"};
  test::write_synthetic_container(dir.file("gpt2.endor"), gpt2, tensors, 1);
  CHECK(load_error(dir.file("gpt2.endor")).find("unsupported architecture \"GPT2LMHeadModel\"") !=
        std::string::npos);
}

TEST_CASE("tensors are found with and without the model. prefix; lm_head absent means tied") {
  TempDir dir;
  const nlohmann::json cfg = test::synthetic_llama_config();
  auto tensors = test::synthetic_llama_tensors(cfg);
  test::write_synthetic_container(dir.file("a.endor"), cfg, tensors, 5);
  auto bare = tensors;
  for (auto& t : bare)
    if (t.name.rfind("model.", 0) == 0) t.name = t.name.substr(6);
  test::write_synthetic_container(dir.file("b.endor"), cfg, bare, 5);  // same seed: same values
  Loaded a(dir.file("a.endor")), b(dir.file("b.endor"));
  const std::vector<int32_t> ids = {1, 5, 9, 33};
  CHECK(full_logits(*a.model, ids) == full_logits(*b.model, ids));

  // Tied (no lm_head in the file) equals an untied file whose lm_head repeats the embedding.
  auto tied = tensors;
  tied.pop_back();
  test::write_synthetic_container(dir.file("tied.endor"), cfg, tied, 5);
  test::write_synthetic_container(dir.file("copy.endor"), cfg, tensors, 5, ValueType::F32,
                                  {{"lm_head.weight", "model.embed_tokens.weight"}});
  Loaded t(dir.file("tied.endor")), c(dir.file("copy.endor"));
  CHECK(full_logits(*t.model, ids) == full_logits(*c.model, ids));
  CHECK(full_logits(*t.model, ids) != full_logits(*a.model, ids));
  // tie_word_embeddings wins over an lm_head present in the file (transformers ties them).
  nlohmann::json tie_cfg = cfg;
  tie_cfg["tie_word_embeddings"] = true;
  test::write_synthetic_container(dir.file("tie_flag.endor"), tie_cfg, tensors, 5);
  Loaded f(dir.file("tie_flag.endor"));
  CHECK(full_logits(*f.model, ids) == full_logits(*t.model, ids));
}

TEST_CASE("decoding with the KV cache gives the full-sequence logits (full and sliding attention)") {
  TempDir dir;
  for (int window : {0, 3})
  for (int n_threads : {1, 2}) {
    INFO("sliding window ", window, ", threads ", n_threads);
    nlohmann::json cfg = test::synthetic_llama_config();
    if (window) {
      cfg["architectures"] = {"MistralForCausalLM"};
      cfg["model_type"] = "mistral";
      cfg["sliding_window"] = window;
    }
    const std::string path = dir.file("kv" + std::to_string(window) + ".endor");
    test::write_synthetic_container(path, cfg, test::synthetic_llama_tensors(cfg), 17);
    Loaded l(path, n_threads);
    const std::vector<int32_t> ids = {1, 7, 3, 60, 22, 22, 5, 41, 0, 13};
    const std::vector<float> full = full_logits(*l.model, ids);
    REQUIRE(full.size() == ids.size() * 64);  // vocab 64
    // Same f32 math in another blocking (T = 1 vs T = 10): rounding-level differences only.
    CHECK(max_abs_diff(full, incremental_logits(*l.model, ids, 4)) <= 1e-5f * std::max(1.0f, max_abs(full)));
  }
}

TEST_CASE("an f16 KV cache: the f32 cache's logits within half rounding, incremental = full, batched = alone") {
  TempDir dir;
  nlohmann::json cfg = test::synthetic_llama_config();
  const std::string path = dir.file("kv16.endor");
  test::write_synthetic_container(path, cfg, test::synthetic_llama_tensors(cfg), 23);
  Loaded l(path, 2);
  const std::vector<int32_t> ids = {1, 7, 3, 60, 22, 22, 5, 41, 0, 13};
  const std::vector<float> f32 = full_logits(*l.model, ids);
  CHECK_THROWS_AS(parse_kv_dtype("f8"), Error);
  l.model->set_kv_dtype(parse_kv_dtype("f16"));
  REQUIRE(l.model->kv_dtype() == KvDtype::F16);
  auto probe = l.model->make_cache(4);
  CHECK(probe->keys(0) == nullptr);
  CHECK(probe->keys16(0) != nullptr);
  const std::vector<float> f16 = full_logits(*l.model, ids);
  REQUIRE(f16.size() == f32.size());
  // Keys and values rounded to half (relative error <= 2^-11 each) move each logit by at most a
  // few such steps of its size; and they do move it (the cache really holds halves).
  const float scale = std::max(1.0f, max_abs(f32));
  float worst = 0;
  for (size_t i = 0; i < f32.size(); ++i) worst = std::max(worst, std::abs(f32[i] - f16[i]));
  CHECK(worst <= 16.0f * std::ldexp(1.0f, -11) * scale);
  CHECK(worst > 0.0f);
  // Token by token through the f16 cache: the same rounded keys/values as the one-pass run.
  CHECK(max_abs_diff(f16, incremental_logits(*l.model, ids, 4)) <= 1e-5f * scale);
  // Two sequences in one batched step (scratch rows rounded into each cache) = each alone.
  auto a = l.model->make_cache(8), b = l.model->make_cache(8);
  const std::vector<int32_t> pa = {4, 9, 2}, pb = {33, 1};
  const Model::SequenceStep steps[] = {{pa.data(), pa.size(), a.get()}, {pb.data(), pb.size(), b.get()}};
  std::vector<float> batched;
  l.model->forward_batch(steps, 2, batched);
  auto alone_a = l.model->make_cache(8), alone_b = l.model->make_cache(8);
  std::vector<float> la, lb;
  l.model->forward(pa.data(), pa.size(), *alone_a, false, la);
  l.model->forward(pb.data(), pb.size(), *alone_b, false, lb);
  REQUIRE(batched.size() == la.size() + lb.size());
  float batch_worst = 0;
  for (size_t i = 0; i < la.size(); ++i) batch_worst = std::max(batch_worst, std::abs(batched[i] - la[i]));
  for (size_t i = 0; i < lb.size(); ++i) batch_worst = std::max(batch_worst, std::abs(batched[la.size() + i] - lb[i]));
  CHECK(batch_worst <= 1e-5f * scale);

  // A sliding window (Mistral, 3 keys): decode steps through the f16 cache (widened row by row)
  // equal the one-pass f16 prefill (widened all at once).
  nlohmann::json mcfg = test::synthetic_llama_config();
  mcfg["architectures"] = {"MistralForCausalLM"};
  mcfg["model_type"] = "mistral";
  mcfg["sliding_window"] = 3;
  const std::string mpath = dir.file("kv16-window.endor");
  test::write_synthetic_container(mpath, mcfg, test::synthetic_llama_tensors(mcfg), 29);
  Loaded m(mpath, 2);
  m.model->set_kv_dtype(KvDtype::F16);
  const std::vector<float> mfull = full_logits(*m.model, ids);
  CHECK(max_abs_diff(mfull, incremental_logits(*m.model, ids, 2)) <= 1e-5f * std::max(1.0f, max_abs(mfull)));
}

TEST_CASE("the context length and the vocabulary are enforced") {
  TempDir dir;
  const nlohmann::json cfg = test::synthetic_llama_config();  // context 16, vocab 64
  test::write_synthetic_container(dir.file("m.endor"), cfg, test::synthetic_llama_tensors(cfg), 3);
  Loaded l(dir.file("m.endor"));
  std::vector<int32_t> long_prompt(17, 4);
  Sampler greedy(SamplerOptions{});
  GenerationOptions go;
  go.max_new_tokens = 4;
  CHECK_THROWS_WITH_AS(generate(*l.model, long_prompt, greedy, go, nullptr),
                       doctest::Contains("context length 16"), Error);
  std::vector<int32_t> bad_id = {1, 64};
  CHECK_THROWS_WITH_AS(generate(*l.model, bad_id, greedy, go, nullptr),
                       doctest::Contains("outside the vocabulary"), Error);

  // Generation stops at the end of the context instead of overrunning the cache.
  std::vector<int32_t> prompt(14, 4);
  go.max_new_tokens = 10;
  go.stop_at_eos = false;
  GenerationStats st;
  const auto out = generate(*l.model, prompt, greedy, go, nullptr, &st);
  CHECK(out.size() == 3);  // tokens 15, 16 fed back; the 17th position would pass the context
  CHECK(st.n_decode_steps == 2);
  CHECK(st.stop == StopReason::Context);
}

TEST_CASE("generate: greedy output equals step-by-step argmax; EOS stops; callbacks stream") {
  TempDir dir;
  const nlohmann::json cfg = test::synthetic_llama_config();
  test::write_synthetic_container(dir.file("m.endor"), cfg, test::synthetic_llama_tensors(cfg), 8);
  Loaded l(dir.file("m.endor"));
  const std::vector<int32_t> prompt = {1, 20, 30};
  Sampler greedy(SamplerOptions{});
  GenerationOptions go;
  go.max_new_tokens = 8;
  go.stop_at_eos = false;
  std::vector<int32_t> streamed;
  size_t n_prompt_logits = 0;
  go.on_prompt_logits = [&](const std::vector<float>& logits, size_t n) {
    n_prompt_logits = n;
    CHECK(logits.size() == n * 64);
  };
  const auto out = generate(*l.model, prompt, greedy, go, [&](int32_t id) { streamed.push_back(id); });
  CHECK(out == streamed);
  CHECK(n_prompt_logits == 3);
  REQUIRE(out.size() == 8);

  std::vector<int32_t> seq = prompt;
  for (int32_t expected : out) {
    const std::vector<float> logits = full_logits(*l.model, seq);
    const float* last = logits.data() + (seq.size() - 1) * 64;
    CHECK(std::max_element(last, last + 64) - last == expected);
    seq.push_back(expected);
  }

  // With EOS = the second generated token, generation stops right after emitting it.
  nlohmann::json eos_cfg = cfg;
  eos_cfg["eos_token_id"] = out[1];
  test::write_synthetic_container(dir.file("eos.endor"), eos_cfg, test::synthetic_llama_tensors(cfg), 8);
  Loaded e(dir.file("eos.endor"));
  GenerationOptions stop;
  stop.max_new_tokens = 8;
  GenerationStats st;
  const auto stopped = generate(*e.model, prompt, greedy, stop, nullptr, &st);
  CHECK(stopped == std::vector<int32_t>(out.begin(), out.begin() + 2));
  CHECK(st.stop == StopReason::Eos);
}

TEST_CASE("perplexity: non-overlapping windows, tail dropped, exp of the mean of window means") {
  TempDir dir;
  const nlohmann::json cfg = test::synthetic_llama_config();
  test::write_synthetic_container(dir.file("m.endor"), cfg, test::synthetic_llama_tensors(cfg), 21);
  Loaded l(dir.file("m.endor"));
  std::vector<int32_t> ids;
  for (int i = 0; i < 13; ++i) ids.push_back((i * 37 + 5) % 64);
  const size_t L = 6;  // windows [0, 6) and [6, 12); token 12 dropped
  double sum = 0;
  for (size_t w = 0; w < 2; ++w) {
    std::vector<int32_t> chunk(ids.begin() + w * L, ids.begin() + (w + 1) * L);
    const std::vector<float> logits = full_logits(*l.model, chunk);
    double nll = 0;
    for (size_t t = 0; t + 1 < L; ++t) {
      const float* row = logits.data() + t * 64;
      double z = 0;
      for (int v = 0; v < 64; ++v) z += std::exp(double(row[v]));
      nll += std::log(z) - row[chunk[t + 1]];
    }
    sum += nll / (L - 1);
  }
  const PerplexityResult r = perplexity(*l.model, ids, L);
  CHECK(r.n_windows == 2);
  CHECK(r.mean_nll == doctest::Approx(sum / 2).epsilon(1e-9));
  CHECK(r.perplexity == doctest::Approx(std::exp(sum / 2)).epsilon(1e-9));
  // The dropped tail does not matter.
  std::vector<int32_t> other_tail = ids;
  other_tail.back() = (other_tail.back() + 1) % 64;
  CHECK(perplexity(*l.model, other_tail, L).perplexity == r.perplexity);
  CHECK_THROWS_AS(perplexity(*l.model, std::vector<int32_t>(ids.begin(), ids.begin() + 5), L), Error);
  CHECK_THROWS_AS(perplexity(*l.model, ids, 1), Error);
  CHECK_THROWS_AS(perplexity(*l.model, std::vector<int32_t>(40, 1), 17), Error);  // > context 16
}

TEST_CASE("write_npy_f32 writes a numpy-readable float32 matrix atomically") {
  TempDir dir;
  std::vector<float> v(3 * 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * float(i) - 1.0f;
  write_npy_f32(dir.file("x.npy"), v.data(), 3, 5);
  const test::NpyMatrix m = test::read_npy_f32(dir.file("x.npy"));
  CHECK(m.rows == 3);
  CHECK(m.cols == 5);
  CHECK(m.data == v);
  const std::string bytes = test::read_text(dir.file("x.npy"));
  CHECK((bytes.size() - 3 * 5 * 4) % 64 == 0);  // header padded to 64 bytes, as numpy writes
  size_t n_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) n_files += entry.is_regular_file();
  CHECK(n_files == 1);  // no temporary left behind
  CHECK_THROWS_AS(write_npy_f32(dir.file("no/such/dir/x.npy"), v.data(), 3, 5), Error);
}

TEST_CASE("backend choice: cpu always; cuda and auto by what this build and machine have") {
  const std::vector<std::string> devices = available_devices();
  REQUIRE(!devices.empty());
  CHECK(devices[0] == "cpu");
  const bool has_cuda = std::find(devices.begin(), devices.end(), "cuda") != devices.end();
  CHECK(make_backend("cpu", 1)->name().find("cpu") != std::string::npos);
  CHECK(make_backend("auto", 0)->name().find(has_cuda ? "cuda" : "cpu") != std::string::npos);
  if (has_cuda) {
    CHECK(make_backend("cuda", 0)->name().find("cuda") != std::string::npos);
  } else {
    CHECK_THROWS_WITH_AS(make_backend("cuda", 0), doctest::Contains("no CUDA device"), Error);
  }
  CHECK_THROWS_WITH_AS(make_backend("tpu", 0), doctest::Contains("unknown device"), Error);
}
