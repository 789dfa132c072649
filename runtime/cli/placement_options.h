// The placement and compute options endor-infer and endor-serve share (--device, --threads, --exact,
// --no-batch-invariance, --kv-dtype, --gpu-mem, --cpu-mem, --prefetch, --disk-io): their declaration, their checks, the
// backend they open and the tiered placement (runtime/offload) they make.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <cxxopts.hpp>

#include "endor/offload.h"
#include "endor/runtime.h"

namespace endor::cli {

// Declares the options above on `options` (with endor-infer's defaults).
void add_placement_options(cxxopts::Options& options);

// Usage checks that need no file: --threads (endor/cli_common.h), --device, --kv-dtype and --disk-io
// known, --prefetch in [1, 64], the memory sizes parse. Throws UsageError (endor/cli_common.h).
void check_placement_options(const cxxopts::ParseResult& args);

// The backend of --device/--threads/--exact/--no-batch-invariance and the KV dtype of --kv-dtype, checked against each
// other (--gpu-mem needs CUDA, f16 KV needs a backend that has it, cufile must be available).
// Throws endor::Error.
struct Compute {
  std::unique_ptr<Backend> backend;
  KvDtype kv_dtype = KvDtype::F32;
};
Compute open_compute(const cxxopts::ParseResult& args);

// Tiered offloading of a run: the placement (from the manifest or --gpu-mem/--cpu-mem) and, when
// blocks stream (or on CUDA, for its timings), the provider the model loads its weights through.
struct Offload {
  Placement placement;
  std::unique_ptr<StreamingWeights> weights;  // null: every group read in place (CPU)
  std::vector<GroupDemand> groups;            // the container's groups (names, sizes, experts)
  bool expert_prefetch = false;               // --expert-prefetch on
};

// kv_capacity / max_tokens: the KV cache rows of all sequences held at once and the rows of the
// largest forward call of this run (fixed needs the budgets must hold besides the weights). Throws
// endor::Error naming the container when the budgets cannot hold the model.
Offload setup_offload(const ContainerReader& container, Backend& backend, const cxxopts::ParseResult& args,
                      size_t kv_capacity, size_t max_tokens, KvDtype kv_dtype);

}  // namespace endor::cli
