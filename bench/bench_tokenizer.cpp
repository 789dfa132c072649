// Tokenizer throughput: load time, encode / decode / streaming-decode MB/s for each tokenizer
// family on ~1 MB texts. Usage: bench_tokenizer [TEXT_FILE...]  (each file is an extra corpus;
// default corpora: the multilingual reference strings of tests/fixtures/tokenizers/refs.json.zst,
// and English prose from samples/kjv-llama when present).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zstd.h>

#include "endor/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string read_maybe_zst(const std::string& path) {
  std::string data = read_file(path);
  if (path.size() < 4 || path.compare(path.size() - 4, 4, ".zst") != 0) return data;
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  std::string out, buf(ZSTD_DStreamOutSize(), '\0');
  ZSTD_inBuffer in{data.data(), data.size(), 0};
  while (in.pos < in.size) {
    ZSTD_outBuffer o{buf.data(), buf.size(), 0};
    size_t r = ZSTD_decompressStream(ctx.get(), &o, &in);
    if (ZSTD_isError(r)) throw std::runtime_error(path + ": " + ZSTD_getErrorName(r));
    out.append(buf.data(), o.pos);
  }
  return out;
}

std::string repeat_to(const std::string& s, size_t bytes) {
  std::string out;
  while (!s.empty() && out.size() < bytes) out += s;
  return out;
}

// Best of `runs` in process CPU seconds (single-threaded work; steadier than wall time on a
// shared machine) and the wall seconds of that run.
struct Timing { double cpu = 1e30, wall = 0; };
template <typename F>
Timing best_of(int runs, F f) {
  Timing best;
  for (int r = 0; r < runs; ++r) {
    auto t = Clock::now();
    std::clock_t c = std::clock();
    f();
    double cpu = static_cast<double>(std::clock() - c) / CLOCKS_PER_SEC;
    if (cpu < best.cpu) best = Timing{cpu, seconds_since(t)};
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string fixtures = std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/tokenizers/";
  std::vector<std::pair<std::string, std::string>> corpora;
  {
    auto refs = nlohmann::json::parse(read_maybe_zst(fixtures + "refs.json.zst"));
    std::string mixed;
    for (const auto& c : refs.at("families").at("llama3").at("cases")) mixed += c.at("text").get<std::string>() + "\n";
    corpora.emplace_back("multilingual refs", repeat_to(mixed, 1 << 20));
  }
  std::string prose = read_file(std::string(ENDOR_SOURCE_DIR) + "/samples/kjv-llama/calib.txt");
  if (!prose.empty()) corpora.emplace_back("English prose (KJV)", repeat_to(prose, 1 << 20));
  for (int i = 1; i < argc; ++i) {
    std::string t = read_file(argv[i]);
    if (t.empty()) { std::fprintf(stderr, "error: cannot read %s\n", argv[i]); return 1; }
    corpora.emplace_back(argv[i], t);
  }

  std::printf("MB/s from process CPU time (best of 3; stream: 1 run); load and encode wall seconds alongside\n");
  std::printf("%-8s %-20s %7s %7s %6s %9s %11s %9s %11s %11s\n", "family", "corpus", "load_s", "cpu_s", "MB", "tokens",
              "encode MB/s", "enc wall", "decode MB/s", "stream MB/s");
  for (const char* family : {"llama2", "llama3", "qwen3", "bytebpe"}) {
    std::string file = std::string(family) == "bytebpe" ? "bytebpe/tokenizer.json" : std::string(family) + ".tokenizer.json.zst";
    std::string json = read_maybe_zst(fixtures + file);
    auto t0 = Clock::now();
    std::clock_t c0 = std::clock();
    endor::Tokenizer tok = endor::Tokenizer::from_json(json, file);
    double load = seconds_since(t0), load_cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    for (const auto& corpus : corpora) {
      const std::string& name = corpus.first;
      const std::string& text = corpus.second;  // (no structured binding: lambdas below capture it)
      double mb = static_cast<double>(text.size()) / 1e6;
      std::vector<int32_t> ids;
      Timing enc = best_of(3, [&] { ids = tok.encode(text); });
      std::string back;
      Timing dec = best_of(3, [&] { back = tok.decode(ids); });
      Timing str = best_of(1, [&] {
        endor::StreamingDecoder s(tok);
        std::string out;
        for (int32_t id : ids) out += s.push(id);
        out += s.flush();
      });
      std::printf("%-8s %-20s %7.3f %7.3f %6.2f %9zu %11.1f %9.3f %11.1f %11.1f\n", family, name.substr(0, 20).c_str(),
                  load, load_cpu, mb, ids.size(), mb / enc.cpu, enc.wall, mb / dec.cpu, mb / str.cpu);
    }
  }
  return 0;
}
