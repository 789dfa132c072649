#include "block_model.h"

namespace endor {

BlockModel::BlockModel(const ModelConfig& config, const ContainerReader& container, Backend& backend,
                       WeightProvider* provider)
    : Model(config, backend), store_(container, backend, provider), scratch_(backend) {}

void BlockModel::forward(const int32_t* ids, size_t n, KvCache& cache, bool all_logits,
                         std::vector<float>& logits) {
  const ModelConfig& c = config_;
  check_forward_inputs(c, store_.path(), ids, n, cache);
  const size_t H = c.hidden, n_past = cache.n_past();
  float* x = scratch_.get(kX, n * H);  // the residual stream [n, H]

  const Clock::time_point t_start = Clock::now();
  double layers_total_ms = 0;
  run_embed(ids, n, n_past, x);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    Clock::time_point t_layer;
    if (profiling_) {
      backend_.synchronize();
      t_layer = Clock::now();
    }
    run_block(l, x, n, n_past, cache.keys(l), cache.values(l), nullptr);
    if (profiling_) {
      backend_.synchronize();
      const double ms = ms_since(t_layer);
      profile_.layer_ms[l] += ms;
      layers_total_ms += ms;
    }
  }
  cache.advance(n);

  const size_t rows = all_logits ? n : 1;
  run_head(all_logits ? x : x + (n - 1) * H, rows, logits);
  if (profiling_) {
    profile_.head_ms += ms_since(t_start) - layers_total_ms;
    profile_.n_calls += 1;
  }
}

void BlockModel::embed(const int32_t* ids, size_t n, float* hidden_out) {
  check_block_inputs(config_, store_.path(), ids, n);
  float* x = scratch_.get(kX, n * config_.hidden);
  run_embed(ids, n, 0, x);
  backend_.download(hidden_out, x, n * config_.hidden);
}

void BlockModel::forward_block(uint32_t layer, float* hidden, size_t n, const LinearInputHook& hook) {
  check_block_inputs(config_, store_.path(), nullptr, n, layer);
  const size_t H = config_.hidden;
  float* x = scratch_.get(kX, n * H);
  backend_.upload(x, hidden, n * H);
  run_block(layer, x, n, 0, scratch_.get(kBlockK, n * kv_dim()), scratch_.get(kBlockV, n * kv_dim()), &hook);
  backend_.download(hidden, x, n * H);
}

void BlockModel::head(const float* hidden, size_t n, std::vector<float>& logits) {
  float* x = scratch_.get(kX, n * config_.hidden);
  backend_.upload(x, hidden, n * config_.hidden);
  run_head(x, n, logits);
}

std::vector<std::string> BlockModel::block_linear_names() const {
  std::vector<std::string> names;
  // The table is the same for every block; block 0 exists in every loadable model.
  for (const LinearSlot& s : const_cast<BlockModel*>(this)->linear_slots(0)) names.emplace_back(s.name);
  return names;
}

void BlockModel::replace_block_weight(uint32_t layer, const std::string& linear, const TensorView& view) {
  if (layer >= config_.n_layers) throw Error(store_.path() + ": no decoder block " + std::to_string(layer));
  for (const LinearSlot& s : linear_slots(layer)) {
    if (linear != s.name) continue;
    const std::string what = store_.path() + ": replacement for " + block_prefix(layer) + linear;
    replaced_.push_back(prepare_replacement(backend_, view, s.rows, s.cols, what));
    *s.weight = replaced_.back().get();
    return;
  }
  throw Error(store_.path() + ": no Linear \"" + linear + "\" in a block of this " + arch_name() + " model");
}

}  // namespace endor
