// endor-infer's offload flags end to end on the CPU device: --cpu-mem budgets and disk tiers from
// the manifest stream blocks and give the same ids as an all-resident run; --stats prints the
// offload table; bad flags and impossible budgets are one-line errors (exit 2 / 1).
#include <doctest/doctest.h>

#include <sstream>

#include "offload_test_util.h"

using namespace endor;
using namespace endor::offloadtest;

namespace {

bool one_error_line(const std::string& err) {
  return err.rfind("error: ", 0) == 0 && err.find('\n') == err.size() - 1;
}

std::string infer() { return "OMP_NUM_THREADS=1 " + test::endor_infer() + " --threads 1 --device cpu"; }

// key=value of the "offload-summary:" line.
std::string summary_value(const std::string& err, const std::string& key) {
  const size_t line = err.find("offload-summary:");
  if (line == std::string::npos) return "";
  const size_t at = err.find(" " + key + "=", line);
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size() + 2;
  return err.substr(begin, err.find_first_of(" \n", begin) - begin);
}

}  // namespace

TEST_CASE("endor-infer: --cpu-mem streams blocks from disk and the ids stay the same") {
  TempDir dir;
  const std::string model = dir.file("m.endor");
  write_tiered_container(model, synthetic_config(8), 21, ValueType::F32, [](const std::string&) { return Tier::Gpu; });
  const std::string ids = " --ids \"1 5 9 13 17\" -n 12 --temperature 0 --ignore-eos";

  const auto resident = test::run_capture(infer() + " " + model + ids + " --stats", dir);
  INFO("stderr: ", resident.err);
  REQUIRE(resident.status == 0);
  CHECK(resident.err.find("offload: device cpu") != std::string::npos);
  CHECK(resident.err.find("read in place") != std::string::npos);
  CHECK(summary_value(resident.err, "disk_groups") == "0");
  CHECK(summary_value(resident.err, "moved_disk_bytes") == "0");

  // --cpu-mem: room for the KV cache (keys and values, 8 layers x 16 rows x 2 kv heads x 16 floats)
  // and two of the eight blocks (read in place); the other six come from disk.
  auto c = ContainerReader::open(model);
  const uint64_t layer = c->manifest().groups[1].size;
  const uint64_t kv = 2 * 8 * 16 * 32 * 4;
  const uint64_t budget = kv + 2 * layer + 100;
  {
    // Without the KV cache's room, only one block fits: --cpu-mem covers the KV cache first.
    const auto tight = test::run_capture(infer() + " " + model + ids + " --stats --cpu-mem " +
                                             std::to_string(2 * layer + 100), dir);
    INFO("stderr: ", tight.err);
    REQUIRE(tight.status == 0);
    CHECK(tight.out == resident.out);
    CHECK(summary_value(tight.err, "disk_groups") == "7");
    CHECK(tight.err.find("kv cache: 32.00 KiB (within --cpu-mem") != std::string::npos);
  }

  for (const char* prefetch : {"1", "2", "7"}) {
    CAPTURE(prefetch);
    const auto run = test::run_capture(infer() + " " + model + ids + " --stats --cpu-mem " + std::to_string(budget) +
                                           " --prefetch " + prefetch, dir);
    INFO("stderr: ", run.err);
    REQUIRE(run.status == 0);
    CHECK(run.out == resident.out);
    if (std::string(prefetch) != "2") continue;
    CHECK(summary_value(run.err, "disk_groups") == "6");
    CHECK(summary_value(run.err, "cpu_groups") == "4");  // embed, head and two blocks
    CHECK(summary_value(run.err, "steps") == "11");
    CHECK(std::stod(summary_value(run.err, "moved_disk_bytes")) > 0);
    CHECK(std::stod(summary_value(run.err, "disk_read_ms")) >= 0);
    CHECK(run.err.find("disk staging: 2 x") != std::string::npos);
    CHECK(run.err.find("moved from disk tier") != std::string::npos);
    CHECK(run.err.find("stall") != std::string::npos);
  }

  // --disk-io buffered: same ids, and the table says how disk blocks were read.
  const auto buffered = test::run_capture(infer() + " " + model + ids + " --stats --disk-io buffered --cpu-mem " +
                                              std::to_string(budget), dir);
  REQUIRE(buffered.status == 0);
  CHECK(buffered.out == resident.out);
  CHECK(buffered.err.find("buffered pread (asked)") != std::string::npos);
  CHECK(summary_value(buffered.err, "disk_direct") == "0");
}

TEST_CASE("endor-infer: a container packed with disk tiers streams them without any budget") {
  TempDir dir;
  const std::string resident = dir.file("a.endor"), on_disk = dir.file("b.endor");
  const std::string src = test::fixture_dir("opt-tiny");
  REQUIRE(test::run_command(test::endor_pack() + " convert " + src + " -o " + resident + " >/dev/null 2>&1") == 0);
  REQUIRE(test::run_command(test::endor_pack() + " convert " + src + " -o " + on_disk +
                            " --gpu-mem 0 --cpu-mem 0 >/dev/null 2>&1") == 0);
  const std::string ids = " --ids \"2 40 41 42\" -n 10 --temperature 0 --ignore-eos";
  const auto a = test::run_capture(infer() + " " + resident + ids, dir);
  const auto b = test::run_capture(infer() + " " + on_disk + ids + " --stats", dir);
  INFO("stderr: ", b.err);
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  CHECK(a.out == b.out);
  CHECK(summary_value(b.err, "disk_groups") == "2");
  CHECK(b.err.find("the container's manifest") != std::string::npos);
}

TEST_CASE("endor-infer: offload flags and budgets that cannot work are one-line errors") {
  TempDir dir;
  const std::string model = dir.file("m.endor");
  write_tiered_container(model, synthetic_config(2), 3, ValueType::F32, [](const std::string&) { return Tier::Gpu; });
  const std::string base = infer() + " " + model + " --ids \"1 2\" -n 2";
  struct Case {
    std::string args;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {" --prefetch 0", 2, "--prefetch"},
      {" --prefetch 65", 2, "--prefetch"},
      {" --disk-io sideways", 2, "--disk-io"},
      {" --gpu-mem lots", 2, "--gpu-mem"},
      {" --cpu-mem 1.5.5G", 2, "--cpu-mem"},
      {" --cpu-mem 3X", 2, "--cpu-mem"},
      {" --gpu-mem 1G", 1, "--gpu-mem needs the CUDA device"},
      {" --disk-io cufile", 1, "--disk-io cufile"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    const auto r = test::run_capture(base + c.args, dir);
    INFO("stderr: ", r.err);
    CHECK(r.status == c.status);
    CHECK(one_error_line(r.err));
    CHECK(r.err.find(c.says) != std::string::npos);
    CHECK(r.out.empty());
  }
  // A budget large enough for everything: nothing streams; none at all: every block from disk.
  // Same output either way.
  const auto plain = test::run_capture(base, dir);
  const auto roomy = test::run_capture(base + " --cpu-mem 1G --prefetch 3", dir);
  const auto none = test::run_capture(base + " --cpu-mem 0 --stats", dir);
  CHECK(plain.status == 0);
  CHECK(roomy.status == 0);
  CHECK(none.status == 0);
  CHECK(roomy.out == plain.out);
  CHECK(none.out == plain.out);
  CHECK(summary_value(none.err, "disk_groups") == "2");
}
