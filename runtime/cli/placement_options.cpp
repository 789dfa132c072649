// The placement and compute options endor-infer and endor-serve share (placement_options.h).
#include "placement_options.h"

#include <algorithm>

#include "endor/cli_common.h"

namespace endor::cli {

void add_placement_options(cxxopts::Options& options) {
  add_threads_option(options);
  options.add_options()
    ("exact", "CPU: multiply every weight by the f32 activations exactly (default: int8/int4 weights take "
              "activations quantized to int8 per 32 values, dense f16/bf16 ones and bitmap ones over 4096 "
              "columns wide activations rounded to f16; bench/ACCURACY.md has the cost)")
    ("no-batch-invariance", "CPU: the fast path for prompts and batches: long prompts through a GEMM and blocked "
                            "attention, up to 8 tokens per weight decode (default: each sequence computed exactly "
                            "as alone, so its greedy ids do not depend on the batch, the prompt's chunking or "
                            "--threads; docs/serve.md has the cost)")
    ("kv-dtype", "KV cache storage: f32, or f16 (half the memory; CPU device only; attention widens the "
                 "cached values back to f32)", cxxopts::value<std::string>()->default_value("f32"))
    ("device", "cpu, cuda or auto (cuda when this build and machine have it)",
     cxxopts::value<std::string>()->default_value("auto"))
    ("gpu-mem", "GPU memory budget, e.g. 3G: decoder blocks that do not fit stream from host memory "
                "(overrides the container's tiers)", cxxopts::value<std::string>())
    ("cpu-mem", "host memory budget for offloaded blocks, e.g. 16G: blocks past it stream from disk "
                "(on the CPU device: blocks read in place)", cxxopts::value<std::string>())
    ("expert-cache", "MoE files packed by expert: memory for the cache of routed experts read from the slow tier, "
                     "taken from --cpu-mem (CUDA: --gpu-mem); 0 = no cache (each routed expert read again). "
                     "Default: half of what the budget leaves for experts (docs/moe.md)", cxxopts::value<std::string>())
    ("expert-prefetch", "MoE experts read into the expert cache: on = also read the experts the next block's "
                        "router picks on this block's MLP input, behind this block's own reads (a guess: costs "
                        "reads, never changes results; needs the cache), off = read only what a block routes "
                        "to (default: a disk that bounds the step pays more for the wrong guesses than the "
                        "overlap gains; --plan predicts both; docs/moe.md)", cxxopts::value<std::string>()->default_value("off"))
    ("prefetch", "offloaded blocks in flight ahead of the computing one",
     cxxopts::value<uint32_t>()->default_value("2"))
    ("disk-io", "how disk-tier blocks are read: auto, direct (O_DIRECT, buffered where refused), buffered, "
                "cufile", cxxopts::value<std::string>()->default_value("auto"));
}

void check_placement_options(const cxxopts::ParseResult& args) {
  threads_option(args);
  const std::string device = args["device"].as<std::string>();
  if (device != "cpu" && device != "cuda" && device != "auto")
    throw UsageError("--device must be cpu, cuda or auto, got '" + device + "'");
  const std::string kv = args["kv-dtype"].as<std::string>();
  if (kv != "f32" && kv != "f16") throw UsageError("--kv-dtype must be f32 or f16, got '" + kv + "'");
  if (args["prefetch"].as<uint32_t>() < 1 || args["prefetch"].as<uint32_t>() > 64)
    throw UsageError("--prefetch must be in [1, 64]");
  const std::string ep = args["expert-prefetch"].as<std::string>();
  if (ep != "on" && ep != "off") throw UsageError("--expert-prefetch must be on or off, got '" + ep + "'");
  if (!parse_disk_io(args["disk-io"].as<std::string>()))
    throw UsageError("--disk-io must be auto, direct, buffered or cufile");
  size_option(args, "gpu-mem");  // usage errors before anything is opened
  size_option(args, "cpu-mem");
  size_option(args, "expert-cache");
}

Compute open_compute(const cxxopts::ParseResult& args) {
  Compute c;
  c.backend = make_backend(args["device"].as<std::string>(), threads_option(args), args.count("exact") > 0,
                           args.count("no-batch-invariance") == 0);
  if (args.count("gpu-mem") && !is_cuda_device(*c.backend))
    throw Error("--gpu-mem needs the CUDA device, but this run uses " + c.backend->name());
  c.kv_dtype = parse_kv_dtype(args["kv-dtype"].as<std::string>());
  if (c.kv_dtype == KvDtype::F16 && !c.backend->supports_f16_kv())
    throw Error("--kv-dtype f16: the " + c.backend->name() + " backend has no f16 KV cache (use --device cpu)");
  std::string no_cufile;
  if (args["disk-io"].as<std::string>() == "cufile" && !cufile_available(&no_cufile))
    throw Error("--disk-io cufile: " + no_cufile);
  return c;
}

Offload setup_offload(const ContainerReader& container, Backend& backend, const cxxopts::ParseResult& args,
                      size_t kv_capacity, size_t max_tokens, KvDtype kv_dtype) {
  const bool cuda = is_cuda_device(backend);
  const Manifest& m = container.manifest();
  const ModelConfig config = parse_model_config(m.config, container.path());
  PlacementRequest request;
  request.groups = group_demands(m);
  request.gpu_budget = size_option(args, "gpu-mem");
  request.cpu_budget = size_option(args, "cpu-mem");
  request.prefetch = args["prefetch"].as<uint32_t>();
  request.expert_cache = size_option(args, "expert-cache");
  request.cuda = cuda;
  request.device_fixed_bytes =
      device_fixed_bytes(config, m, kv_capacity, std::min<size_t>(max_tokens, config.max_positions), cuda);
  if (cuda) request.device_capacity = device_free_bytes(backend);
  else
    request.host_kv_bytes =
        kv_cache_bytes(config.n_layers, kv_capacity, uint64_t(config.n_kv_heads) * config.head_dim, kv_dtype);
  Offload o;
  o.groups = request.groups;
  o.expert_prefetch = args["expert-prefetch"].as<std::string>() == "on";
  try {
    o.placement = place_groups(request);
  } catch (const Error& e) {
    throw Error(container.path() + ": " + e.what());  // budgets that cannot hold this model
  }
  if (cuda || o.placement.streams()) {
    StreamingOptions options;
    options.prefetch = request.prefetch;
    options.disk_io = *parse_disk_io(args["disk-io"].as<std::string>());
    options.expert_prefetch = o.expert_prefetch;
    o.weights = make_streaming_weights(container, backend, o.placement, options);
  }
  return o;
}

}  // namespace endor::cli
