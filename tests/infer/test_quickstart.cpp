// The quick-start path (scripts/quickstart.sh) kept working: text generation from the sample model.
// 1. Dense f32 greedy: endor-infer's ids and text equal transformers' greedy continuation
//    (tests/infer/golden/greedy_transformers.json, tools/make_greedy_fixture.py).
// 2. 50 % magnitude, as the quick start packs it: inspect shows the sizes, and the greedy text
//    equals the committed golden file tests/infer/golden/quickstart.txt exactly.
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include "endor/tokenizer.h"
#include "infer_test_util.h"

using namespace endor;
using endor::test::TempDir;

TEST_CASE("dense greedy continuation equals transformers' (ids and streamed text)") {
  TempDir dir;
  const std::string model = test::pack_sample(dir, "kjv-f32.endor", "convert --dtype f32");
  const nlohmann::json ref = test::read_json(test::infer_golden("greedy_transformers.json"));
  const std::string prompt = ref["prompt"];
  const std::vector<int32_t> prompt_ids = ref["prompt_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> want = ref["new_ids"].get<std::vector<int32_t>>();
  const std::string n = std::to_string(ref["max_new_tokens"].get<int>());

  // The CLI's tokenizer agrees on the prompt.
  auto r = test::infer(dir, "tokenize " + model, &prompt);
  REQUIRE(r.status == 0);
  CHECK(parse_ids(r.out) == prompt_ids);

  r = test::infer(dir, model + " --ids \"" + format_ids(prompt_ids) + "\" -n " + n + " --temperature 0");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(parse_ids(r.out) == want);

  // -p streams the same continuation as text after the prompt (one newline closes the output).
  r = test::infer(dir, model + " -p \"" + prompt + "\" -n " + n + " --temperature 0");
  REQUIRE(r.status == 0);
  std::string want_text = prompt + ref["new_text"].get<std::string>();
  if (want_text.back() != '\n') want_text += '\n';
  CHECK(r.out == want_text);
}

TEST_CASE("quick start at 50 %: inspect shows the sizes, greedy text equals the golden file") {
  TempDir dir;
  // As scripts/quickstart.sh: endor-pack prune SAMPLE --sparsity 0.5 (stored dtype f16), whose
  // default is SparseGPT on text the model generates. Its weights come from sampled text and
  // BLAS/oneDNN sums, so its greedy text is checked for what holds on any CPU (starts with the
  // prompt, reproducible); the golden text is magnitude's, which is exact arithmetic on every CPU.
  const std::string quick = test::pack_sample(dir, "quick-50.endor", "prune --sparsity 0.5");
  const auto qi = test::run_capture(test::endor_pack() + " inspect " + quick + " --json", dir);
  REQUIRE(qi.status == 0);
  CHECK(qi.out.find("\"method\": \"sparsegpt\"") != std::string::npos);
  CHECK(qi.out.find("\"the model itself\"") != std::string::npos);
  const std::string quick_greedy = quick + " -p \"And God said\" -n 48 --temperature 0";
  const auto qa = test::infer(dir, quick_greedy), qb = test::infer(dir, quick_greedy);
  REQUIRE(qa.status == 0);
  CHECK(qa.out.rfind("And God said", 0) == 0);
  CHECK(qa.out == qb.out);

  const std::string model = test::pack_sample(dir, "sample-50.endor", "prune --sparsity 0.5 --method magnitude");

  struct stat st;
  REQUIRE(::stat(model.c_str(), &st) == 0);
  const auto inspect = test::run_capture(test::endor_pack() + " inspect " + model + " --verify", dir);
  INFO("inspect: ", inspect.out, inspect.err);
  REQUIRE(inspect.status == 0);
  CHECK(inspect.out.find("(" + std::to_string(st.st_size) + " bytes)") != std::string::npos);
  CHECK(inspect.out.find("of tensor data vs") != std::string::npos);
  CHECK(inspect.out.find("dense in the source dtype") != std::string::npos);
  CHECK(inspect.out.find("50.00%") != std::string::npos);
  CHECK(inspect.out.find("verify: OK") != std::string::npos);

  // Regenerate the golden file (after a deliberate change of the model or the packer) with:
  //   endor-pack prune samples/kjv-llama -o build/sample-mag50.endor --sparsity 0.5 --method magnitude
  //   endor-infer build/sample-mag50.endor -p "And God said" -n 48 --temperature 0 --threads 1
  //   > tests/infer/golden/quickstart.txt
  const std::string golden = test::read_text(test::infer_golden("quickstart.txt"));
  const auto r = test::infer(dir, model + " -p \"And God said\" -n 48 --temperature 0");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out == golden);
  CHECK(r.out.rfind("And God said", 0) == 0);

  // Sampling as the quick start does is reproducible for a fixed seed.
  const std::string sampled = model + " -p \"And God said\" -n 24 --temperature 0.8 --top-p 0.95 --seed 1";
  const auto a = test::infer(dir, sampled), b = test::infer(dir, sampled);
  CHECK(a.status == 0);
  CHECK(a.out == b.out);
  CHECK(a.out.rfind("And God said", 0) == 0);
}

TEST_CASE("-p on a container without tokenizer.json: one line suggesting --ids") {
  TempDir dir;
  const nlohmann::json cfg = test::synthetic_llama_config();
  const std::string bare = dir.file("bare.endor");
  test::write_synthetic_container(bare, cfg, test::synthetic_llama_tensors(cfg), 5);
  auto r = test::infer(dir, bare + " -p hello");
  CHECK(r.status == 1);
  CHECK(test::one_error_line(r.err));
  CHECK(r.err.find("bare.endor") != std::string::npos);
  CHECK(r.err.find("--ids") != std::string::npos);
  CHECK(r.out.empty());
  r = test::infer(dir, bare + " --ids \"1 2\" -n 3 --temperature 0 --ignore-eos");  // ids still work there
  CHECK(r.status == 0);
  CHECK(parse_ids(r.out).size() == 3);

  // By default generation ends at the config's EOS (2 here); --ignore-eos runs on to -n tokens.
  const auto all = test::infer(dir, bare + " --ids 1 -n 15 --temperature 0 --ignore-eos");
  const auto stopped = test::infer(dir, bare + " --ids 1 -n 15 --temperature 0");
  REQUIRE(all.status == 0);
  REQUIRE(stopped.status == 0);
  std::vector<int32_t> want = parse_ids(all.out);
  CHECK(want.size() == 15);
  const auto eos = std::find(want.begin(), want.end(), 2);
  if (eos != want.end()) want.erase(eos + 1, want.end());
  CHECK(parse_ids(stopped.out) == want);
}
