// Every fixture architecture, packed by endor-pack in every weight variant, against the logits
// and greedy continuations transformers computed (tests/fixtures/models/<name>/reference.json).
//
// Tolerance (derived, not tuned): both sides compute in f32 from identical weight values (the
// packer's rounding/pruning/quantization reproduces the variant's arithmetic exactly), so they
// differ only by rounding order (blocked sums, FMA, exp/rsqrt implementations). A length-K sum of
// f32 products carries a relative error of about sqrt(K)·u (u = eps/2, random-walk rounding;
// Higham, "Accuracy and Stability", §2.8 / §3.1), and two independent implementations differ by
// sqrt(2) of that. A logit is the end of a chain of `depth` such reductions (per block: norm,
// q/k/v, scores, softmax sum, probs·V, o, norm, up/gate, down: 9; head: norm + lm_head: 2), whose
// relative errors add to first order. So |Δ| <~ sqrt(2)·sqrt(K)·(eps/2)·depth·max|logit|; with
// the fixtures' longest reduction K = 128, sqrt(2)·sqrt(128)/2 = 8, and a factor 2 for the
// amplification of an error by the following layers' Jacobians (random-init blocks, gain ~1–2),
// c = 16:   |Δ| <= 16 · eps_f32 · depth · max|logit_ref|.
// For the fixtures (2 layers: depth 20, max|logit| ~ 1-3) this is ~1e-4 to 1e-3; a real defect
// (a wrong eps, a RoPE off by one position, a missing bias, a mis-decoded int4 group) moves
// logits by 1e-3 to 1 and fails it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "endor/runtime.h"
#include "runtime_test_util.h"

using namespace endor;
using endor::test::TempDir;

namespace {

struct Variant {
  const char* name;
  const char* pack_args;  // endor-pack arguments producing the container this variant describes
};
const Variant kVariants[] = {
    {"orig", "convert --dtype f32"},
    {"f16", "convert --dtype f16"},
    {"bf16", "convert --dtype bf16"},
    {"mag50_f16", "prune --method magnitude --sparsity 0.5 --quant none --dtype f16"},
    {"mag50_int8", "prune --method magnitude --sparsity 0.5 --quant int8 --quant-head none --dtype f16"},
    {"mag50_int4", "prune --method magnitude --sparsity 0.5 --quant int4 --quant-head none --group-size 32 --dtype f16"},
};

constexpr double kEpsF32 = 1.1920928955078125e-07;
constexpr double kC = 16;  // see the header comment

double logit_tolerance(uint32_t n_layers, float max_ref) {
  const double depth = 9.0 * n_layers + 2.0;
  return kC * kEpsF32 * depth * std::max(1.0f, max_ref);
}

// Containers packed once per test process, in one temporary directory.
class PackedFixtures {
 public:
  std::string get(const std::string& model, const Variant& v) {
    const std::string key = model + "." + v.name;
    auto it = paths_.find(key);
    if (it != paths_.end()) return it->second;
    const std::string out = dir_.file(key + ".endor");
    const std::string cmd = test::endor_pack() + " " + v.pack_args + " " + test::fixture_dir(model) +
                            " -o " + out + " >" + dir_.file("pack.log") + " 2>&1";
    const int status = test::run_command(cmd);
    if (status != 0)
      throw std::runtime_error(cmd + " failed (" + std::to_string(status) + "): " +
                               test::read_text(dir_.file("pack.log")));
    paths_[key] = out;
    return out;
  }

 private:
  TempDir dir_;
  std::map<std::string, std::string> paths_;
};

PackedFixtures& packed() {
  static PackedFixtures p;
  return p;
}

// One thread: tiny models, and OpenMP barriers on a busy shared machine cost more than the work.
// Exact f32 activations: the references are transformers' f32 logits of the same decoded weights
// (int8 activations would move them by far more than the tolerance; their cost is in
// bench/ACCURACY.md, their arithmetic tested in tests/kernels).
struct ModelRun {
  std::unique_ptr<Backend> backend = make_exact_cpu_backend(1);
  std::unique_ptr<ContainerReader> reader;
  std::unique_ptr<Model> model;
  explicit ModelRun(const std::string& path) {
    reader = ContainerReader::open(path);
    model = load_model(*reader, *backend);
  }
};

std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

// One prompt's logits (every position) against the reference file: max |Δlogit| and max |logit|.
struct LogitError {
  float err = 0, max_ref = 0;
};
LogitError logit_error(Model& model, const std::vector<int32_t>& ids, const std::string& npy) {
  const test::NpyMatrix expected = test::read_npy_f32(npy);
  REQUIRE(expected.rows == ids.size());
  REQUIRE(expected.cols == model.config().vocab);
  auto cache = model.make_cache(ids.size());
  std::vector<float> logits;
  model.forward(ids.data(), ids.size(), *cache, true, logits);
  LogitError e;
  for (size_t k = 0; k < logits.size(); ++k) {
    e.max_ref = std::max(e.max_ref, std::abs(expected.data[k]));
    e.err = std::max(e.err, std::abs(logits[k] - expected.data[k]));
  }
  return e;
}

// Checks every variant of one fixture model; prints the measured errors for the record.
void check_fixture(const std::string& name) {
  const std::string fx = test::fixture_dir(name);
  INFO("fixture ", fx);
  REQUIRE(test::file_exists(fx + "/reference.json"));
  const nlohmann::json ref = test::read_json(fx + "/reference.json");
  const auto& prompts = ref["prompts"];
  for (const Variant& v : kVariants) {
    INFO("variant ", v.name, " (endor-pack ", v.pack_args, ")");
    ModelRun run(packed().get(name, v));
    const ModelConfig& c = run.model->config();
    double worst = 0, worst_tol = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const LogitError e = logit_error(*run.model, ids_of(prompts[i]["ids"]),
                                       fx + "/logits_" + v.name + "_p" + std::to_string(i) + ".npy");
      const float err = e.err, max_ref = e.max_ref;
      const double tol = logit_tolerance(c.n_layers, max_ref);
      INFO("prompt ", i, ": max |Δlogit| ", err, ", tolerance ", tol, ", max |logit| ", max_ref);
      CHECK(err <= tol);
      worst = std::max<double>(worst, err);
      worst_tol = std::max(worst_tol, tol);
    }

    // Greedy continuation of prompt 0 (EOS not stopping, as the reference was made).
    const std::vector<int32_t> expected_greedy = ids_of(ref["greedy"]["by_variant"][v.name]);
    Sampler greedy(SamplerOptions{});
    GenerationOptions go;
    go.max_new_tokens = expected_greedy.size();
    go.stop_at_eos = false;
    const std::vector<int32_t> got =
        generate(*run.model, ids_of(prompts[0]["ids"]), greedy, go, nullptr);
    CHECK(got == expected_greedy);
    std::printf("%-16s %-11s max|dlogit| %.3g (tolerance %.3g), greedy %s\n", name.c_str(), v.name,
                worst, worst_tol, got == expected_greedy ? "equal" : "DIFFERENT");
  }
}

// A GGUF written by llama.cpp's own convert_hf_to_gguf.py (tools/make_gguf_moe_fixtures.py), packed
// f32, against reference logits of the same weights: the experts read from llama.cpp's stacked
// ffn_{gate,up,down}_exps (Q8_0 blocks among them), the router from ffn_gate_inp, the families'
// keys ({arch}.expert_count, ...), llama's q/k permutation undone for Mixtral.
void check_llamacpp_gguf(const std::string& gguf, const std::string& logits_prefix, const std::string& prompts_from) {
  INFO("GGUF ", gguf);
  TempDir dir;
  const std::string out = dir.file("m.endor");
  const std::string cmd = test::endor_pack() + " convert " + gguf + " -o " + out + " --dtype f32 >" + dir.file("log") + " 2>&1";
  REQUIRE_MESSAGE(test::run_command(cmd) == 0, test::read_text(dir.file("log")));
  ModelRun run(out);
  const ModelConfig& c = run.model->config();
  CHECK(c.moe());
  const nlohmann::json ref = test::read_json(test::fixture_dir(prompts_from) + "/reference.json");
  const auto& prompts = ref["prompts"];
  REQUIRE(prompts.size() == 3);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const LogitError e = logit_error(*run.model, ids_of(prompts[i]["ids"]), logits_prefix + std::to_string(i) + ".npy");
    const float err = e.err;
    const double tol = logit_tolerance(c.n_layers, e.max_ref);
    INFO("prompt ", i, ": max |dlogit| ", err, ", tolerance ", tol);
    CHECK(err <= tol);
    std::printf("%-36s prompt %zu max|dlogit| %.3g (tolerance %.3g)\n", gguf.substr(gguf.rfind('/') + 1).c_str(), i, err, tol);
  }
}

}  // namespace

TEST_CASE("llama.cpp's GGUF of mixtral-tiny (llama with experts, f16): transformers on the same f16 weights") {
  const std::string g = std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/gguf/";
  check_llamacpp_gguf(g + "llamacpp-mixtral-tiny.f16.gguf", g + "llamacpp-mixtral-tiny.f16/logits_p", "mixtral-tiny");
}

TEST_CASE("llama.cpp's GGUF of qwen3-moe-tiny (qwen3moe, Q8_0 experts): transformers' logits of that file, renormalized") {
  const std::string g = std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/gguf/";
  check_llamacpp_gguf(g + "llamacpp-qwen3-moe-tiny.q8_0.gguf", g + "llamacpp-qwen3-moe-tiny.q8_0/logits_p", "qwen3-moe-tiny");
}

TEST_CASE("opt-tiny: pre-LN OPT, biases, learned positions, tied lm_head") { check_fixture("opt-tiny"); }
TEST_CASE("opt-postln-proj: post-LN OPT with project_in/project_out") { check_fixture("opt-postln-proj"); }
TEST_CASE("opt-noprefix: OPT tensors without the model. prefix") { check_fixture("opt-noprefix"); }
TEST_CASE("llama-tiny: Llama MHA, untied lm_head") { check_fixture("llama-tiny"); }
TEST_CASE("llama-gqa-bf16: GQA, explicit head_dim, tied, bf16 checkpoint") { check_fixture("llama-gqa-bf16"); }
TEST_CASE("llama3-rope: Llama-3 rope_scaling, hub-style config") { check_fixture("llama3-rope"); }
TEST_CASE("mistral-tiny: sliding window 4") { check_fixture("mistral-tiny"); }
TEST_CASE("qwen2-tiny: q/k/v biases, tied") { check_fixture("qwen2-tiny"); }
TEST_CASE("qwen3-tiny: per-head q/k RMSNorm, head_dim 24 != 64/4, untied") { check_fixture("qwen3-tiny"); }
TEST_CASE("qwen3-moe-tiny: 5 experts, top-3, unnormalized top-k, f32 router") { check_fixture("qwen3-moe-tiny"); }
TEST_CASE("mixtral-tiny: 4 experts, top-2 renormalized, w1/w2/w3 experts") { check_fixture("mixtral-tiny"); }
TEST_CASE("llama-sharded: a checkpoint in several shards") { check_fixture("llama-sharded"); }

TEST_CASE("perplexity over ids equals the value from transformers' logits") {
  // Windows of L = len(prompt 0): [prompt 0] and [first L ids of prompt 2]; a 3-id tail dropped.
  // Causality makes prompt 2's first L logit rows the logits of that window.
  const std::string fx = test::fixture_dir("llama-tiny");
  const nlohmann::json ref = test::read_json(fx + "/reference.json");
  const std::vector<int32_t> p0 = ids_of(ref["prompts"][0]["ids"]), p2 = ids_of(ref["prompts"][2]["ids"]);
  const size_t L = p0.size();
  REQUIRE(p2.size() >= L + 3);
  std::vector<int32_t> ids = p0;
  ids.insert(ids.end(), p2.begin(), p2.begin() + L);
  ids.insert(ids.end(), p2.begin(), p2.begin() + 3);

  double sum = 0;
  for (int w = 0; w < 2; ++w) {
    const test::NpyMatrix lg = test::read_npy_f32(fx + (w == 0 ? "/logits_orig_p0.npy" : "/logits_orig_p2.npy"));
    const int32_t* window = ids.data() + w * L;
    double nll = 0;
    for (size_t t = 0; t + 1 < L; ++t) {
      const float* row = lg.row(t);
      double top = *std::max_element(row, row + lg.cols), z = 0;
      for (size_t v = 0; v < lg.cols; ++v) z += std::exp(double(row[v]) - top);
      nll += top + std::log(z) - row[window[t + 1]];
    }
    sum += nll / double(L - 1);
  }
  const double expected = std::exp(sum / 2);

  ModelRun run(packed().get("llama-tiny", kVariants[0]));
  const PerplexityResult r = perplexity(*run.model, ids, L);
  CHECK(r.n_windows == 2);
  // A mean of cross-entropies inherits the logits' absolute error (log-softmax is 1-Lipschitz in
  // max-norm per term, twice: the target logit and the log-sum-exp).
  const double logit_tol = logit_tolerance(run.model->config().n_layers, 4.0f);
  CHECK(std::abs(r.mean_nll - sum / 2) <= 2 * logit_tol);
  CHECK(r.perplexity == doctest::Approx(expected).epsilon(2 * logit_tol));
  std::printf("perplexity llama-tiny ids: %.9g (from transformers' logits %.9g)\n", r.perplexity, expected);
}
