// The exports loaded by the real consumers. Each case skips, saying what is missing:
//   transformers (+ compressed-tensors): python3 or $ENDOR_PYTHON with torch, transformers,
//     compressed_tensors and numpy (tools/requirements-export.txt). The compressed-tensors and hf
//     exports load with every parameter bit-equal to the container's decoded tensor, the int4
//     export's logits within 1e-3 relative of `endor-infer --exact --dump-logits`, the hf export's
//     perplexity within 1e-4 relative of `endor-infer --perplexity --exact`.
//   llama.cpp: llama-perplexity and llama-quantize in $ENDOR_LLAMA_CPP_BIN (default
//     ~/.cache/endor/peers/llama-build/bin, bench/peers/build_llama.sh). The GGUF export (int4 as
//     Q4_1 blocks, int8g as Q8_0, each Linear's type checked) runs, and llama-quantize takes it to
//     Q8_0. With the SmolLM2 folder (~/.cache/endor/smollm2-135m-instruct-hf) and llama.cpp's
//     convert_hf_to_gguf.py ($ENDOR_LLAMA_CPP_CONVERT), the GGUF export's llama-perplexity equals
//     that of llama.cpp's own F32 conversion of the hf export.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "../packer/synthetic_checkpoint.h"
#include "endor/gguf.h"

using endor::test::make_temp_dir;
using endor::test::read_bytes;
using endor::test::remove_tree;

namespace {

const std::string kPack = std::string(ENDOR_BINARY_DIR) + "/packer/endor-pack";
const std::string kInfer = std::string(ENDOR_BINARY_DIR) + "/runtime/endor-infer";
const std::string kText = std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/perplexity/text.txt";
const std::string kTool = std::string(ENDOR_SOURCE_DIR) + "/tools/export_check_transformers.py";

std::string fixture(const std::string& name) { return std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/models/" + name; }
std::string quote(const std::string& s) { return "'" + s + "'"; }

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

std::string env_or(const char* key, const std::string& fallback) {
  const char* v = std::getenv(key);
  return v && *v ? v : fallback;
}

std::string cache_dir() { return env_or("ENDOR_CACHE", env_or("HOME", "") + "/.cache/endor"); }

// Runs a shell command; its combined output. REQUIREs exit 0 unless `may_fail`.
std::string sh(const std::string& cmd, const std::string& dir, int* rc_out = nullptr) {
  const std::string log = dir + "/cmd.log";
  const int status = std::system(("(" + cmd + ") > " + quote(log) + " 2>&1").c_str());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::string out = read_bytes(log);
  if (rc_out) {
    *rc_out = rc;
  } else {
    INFO(cmd << "\n" << out);
    REQUIRE(rc == 0);
  }
  return out;
}

double number_after(const std::string& text, const std::string& key) {
  const size_t at = text.rfind(key);
  REQUIRE_MESSAGE(at != std::string::npos, "no '" << key << "' in: " << text);
  return std::strtod(text.c_str() + at + key.size(), nullptr);
}

// llama-perplexity's figure: on a loaded machine it sometimes exits 0 without printing its last lines
// ("Final estimate"), so a run without them is repeated, up to 3 times (scripts/llama_quants.sh does too).
double llama_ppl(const std::string& cmd, const std::string& dir) {
  const std::string key = "Final estimate: PPL = ";
  std::string out;
  for (int attempt = 0; attempt < 3; ++attempt) {
    out = sh(cmd, dir);
    if (out.rfind(key) != std::string::npos) break;
  }
  return number_after(out, key);
}

std::string transformers_python() {
  const std::string py = env_or("ENDOR_PYTHON", "python3");
  const int s = std::system((quote(py) + " -c 'import torch, transformers, compressed_tensors, numpy' > /dev/null 2>&1").c_str());
  return s == 0 ? py : "";
}

}  // namespace

TEST_CASE("transformers loads the hf and compressed-tensors exports as Endor decodes them") {
  const std::string py = transformers_python();
  if (py.empty()) {
    MESSAGE("SKIPPED: no python3 ($ENDOR_PYTHON) with torch, transformers, compressed_tensors and numpy "
            "(pip install -r tools/requirements-export.txt)");
    return;
  }
  const std::string dir = make_temp_dir("export-hf");
  const std::string tool = quote(py) + " " + quote(kTool);
  struct Case {
    std::string fixture;
    std::vector<std::string> quant;
  };
  const std::vector<Case> cases = {
      {"llama-tiny", {"--quant", "int4", "--group-size", "32"}},
      {"qwen2-tiny", {"--quant", "int4", "--group-size", "8"}},
      {"opt-tiny", {"--quant", "int8"}},
  };
  for (const Case& c : cases) {
    INFO(c.fixture);
    const std::string endor = dir + "/" + c.fixture + ".endor";
    std::string args;
    for (const std::string& a : c.quant) args += " " + a;
    sh(quote(kPack) + " prune " + quote(fixture(c.fixture)) + " -o " + quote(endor) + " --sparsity 0.5" + args, dir);
    const std::string ct = dir + "/" + c.fixture + "-ct", hf = dir + "/" + c.fixture + "-hf";
    sh(quote(kPack) + " export " + quote(endor) + " --to compressed-tensors -o " + quote(ct), dir);
    sh(quote(kPack) + " export " + quote(endor) + " --to hf -o " + quote(hf), dir);
    // One python process (torch loads once): both folders' weights bit for bit, the quantized
    // export's logits against endor-infer --exact, the hf export's perplexity.
    const std::string ids = sh(quote(kInfer) + " tokenize " + quote(endor) + " < " + quote(kText) + " | tr '\\n' ' ' | cut -d' ' -f1-40", dir);
    const std::string npy = dir + "/" + c.fixture + ".npy", ids_file = dir + "/ids.txt";
    sh(quote(kInfer) + " " + quote(endor) + " --exact --ids " + quote(ids) + " -n 1 --dump-logits " + quote(npy), dir);
    sh(quote(kInfer) + " tokenize " + quote(endor) + " < " + quote(kText) + " > " + quote(ids_file), dir);
    const std::string out = sh(tool + " all --ct " + quote(ct) + " --hf " + quote(hf) + " --endor " + quote(endor) + " --ids " + quote(ids) +
                                   " --endor-logits " + quote(npy) + " --ids-file " + quote(ids_file) + " --ctx 64",
                               dir);
    // (the tool exits non-zero, failing sh(), on any weight difference or logits past 1e-3)
    size_t clean = 0;
    for (size_t at = out.find("parameters compared, 0 problems"); at != std::string::npos; at = out.find("parameters compared, 0 problems", at + 1))
      ++clean;
    CHECK(clean == 2);
    const double mine = number_after(sh(quote(kInfer) + " " + quote(endor) + " --exact --perplexity " + quote(kText) + " --ctx 64", dir),
                                     "perplexity: ");
    const double theirs = number_after(out, "perplexity: ");
    const size_t at = out.find(" tokens, max");
    MESSAGE(c.fixture << " compressed-tensors logits:" << out.substr(at, out.find('\n', at) - at) << "; hf perplexity: transformers "
                      << theirs << ", endor-infer --exact " << mine);
    CHECK(std::fabs(theirs - mine) <= 1e-4 * mine);
  }
  remove_tree(dir);
}

TEST_CASE("llama.cpp runs the GGUF export, quantizes it, and scores it as its own conversion") {
  const std::string bin = env_or("ENDOR_LLAMA_CPP_BIN", cache_dir() + "/peers/llama-build/bin");
  if (!exists(bin + "/llama-perplexity") || !exists(bin + "/llama-quantize")) {
    MESSAGE("SKIPPED: no llama-perplexity / llama-quantize in " << bin << " ($ENDOR_LLAMA_CPP_BIN; bench/peers/build_llama.sh builds them)");
    return;
  }
  const std::string dir = make_temp_dir("export-llama");
  const std::string endor = dir + "/m.endor", gguf = dir + "/m.gguf";
  // llama (MHA, untied), qwen2 (biases, GQA, tied) and mistral (GQA, written as llama) as int4 in
  // Q4_1 blocks; llama's int8g (embedding and head too) in Q8_0 blocks. Every Linear whose columns
  // are whole 32-blocks has the block type.
  struct Case {
    const char* fixture;
    const char* quant;
    endor::GgmlType type;  // every decoder Linear's in the export
  };
  for (const Case& c : {Case{"qwen2-tiny", "--quant int4", endor::GgmlType::Q4_1}, Case{"mistral-tiny", "--quant int4", endor::GgmlType::Q4_1},
                        Case{"llama-tiny", "--quant int8g --quant-head int8g", endor::GgmlType::Q8_0},
                        Case{"llama-tiny", "--quant int4", endor::GgmlType::Q4_1}}) {
    ::unlink(endor.c_str());
    ::unlink(gguf.c_str());
    sh(quote(kPack) + " prune " + quote(fixture(c.fixture)) + " -o " + quote(endor) + " --sparsity 0.5 " + c.quant + " --group-size 32", dir);
    sh(quote(kPack) + " export " + quote(endor) + " --to gguf -o " + quote(gguf), dir);
    uint64_t blocks = 0;
    const auto file = endor::GgufFile::open(gguf);
    for (const endor::GgufTensorInfo& t : file->header().tensors) {
      if (t.ne.size() != 2 || t.name == "token_embd.weight" || t.name == "output.weight") continue;
      INFO((std::string(c.fixture) + " " + t.name + ": " + endor::ggml_type_name(t.type)));
      if (t.ne[0] % 32 != 0) {  // qwen2-tiny's down_proj (88 columns): no whole blocks, floats
        CHECK(endor::ggml_block_elements(t.type) == 1);
        continue;
      }
      CHECK(t.type == c.type);
      ++blocks;
    }
    CHECK(blocks > 0);
    const double p = llama_ppl(quote(bin + "/llama-perplexity") + " -m " + quote(gguf) + " -f " + quote(kText) + " -c 64 -t 2", dir);
    MESSAGE((std::string(c.fixture) + " " + c.quant + " @ 50 % GGUF export (" + endor::ggml_type_name(c.type) + " blocks): llama-perplexity ") << p);
    CHECK(std::isfinite(p));
    CHECK(p > 1.0);
  }
  // (the export holds Q4_1 blocks: int4 at groups of 32 goes out in llama.cpp's own type, so quantizing
  // again needs llama-quantize's --allow-requantize)
  sh(quote(bin + "/llama-quantize") + " --allow-requantize " + quote(gguf) + " " + quote(dir + "/q8.gguf") + " Q8_0", dir);
  CHECK(std::isfinite(llama_ppl(quote(bin + "/llama-perplexity") + " -m " + quote(dir + "/q8.gguf") + " -f " + quote(kText) + " -c 64 -t 2", dir)));

  // SmolLM2 (a tokenizer llama.cpp's converter recognizes): our GGUF against llama.cpp's own conversion.
  const std::string smol = cache_dir() + "/smollm2-135m-instruct-hf";
  const std::string convert = env_or("ENDOR_LLAMA_CPP_CONVERT", cache_dir() + "/peers/llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py");
  const std::string py = transformers_python();
  if (!exists(smol + "/model.safetensors") || !exists(convert) || py.empty()) {
    MESSAGE("PARTLY SKIPPED: needs " << smol << " (tools/make_smollm2_fixture.py), " << convert
                                     << " ($ENDOR_LLAMA_CPP_CONVERT) and python with torch and transformers");
    remove_tree(dir);
    return;
  }
  const std::string s_endor = dir + "/s.endor", s_gguf = dir + "/s.gguf", s_hf = dir + "/s-hf", s_ref = dir + "/s-ref.gguf";
  sh(quote(kPack) + " prune " + quote(smol) + " -o " + quote(s_endor) + " --sparsity 0.5 --quant int4 --group-size 64", dir);
  sh(quote(kPack) + " export " + quote(s_endor) + " --to gguf -o " + quote(s_gguf) + " --dtype f32", dir);
  sh(quote(kPack) + " export " + quote(s_endor) + " --to hf -o " + quote(s_hf) + " --dtype f32", dir);
  sh(quote(py) + " " + quote(convert) + " " + quote(s_hf) + " --outtype f32 --outfile " + quote(s_ref), dir);
  const std::string text = "/usr/share/common-licenses/GPL-3";
  auto score = [&](const std::string& g) {
    return llama_ppl(quote(bin + "/llama-perplexity") + " -m " + quote(g) + " -f " + text + " -c 512 -t 2 --chunks 4", dir);
  };
  const double ours = score(s_gguf), theirs = score(s_ref);
  MESSAGE("SmolLM2 magnitude 50 % int4 (f32 GGUF): llama-perplexity of the export " << ours << ", of llama.cpp's conversion " << theirs);
  CHECK(std::fabs(ours - theirs) <= 1e-4 * theirs);
  remove_tree(dir);
}
