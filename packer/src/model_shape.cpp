// ModelShape: the packer's view of the dimensions the registry parsed from config.json (the
// parsing and every family's tensor list are in model-registry/).
#include "endor/checkpoint.h"

namespace endor {

ModelShape shape_of(const ModelConfig& c) {
  ModelShape s;
  s.family = c.arch;
  s.model_type = c.model_type;
  s.vocab = c.vocab;
  s.hidden = c.hidden;
  s.intermediate = c.intermediate;
  s.layers = c.n_layers;
  s.heads = c.n_heads;
  s.kv_heads = c.n_kv_heads;
  s.head_dim = c.head_dim;
  s.word_embed_dim = c.arch == Architecture::Opt ? c.word_embed_dim : c.hidden;
  s.max_positions = c.max_positions;
  s.tied_head = c.tie_word_embeddings;
  return s;
}

ModelShape read_model_shape(const nlohmann::json& config, const std::string& where) {
  return shape_of(parse_model_config(config, where, ""));
}

}  // namespace endor
