// Calibrated pruning (pack_calibrated: Wanda, SparseGPT) on the sample model samples/kjv-llama with
// a small calibration (8 windows × 64 tokens of calib.txt): requested sparsity, valid containers,
// and the acceptance of issue 6: at 50 % both beat magnitude's held-out perplexity.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "endor/packer.h"
#include "endor/runtime.h"
#include "endor/tokenizer.h"

using namespace endor;

namespace {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/endor-calib-test-XXXXXX";
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  size_t n_entries() const {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(path_)) n += !e.path().empty();
    return n;
  }

 private:
  std::string path_;
};

const std::string kSample = std::string(ENDOR_SOURCE_DIR) + "/samples/kjv-llama";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

PackOptions prune_options(const std::string& method, double sparsity, uint32_t n = 0, uint32_t m = 0) {
  PackOptions o;
  o.command = "prune";
  o.prune.method = method;
  o.prune.sparsity = sparsity;
  o.prune.n = n;
  o.prune.m = m;
  o.tool_version = "test";
  return o;
}

CalibrationOptions small_calibration() {
  CalibrationOptions c;
  c.text_path = kSample + "/calib.txt";
  c.n_samples = 8;
  c.seq_len = 64;
  c.seed = 0;
  return c;
}

// Held-out perplexity (ALGORITHMS.md "Perplexity") over all of heldout.txt in windows of 256 (184
// windows, ~10 s each model). On its first 8 windows alone Wanda (8×64 calibration) scored 81.1 vs
// magnitude's 79.9: on this small model the margins are small, so the whole held-out text is used.
double heldout_perplexity(const std::string& container) {
  auto reader = ContainerReader::open(container);
  auto backend = make_backend("cpu", 0);
  auto model = load_model(*reader, *backend);
  const Tokenizer tok = Tokenizer::from_json(*reader->file("tokenizer.json"), container);
  std::vector<int32_t> ids = tok.encode(read_text(kSample + "/heldout.txt"), true);
  REQUIRE(ids.size() >= 256);
  return perplexity(*model, ids, 256).perplexity;
}

struct Linear {
  std::vector<float> w;
  uint64_t rows = 0, cols = 0;
};

std::vector<Linear> pruned_linears(const ContainerReader& r) {
  std::vector<Linear> out;
  for (const TensorInfo& t : r.manifest().tensors) {
    if (t.shape.size() != 2 || t.name.find(".layers.") == std::string::npos) continue;
    Linear l;
    l.rows = t.shape[0];
    l.cols = t.shape[1];
    l.w.resize(l.rows * l.cols);
    decode_rows_f32(r.tensor(t), 0, l.rows, l.w.data());
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace

TEST_CASE("wanda and sparsegpt at 50 %: sparsity as requested, verified container, perplexity below magnitude's") {
  TempDir dir;
  const std::string mag = dir.file("mag.endor"), wanda = dir.file("wanda.endor"), sgpt = dir.file("sgpt.endor");
  pack_checkpoint(kSample, mag, prune_options("magnitude", 0.5));
  pack_calibrated(kSample, wanda, prune_options("wanda", 0.5), small_calibration());
  pack_calibrated(kSample, sgpt, prune_options("sparsegpt", 0.5), small_calibration());
  CHECK(dir.n_entries() == 3);  // the temporary dense containers are gone

  for (const std::string& path : {wanda, sgpt}) {
    CAPTURE(path);
    auto r = ContainerReader::open(path);
    CHECK_NOTHROW(r->verify_all());
    const auto& prov = r->manifest().provenance;
    CHECK(prov["calibration"]["samples"] == 8);
    CHECK(prov["calibration"]["seq_len"] == 64);
    const std::vector<Linear> linears = pruned_linears(*r);
    REQUIRE(linears.size() == 6 * 7);
    for (const Linear& l : linears) {
      uint64_t total_zeros = 0;
      for (uint64_t i = 0; i < l.rows; ++i) {
        uint64_t zeros = 0;
        for (uint64_t j = 0; j < l.cols; ++j) zeros += l.w[i * l.cols + j] == 0.0f;
        total_zeros += zeros;
        if (path == wanda) CHECK(zeros >= l.cols / 2);  // per row, int(in·0.5)
      }
      // SparseGPT picks its mask jointly over rows × 128 columns: the matrix is 50 % (no per-row rule).
      const double frac = double(total_zeros) / double(l.rows * l.cols);
      CHECK(frac >= 0.5 - 1e-3);
      CHECK(frac <= 0.5 + 0.02);
    }
  }

  const double p_mag = heldout_perplexity(mag), p_wanda = heldout_perplexity(wanda), p_sgpt = heldout_perplexity(sgpt);
  MESSAGE("held-out ppl (heldout.txt, ctx 256): magnitude " << p_mag << ", wanda " << p_wanda << ", sparsegpt " << p_sgpt);
  CHECK(std::isfinite(p_wanda));
  CHECK(p_wanda < p_mag);
  CHECK(p_sgpt < p_mag);
}

TEST_CASE("sparsegpt 2:4 with int8: every group of 4 has 2 zeros; the same seed gives the same file") {
  TempDir dir;
  PackOptions o = prune_options("sparsegpt", 0.0, 2, 4);
  o.quant = Quantization::Int8;
  pack_calibrated(kSample, dir.file("a.endor"), o, small_calibration());
  pack_calibrated(kSample, dir.file("b.endor"), o, small_calibration());
  auto a = ContainerReader::open(dir.file("a.endor"));
  auto b = ContainerReader::open(dir.file("b.endor"));
  CHECK_NOTHROW(a->verify_all());
  const std::vector<Linear> la = pruned_linears(*a), lb = pruned_linears(*b);
  REQUIRE(la.size() == 42);
  for (size_t k = 0; k < la.size(); ++k) {
    CHECK(la[k].w == lb[k].w);
    const Linear& l = la[k];
    for (uint64_t g = 0; g < l.w.size() / 4; ++g) {
      int zeros = 0;
      for (int j = 0; j < 4; ++j) zeros += l.w[g * 4 + j] == 0.0f;
      if (zeros < 2) FAIL("group " << g << " has " << zeros << " zeros");
    }
  }
  CalibrationOptions other = small_calibration();
  other.seed = 1;
  pack_calibrated(kSample, dir.file("c.endor"), o, other);
  auto c = ContainerReader::open(dir.file("c.endor"));
  CHECK(pruned_linears(*c)[0].w != la[0].w);  // another seed draws other windows
}

TEST_CASE("calibration errors: one clear message, no output, no leftovers") {
  TempDir dir;
  const std::string out = dir.file("out.endor");
  CalibrationOptions missing = small_calibration();
  missing.text_path = dir.file("nope.txt");
  CHECK_THROWS_WITH_AS(pack_calibrated(kSample, out, prune_options("wanda", 0.5), missing),
                       doctest::Contains("nope.txt"), Error);
  CalibrationOptions too_long = small_calibration();
  too_long.seq_len = 100000;
  CHECK_THROWS_WITH_AS(pack_calibrated(kSample, out, prune_options("wanda", 0.5), too_long),
                       doctest::Contains("--calib-seqlen"), Error);
  {
    std::ofstream(dir.file("short.txt")) << "In the beginning";
  }
  CalibrationOptions short_text = small_calibration();
  short_text.text_path = dir.file("short.txt");
  CHECK_THROWS_WITH_AS(pack_calibrated(kSample, out, prune_options("sparsegpt", 0.5), short_text),
                       doctest::Contains("tokens"), Error);
  PackOptions wq = prune_options("wanda", 0.5);
  wq.quant = Quantization::Int4;
  CHECK_THROWS_AS(pack_calibrated(kSample, out, wq, small_calibration()), Error);
  CHECK_THROWS_AS(pack_calibrated(kSample, out, prune_options("magnitude", 0.5), small_calibration()), Error);
  CHECK(dir.n_entries() == 1);  // only short.txt
}
