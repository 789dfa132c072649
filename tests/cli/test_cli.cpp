// End-to-end runs of the built endor-pack binary on the transformers-made fixtures: commands,
// exit codes, one-line errors, no leftover files, inputs untouched, Ctrl-C cleanup.
#include <doctest/doctest.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "../packer/gguf_builder.h"
#include "../packer/synthetic_checkpoint.h"
#include "endor/openmp_policy.h"

extern char** environ;

using endor::test::make_temp_dir;
using endor::test::read_bytes;
using endor::test::remove_tree;
using endor::test::write_bytes;

namespace {

const std::string kBinary = std::string(ENDOR_BINARY_DIR) + "/packer/endor-pack";

std::string fixture(const std::string& name) { return std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/models/" + name; }

struct Run {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out, err;
};

// Starts endor-pack with stdout/stderr redirected to files in `io_dir`, optionally in `cwd`.
pid_t spawn(const std::vector<std::string>& args, const std::string& io_dir, const std::string& cwd = "") {
  std::vector<std::string> argv_s = {kBinary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, (io_dir + "/stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, (io_dir + "/stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, kBinary.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE_MESSAGE(rc == 0, "cannot start " << kBinary);
  return pid;
}

Run wait_for(pid_t pid, const std::string& io_dir) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  Run r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = read_bytes(io_dir + "/stdout");
  r.err = read_bytes(io_dir + "/stderr");
  return r;
}

// Runs endor-pack to completion; its stdout/stderr go through a private scratch folder.
Run run(const std::vector<std::string>& args, const std::string& cwd = "") {
  const std::string io = make_temp_dir("cli-io");
  const Run r = wait_for(spawn(args, io, cwd), io);
  remove_tree(io);
  return r;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Every file (recursively) with its bytes: the "hash" of a folder, exact.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const std::string& n : list_dir(dir)) {
    const std::string p = dir + "/" + n;
    struct stat st {};
    ::stat(p.c_str(), &st);
    if (S_ISDIR(st.st_mode)) {
      for (const auto& [k, v] : snapshot(p)) files[n + "/" + k] = v;
    } else {
      files[n] = read_bytes(p);
    }
  }
  return files;
}

// An error run: the expected exit code and exactly one line on stderr starting "error: ".
void check_one_line_error(const Run& r, int code, const std::string& fragment) {
  CAPTURE(r.err);
  CHECK(r.exit_code == code);
  CHECK(r.err.rfind("error: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find(fragment) != std::string::npos);
}

// A usage error: exit 2 and one line "error: WHAT (see endor-pack [COMMAND] --help)", the shape all
// three programs share (endor/cli_common.h).
void check_usage_error(const Run& r, const std::string& command, const std::string& fragment) {
  check_one_line_error(r, 2, fragment);
  const std::string tail = " (see " + command + " --help)\n";
  CHECK(r.err.size() > tail.size());
  CHECK(r.err.compare(r.err.size() - tail.size(), tail.size(), tail) == 0);
}

}  // namespace

TEST_CASE("--help on the tool and on every command") {
  const Run top = run({"--help"});
  CHECK(top.exit_code == 0);
  for (const char* cmd : {"convert", "prune", "inspect", "compare"}) CHECK(top.out.find(cmd) != std::string::npos);
  CHECK(run({}).exit_code == 2);
  CHECK(run({"frobnicate"}).exit_code == 2);
  const std::map<std::string, std::vector<std::string>> expect = {
      {"convert", {"--dtype", "--output", "--gpu-mem"}},
      {"prune", {"--sparsity", "--method", "--pattern", "--scope", "--quant", "--group-size", "--skip", "--calib", "--cpu-mem"}},
      {"inspect", {"--json", "--verify"}},
      {"compare", {"--zstd-levels", "--csv", "--json", "--svg", "--sparsity"}}};
  for (const auto& [cmd, options] : expect) {
    CAPTURE(cmd);
    const Run r = run({cmd, "--help"});
    CHECK(r.exit_code == 0);
    for (const std::string& o : options) CHECK(r.out.find(o) != std::string::npos);
  }
}

TEST_CASE("usage errors: exit 2, one line naming the option and where the help is") {
  const std::string dir = make_temp_dir("cli-usage");
  const std::string out = dir + "/x.endor";
  check_usage_error(run({"frobnicate"}), "endor-pack", "unknown command 'frobnicate'");
  check_usage_error(run({"convert", fixture("opt-tiny"), "-o", out, "--bogus"}), "endor-pack convert", "bogus");
  check_usage_error(run({"convert", fixture("opt-tiny"), "extra", "-o", out}), "endor-pack convert",
                    "unexpected argument 'extra'");
  check_usage_error(run({"inspect"}), "endor-pack inspect", "missing FILE");
  check_usage_error(run({"convert", fixture("opt-tiny"), "-o", out, "--cpu-mem", "12Q"}), "endor-pack convert",
                    "--cpu-mem: invalid size '12Q'");
  check_usage_error(run({"export", out, "--to", "hf", "-o", dir + "/hf", "--max-shard-size", "lots"}), "endor-pack export",
                    "--max-shard-size: invalid size 'lots'");
  for (const char* threads : {"-1", "4097"})
    check_usage_error(run({"compare", fixture("opt-tiny"), "--threads", threads}), "endor-pack compare",
                      std::string("--threads must be in [0, 4096] (0 = all cores), got ") + threads);
  check_usage_error(run({"compare", fixture("opt-tiny"), "--threads", "two"}), "endor-pack compare", "two");
  // prune and convert: the same --threads, with the same check.
  check_usage_error(run({"prune", fixture("opt-tiny"), "-o", "x.endor", "--sparsity", "0.5", "--threads", "-1"}),
                    "endor-pack prune", "--threads must be in [0, 4096] (0 = all cores), got -1");
  check_usage_error(run({"convert", fixture("opt-tiny"), "-o", "x.endor", "--threads", "4097"}), "endor-pack convert",
                    "--threads must be in [0, 4096] (0 = all cores), got 4097");
  CHECK(list_dir(dir).empty());  // nothing written by a refused command
  remove_tree(dir);
}

TEST_CASE("sizes print in the binary units the size options read (format_bytes)") {
  const std::string dir = make_temp_dir("cli-sizes");
  const std::string out = dir + "/m.endor";
  const Run c = run({"convert", fixture("llama-tiny"), "-o", out});
  REQUIRE_MESSAGE(c.exit_code == 0, c.err);
  const std::string size = endor::format_bytes(read_bytes(out).size());
  CAPTURE(c.out);
  CHECK(size.find("iB") != std::string::npos);  // the fixture is over 1 KiB: a unit, not bytes
  CHECK(c.out.find("wrote " + out + ": " + size + ", ") == 0);
  const Run i = run({"inspect", out});
  REQUIRE(i.exit_code == 0);
  CHECK(i.out.find(size + " (" + std::to_string(read_bytes(out).size()) + " bytes)") != std::string::npos);
  for (const char* si : {" GB", " MB", " kB"}) CHECK(c.out.find(si) == std::string::npos);
  remove_tree(dir);
}

TEST_CASE("convert, prune, inspect --verify on OPT and Llama fixtures; inputs untouched") {
  const std::string dir = make_temp_dir("cli-pack");
  for (const char* name : {"opt-tiny", "opt-noprefix", "llama-tiny", "llama-sharded", "qwen2-tiny"}) {
    const std::string name_s = name;
    CAPTURE(name_s);
    const auto before = snapshot(fixture(name));
    const std::string dense = dir + "/" + name + ".dense.endor", pruned = dir + "/" + name + ".pruned.endor";
    const Run c = run({"convert", fixture(name), "-o", dense, "--dtype", "f16"});
    CHECK(c.exit_code == 0);
    CHECK(c.out.find("wrote " + dense) != std::string::npos);
    // Nothing said of method or calibration: SparseGPT on text the model writes itself, saying so.
    const Run p = run({"prune", fixture(name), "-o", pruned, "--sparsity", "0.5", "--quant", "int8"});
    CHECK(p.exit_code == 0);
    CHECK(p.err.find("note: no --method: sparsegpt") != std::string::npos);
    CHECK(p.err.find("note: no --calib: calibrating on 128 x ") != std::string::npos);
    CHECK(p.err.find("tokens generated by the model itself") != std::string::npos);
    CHECK(p.out.find("pruned by sparsegpt") != std::string::npos);

    const Run iv = run({"inspect", pruned, "--verify"});
    CHECK(iv.exit_code == 0);
    CHECK(iv.out.find("verify: OK") != std::string::npos);
    CHECK(iv.out.find("provenance:") != std::string::npos);
    const Run ij = run({"inspect", pruned, "--json"});
    REQUIRE(ij.exit_code == 0);
    const nlohmann::json rep = nlohmann::json::parse(ij.out);
    CHECK(rep["provenance"]["method"] == "sparsegpt");
    CHECK(rep["provenance"]["calibration"]["generated"]["by"] == "the model itself");
    CHECK(rep["provenance"]["calibration"]["samples"] == 128);
    CHECK(rep["provenance"]["quant"] == "int8");
    int linears = 0;
    for (const nlohmann::json& t : rep["tensors"]) {
      const std::string n = t["name"];
      if (n.find("layers.") == std::string::npos || t["shape"].size() != 2) {
        // --quant without --quant-head: the embedding and lm_head int8 too, nothing else outside the blocks.
        const bool head = n.find("embed_tokens") != std::string::npos || n.find("lm_head") != std::string::npos;
        CHECK((t["value_type"] == "int8") == head);
        continue;
      }
      ++linears;
      CHECK(t["value_type"] == "int8");
      CHECK(t["sparsity"].get<double>() >= 0.5);
      CHECK(t["ratio"].get<double>() < 0.7);
    }
    CHECK(linears == 2 * (std::string(name).rfind("opt", 0) == 0 ? 6 : 7));
    CHECK(rep["total"]["ratio"].get<double>() < 1.0);
    CHECK(rep["files"][0]["name"] == "tokenizer.json");
    const Run id = run({"inspect", dense, "--json"});
    REQUIRE(id.exit_code == 0);
    for (const nlohmann::json& t : nlohmann::json::parse(id.out)["tensors"]) CHECK(t["value_type"] == "f16");
    CHECK(snapshot(fixture(name)) == before);
  }
  CHECK(list_dir(dir).size() == 10);  // nothing but the outputs
  remove_tree(dir);
}

TEST_CASE("inspect shows an MoE's experts per block (count, top-k, stored bytes, share not stored); none for a dense model") {
  const std::string dir = make_temp_dir("cli-inspect-moe");
  const std::string moe = dir + "/moe.endor", dense = dir + "/dense.endor";
  REQUIRE(run({"prune", fixture("qwen3-moe-tiny"), "-o", moe, "--method", "magnitude", "--sparsity", "0.5"}).exit_code == 0);
  const Run j = run({"inspect", moe, "--json"});
  REQUIRE(j.exit_code == 0);
  const nlohmann::json rep = nlohmann::json::parse(j.out);
  REQUIRE(rep["experts"].size() == 2);
  uint64_t expert_bytes = 0;
  for (const nlohmann::json& t : rep["tensors"])
    if (t["name"].get<std::string>().find("layers.1.mlp.experts.") != std::string::npos) expert_bytes += t["bytes"].get<uint64_t>();
  const nlohmann::json& b1 = rep["experts"][1];
  CHECK(b1["block"] == 1);
  CHECK(b1["experts"] == 5);
  CHECK(b1["top_k"] == 3);
  CHECK(b1["bytes"].get<uint64_t>() == expert_bytes);
  CHECK(b1["sparsity"].get<double>() == doctest::Approx(0.5));
  const Run t = run({"inspect", moe});
  CHECK(t.out.find("experts per block (top-3 of 5 routed per token):") != std::string::npos);
  CHECK(t.out.find("  block 1: 5 experts, ") != std::string::npos);
  REQUIRE(run({"convert", fixture("llama-tiny"), "-o", dense}).exit_code == 0);
  const Run d = run({"inspect", dense, "--json"});
  REQUIRE(d.exit_code == 0);
  CHECK(nlohmann::json::parse(d.out)["experts"].empty());
  remove_tree(dir);
}

TEST_CASE("--min-expert-tokens sets which MoE experts fall back to magnitude; magnitude itself refuses it") {
  const std::string dir = make_temp_dir("cli-min-expert");
  const std::vector<std::string> base = {"prune", fixture("qwen3-moe-tiny"), "-o", dir + "/m.endor", "--method", "wanda",
                                         "--sparsity", "0.5", "--calib-samples", "2", "--calib-seqlen", "16"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a);
  };
  const Run none = with({"--min-expert-tokens", "0"});
  REQUIRE_MESSAGE(none.exit_code == 0, none.err);
  CHECK(none.err.find("experts under") == std::string::npos);
  const Run all = with({"--min-expert-tokens", "1000000"});
  REQUIRE_MESSAGE(all.exit_code == 0, all.err);
  // Every expert of the fixture (two MoE blocks of 5) is under a million tokens.
  CHECK(all.err.find("note: 10 experts under 1000000 calibration tokens (of 10): pruned by magnitude instead of wanda") !=
        std::string::npos);
  // The summary splits the pruned tensors: 10 experts x (gate, up, down) by the fallback.
  CHECK(all.out.find(" pruned by wanda, 30 of them by magnitude) in ") != std::string::npos);
  CHECK(none.out.find(" of them by magnitude") == std::string::npos);
  const Run mag = run({"prune", fixture("qwen3-moe-tiny"), "-o", dir + "/g.endor", "--method", "magnitude", "--sparsity",
                       "0.5", "--min-expert-tokens", "4"});
  CHECK(mag.exit_code == 2);
  CHECK(mag.err.find("--min-expert-tokens is for --method wanda|sparsegpt|gptq") != std::string::npos);
  CHECK(list_dir(dir).size() == 1);  // the refused run wrote nothing
  remove_tree(dir);
}

TEST_CASE("an explicit magnitude prune at >= 30 % says what it costs; below 30 %, and without pruning, nothing is said") {
  const std::string dir = make_temp_dir("cli-mag");
  const Run at50 = run({"prune", fixture("llama-tiny"), "-o", dir + "/a.endor", "--sparsity", "0.5", "--method", "magnitude"});
  REQUIRE(at50.exit_code == 0);
  CHECK(at50.err.find("note: magnitude pruning at 50 % ignores how the model uses its weights") != std::string::npos);
  CHECK(at50.err.find("leave out --method for the calibrated default") != std::string::npos);
  CHECK(at50.err.find("no --method") == std::string::npos);
  CHECK(at50.out.find("pruned by magnitude") != std::string::npos);
  const Run nm = run({"prune", fixture("llama-tiny"), "-o", dir + "/b.endor", "--pattern", "2:4", "--method", "magnitude"});
  REQUIRE(nm.exit_code == 0);
  CHECK(nm.err.find("note: magnitude pruning at 2:4") != std::string::npos);
  for (const std::vector<std::string>& quiet :
       {std::vector<std::string>{"--sparsity", "0.2", "--method", "magnitude"}, std::vector<std::string>{"--sparsity", "0", "--quant", "int8", "--quant-head", "int8"}}) {
    std::vector<std::string> args = {"prune", fixture("llama-tiny"), "-o", dir + "/c.endor"};
    args.insert(args.end(), quiet.begin(), quiet.end());
    const Run r = run(args);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.find("note:") == std::string::npos);  // nothing chosen for the user, nothing to warn of
  }
  remove_tree(dir);
}

TEST_CASE("compare on a checkpoint (with prune options) and on a .endor file") {
  const std::string dir = make_temp_dir("cli-compare");
  const auto before = snapshot(fixture("opt-postln-proj"));
  const Run r = run({"compare", fixture("opt-postln-proj"), "--sparsity", "0.5", "--zstd-levels", "1,3", "--min-time", "0",
                     "--csv", dir + "/c.csv", "--json", dir + "/c.json", "--svg", dir + "/c.svg"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("TOTAL") != std::string::npos);
  CHECK(r.out.find("magnitude 50% unstructured") != std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(read_bytes(dir + "/c.json"));
  const nlohmann::json& total = j["total"];
  CHECK(total["endor_bytes"].get<uint64_t>() < total["dense_bytes"].get<uint64_t>());
  REQUIRE(total["zstd"].size() == 2);
  CHECK(total["zstd"][0]["level"] == 1);
  CHECK(total["zstd"][1]["bytes"].get<uint64_t>() > 0);
  CHECK(total["endor_mt_gbps"].get<double>() > 0);
  CHECK(total["endor_1t_gbps"].get<double>() > 0);
  CHECK(total["zstd"][0]["decode_gbps"].get<double>() > 0);
  const std::string csv = read_bytes(dir + "/c.csv");
  CHECK(csv.rfind("tensor,encoding,value_type,numel,dense_bytes,endor_bytes,zstd1_bytes,zstd3_bytes", 0) == 0);
  CHECK(csv.find("\nTOTAL,") != std::string::npos);
  CHECK(csv.find("\nTOTAL decoder Linears,") != std::string::npos);
  CHECK(size_t(std::count(csv.begin(), csv.end(), '\n')) == j["tensors"].size() + 3);
  CHECK(j["total_linears"]["endor_bytes"].get<uint64_t>() < j["total_linears"]["dense_bytes"].get<uint64_t>());
  const std::string svg = read_bytes(dir + "/c.svg");
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("zstd -3") != std::string::npos);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(snapshot(fixture("opt-postln-proj")) == before);

  // A .endor file, default output names in the current folder.
  REQUIRE(run({"prune", fixture("llama-tiny"), "-o", dir + "/m.endor", "--pattern", "2:4"}).exit_code == 0);
  const Run f = run({"compare", dir + "/m.endor", "--zstd-levels", "1", "--min-time", "0"}, dir);
  CAPTURE(f.err);
  CHECK(f.exit_code == 0);
  CHECK(f.out.find("sparsegpt 50% 2:4") != std::string::npos);  // prune's default method
  for (const char* ext : {"csv", "json", "svg"}) CHECK(read_bytes(dir + "/m.compare." + ext).size() > 100);
  const Run bad = run({"compare", dir + "/m.endor", "--sparsity", "0.5"});
  check_one_line_error(bad, 2, "apply when comparing a checkpoint");
  check_one_line_error(run({"compare", dir + "/m.endor", "--zstd-levels", "1,x"}), 2, "--zstd-levels");
  remove_tree(dir);
}

TEST_CASE("errors: one line, right exit code, no output or temporary file left") {
  const std::string dir = make_temp_dir("cli-err");
  const std::string out_dir = dir + "/out";
  ::mkdir(out_dir.c_str(), 0755);
  const std::string out = out_dir + "/x.endor";

  check_one_line_error(run({"convert", dir + "/no-such-checkpoint", "-o", out}), 1, "no such checkpoint folder");
  check_one_line_error(run({"convert", "-o", out}), 2, "missing SRC");
  check_one_line_error(run({"convert", fixture("opt-tiny")}), 2, "missing -o");
  check_one_line_error(run({"convert", fixture("opt-tiny"), "-o", out, "--dtype", "f8"}), 2, "--dtype");
  check_one_line_error(run({"convert", fixture("opt-tiny"), "-o", out, "--bogus"}), 2, "bogus");
  for (const char* s : {"1", "1.5", "-0.1", "abc", "nan"})
    check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", s}), 2, "--sparsity");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out}), 2, "needs --sparsity");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--pattern", "2:4", "--sparsity", "0.3"}), 2,
                       "contradicts --pattern 2:4");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--pattern", "4:2"}), 2, "0 < N < M");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", "0.5", "--gpu-mem", "lots"}), 2,
                       "invalid size");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", "0", "--quant", "int8", "--calib", "x.txt"}),
                       2, "--calib calibrates pruning");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", "0.5", "--method", "magnitude", "--calib",
                            "x.txt"}), 2, "--calib is for --method wanda|sparsegpt");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", "0.5", "--calib", dir + "/absent.txt"}), 1,
                       "absent.txt: cannot open the calibration text");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", "0.5", "--method", "sparsegpt",
                            "--calib", dir + "/absent.txt"}), 1, "absent.txt: cannot open the calibration text");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", "0.5", "--skip", "("}), 2, "--skip");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", "0.5", "--quant-head", "int3"}), 2,
                       "--quant-head must be none, int8, int8g, int4 or int4k");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", "0.5", "--quant", "int5"}), 2,
                       "--quant must be none, int8, int8g, int4 or int4k");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--method", "gptq", "--quant", "int4k", "--sparsity",
                            "0.5", "--calib", "x.txt"}), 2, "--method gptq quantizes without pruning");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--method", "gptq", "--calib", "x.txt"}), 2,
                       "--method gptq needs --quant");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", "0.5", "--method", "wanda", "--act-order"}), 2,
                       "--act-order is for --method sparsegpt|gptq");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--method", "gptq", "--quant", "int4", "--clip",
                            "max", "--calib", "x.txt"}), 2, "--clip must be mse or none");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", "0.5", "--int8", "v_proj"}), 2,
                       "--int8 chooses int8");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", "0.5", "--quant", "int4k", "--int8",
                            "("}), 2, "--int8 is not a valid regex");
  check_one_line_error(run({"convert", fixture("opt-tiny"), "-o", out, "--quant-head", "int8"}), 2, "quant-head");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", "0.5", "--method", "magnitude",
                            "--sparsity-ramp", "0.1"}), 2,
                       "--sparsity-ramp needs --method wanda|sparsegpt");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--sparsity", "0.5", "--sparsity-ramp", "0.5",
                            "--method", "wanda", "--calib", "x.txt"}), 2, "S + D < 1");
  check_one_line_error(run({"prune", fixture("opt-tiny"), "-o", out, "--pattern", "2:4", "--sparsity-ramp", "0.1",
                            "--method", "wanda", "--calib", "x.txt"}), 2, "not --pattern 2:4");

  // Corrupt safetensors: a copy of a fixture with its data cut short.
  const std::string corrupt = dir + "/corrupt";
  REQUIRE(std::system(("cp -r '" + fixture("opt-tiny") + "' '" + corrupt + "'").c_str()) == 0);
  const std::string st = read_bytes(corrupt + "/model.safetensors");
  write_bytes(corrupt + "/model.safetensors", st.substr(0, st.size() - 100));
  const auto corrupt_before = snapshot(corrupt);
  check_one_line_error(run({"convert", corrupt, "-o", out}), 1, corrupt + "/model.safetensors: ");
  write_bytes(corrupt + "/model.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\xff{}", 10));
  check_one_line_error(run({"prune", corrupt, "-o", out, "--sparsity", "0.5"}), 1, "100 MB limit");
  write_bytes(corrupt + "/model.safetensors", st.substr(0, st.size() - 100));
  CHECK(snapshot(corrupt) == corrupt_before);

  // Truncated .endor given to inspect.
  REQUIRE(run({"convert", fixture("llama-tiny"), "-o", dir + "/good.endor"}).exit_code == 0);
  const std::string good = read_bytes(dir + "/good.endor");
  write_bytes(dir + "/cut.endor", good.substr(0, good.size() / 2));
  check_one_line_error(run({"inspect", dir + "/cut.endor"}), 1, dir + "/cut.endor");
  check_one_line_error(run({"inspect", dir + "/cut.endor", "--verify"}), 1, dir + "/cut.endor");
  check_one_line_error(run({"inspect", dir + "/none.endor"}), 1, dir + "/none.endor");
  // A flipped data byte passes open but fails --verify.
  std::string flipped = good;
  flipped[8192 + 10] = char(flipped[8192 + 10] ^ 0x40);
  write_bytes(dir + "/flip.endor", flipped);
  CHECK(run({"inspect", dir + "/flip.endor"}).exit_code == 0);
  check_one_line_error(run({"inspect", dir + "/flip.endor", "--verify"}), 1, dir + "/flip.endor");

  // Unwritable output folder: one that does not exist, and (unless root) one without write permission.
  check_one_line_error(run({"convert", fixture("opt-tiny"), "-o", dir + "/nowhere/x.endor"}), 1, "cannot create");
  if (::geteuid() != 0) {
    const std::string ro = dir + "/readonly";
    ::mkdir(ro.c_str(), 0555);
    check_one_line_error(run({"convert", fixture("opt-tiny"), "-o", ro + "/x.endor"}), 1, "cannot create");
    CHECK(list_dir(ro).empty());
  }
  check_one_line_error(run({"compare", fixture("opt-tiny"), "--min-time", "0", "--zstd-levels", "1", "--csv",
                            dir + "/nowhere/c.csv"}), 1, "cannot create");
  CHECK(list_dir(out_dir).empty());
  remove_tree(dir);
}

TEST_CASE("GGUF: convert, prune and compare a GGUF file; corrupt GGUF files give one line and no output") {
  const std::string dir = make_temp_dir("cli-gguf");
  const std::string gguf = std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/gguf/tiny-llama.gguf";
  const std::string before = read_bytes(gguf);
  Run r = run({"convert", gguf, "-o", dir + "/c.endor"});
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  r = run({"prune", gguf, "-o", dir + "/p.endor", "--sparsity", "0.5", "--quant", "int4", "--group-size", "32"});
  CHECK(r.exit_code == 0);
  r = run({"inspect", dir + "/p.endor", "--verify", "--json"});
  CHECK(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["provenance"]["source"] == "tiny-llama.gguf");  // the base name, not the path
  r = run({"compare", gguf, "--sparsity", "0.5", "--zstd-levels", "1", "--min-time", "0", "--csv", dir + "/x.csv",
           "--json", dir + "/x.json", "--svg", dir + "/x.svg"});
  CHECK(r.exit_code == 0);
  CHECK(read_bytes(gguf) == before);

  const std::string out_dir = dir + "/out";
  ::mkdir(out_dir.c_str(), 0755);
  for (const gguf_test::CorruptCase& c : gguf_test::corrupt_cases()) {
    CAPTURE(c.name);
    const std::string bad = dir + "/bad.gguf";
    write_bytes(bad, std::string(c.bytes.begin(), c.bytes.end()));
    check_one_line_error(run({"convert", bad, "-o", out_dir + "/x.endor"}), 1, c.fragment);
    CHECK(list_dir(out_dir).empty());
    CHECK(read_bytes(bad) == std::string(c.bytes.begin(), c.bytes.end()));
  }
  remove_tree(dir);
}

TEST_CASE("int4k and GPTQ: packs that inspect, verify and decode; --int8 keeps the named Linears int8") {
  const std::string dir = make_temp_dir("cli-gptq");
  const std::string sample = std::string(ENDOR_SOURCE_DIR) + "/samples/kjv-llama";
  const auto before = snapshot(sample);
  // Round to nearest on int4k (groups of 32 by default), v_proj int8.
  Run r = run({"prune", sample, "-o", dir + "/k.endor", "--sparsity", "0", "--quant", "int4k", "--int8", "v_proj",
               "--quant-head", "int8"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run({"inspect", dir + "/k.endor", "--json", "--verify"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["format_version"] == "1.1");
  size_t k = 0, v8 = 0;
  for (const auto& t : j["tensors"]) {
    const std::string name = t["name"];
    if (name.find("v_proj") != std::string::npos) {
      CHECK(t["value_type"] == "int8");
      ++v8;
    } else if (name.find("proj.weight") != std::string::npos) {
      CHECK(t["value_type"] == "int4k");
      CHECK(t["group_size"] == 32);
      ++k;
    }
  }
  CHECK(v8 == 6);
  CHECK(k == 6 * 6);
  CHECK(j["provenance"]["int8_tensors"] == "v_proj");
  // GPTQ with act-order on the same grid: calibrated, no weight pruned.
  r = run({"prune", sample, "-o", dir + "/g.endor", "--method", "gptq", "--quant", "int4k", "--act-order", "--calib",
           sample + "/calib.txt", "--calib-samples", "4", "--calib-seqlen", "64"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run({"inspect", dir + "/g.endor", "--json", "--verify"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const nlohmann::json g = nlohmann::json::parse(r.out);
  CHECK(g["provenance"]["method"] == "gptq");
  CHECK(g["provenance"]["act_order"] == true);
  for (const auto& t : g["tensors"])
    if (std::string(t["name"]).find("proj.weight") != std::string::npos) {
      CHECK(t["value_type"] == "int4k");
      CHECK(t["encoding"] == "dense");
    }
  CHECK(snapshot(sample) == before);
  remove_tree(dir);
}

TEST_CASE("--quant stores the embedding and lm_head int8 unless --quant-head says otherwise") {
  const std::string dir = make_temp_dir("cli-quant-head");
  const std::string sample = std::string(ENDOR_SOURCE_DIR) + "/samples/kjv-llama";
  // value_type of every head matrix (embedding, lm_head) of a packed file, and the provenance's quant_head.
  auto heads = [&](const std::string& file) {
    const Run r = run({"inspect", file, "--json"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    std::set<std::string> types;
    size_t n = 0;
    for (const auto& t : j["tensors"]) {
      const std::string name = t["name"];
      if (name.find("embed_tokens") != std::string::npos || name.find("lm_head") != std::string::npos) {
        types.insert(t["value_type"].get<std::string>());
        ++n;
      }
    }
    CHECK(n >= 1);
    return std::make_pair(types, j["provenance"].value("quant_head", std::string("?")));
  };
  const std::string note = "note: no --quant-head: the token embedding and lm_head are stored int8";
  Run r = run({"prune", sample, "-o", dir + "/d.endor", "--sparsity", "0.5", "--method", "magnitude", "--quant", "int4"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.err.find(note) != std::string::npos);
  CHECK(heads(dir + "/d.endor") == std::make_pair(std::set<std::string>{"int8"}, std::string("int8")));
  r = run({"prune", sample, "-o", dir + "/n.endor", "--sparsity", "0.5", "--method", "magnitude", "--quant", "int4",
           "--quant-head", "none", "--dtype", "f16"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.err.find(note) == std::string::npos);
  CHECK(heads(dir + "/n.endor") == std::make_pair(std::set<std::string>{"f16"}, std::string("none")));
  r = run({"prune", sample, "-o", dir + "/k.endor", "--sparsity", "0", "--quant", "int8g", "--quant-head", "int4k"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(heads(dir + "/k.endor").first == std::set<std::string>{"int4k"});
  // No --quant: the head keeps --dtype, and no note.
  r = run({"prune", sample, "-o", dir + "/p.endor", "--sparsity", "0.5", "--method", "magnitude", "--dtype", "f16"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.err.find(note) == std::string::npos);
  CHECK(heads(dir + "/p.endor") == std::make_pair(std::set<std::string>{"f16"}, std::string("none")));
  remove_tree(dir);
}

TEST_CASE("SIGINT during a pack leaves nothing behind") {
  const std::string dir = make_temp_dir("cli-sigint");
  endor::test::LlamaDims d;  // ~100 MB of f32: packing takes long enough to interrupt
  d.vocab = 2048;
  d.hidden = 1024;
  d.intermediate = 2816;
  d.layers = 2;
  d.heads = 8;
  d.kv_heads = 8;
  d.dtype = "F32";
  endor::test::write_llama_checkpoint(dir + "/big", d);
  const auto before = snapshot(dir + "/big");
  const std::string out_dir = dir + "/out";
  ::mkdir(out_dir.c_str(), 0755);
  const std::string io = dir + "/io";
  ::mkdir(io.c_str(), 0755);
  const pid_t pid = spawn({"prune", dir + "/big", "-o", out_dir + "/big.endor", "--sparsity", "0.5", "--method", "magnitude", "--scope", "matrix"}, io);
  // Interrupt as soon as the temporary output exists.
  bool saw_temp = false;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    if (!list_dir(out_dir).empty()) {
      saw_temp = true;
      break;
    }
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) break;  // finished before we looked (should not happen)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  REQUIRE(saw_temp);
  CHECK(list_dir(out_dir)[0].find("big.endor.tmp-") == 0);
  ::kill(pid, SIGINT);
  const Run r = wait_for(pid, io);
  CHECK(r.signal == SIGINT);
  CHECK(list_dir(out_dir).empty());
  CHECK(snapshot(dir + "/big") == before);
  remove_tree(dir);
}

namespace {

// The files the process holds open (targets of /proc/PID/fd/*): unlinked ones end in " (deleted)".
std::vector<std::string> open_files(pid_t pid) {
  std::vector<std::string> out;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  for (const std::string& n : list_dir(fd_dir)) {
    char buf[4096];
    const ssize_t len = ::readlink((fd_dir + "/" + n).c_str(), buf, sizeof buf - 1);
    if (len > 0) out.emplace_back(buf, size_t(len));
  }
  return out;
}

bool any_contains(const std::vector<std::string>& v, const std::string& a, const std::string& b = "") {
  for (const std::string& s : v)
    if (s.find(a) != std::string::npos && s.find(b) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("signals during calibrated pruning leave nothing behind (temporary model, scratch files, output)") {
  // A random Llama of ~135 MB f32 (converting it takes long enough to interrupt) with the sample's
  // tokenizer. Phases: the temporary model being written; calibration (the model and the scratch
  // files are unlinked: even SIGKILL leaves nothing); the output being written.
  const std::string dir = make_temp_dir("cli-calib-signal");
  endor::test::LlamaDims d;
  d.vocab = 4096;  // the sample tokenizer's
  d.hidden = 1024;
  d.intermediate = 2816;
  d.layers = 2;
  d.heads = 8;
  d.kv_heads = 8;
  d.dtype = "F32";
  endor::test::write_llama_checkpoint(dir + "/big", d);
  const std::string sample = std::string(ENDOR_SOURCE_DIR) + "/samples/kjv-llama";
  write_bytes(dir + "/big/tokenizer.json", read_bytes(sample + "/tokenizer.json"));
  const auto before = snapshot(dir + "/big");
  const std::string out_dir = dir + "/out", io = dir + "/io";
  ::mkdir(out_dir.c_str(), 0755);
  ::mkdir(io.c_str(), 0755);

  struct Phase {
    const char* what;
    const char* method;
    int sig;
  };
  for (const Phase& ph : {Phase{"model", "wanda", SIGINT}, Phase{"calibration", "sparsegpt", SIGTERM},
                          Phase{"calibration", "sparsegpt", SIGKILL}, Phase{"output", "wanda", SIGINT}}) {
    const std::string what = ph.what;
    CAPTURE(what);
    CAPTURE(ph.sig);
    const pid_t pid = spawn({"prune", dir + "/big", "-o", out_dir + "/x.endor", "--method", ph.method, "--sparsity",
                             "0.5", "--calib", sample + "/calib.txt", "--calib-samples", "2", "--calib-seqlen", "16"},
                            io);
    bool model_seen = false, ready = false, exited = false;
    const auto t0 = std::chrono::steady_clock::now();
    while (!ready && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
      const std::vector<std::string> entries = list_dir(out_dir);
      const bool model_now = !entries.empty() && entries[0].find("x.endor.calib-model.tmp-") == 0;
      model_seen = model_seen || model_now;
      if (what == "model") ready = model_now;
      if (what == "calibration") {
        const std::vector<std::string> files = open_files(pid);
        ready = model_seen && entries.empty() && any_contains(files, ".calib-acts.tmp-", " (deleted)") &&
                any_contains(files, ".calib-tensors.tmp-", " (deleted)");
      }
      if (what == "output") ready = !entries.empty() && entries[0].find("x.endor.tmp-") == 0;
      int status = 0;
      if (!ready && ::waitpid(pid, &status, WNOHANG) == pid) {  // finished before the phase was seen
        exited = true;
        break;
      }
      if (!ready) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    REQUIRE_FALSE(exited);
    REQUIRE(ready);
    if (what == "calibration") CHECK(list_dir(out_dir).empty());  // scratch files in use, all nameless
    ::kill(pid, ph.sig);
    const Run r = wait_for(pid, io);
    CHECK(r.signal == ph.sig);
    CHECK(list_dir(out_dir).empty());
  }
  CHECK(snapshot(dir + "/big") == before);
  remove_tree(dir);
}

#ifdef ENDOR_TEST_TOKENIZER
#include "endor/tokenizer.h"

TEST_CASE("--calib-ids: the ids of the calibration text prune as the text does; bad ids are one line") {
  const std::string dir = make_temp_dir("cli-calib-ids");
  const std::string sample = std::string(ENDOR_SOURCE_DIR) + "/samples/kjv-llama";
  const std::string text = read_bytes(sample + "/calib.txt");
  const endor::Tokenizer tok = endor::Tokenizer::from_json(read_bytes(sample + "/tokenizer.json"), "tokenizer.json");
  const std::vector<int32_t> ids = tok.encode(text, true);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? (i % 50 ? " " : "\n") : "") + std::to_string(ids[i]);
  write_bytes(dir + "/calib.ids", line + "\n");
  const std::vector<std::string> common = {"--method", "sparsegpt", "--sparsity", "0.5", "--quant", "int4k",
                                           "--calib-samples", "4", "--calib-seqlen", "64"};
  auto prune = [&](const std::string& out, const std::vector<std::string>& calib) {
    std::vector<std::string> a = {"prune", sample, "-o", out};
    a.insert(a.end(), common.begin(), common.end());
    a.insert(a.end(), calib.begin(), calib.end());
    return run(a);
  };
  Run r = prune(dir + "/text.endor", {"--calib", sample + "/calib.txt"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = prune(dir + "/ids.endor", {"--calib-ids", dir + "/calib.ids"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto a = endor::ContainerReader::open(dir + "/text.endor"), b = endor::ContainerReader::open(dir + "/ids.endor");
  REQUIRE(a->manifest().tensors.size() == b->manifest().tensors.size());
  size_t same = 0;
  for (const endor::TensorInfo& t : a->manifest().tensors) {
    const std::optional<endor::TensorView> x = a->find_tensor(t.name), y = b->find_tensor(t.name);
    REQUIRE(y.has_value());
    same += x->layout.total_bytes == y->layout.total_bytes && std::memcmp(x->data, y->data, x->layout.total_bytes) == 0;
  }
  CHECK(same == a->manifest().tensors.size());
  CHECK(b->manifest().provenance["calibration"]["ids"] == "calib.ids");
  CHECK(b->manifest().provenance["calibration"]["tokens"] == ids.size());

  // Other ids prune otherwise (the file is read, not ignored).
  std::string shifted;
  for (size_t i = 0; i < ids.size(); ++i) shifted += std::to_string((ids[i] + 7) % 1000) + " ";
  write_bytes(dir + "/other.ids", shifted);
  r = prune(dir + "/other.endor", {"--calib-ids", dir + "/other.ids"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(read_bytes(dir + "/other.endor") != read_bytes(dir + "/ids.endor"));

  const std::string out = dir + "/bad.endor";
  write_bytes(dir + "/word.ids", "1 2 3\n4 five 6\n");
  check_one_line_error(prune(out, {"--calib-ids", dir + "/word.ids"}), 1, "word.ids:2: 'five' is not a token id");
  write_bytes(dir + "/big.ids", "1 2 99999999999999999999\n");
  check_one_line_error(prune(out, {"--calib-ids", dir + "/big.ids"}), 1, "is not a token id below the vocabulary size");
  write_bytes(dir + "/short.ids", "1 2 3\n");
  check_one_line_error(prune(out, {"--calib-ids", dir + "/short.ids"}), 1, "short.ids: 3 tokens");
  check_one_line_error(prune(out, {"--calib-ids", dir + "/short.ids", "--calib", sample + "/calib.txt"}), 2,
                       "--calib and --calib-ids both given");
  CHECK(list_dir(dir).size() == 8);  // 5 inputs, 3 outputs: nothing left by the failures
  remove_tree(dir);
}
#endif

TEST_CASE("endor-pack names OpenBLAS's kernels from the CPU's features unless the user did") {
  // OpenBLAS prints the core it chose when it loads (OPENBLAS_VERBOSE=2); endor-pack re-executes
  // itself once with OPENBLAS_CORETYPE set (endor/openmp_policy.h), so the last choice printed is ours.
  const char* want = endor::openblas_core_for_this_cpu();
  if (!want) {
    MESSAGE("skipped: this CPU has neither AVX-512 nor AVX2, so endor-pack leaves OpenBLAS's own choice");
    return;
  }
  const std::string io = make_temp_dir("cli-blas");
  const std::string base = "env -u OPENBLAS_CORETYPE -u ENDOR_REEXEC -u OMP_WAIT_POLICY OPENBLAS_VERBOSE=2 '" + kBinary +
                           "' --version >'" + io + "/out' 2>'" + io + "/err'";
  REQUIRE(std::system(base.c_str()) == 0);
  std::string err = read_bytes(io + "/err"), last;
  for (size_t at = err.find("Core: "); at != std::string::npos; at = err.find("Core: ", at + 1))
    last = err.substr(at + 6, err.find('\n', at) - at - 6);
  CHECK(last == want);
  // The user's choice stands.
  const std::string mine = "env -u ENDOR_REEXEC OPENBLAS_CORETYPE=Haswell OPENBLAS_VERBOSE=2 '" + kBinary +
                           "' --version >'" + io + "/out' 2>'" + io + "/err'";
  REQUIRE(std::system(mine.c_str()) == 0);
  err = read_bytes(io + "/err");
  CHECK(err.find("Core: Haswell") != std::string::npos);
  CHECK(err.find("Core: SkylakeX") == std::string::npos);
  remove_tree(io);
}
