// Tier planning: which layer group lives on the GPU, in host memory or on disk, from budgets.
#include "detail.h"
#include "endor/expert_groups.h"
#include "endor/tier_plan.h"

namespace endor {

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
  // Blocks in execution order, never moving back to a faster tier once one spilled; then the MoE
  // experts' own groups ("layers.N.experts.E", SPEC.md §4.2) in the same way: a token reads every
  // block's dense part but only top_k of a block's experts.
  for (const GroupName::Kind kind : {GroupName::Kind::Block, GroupName::Kind::Expert}) {
    int floor_tier = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      if (parse_group_name(names[i]).kind != kind) continue;
      tiers[i] = place(bytes[i], floor_tier);
      floor_tier = int(tiers[i]);
    }
  }
  return tiers;
}

}  // namespace endor
