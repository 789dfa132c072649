// Shared helpers of the endor-infer text tests: the sample model packed with the built endor-pack,
// commands fed from a file on stdin, and the fixtures' paths.
#pragma once

#include <string>

#include <doctest/doctest.h>

#include "../runtime/runtime_test_util.h"  // TempDir, run_capture, endor_pack/endor_infer paths

namespace endor::test {

inline std::string sample_dir() { return std::string(ENDOR_SOURCE_DIR) + "/samples/kjv-llama"; }
inline std::string infer_golden(const std::string& name) {
  return std::string(ENDOR_SOURCE_DIR) + "/tests/infer/golden/" + name;
}
inline std::string ppl_fixture(const std::string& name) {
  return std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/perplexity/" + name;
}

// Packs the sample with `endor-pack <pack_args>` into dir/name; REQUIREs success.
inline std::string pack_sample(const TempDir& dir, const std::string& name, const std::string& pack_args) {
  const std::string out = dir.file(name);
  const CommandResult r = run_capture(endor_pack() + " " + pack_args + " " + sample_dir() + " -o " + out, dir);
  INFO("endor-pack stderr: ", r.err);
  REQUIRE(r.status == 0);
  return out;
}

// endor-infer with one CPU thread (reproducible sums, quiet on a shared machine) and the given
// arguments; `stdin_text` (when not null) is written to a file and redirected to stdin.
inline CommandResult infer(const TempDir& dir, const std::string& args, const std::string* stdin_text = nullptr) {
  std::string cmd = "OMP_NUM_THREADS=1 " + endor_infer() + " " + args;
  if (stdin_text) {
    const std::string in = dir.file("stdin.txt");
    std::ofstream(in, std::ios::binary) << *stdin_text;
    cmd += " < " + in;
  }
  return run_capture(cmd, dir);
}

inline bool one_error_line(const std::string& err) {
  return err.rfind("error: ", 0) == 0 && err.find('\n') == err.size() - 1;
}

// The text after "perplexity: " on the last line of endor-infer --perplexity's stdout.
inline double last_line_perplexity(const std::string& out) {
  const size_t end = out.size() && out.back() == '\n' ? out.size() - 1 : out.size();
  const size_t begin = out.rfind('\n', end - 1);
  const std::string line = out.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin + 1));
  const std::string key = "perplexity: ";
  if (line.rfind(key, 0) != 0) return -1;
  return std::stod(line.substr(key.size()));
}

}  // namespace endor::test
