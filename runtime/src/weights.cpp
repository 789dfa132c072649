// Tensor placement on a Backend (WeightStore), activation buffers, shared forward checks.
#include "weights.h"

#include <sstream>

#include "endor/expert_groups.h"

namespace endor {
namespace {

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

}  // namespace

WeightStore::WeightStore(const ContainerReader& container, Backend& backend, WeightProvider* provider)
    : container_(container), backend_(backend), provider_(provider) {}

WeightStore::~WeightStore() {
  for (float* p : buffers_) backend_.free(p);
}

const TensorInfo* WeightStore::find(const std::string& name) const {
  const Manifest& m = container_.manifest();
  if (const TensorInfo* t = m.find_tensor(name)) return t;
  const std::string prefix = "model.";
  return name.rfind(prefix, 0) == 0 ? m.find_tensor(name.substr(prefix.size())) : nullptr;
}

const TensorInfo& WeightStore::require(const std::string& name,
                                       const std::vector<uint64_t>& shape) const {
  const TensorInfo* t = find(name);
  if (!t) throw Error(path() + ": missing tensor \"" + name + "\"");
  if (t->shape != shape)
    throw Error(path() + ": tensor \"" + t->name + "\" has shape " + shape_text(t->shape) +
                " but config.json implies " + shape_text(shape));
  return *t;
}

const Weight& WeightStore::matrix(const TensorSpec& spec) {
  if (spec.shape.size() != 2) throw Error(path() + ": tensor \"" + spec.name + "\" is not a matrix");
  const TensorInfo& info = require(spec.name, spec.shape);
  auto it = matrices_.find(info.name);
  if (it != matrices_.end()) return *it->second;
  // Backend::prepare_weight asks the view to outlive the Weight: keep it in stable storage.
  TensorView& view = views_.emplace_back(container_.tensor(info));
  // The kernels trust the bitmap index; check it once here (O(bitmap bytes), ~1/16 of f16 data).
  validate_bitmap(view, path() + ": tensor \"" + info.name + "\"");
  // And whether an int4 tensor is 2:4 (the CPU one-token kernel's gather path), from the file's
  // bytes: a streamed weight is prepared before its slot is filled, and keeps this view's flag.
  view.two_of_four = info.value_type == ValueType::I4 && is_two_of_four(view);
  // Without a provider every weight stays in the mapping, and the backend may add a copy of its own
  // once (the CPU backend: a bitmap int4 weight's dense codes, cpu::Options::int4_dense) -- but not
  // an expert's: a token routes to a few experts, so copying each at load would read and hold them
  // all (the Qwen3-30B-A3B shape at 4 blocks: 2.1x the RSS, seconds of start-up) for the few a token
  // runs.
  const bool expert = is_expert_group(container_.manifest().groups[info.group].name);
  std::unique_ptr<Weight> w = provider_  ? provider_->prepare(backend_, view, info.group)
                              : expert ? backend_.prepare_weight(view)
                                       : backend_.prepare_resident_weight(view);
  const Weight* raw = w.get();
  weights_by_group_[info.group].push_back(std::move(w));
  matrices_[info.name] = raw;
  return *raw;
}

float* WeightStore::vector(const TensorSpec& spec) {
  if (spec.shape.size() != 1) throw Error(path() + ": tensor \"" + spec.name + "\" is not a vector");
  const uint64_t n = spec.shape[0];
  const TensorInfo& info = require(spec.name, spec.shape);
  const TensorView view = container_.tensor(info);
  validate_bitmap(view, path() + ": tensor \"" + info.name + "\"");
  std::vector<float> host(n);
  decode_rows_f32(view, 0, 1, host.data());
  float* dst = backend_.alloc(n);
  buffers_.push_back(dst);
  backend_.upload(dst, host.data(), n);
  return dst;
}

float* WeightStore::constant(float value, uint64_t n) {
  std::vector<float> host(n, value);
  float* dst = backend_.alloc(n);
  buffers_.push_back(dst);
  backend_.upload(dst, host.data(), n);
  return dst;
}

uint64_t WeightStore::encoded_bytes(const std::string& name) const {
  const TensorInfo* t = find(name);
  return t ? t->size : 0;
}

uint64_t WeightStore::read_bytes(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) return 0;
  const auto it = matrices_.find(t->name);
  if (it == matrices_.end() || it->second->copy_bytes() == 0) return t->size;
  const TensorLayout& L = it->second->layout();
  return it->second->copy_bytes() + L.scales_bytes + L.mins_bytes;
}

uint32_t WeightStore::group_of(const std::string& name) const {
  const TensorInfo* t = find(name);
  return t ? t->group : 0;
}

ScratchBuffers::~ScratchBuffers() {
  for (auto& s : slots_)
    if (s.first) backend_.free(s.first);
}

float* ScratchBuffers::get(size_t slot, size_t n_floats) {
  if (slot >= slots_.size()) slots_.resize(slot + 1, {nullptr, 0});
  auto& s = slots_[slot];
  if (s.second < n_floats) {
    if (s.first) backend_.free(s.first);
    s.first = nullptr;
    s.second = 0;
    s.first = backend_.alloc(n_floats);
    s.second = n_floats;
  }
  return s.first;
}

void check_forward_inputs(const ModelConfig& config, const std::string& path, const int32_t* ids,
                          size_t n, const KvCache& cache) {
  if (n == 0) throw Error(path + ": forward pass over zero tokens");
  const size_t end = cache.n_past() + n;
  if (end > config.max_positions)
    throw Error(path + ": " + std::to_string(end) + " tokens exceed the context length " +
                std::to_string(config.max_positions) + " (max_position_embeddings)");
  if (end > cache.capacity())
    throw Error(path + ": " + std::to_string(end) + " tokens exceed the KV cache capacity " +
                std::to_string(cache.capacity()));
  for (size_t i = 0; i < n; ++i)
    if (ids[i] < 0 || static_cast<uint64_t>(ids[i]) >= config.vocab)
      throw Error(path + ": token id " + std::to_string(ids[i]) + " is outside the vocabulary [0, " +
                  std::to_string(config.vocab) + ")");
}

void BlockHookCaller::operator()(const Model::LinearInputHook* hook, uint32_t layer,
                                 const char* linear, const float* x, size_t n, size_t in) {
  if (!hook || !*hook) return;
  host_.resize(n * in);
  backend_.download(host_.data(), x, n * in);
  (*hook)(layer, linear, host_.data(), n, in);
}

std::unique_ptr<Weight> prepare_replacement(Backend& backend, const TensorView& view, uint64_t rows,
                                            uint64_t cols, const std::string& what) {
  if (!view.info || view.info->shape != std::vector<uint64_t>{rows, cols})
    throw Error(what + ": replacement weight must have shape " + shape_text({rows, cols}));
  validate_bitmap(view, what);
  return backend.prepare_weight(view);
}

void check_block_inputs(const ModelConfig& config, const std::string& path, const int32_t* ids,
                        size_t n, uint32_t layer) {
  if (n == 0) throw Error(path + ": block pass over zero tokens");
  if (n > config.max_positions)
    throw Error(path + ": " + std::to_string(n) + " tokens exceed the context length " +
                std::to_string(config.max_positions) + " (max_position_embeddings)");
  if (layer >= config.n_layers)
    throw Error(path + ": no decoder block " + std::to_string(layer) + " (the model has " +
                std::to_string(config.n_layers) + ")");
  if (ids)
    for (size_t i = 0; i < n; ++i)
      if (ids[i] < 0 || static_cast<uint64_t>(ids[i]) >= config.vocab)
        throw Error(path + ": token id " + std::to_string(ids[i]) + " is outside the vocabulary [0, " +
                    std::to_string(config.vocab) + ")");
}

}  // namespace endor
