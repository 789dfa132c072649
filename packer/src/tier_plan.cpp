// Tier planning: which layer group lives on the GPU, in host memory or on disk, from budgets.
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "detail.h"
#include "endor/packer.h"

namespace endor {

uint64_t parse_byte_size(const std::string& text) {
  const std::string bad = "invalid size '" + text + "' (examples: 16G, 512M, 1.5T, 4096)";
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) throw Error(bad);
  const std::string number = text.substr(0, i);
  if (number.find('.') != number.rfind('.')) throw Error(bad);
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value) || value < 0) throw Error(bad);
  std::string unit = text.substr(i);
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() >= 2 && unit.compare(unit.size() - 2, 2, "IB") == 0) unit.resize(unit.size() - 2);
  else if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  double scale = 1;
  if (unit == "") scale = 1;
  else if (unit == "K") scale = 1024.0;
  else if (unit == "M") scale = 1024.0 * 1024;
  else if (unit == "G") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  else throw Error(bad);
  const double bytes = value * scale;
  if (bytes >= 1.8e19) throw Error(bad);
  return uint64_t(bytes);
}

std::vector<Tier> plan_tiers(const std::vector<std::string>& names, const std::vector<uint64_t>& bytes,
                             const TierBudget& budget) {
  if (names.size() != bytes.size()) throw Error("plan_tiers: names and sizes differ in length");
  std::vector<Tier> tiers(names.size(), Tier::Cpu);
  // Remaining room per tier; nullopt = unlimited.
  std::optional<uint64_t> room[2] = {budget.gpu_bytes, budget.cpu_bytes};
  auto fits = [&](int tier, uint64_t n) { return !room[tier] || *room[tier] >= n; };
  auto take = [&](int tier, uint64_t n) {
    if (room[tier]) *room[tier] -= n;
  };
  // The fastest tier (starting at `from`) with room for n bytes.
  auto place = [&](uint64_t n, int from) {
    for (int t = from; t < 2; ++t)
      if (fits(t, n)) {
        take(t, n);
        return Tier(t);
      }
    return Tier::Disk;
  };
  // embed and head first: they are touched by every token.
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == "embed" || names[i] == "head") tiers[i] = place(bytes[i], 0);
  // Layers in execution order, never moving back to a faster tier once one spilled.
  int floor_tier = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].rfind("layers.", 0) != 0) continue;
    tiers[i] = place(bytes[i], floor_tier);
    floor_tier = int(tiers[i]);
  }
  return tiers;
}

}  // namespace endor
