// Throughput mode on the sample model (samples/kjv-llama, packed here): generate_batch and
// endor-infer --prompts give every prompt the greedy ids it gets alone, with prompts of different
// lengths, a batch smaller than the number of prompts (sequences leave and join), blocks read in
// place or streamed from disk; the output is in prompt order; bad input is a one-line error.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "../runtime/runtime_test_util.h"
#include "endor/offload.h"
#include "endor/runtime.h"
#include "endor/tokenizer.h"

using namespace endor;
using endor::test::TempDir;

namespace {

const std::vector<std::string> kPrompts = {
    "In the beginning God created",
    "And the LORD spake unto Moses, saying, Speak unto the children of Israel, and say unto them",
    "Blessed",
    "Then Jesus said unto his disciples,",
    "And it came to pass in those days, that there went out a decree",
    "The LORD is my shepherd; I shall not want. He maketh me to lie down",
    "For God so loved",
};

std::string pack_sample(const TempDir& dir, const std::string& name, const std::string& pack_args) {
  const std::string out = dir.file(name);
  const std::string sample = std::string(ENDOR_SOURCE_DIR) + "/samples/kjv-llama";
  const auto r = test::run_capture(test::endor_pack() + " " + pack_args + " " + sample + " -o " + out, dir);
  INFO("endor-pack stderr: ", r.err);
  REQUIRE(r.status == 0);
  return out;
}

std::string infer() { return "OMP_NUM_THREADS=1 " + test::endor_infer() + " --threads 1 --device cpu"; }

bool one_error_line(const std::string& err) {
  return err.rfind("error: ", 0) == 0 && err.find('\n') == err.size() - 1;
}

std::string write_prompts(const TempDir& dir, const std::string& name, const std::vector<std::string>& lines) {
  const std::string path = dir.file(name);
  std::ofstream out(path, std::ios::binary);
  for (const std::string& l : lines) out << l << "\n";
  return path;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::string summary_value(const std::string& err, const std::string& key) {
  const size_t line = err.find("offload-summary:");
  if (line == std::string::npos) return "";
  const size_t at = err.find(" " + key + "=", line);
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size() + 2;
  return err.substr(begin, err.find_first_of(" \n", begin) - begin);
}

}  // namespace

TEST_CASE("generate_batch: greedy ids of every prompt equal generate() of the prompt alone") {
  TempDir dir;
  // Two encodings: dense f16 (fused dense kernel) and 50 % int4 (bitmap kernels).
  for (const char* pack : {"convert --dtype f16", "prune --method magnitude --sparsity 0.5 --quant int4"}) {
    CAPTURE(pack);
    const std::string path = pack_sample(dir, "m.endor", pack);
    std::unique_ptr<ContainerReader> container = ContainerReader::open(path);
    const Tokenizer tok = Tokenizer::from_json(*container->file("tokenizer.json"), "tokenizer.json");
    std::unique_ptr<Backend> backend = make_backend("cpu", 1);
    std::unique_ptr<Model> model = load_model(*container, *backend);

    std::vector<std::vector<int32_t>> prompts;
    for (const std::string& p : kPrompts) prompts.push_back(tok.encode(p, true));
    SamplerOptions greedy;
    GenerationOptions alone_options;
    alone_options.max_new_tokens = 10;
    alone_options.stop_at_eos = false;
    std::vector<std::vector<int32_t>> alone;
    for (const auto& p : prompts) {
      Sampler sampler(greedy);
      alone.push_back(generate(*model, p, sampler, alone_options, {}));
    }

    for (size_t batch : {size_t(1), size_t(3), size_t(8)}) {
      CAPTURE(batch);
      BatchGenerationOptions options;
      options.batch = batch;
      options.max_new_tokens = 10;
      options.stop_at_eos = false;
      std::vector<size_t> order;
      BatchGenerationStats st;
      const auto got = generate_batch(*model, prompts, greedy, options,
                                      [&](size_t i, const std::vector<int32_t>& ids) {
                                        CHECK(ids.size() == 10);
                                        order.push_back(i);
                                      },
                                      &st);
      REQUIRE(got.size() == prompts.size());
      for (size_t i = 0; i < prompts.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i] == alone[i]);
      }
      CHECK(order.size() == prompts.size());
      CHECK(st.n_generated == prompts.size() * 10);
      CHECK(st.max_active == std::min(batch, prompts.size()));
      // Every step generates one token per active sequence: fewer steps than tokens when batched.
      if (batch == 1) CHECK(st.n_steps == prompts.size() * 10);
      if (batch == 8) CHECK(st.n_steps == 10);
      if (batch == 3) CHECK(st.n_steps < prompts.size() * 10);
    }
  }
}

TEST_CASE("generate_batch: a sequence stopped by the context leaves and the next prompt joins") {
  TempDir dir;
  const std::string path = pack_sample(dir, "m.endor", "convert --dtype f32");
  std::unique_ptr<ContainerReader> container = ContainerReader::open(path);
  std::unique_ptr<Backend> backend = make_backend("cpu", 1);
  std::unique_ptr<Model> model = load_model(*container, *backend);
  const size_t ctx = model->config().max_positions;
  // One prompt 3 tokens short of the context: it stops after 4 tokens; the short ones run 20.
  std::vector<std::vector<int32_t>> prompts = {std::vector<int32_t>(ctx - 3, 5), {1, 7, 9}, {1, 4}, {1, 11, 12, 13}};
  BatchGenerationOptions options;
  options.batch = 2;
  options.max_new_tokens = 20;
  options.stop_at_eos = false;
  const auto got = generate_batch(*model, prompts, SamplerOptions{}, options);
  CHECK(got[0].size() == 4);
  GenerationOptions alone_options;
  alone_options.max_new_tokens = 20;
  alone_options.stop_at_eos = false;
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    Sampler sampler(SamplerOptions{});
    CHECK(got[i] == generate(*model, prompts[i], sampler, alone_options, {}));
  }
  options.batch = 0;
  CHECK_THROWS_AS(generate_batch(*model, prompts, SamplerOptions{}, options), Error);
  options.batch = 2;
  prompts.push_back({});
  CHECK_THROWS_AS(generate_batch(*model, prompts, SamplerOptions{}, options), Error);
}

TEST_CASE("endor-infer --prompts: prompt order, ids and text as alone, from disk too, --jsonl and --stats") {
  TempDir dir;
  const std::string model = pack_sample(dir, "m.endor", "prune --method magnitude --sparsity 0.5 --quant int8");
  const std::string prompts = write_prompts(dir, "prompts.txt", kPrompts);
  const std::string gen = " -n 8 --temperature 0 --ignore-eos";

  // Each prompt alone (text mode).
  std::vector<std::string> alone;
  for (const std::string& p : kPrompts) {
    const auto r = test::run_capture(infer() + " " + model + gen + " -p \"" + p + "\"", dir);
    REQUIRE(r.status == 0);
    alone.push_back(r.out);
  }
  std::string alone_all;
  for (const std::string& a : alone) alone_all += a;

  const auto text = test::run_capture(infer() + " " + model + gen + " --prompts " + prompts + " --batch 3", dir);
  INFO("stderr: ", text.err);
  REQUIRE(text.status == 0);
  CHECK(text.out == alone_all);

  // --jsonl, every block from disk (--cpu-mem 0), with the stats line.
  const auto js = test::run_capture(infer() + " " + model + gen + " --prompts " + prompts +
                                        " --batch 4 --jsonl --stats --plan --cpu-mem 0", dir);
  INFO("stderr: ", js.err);
  REQUIRE(js.status == 0);
  const std::vector<std::string> lines = lines_of(js.out);
  REQUIRE(lines.size() == kPrompts.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    CAPTURE(i);
    const nlohmann::json j = nlohmann::json::parse(lines[i]);
    CHECK(j["prompt"] == kPrompts[i]);
    CHECK(j["ids"].size() == 8);
    std::string expect = alone[i];
    if (!expect.empty() && expect.back() == '\n') expect.pop_back();
    CHECK(kPrompts[i] + j["text"].get<std::string>() == expect);
  }
  CHECK(summary_value(js.err, "batch") == "4");
  CHECK(summary_value(js.err, "generated_tokens") == std::to_string(8 * kPrompts.size()));
  CHECK(std::stod(summary_value(js.err, "generated_tokens_per_s")) > 0);
  CHECK(std::stod(summary_value(js.err, "moved_disk_bytes")) > 0);
  CHECK(summary_value(js.err, "disk_groups") != "0");
  // --plan printed its prediction before the run and, with --stats, predicted vs measured.
  CHECK(js.err.find("plan-summary: batch=4 ") < js.err.find("offload-summary:"));
  CHECK(js.err.find("bound=") != std::string::npos);
  const size_t vs = js.err.find("plan-vs-measured: predicted_step_ms=");
  REQUIRE(vs != std::string::npos);
  CHECK(std::stod(js.err.substr(vs + 36)) > 0);

  // The ids of --jsonl equal --ids of each prompt alone.
  const auto tokenized = test::run_capture("printf '%s' \"" + kPrompts[1] + "\" | " + test::endor_infer() +
                                               " tokenize " + model, dir);
  REQUIRE(tokenized.status == 0);
  std::string ids_line = tokenized.out;
  while (!ids_line.empty() && ids_line.back() == '\n') ids_line.pop_back();
  const auto by_ids = test::run_capture(infer() + " " + model + gen + " --ids \"" + ids_line + "\"", dir);
  REQUIRE(by_ids.status == 0);
  const nlohmann::json second = nlohmann::json::parse(lines[1]);
  std::string joined;
  for (const auto& id : second["ids"]) joined += (joined.empty() ? "" : " ") + std::to_string(id.get<int>());
  CHECK(by_ids.out == joined + "\n");
}

TEST_CASE("endor-infer --prompts: bad input is one error line, nothing on stdout") {
  TempDir dir;
  const std::string model = pack_sample(dir, "m.endor", "convert --dtype f16");
  const std::string ok = write_prompts(dir, "ok.txt", {"Blessed"});
  struct Case {
    std::string args;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {" --prompts " + dir.file("missing.txt"), 1, "missing.txt: cannot open"},
      {" --prompts " + write_prompts(dir, "empty.txt", {}), 1, "empty.txt: no prompts"},
      {" --prompts " + write_prompts(dir, "blank.txt", {"", "\r", ""}), 1, "blank.txt: no prompts"},
      {" --prompts " + ok + " --batch 0", 2, "--batch must be at least 1"},
      {" -p Blessed --batch 2", 2, "--batch and --jsonl go with --prompts"},
      {" -p Blessed --jsonl", 2, "--batch and --jsonl go with --prompts"},
      {" --prompts " + ok + " -p Blessed", 2, "give one of"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    const auto r = test::run_capture(infer() + " " + model + c.args, dir);
    CHECK(r.status == c.status);
    CHECK(r.out.empty());
    CHECK(one_error_line(r.err));
    CHECK(r.err.find(c.says) != std::string::npos);
  }
}
