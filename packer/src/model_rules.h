// Private to endor_packer: the tensors a supported architecture has, with the shapes config.json
// implies, and their order inside a layer group.
#pragma once

#include <string>
#include <vector>

#include "endor/packer.h"

namespace endor::model_rules {

struct TensorRule {
  std::string name;              // canonical name
  std::vector<uint64_t> shape;   // expected shape
  bool required = false;         // missing -> error
};
std::vector<TensorRule> rules(const ModelShape&, const nlohmann::json& config, const std::string& where);

// Position of a tensor inside its group (execution order: attention, then MLP); unknown last.
int rank_in_group(ModelFamily, const std::string& canonical_name);

}  // namespace endor::model_rules
