// endor_packer: which tier (gpu, cpu, disk) each manifest group is planned for under byte budgets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "endor/format.h"

namespace endor {

// Budgets are parsed by parse_byte_size (endor/format.h).
struct TierBudget {
  std::optional<uint64_t> gpu_bytes, cpu_bytes;     // nullopt = unlimited
};

// Groups in execution order: "embed", "layers.0", ..., "head" (others are ignored and keep Cpu).
// embed and head go to gpu first, then layers in order fill gpu, then cpu, then disk; once a
// layer spills to a slower tier, every later layer stays at that tier or slower. A group goes
// to a tier only if it fits in what is left there.
std::vector<Tier> plan_tiers(const std::vector<std::string>& group_names,
                             const std::vector<uint64_t>& group_bytes, const TierBudget&);

}  // namespace endor
