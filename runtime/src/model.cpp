// Model plumbing shared by the architectures: loading by config, KV cache, profiling, backends.
#include <algorithm>

#include "weights.h"

#ifdef ENDOR_RUNTIME_CUDA
#include "endor/cuda_backend.h"
#endif

namespace endor {

const char* to_string(KvDtype d) { return d == KvDtype::F16 ? "f16" : "f32"; }

KvDtype parse_kv_dtype(const std::string& s) {
  if (s == "f32") return KvDtype::F32;
  if (s == "f16") return KvDtype::F16;
  throw Error("KV cache dtype \"" + s + "\" is not one of f32, f16");
}

KvCache::KvCache(Backend& backend, uint32_t n_layers, size_t capacity, uint32_t kv_dim, KvDtype dtype)
    : backend_(backend), capacity_(capacity), kv_dim_(kv_dim), dtype_(dtype) {
  if (dtype == KvDtype::F16 && !backend.supports_f16_kv())
    throw Error(std::string("the ") + backend.name() + " backend has no f16 KV cache (use --kv-dtype f32)");
  // Backend memory comes in floats: a half array takes half as many (rounded up).
  const size_t floats = dtype == KvDtype::F16 ? (capacity * kv_dim + 1) / 2 : capacity * kv_dim;
  keys_.reserve(n_layers);
  values_.reserve(n_layers);
  try {
    for (uint32_t l = 0; l < n_layers; ++l) {
      keys_.push_back(backend_.alloc(floats));
      values_.push_back(backend_.alloc(floats));
    }
  } catch (...) {
    for (float* p : keys_) backend_.free(p);
    for (float* p : values_) backend_.free(p);
    throw;
  }
}

KvCache::~KvCache() {
  for (float* p : keys_) backend_.free(p);
  for (float* p : values_) backend_.free(p);
}

std::unique_ptr<KvCache> Model::make_cache(size_t capacity) {
  capacity = std::max<size_t>(1, std::min<size_t>(capacity, config_.max_positions));
  return std::make_unique<KvCache>(backend_, config_.n_layers, capacity,
                                   config_.n_kv_heads * config_.head_dim, kv_dtype_);
}

void Model::set_kv_dtype(KvDtype dtype) {
  if (dtype == KvDtype::F16 && !backend_.supports_f16_kv())
    throw Error(std::string("the ") + backend_.name() + " backend has no f16 KV cache (use --kv-dtype f32)");
  kv_dtype_ = dtype;
}

void Model::set_profiling(bool on) {
  profiling_ = on;
  reset_profile();
}

void Model::reset_profile() {
  profile_ = ForwardProfile{};
  profile_.layer_ms.assign(config_.n_layers, 0.0);
}

std::unique_ptr<Model> load_model(const ContainerReader& container, Backend& backend) {
  return load_model(container, backend, nullptr);
}

std::unique_ptr<Model> load_model(const ContainerReader& container, Backend& backend, WeightProvider* weights) {
  const Manifest& m = container.manifest();
  ModelConfig config = parse_model_config(m.config, container.path());
  // generate() stops where transformers would: generation_config's eos ids take precedence.
  if (m.generation_config.is_object() && m.generation_config.contains("eos_token_id")) {
    const auto& g = m.generation_config["eos_token_id"];
    if (g.is_number_integer() || g.is_array()) {
      config.eos_token_ids.clear();
      for (const auto& v : g.is_array() ? g : nlohmann::json::array({g}))
        if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX)
          config.eos_token_ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
  }
  std::unique_ptr<Model> model = config.arch == Architecture::Opt
                                     ? make_opt_model(config, container, backend, weights)
                                     : make_llama_model(config, container, backend, weights);
  model->reset_profile();
  return model;
}

std::vector<std::string> available_devices() {
  std::vector<std::string> devices = {"cpu"};
#ifdef ENDOR_RUNTIME_CUDA
  if (cuda_device_available()) devices.push_back("cuda");
#endif
  return devices;
}

std::unique_ptr<Backend> make_backend(const std::string& device, int n_threads, bool exact, bool batch_invariant) {
  cpu::Options cpu_options;
  cpu_options.n_threads = n_threads;
  cpu_options.exact = exact;
  cpu_options.batch_invariant = batch_invariant;
  if (device == "cpu") return make_cpu_backend(cpu_options);
#ifdef ENDOR_RUNTIME_CUDA
  if (device == "cuda" || device == "auto") {
    std::string why;
    if (cuda_device_available(&why)) {
      cuda::Options cuda_options;
      cuda_options.batch_invariant = batch_invariant;
      return make_cuda_backend(cuda_options);
    }
    if (device == "cuda") throw Error("this machine has no CUDA device (" + why + "); use --device cpu");
    return make_cpu_backend(cpu_options);
  }
#else
  if (device == "auto") return make_cpu_backend(cpu_options);
  if (device == "cuda") throw Error("this build has no CUDA device support (built without nvcc); use --device cpu");
#endif
  throw Error("unknown device \"" + device + "\" (expected cpu, cuda or auto)");
}

}  // namespace endor
