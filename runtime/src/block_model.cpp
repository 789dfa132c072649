#include "block_model.h"

namespace endor {

BlockModel::BlockModel(const ModelConfig& config, const ContainerReader& container, Backend& backend,
                       WeightProvider* provider)
    : Model(config, backend), tensors_(config_), store_(container, backend, provider), scratch_(backend) {}

const char* BlockModel::linear_name(Module module, int32_t expert) const {
  for (const BlockLinear& l : tensors_.block_linears())
    if (l.module == module && l.expert == expert) return l.name.c_str();
  throw Error(store_.path() + ": a " + config_.model_type + " block has no such Linear");
}

double BlockModel::run_blocks(const int32_t* const* ids, KvCache* const* caches, BlockRows& rows, float*& x) {
  const ModelConfig& c = config_;
  const size_t H = c.hidden;
  double layers_total_ms = 0;
  for (size_t s = 0; s < rows.seqs.size(); ++s)
    run_embed(ids[s], rows.seqs[s].n, rows.seqs[s].n_past, x + rows.seqs[s].row * H);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    for (size_t s = 0; s < rows.seqs.size(); ++s) {
      rows.seqs[s].k_cache = caches[s]->keys(l);
      rows.seqs[s].v_cache = caches[s]->values(l);
      rows.seqs[s].k_cache16 = caches[s]->keys16(l);
      rows.seqs[s].v_cache16 = caches[s]->values16(l);
    }
    Clock::time_point t_layer;
    if (profiling_) {
      backend_.synchronize();
      t_layer = Clock::now();
    }
    run_block(l, x, rows, nullptr);
    if (profiling_) {
      backend_.synchronize();
      const double ms = ms_since(t_layer);
      profile_.layer_ms[l] += ms;
      layers_total_ms += ms;
    }
  }
  for (size_t s = 0; s < rows.seqs.size(); ++s) caches[s]->advance(rows.seqs[s].n);
  return layers_total_ms;
}

namespace {
// The CPU backend's fused decode kernels serve up to this many tokens per call (kernels.h).
constexpr size_t kFusedTokens = 8;
void add_positions(std::vector<int32_t>& positions, size_t n_past, size_t n) {
  for (size_t t = 0; t < n; ++t) positions.push_back(static_cast<int32_t>(n_past + t));
}
}  // namespace

const float* BlockModel::run_sequence(const int32_t* ids, size_t n, KvCache& cache, bool all_logits) {
  const ModelConfig& c = config_;
  check_forward_inputs(c, store_.path(), ids, n, cache);
  const size_t H = c.hidden;
  BlockRows rows;
  rows.n = n;
  rows.seqs.push_back({0, n, cache.n_past(), nullptr, nullptr});
  rows.linear_calls.push_back({0, n});
  add_positions(rows.positions, cache.n_past(), n);
  float* x = scratch_.get(kX, n * H);  // the residual stream [n, H]
  const Clock::time_point t_start = Clock::now();
  KvCache* caches[] = {&cache};
  const double layers_ms = run_blocks(&ids, caches, rows, x);
  const float* logits = run_head(all_logits ? x : x + (n - 1) * H, all_logits ? n : 1);
  if (profiling_) {
    backend_.synchronize();
    profile_.head_ms += ms_since(t_start) - layers_ms;
    profile_.n_calls += 1;
  }
  return logits;
}

void BlockModel::forward(const int32_t* ids, size_t n, KvCache& cache, bool all_logits,
                         std::vector<float>& logits) {
  download_logits(run_sequence(ids, n, cache, all_logits), all_logits ? n : 1, logits);
}

int32_t BlockModel::forward_next(const int32_t* ids, size_t n, KvCache& cache, Sampler& sampler) {
  return sampler.sample_on(backend_, run_sequence(ids, n, cache, false), config_.vocab);
}

void BlockModel::download_logits(const float* backend_logits, size_t rows, std::vector<float>& logits) {
  logits.resize(rows * config_.vocab);
  backend_.download(logits.data(), backend_logits, rows * config_.vocab);
}

void BlockModel::forward_batch(const SequenceStep* steps, size_t n_steps, std::vector<float>& logits) {
  const ModelConfig& c = config_;
  if (n_steps == 0) throw Error(store_.path() + ": batched forward pass over no sequence");
  const size_t H = c.hidden;
  BlockRows rows;
  std::vector<const int32_t*> ids(n_steps);
  std::vector<KvCache*> caches(n_steps);
  bool all_single = false;  // the last Linear call holds single-token steps only
  for (size_t s = 0; s < n_steps; ++s) {
    const SequenceStep& st = steps[s];
    if (!st.cache) throw Error(store_.path() + ": batched forward pass: sequence " + std::to_string(s) + " has no cache");
    for (size_t e = 0; e < s; ++e)
      if (caches[e] == st.cache)
        throw Error(store_.path() + ": batched forward pass: two sequences share one KV cache");
    check_forward_inputs(c, store_.path(), st.ids, st.n, *st.cache);
    ids[s] = st.ids;
    caches[s] = st.cache;
    rows.seqs.push_back({rows.n, st.n, st.cache->n_past(), nullptr, nullptr});
    // Consecutive sequences share one Linear call while the call stays within the fused kernels'
    // token limit (each row's result there does not depend on the other rows, so a prompt gets
    // the values it gets alone), and single-token steps always do (a batch's decode rows: the
    // kernel path for the batch). A longer prompt has a call of its own.
    const bool merge = s > 0 && ((st.n == 1 && all_single) || rows.linear_calls.back().n + st.n <= kFusedTokens);
    if (merge) {
      rows.linear_calls.back().n += st.n;
      all_single = all_single && st.n == 1;
    } else {
      rows.linear_calls.push_back({rows.n, st.n});
      all_single = st.n == 1;
    }
    add_positions(rows.positions, st.cache->n_past(), st.n);
    rows.n += st.n;
  }
  float* x = scratch_.get(kX, rows.n * H);
  const Clock::time_point t_start = Clock::now();
  const double layers_ms = run_blocks(ids.data(), caches.data(), rows, x);
  // Each sequence's last row -> logits [n_steps, vocab].
  float* last = scratch_.get(kLastRows, n_steps * H);
  for (size_t s = 0; s < n_steps; ++s)
    backend_.copy(last + s * H, x + (rows.seqs[s].row + rows.seqs[s].n - 1) * H, H);
  download_logits(run_head(last, n_steps), n_steps, logits);
  if (profiling_) {
    profile_.head_ms += ms_since(t_start) - layers_ms;
    profile_.n_calls += 1;
  }
}

void BlockModel::linear_rows(const BlockRows& rows, const Weight& w, const float* x, const float* bias, float* y) {
  const size_t in = w.in_features(), out = w.out_features();
  for (const RowRange& r : rows.linear_calls) backend_.linear(w, x + r.row * in, r.n, bias, y + r.row * out);
}

void BlockModel::linear_group_rows(const BlockRows& rows, const Backend::LinearTarget* targets, size_t n_targets,
                                   const float* x) {
  const size_t in = targets[0].w->in_features();
  if (rows.linear_calls.size() == 1 && rows.linear_calls[0].row == 0) {
    backend_.linear_group(targets, n_targets, x, rows.linear_calls[0].n);
    return;
  }
  std::vector<Backend::LinearTarget> at(targets, targets + n_targets);
  for (const RowRange& r : rows.linear_calls) {
    for (size_t i = 0; i < n_targets; ++i) at[i].y = targets[i].y + r.row * targets[i].w->out_features();
    backend_.linear_group(at.data(), n_targets, x + r.row * in, r.n);
  }
}

float* BlockModel::new_keys(const BlockRows& rows, size_t kv_dim) {
  if (rows.seqs.size() == 1 && rows.seqs[0].k_cache) return rows.seqs[0].k_cache + rows.seqs[0].n_past * kv_dim;
  return scratch_.get(kBlockK, rows.n * kv_dim);
}

float* BlockModel::new_values(const BlockRows& rows, size_t kv_dim) {
  if (rows.seqs.size() == 1 && rows.seqs[0].k_cache) return rows.seqs[0].v_cache + rows.seqs[0].n_past * kv_dim;
  return scratch_.get(kBlockV, rows.n * kv_dim);
}

void BlockModel::store_kv(const BlockRows& rows, const float* k, const float* v, size_t kv_dim) {
  if (rows.seqs.size() == 1 && rows.seqs[0].k_cache) return;  // written in place
  for (const SequenceRows& s : rows.seqs) {
    if (s.k_cache) {
      backend_.copy(s.k_cache + s.n_past * kv_dim, k + s.row * kv_dim, s.n * kv_dim);
      backend_.copy(s.v_cache + s.n_past * kv_dim, v + s.row * kv_dim, s.n * kv_dim);
    } else {
      backend_.store_f16(s.k_cache16 + s.n_past * kv_dim, k + s.row * kv_dim, s.n * kv_dim);
      backend_.store_f16(s.v_cache16 + s.n_past * kv_dim, v + s.row * kv_dim, s.n * kv_dim);
    }
  }
}

void BlockModel::attend(const BlockRows& rows, const float* q, size_t q_dim, const AttentionParams& p, float* out) {
  attn_seqs_.clear();
  for (const SequenceRows& s : rows.seqs)
    attn_seqs_.push_back(
        {q + s.row * q_dim, s.k_cache, s.v_cache, s.k_cache16, s.v_cache16, s.n_past, s.n, out + s.row * q_dim});
  backend_.attention_seqs(attn_seqs_.data(), attn_seqs_.size(), p);
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
  BlockRows rows;
  rows.n = n;
  rows.seqs.push_back({0, n, 0, scratch_.get(kBlockK, n * kv_dim()), scratch_.get(kBlockV, n * kv_dim())});
  rows.linear_calls.push_back({0, n});
  add_positions(rows.positions, 0, n);
  run_block(layer, x, rows, &hook);
  backend_.download(hidden, x, n * H);
}

void BlockModel::head(const float* hidden, size_t n, std::vector<float>& logits) {
  float* x = scratch_.get(kX, n * config_.hidden);
  backend_.upload(x, hidden, n * config_.hidden);
  download_logits(run_head(x, n), n, logits);
}

std::vector<std::string> BlockModel::block_linear_names() const {
  std::vector<std::string> names;
  for (const BlockLinear& l : tensors_.block_linears()) names.push_back(l.name);
  return names;
}

void BlockModel::replace_block_weight(uint32_t layer, const std::string& linear, const TensorView& view) {
  if (layer >= config_.n_layers) throw Error(store_.path() + ": no decoder block " + std::to_string(layer));
  for (const BlockLinear& l : tensors_.block_linears()) {
    if (linear != l.name) continue;
    const std::string what = store_.path() + ": replacement for " + tensors_.block_prefix(layer) + linear;
    replaced_.push_back(prepare_replacement(backend_, view, l.rows, l.cols, what));
    *linear_slot(layer, l.module, l.expert) = replaced_.back().get();
    return;
  }
  throw Error(store_.path() + ": no Linear \"" + linear + "\" in a block of this " + arch_name() + " model");
}

}  // namespace endor
