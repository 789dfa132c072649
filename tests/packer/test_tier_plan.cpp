// Tier planning from budgets, and byte-size parsing.
#include <doctest/doctest.h>

#include <cmath>

#include "endor/tier_plan.h"

using namespace endor;

namespace {
const std::vector<std::string> kNames = {"embed", "layers.0", "layers.1", "layers.2", "layers.3", "head", "files"};
const std::vector<uint64_t> kSizes = {100, 300, 300, 300, 300, 50, 10};
}  // namespace

TEST_CASE("parse_byte_size: binary units, optional B/iB, decimals") {
  CHECK(parse_byte_size("4096") == 4096);
  CHECK(parse_byte_size("64K") == 65536);
  CHECK(parse_byte_size("512M") == 512ull << 20);
  CHECK(parse_byte_size("16G") == 16ull << 30);
  CHECK(parse_byte_size("16g") == 16ull << 30);
  CHECK(parse_byte_size("16GB") == 16ull << 30);
  CHECK(parse_byte_size("16GiB") == 16ull << 30);
  CHECK(parse_byte_size("1.5T") == 3ull << 39);
  CHECK(parse_byte_size("0") == 0);
  for (const char* bad : {"", "G", "16X", "-1G", "1.2.3G", "16 G", "nanG", "1e3", "99999999999T"})
    CHECK_THROWS_WITH_AS(parse_byte_size(bad), doctest::Contains("invalid size"), Error);
}

TEST_CASE("format_bytes prints in parse_byte_size's units: a printed size reads back") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.00 KiB");
  CHECK(format_bytes(16ull << 30) == "16.00 GiB");
  CHECK(format_bytes(1ull << 50) == "1024.00 TiB");  // T is the largest unit the parser reads
  for (uint64_t b : {1500ull, 123456789ull, 7ull << 30, 3ull << 39, 5ull << 40}) {
    std::string typed = format_bytes(b);
    typed.erase(typed.find(' '), 1);  // "1.46 KiB" -> "1.46KiB", as a user would type it
    CAPTURE(typed);
    const double back = double(parse_byte_size(typed));
    CHECK(std::abs(back - double(b)) <= 0.005 * double(b));  // two decimals of the unit
  }
}

TEST_CASE("no budgets: everything on the GPU") {
  const auto t = plan_tiers(kNames, kSizes, {});
  for (size_t i = 0; i + 1 < kNames.size(); ++i) CHECK(t[i] == Tier::Gpu);
}

TEST_CASE("embed and head first, then layers fill gpu, then cpu, then disk") {
  TierBudget b;
  b.gpu_bytes = 100 + 50 + 300 + 299;  // embed + head + one layer (+ not quite another)
  b.cpu_bytes = 600;
  const auto t = plan_tiers(kNames, kSizes, b);
  CHECK(t[0] == Tier::Gpu);  // embed
  CHECK(t[5] == Tier::Gpu);  // head
  CHECK(t[1] == Tier::Gpu);
  CHECK(t[2] == Tier::Cpu);
  CHECK(t[3] == Tier::Cpu);
  CHECK(t[4] == Tier::Disk);
}

TEST_CASE("a layer never returns to a faster tier after one spilled") {
  // layers.1 is large and spills; the smaller layers after it would fit on the GPU but stay behind.
  const std::vector<std::string> names = {"embed", "layers.0", "layers.1", "layers.2", "head"};
  const std::vector<uint64_t> sizes = {10, 100, 500, 100, 10};
  TierBudget b;
  b.gpu_bytes = 300;
  const auto t = plan_tiers(names, sizes, b);
  CHECK(t[1] == Tier::Gpu);
  CHECK(t[2] == Tier::Cpu);  // cpu unlimited
  CHECK(t[3] == Tier::Cpu);
}

TEST_CASE("tiny budgets: embed/head that do not fit go to cpu or disk") {
  TierBudget b;
  b.gpu_bytes = 60;  // head fits, embed does not
  b.cpu_bytes = 100;
  const auto t = plan_tiers(kNames, kSizes, b);
  CHECK(t[0] == Tier::Cpu);
  CHECK(t[5] == Tier::Gpu);
  for (int i = 1; i <= 4; ++i) CHECK(t[size_t(i)] == Tier::Disk);
  TierBudget zero;
  zero.gpu_bytes = 0;
  zero.cpu_bytes = 0;
  for (size_t i = 0; i + 1 < kNames.size(); ++i) CHECK(plan_tiers(kNames, kSizes, zero)[i] == Tier::Disk);
}

TEST_CASE("only a GPU budget: the rest goes to host memory") {
  TierBudget b;
  b.gpu_bytes = 16ull << 30;
  const auto all = plan_tiers(kNames, kSizes, b);
  for (size_t i = 0; i + 1 < kNames.size(); ++i) CHECK(all[i] == Tier::Gpu);
  b.gpu_bytes = 150;
  const auto t = plan_tiers(kNames, kSizes, b);
  CHECK(t[0] == Tier::Gpu);
  CHECK(t[5] == Tier::Gpu);
  for (int i = 1; i <= 4; ++i) CHECK(t[size_t(i)] == Tier::Cpu);
  CHECK_THROWS_AS(plan_tiers(kNames, {1, 2}, b), Error);
}
