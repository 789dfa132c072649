// Manifest group names of a container's decoder blocks and of MoE experts placed on their own
// (SPEC.md §4.2): "layers.N" is block N (for an MoE block: attention, norms and router), and
// "layers.N.experts.E" is expert E of block N (its gate, up and down). Header-only; shared by the
// packer (which names groups) and the runtime (which places and streams them).
#pragma once

#include <cstdint>
#include <string>

namespace endor {

struct GroupName {
  enum class Kind : uint8_t { Other, Block, Expert } kind = Kind::Other;
  uint32_t layer = 0;   // Block and Expert
  uint32_t expert = 0;  // Expert only
};

namespace group_names_detail {
// Parses decimal digits at text[pos...] into *out (no sign, no leading '+', at most 9 digits);
// returns the position after them, or npos when there are none or too many.
inline size_t parse_index(const std::string& text, size_t pos, uint32_t* out) {
  size_t end = pos;
  uint64_t v = 0;
  while (end < text.size() && text[end] >= '0' && text[end] <= '9' && end - pos < 9) v = v * 10 + uint64_t(text[end++] - '0');
  if (end == pos || (end < text.size() && text[end] >= '0' && text[end] <= '9')) return std::string::npos;
  *out = uint32_t(v);
  return end;
}
}  // namespace group_names_detail

// "layers.7" -> Block 7; "layers.7.experts.12" -> Expert (7, 12); anything else Other.
inline GroupName parse_group_name(const std::string& name) {
  GroupName g;
  static const std::string kLayers = "layers.", kExperts = ".experts.";
  if (name.compare(0, kLayers.size(), kLayers) != 0) return g;
  size_t at = group_names_detail::parse_index(name, kLayers.size(), &g.layer);
  if (at == std::string::npos) return g;
  if (at == name.size()) {
    g.kind = GroupName::Kind::Block;
    return g;
  }
  if (name.compare(at, kExperts.size(), kExperts) != 0) return g;
  at = group_names_detail::parse_index(name, at + kExperts.size(), &g.expert);
  if (at == name.size()) g.kind = GroupName::Kind::Expert;
  return g;
}

inline bool is_block_group(const std::string& name) { return parse_group_name(name).kind == GroupName::Kind::Block; }
inline bool is_expert_group(const std::string& name) { return parse_group_name(name).kind == GroupName::Kind::Expert; }

inline std::string block_group_name(uint32_t layer) { return "layers." + std::to_string(layer); }
inline std::string expert_group_name(uint32_t layer, uint32_t expert) {
  return block_group_name(layer) + ".experts." + std::to_string(expert);
}

// The expert index of a tensor's canonical name ("model.layers.3.mlp.experts.12.up_proj.weight",
// "model.layers.3.block_sparse_moe.experts.12.w3.weight" -> 12); -1 when it names no expert.
inline int64_t expert_of_tensor(const std::string& canonical_name) {
  static const std::string kExperts = ".experts.";
  const size_t at = canonical_name.find(kExperts);
  if (at == std::string::npos) return -1;
  uint32_t e = 0;
  const size_t end = group_names_detail::parse_index(canonical_name, at + kExperts.size(), &e);
  if (end == std::string::npos || end >= canonical_name.size() || canonical_name[end] != '.') return -1;
  return e;
}

}  // namespace endor
