// endor-infer end to end: streamed greedy ids, --dump-logits, --stats, and one-line errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "endor/runtime.h"
#include "runtime_test_util.h"

using namespace endor;
using endor::test::TempDir;

namespace {

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  int32_t v;
  while (in >> v) ids.push_back(v);
  return ids;
}

bool one_error_line(const std::string& err) {
  return err.rfind("error: ", 0) == 0 && err.find('\n') == err.size() - 1;
}

}  // namespace

TEST_CASE("endor-infer --ids streams transformers' greedy ids and dumps the prompt's logits") {
  TempDir dir;
  const std::string fx = test::fixture_dir("llama-tiny");
  const std::string model = dir.file("llama-tiny.endor");
  REQUIRE(test::run_command(test::endor_pack() + " convert --dtype f32 " + fx + " -o " + model +
                            " >/dev/null 2>&1") == 0);
  const nlohmann::json ref = test::read_json(fx + "/reference.json");
  const std::vector<int32_t> prompt = ref["prompts"][0]["ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> expected = ref["greedy"]["new_tokens"].get<std::vector<int32_t>>();
  // The CLI stops after EOS (511 here), as transformers' generate() does by default.
  const int32_t eos = ref["config"]["eos_token_id"].get<int32_t>();
  auto eos_at = std::find(expected.begin(), expected.end(), eos);
  if (eos_at != expected.end()) expected.erase(eos_at + 1, expected.end());

  const std::string npy = dir.file("logits.npy");
  const auto r = test::run_capture(test::endor_infer() + " " + model + " --ids \"" + join_ids(prompt) +
                                       "\" -n 32 --temperature 0 --threads 1 --dump-logits " + npy + " --stats",
                                   dir);
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(parse_ids(r.out) == expected);
  CHECK(r.err.find("prefill: 8 tokens") != std::string::npos);
  CHECK(r.err.find("decode: ") != std::string::npos);
  // Sizes print as format_bytes does (binary units, what --gpu-mem/--cpu-mem read).
  CHECK(std::regex_search(r.err, std::regex("bytes read per token: [0-9]+\\.[0-9]{2} [KMGT]iB \\([0-9]+ bytes of weights as the kernels read them\\)")));
  CHECK(r.err.find("time per layer") != std::string::npos);

  const test::NpyMatrix got = test::read_npy_f32(npy);
  const test::NpyMatrix want = test::read_npy_f32(fx + "/logits_orig_p0.npy");
  REQUIRE(got.rows == want.rows);
  REQUIRE(got.cols == want.cols);
  float err = 0;
  for (size_t i = 0; i < got.data.size(); ++i) err = std::max(err, std::abs(got.data[i] - want.data[i]));
  CHECK(err < 1e-4f);  // same forward pass as test_models_vs_transformers (tolerance derived there)

  // Sampling with a fixed seed is reproducible from the command line.
  const std::string cmd = test::endor_infer() + " " + model + " --ids \"" + join_ids(prompt) +
                          "\" -n 12 --temperature 0.9 --top-k 40 --top-p 0.95 --seed 7 --threads 1";
  const auto a = test::run_capture(cmd, dir);
  const auto b = test::run_capture(cmd, dir);
  CHECK(a.status == 0);
  CHECK(a.out == b.out);
  CHECK(parse_ids(a.out).size() >= 1);
}

TEST_CASE("endor-infer errors are one line, exit 1 (2 for usage), and leave no output file") {
  TempDir dir;
  const nlohmann::json cfg = test::synthetic_llama_config();  // context 16, vocab 64
  const std::string model = dir.file("m.endor");
  test::write_synthetic_container(model, cfg, test::synthetic_llama_tensors(cfg), 4);
  const std::string infer = test::endor_infer() + " --threads 1";
  const std::string npy = dir.file("out.npy");

  auto r = test::run_capture(infer + " " + dir.file("absent.endor") + " --ids 1", dir);
  CHECK(r.status == 1);
  CHECK(one_error_line(r.err));
  CHECK(r.err.find("absent.endor") != std::string::npos);

  r = test::run_capture(infer + " " + model + " -p hello", dir);
  CHECK(r.status == 1);
  CHECK(one_error_line(r.err));  // no tokenizer.json in a synthetic container (tests/infer: the text side)
  CHECK(r.err.find("--ids") != std::string::npos);

  r = test::run_capture(infer + " " + model + " --ids \"1 x 3\"", dir);
  CHECK(r.status == 2);
  CHECK(one_error_line(r.err));

  r = test::run_capture(infer + " " + model, dir);
  CHECK(r.status == 2);
  CHECK(one_error_line(r.err));

  r = test::run_capture(infer + " " + model + " --ids 1 --bogus", dir);
  CHECK(r.status == 2);
  CHECK(one_error_line(r.err));

  r = test::run_capture(infer + " " + model + " --ids 1 --kv-dtype f8", dir);
  CHECK(r.status == 2);
  CHECK(one_error_line(r.err));
  CHECK(r.err.find("f8") != std::string::npos);

  const auto devices = available_devices();
  if (std::find(devices.begin(), devices.end(), "cuda") == devices.end()) {
    r = test::run_capture(infer + " " + model + " --ids 1 --device cuda", dir);
    CHECK(r.status == 1);
    CHECK(one_error_line(r.err));
    CHECK(r.err.find("no CUDA device") != std::string::npos);
  }

  std::string seventeen;
  for (int i = 0; i < 17; ++i) seventeen += "3 ";
  r = test::run_capture(infer + " " + model + " --ids \"" + seventeen + "\" --dump-logits " + npy, dir);
  CHECK(r.status == 1);
  CHECK(one_error_line(r.err));
  CHECK(r.err.find("context length 16") != std::string::npos);
  CHECK_FALSE(test::file_exists(npy));

  r = test::run_capture(infer + " " + model + " --ids \"1 64\" --dump-logits " + npy, dir);
  CHECK(r.status == 1);
  CHECK(r.err.find("outside the vocabulary") != std::string::npos);
  CHECK_FALSE(test::file_exists(npy));

  // A truncated container: one line, exit 1, the file untouched.
  const std::string bytes = test::read_text(model);
  {
    std::ofstream cut(dir.file("cut.endor"), std::ios::binary);
    cut.write(bytes.data(), std::streamsize(bytes.size() / 2));
  }
  r = test::run_capture(infer + " " + dir.file("cut.endor") + " --ids 1", dir);
  CHECK(r.status == 1);
  CHECK(one_error_line(r.err));
  CHECK(test::read_text(dir.file("cut.endor")).size() == bytes.size() / 2);

  // A good run on the same file for contrast: -n tokens as ids, and the npy written.
  r = test::run_capture(infer + " " + model + " --ids \"1 2 3\" -n 5 --temperature 0 --dump-logits " + npy, dir);
  CHECK(r.status == 0);
  CHECK(parse_ids(r.out).size() <= 5);
  CHECK(test::read_npy_f32(npy).rows == 3);
}

TEST_CASE("endor-infer usage errors: exit 2, one line naming the option and where the help is") {
  TempDir dir;
  const nlohmann::json cfg = test::synthetic_llama_config();  // context 16
  const std::string model = dir.file("m.endor");
  test::write_synthetic_container(model, cfg, test::synthetic_llama_tensors(cfg), 4);
  const std::string text = dir.file("text.txt");
  std::ofstream(text) << "one two three\n";
  const std::string infer = test::endor_infer() + " ";
  const struct {
    std::string args, what;
  } cases[] = {
      {model + " --ids 1 --bogus", "bogus"},
      {model + " other.endor --ids 1", "unexpected argument 'other.endor'"},
      {"--ids 1", "missing FILE"},
      {model + " --ids 1 --threads -1", "--threads must be in [0, 4096] (0 = all cores), got -1"},
      {model + " --ids 1 --threads 4097", "--threads must be in [0, 4096]"},
      {model + " --ids 1 --gpu-mem 12Q", "--gpu-mem: invalid size '12Q'"},
      {model + " --ids 1 --cpu-mem lots", "--cpu-mem: invalid size 'lots'"},
      {model + " --ids 1 --device tpu", "--device must be cpu, cuda or auto, got 'tpu'"},
      {model + " --ids 1 --kv-dtype f8", "--kv-dtype must be f32 or f16, got 'f8'"},
      {model + " --ids 1 --expert-prefetch maybe", "--expert-prefetch must be on or off, got 'maybe'"},
      {model + " --perplexity " + text + " --ctx 1", "--ctx must be a whole number >= 2, got '1'"},
      {model + " --perplexity " + text + " --ctx -5", "--ctx must be a whole number >= 2, got '-5'"},
      {model + " --perplexity " + text + " --ctx abc", "got 'abc'"},
      // The model's context (16) is known once the file is open: still the command line's fault.
      {model + " --perplexity " + text + " --ctx 17",
       "--ctx 17 exceeds the model's context length 16 (max_position_embeddings)"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.args);
    const auto r = test::run_capture(infer + c.args, dir);
    INFO("stderr: ", r.err);
    CHECK(test::is_usage_error(r, "endor-infer", c.what));
  }
  CHECK(test::is_usage_error(test::run_capture(infer + "tokenize", dir), "endor-infer tokenize", "missing FILE"));
  CHECK(test::is_usage_error(test::run_capture(infer + "detokenize " + model + " --bogus", dir),
                             "endor-infer detokenize", "bogus"));
  // A failure of the work is exit 1 and names the file, without the help hint.
  const auto r = test::run_capture(infer + dir.file("absent.endor") + " --ids 1", dir);
  CHECK(r.status == 1);
  CHECK(r.err.rfind("error: " + dir.file("absent.endor") + ": ", 0) == 0);
  CHECK(r.err.find("--help") == std::string::npos);
}

TEST_CASE("--stats counts the CPU's copy of resident int4 codes: other Linears get one, MoE experts never") {
  // The copy (cpu::Options::int4_dense) is made at load for resident bitmap int4 weights where the
  // AVX-512 VBMI2 kernels run, but not for an MoE expert (a token reads a few of them). --stats'
  // "bytes read per token" counts each weight as the kernels read it (Weight::copy_bytes), experts
  // included, so a model whose only int4 bitmaps are experts reads the same bytes with and without
  // ENDOR_INT4_DENSE=off.
  TempDir dir;
  auto pack = [&](const char* fixture, const std::string& extra) {
    const std::string out = dir.file(std::string(fixture) + ".endor");
    REQUIRE(test::run_command(test::endor_pack() + " prune " + test::fixture_dir(fixture) + " -o " + out +
                              " --sparsity 0.5 --method magnitude --quant int4 --group-size 64 " + extra +
                              " >/dev/null 2>&1") == 0);
    return out;
  };
  // (bytes read per token, greedy ids) of one run, the copy allowed (auto) or not (off).
  auto stats = [&](const std::string& model, const char* copy) {
    const auto r = test::run_capture(std::string("ENDOR_INT4_DENSE=") + copy + " " + test::endor_infer() + " " + model +
                                         " --ids '1 2 3' -n 4 --temperature 0 --threads 1 --stats",
                                     dir);
    INFO("stderr: ", r.err);
    REQUIRE(r.status == 0);
    std::smatch m;
    REQUIRE(std::regex_search(r.err, m, std::regex("\\(([0-9]+) bytes of weights as the kernels read them\\)")));
    return std::make_pair(std::stoull(m[1].str()), r.out);
  };
  const std::string dense_mlp = pack("qwen3-tiny", "");
  const auto [dense_on, dense_on_ids] = stats(dense_mlp, "auto");
  const auto [dense_off, dense_off_ids] = stats(dense_mlp, "off");
  CHECK(dense_on_ids == dense_off_ids);  // the copy gives the bitmap's results
  if (dense_on == dense_off) {
    MESSAGE("skipped: this CPU makes no copy of int4 codes (needs the AVX-512 VBMI2 kernels and memory to spare)");
    return;
  }
  CHECK(dense_on > dense_off);
  // Qwen3-MoE: its attention is copied, its experts are not ...
  const std::string moe = pack("qwen3-moe-tiny", "");
  const auto [moe_on, moe_on_ids] = stats(moe, "auto");
  const auto [moe_off, moe_off_ids] = stats(moe, "off");
  CHECK(moe_on > moe_off);
  CHECK(moe_on_ids == moe_off_ids);
  // ... so with its attention left unpruned and unquantized, nothing is.
  const std::string experts_only = pack("qwen3-moe-tiny", "--skip self_attn");
  const auto [exp_on, exp_on_ids] = stats(experts_only, "auto");
  const auto [exp_off, exp_off_ids] = stats(experts_only, "off");
  CHECK(exp_on == exp_off);
  CHECK(exp_on_ids == exp_off_ids);
}
