// endor-infer --perplexity against transformers on tests/fixtures/perplexity (the sample model's
// held-out text, windows of 64), the library's per-window figures, and the error cases.
#include <cmath>
#include <string>
#include <vector>

#include "endor/runtime.h"
#include "endor/tokenizer.h"
#include "infer_test_util.h"

using namespace endor;
using endor::test::TempDir;

namespace {

// Tolerance on a mean NLL (nats). Per token, |d NLL| = |d logsumexp(z) - d z_target| <= 2 max|d z|.
// The f32 logits of this model differ from transformers' by at most 1.05e-5 (measured on the
// fixture's first window with --dump-logits); allowing 10x that, a mean over tokens or windows
// moves by at most 2 * 1e-4. The perplexity's relative error is then exp(2e-4) - 1 ~ 2e-4.
constexpr double kNllTolerance = 2e-4;

}  // namespace

TEST_CASE("--perplexity equals transformers' on the fixture (ids exact, NLL per window within tolerance)") {
  TempDir dir;
  const std::string model_path = test::pack_sample(dir, "kjv-f32.endor", "convert --dtype f32");
  const nlohmann::json ref = test::read_json(test::ppl_fixture("reference.json"));
  const size_t window = ref["window"].get<size_t>();
  const std::vector<int32_t> ref_ids = ref["token_ids"].get<std::vector<int32_t>>();
  const std::vector<double> ref_nll = ref["window_mean_nll"].get<std::vector<double>>();

  SUBCASE("the library: the container's tokenizer and endor::perplexity") {
    std::unique_ptr<ContainerReader> container = ContainerReader::open(model_path);
    const std::optional<std::string_view> json = container->file("tokenizer.json");
    REQUIRE(json.has_value());
    const Tokenizer tok = Tokenizer::from_json(*json, "tokenizer.json");
    const std::vector<int32_t> ids = tok.encode(test::read_text(test::ppl_fixture("text.txt")), true);
    REQUIRE(ids == ref_ids);

    std::unique_ptr<Backend> backend = make_backend("cpu", 1);
    std::unique_ptr<Model> model = load_model(*container, *backend);
    std::vector<size_t> progress;
    const PerplexityResult r = perplexity(*model, ids, window, [&](size_t done, size_t total) {
      CHECK(total == ref_nll.size());
      progress.push_back(done);
    });
    REQUIRE(r.n_windows == ref_nll.size());
    REQUIRE(r.window_nll.size() == ref_nll.size());
    CHECK(progress.size() == ref_nll.size());
    CHECK(progress.back() == ref_nll.size());
    for (size_t w = 0; w < ref_nll.size(); ++w) {
      INFO("window ", w);
      CHECK(std::abs(r.window_nll[w] - ref_nll[w]) <= kNllTolerance);
    }
    CHECK(std::abs(r.mean_nll - ref["mean_nll"].get<double>()) <= kNllTolerance);
  }

  SUBCASE("the CLI: last stdout line, progress on stderr") {
    const auto r = test::infer(dir, model_path + " --perplexity " + test::ppl_fixture("text.txt") +
                                        " --ctx " + std::to_string(window));
    INFO("stdout: ", r.out, "\nstderr: ", r.err);
    REQUIRE(r.status == 0);
    const double ppl = test::last_line_perplexity(r.out);
    REQUIRE(ppl > 0);
    CHECK(std::abs(std::log(ppl) - ref["mean_nll"].get<double>()) <= kNllTolerance);
    CHECK(std::abs(ppl / ref["perplexity"].get<double>() - 1) <= 1e-3);  // the 0.1 %, a fortiori
    CHECK(r.out.find(std::to_string(ref_ids.size()) + " tokens") != std::string::npos);
    CHECK(r.out.find("windows: " + std::to_string(ref_nll.size()) + " of " + std::to_string(window)) !=
          std::string::npos);
    CHECK(r.err.find("window " + std::to_string(ref_nll.size()) + "/" + std::to_string(ref_nll.size())) !=
          std::string::npos);
    CHECK(r.err.find("tokens/s") != std::string::npos);
  }
}

TEST_CASE("--perplexity errors: one line, non-zero exit") {
  TempDir dir;
  const std::string model = test::pack_sample(dir, "kjv.endor", "convert");
  const std::string shortfile = dir.file("short.txt");
  std::ofstream(shortfile) << "In the beginning God created the heaven and the earth.\n";
  const nlohmann::json cfg = test::synthetic_llama_config();
  const std::string bare = dir.file("bare.endor");
  test::write_synthetic_container(bare, cfg, test::synthetic_llama_tensors(cfg), 3);

  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "and God said ";
  struct Case {
    std::string args, must_mention;
    int status;
  };
  const std::vector<Case> cases = {
      // Fewer tokens than one window of the default L = 256.
      {model + " --perplexity " + shortfile, "use a smaller --ctx", 1},
      {model + " --perplexity " + shortfile + " --ctx 300", "--ctx 300 exceeds the model's context length 256", 2},
      {model + " --perplexity " + shortfile + " --ctx 1", "--ctx must be a whole number >= 2", 2},
      {model + " --perplexity " + dir.file("absent.txt") + " --ctx 8", "absent.txt", 1},
      {model + " --perplexity " + dir.path() + " --ctx 8", "is a directory", 1},
      {model + " --perplexity " + shortfile + " -p hello", "give one of", 2},
      {model + " -p hello --ctx 8", "--ctx goes with --perplexity", 2},
      {bare + " --perplexity " + shortfile, "--ids", 1},
      // A prompt past the context is refused before any of it is echoed (out stays empty).
      {model + " -n 4 -p '" + long_prompt + "'", "more than the model's context length 256", 1},
  };
  for (const Case& c : cases) {
    INFO("endor-infer ", c.args);
    const auto r = test::infer(dir, c.args);
    INFO("stderr: ", r.err);
    CHECK(r.status == c.status);
    CHECK(test::one_error_line(r.err));
    CHECK(r.err.find(c.must_mention) != std::string::npos);
    CHECK(r.out.empty());
  }
  // The short text does fit a window of 8.
  const auto r = test::infer(dir, model + " --perplexity " + shortfile + " --ctx 8");
  CHECK(r.status == 0);
  CHECK(test::last_line_perplexity(r.out) > 1);
}
