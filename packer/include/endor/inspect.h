// endor_packer: `endor-pack inspect`: a container's tensors, tiers and provenance as JSON or text.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "endor/format.h"

namespace endor {

// Per tensor: name, shape, encoding, value type, sparsity, bytes, ratio to dense in the source
// dtype; totals per tier and overall; provenance. With verify, runs verify_all() first (throws
// on the first bad group) and records "verified": true.
nlohmann::json inspect_container(const ContainerReader&, bool verify);
std::string render_inspect_text(const nlohmann::json& report);

}  // namespace endor
