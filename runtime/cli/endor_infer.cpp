// endor-infer: run a .endor model on a prompt and stream the generated text (or ids), measure
// perplexity on a text file, or tokenize / detokenize with the model's tokenizer.
//   endor-infer FILE -p TEXT | --ids "1 2 3" [sampling options]
//   endor-infer FILE --perplexity TEXT_FILE [--ctx L]
//   endor-infer FILE --chat [-p TEXT]   (a conversation through the model's chat template)
//   endor-infer tokenize FILE  /  endor-infer detokenize FILE   (stdin -> stdout)
// Errors: one line on stderr, exit 1, or exit 2 for a malformed command line (endor/cli_common.h).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <cxxopts.hpp>

#include "endor/cli_common.h"
#include "endor/offload.h"
#include "endor/runtime.h"
#include "endor/tokenizer.h"
#include "endor/openmp_policy.h"
#include "chat_command.h"
#include "placement_options.h"
#include "tokenizer_commands.h"

namespace {

using endor::cli::UsageError;

// "1 2 3" or "1,2,3" -> ids; every entry a non-negative integer.
std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::string item;
  std::istringstream in(text);
  while (in >> item) {
    std::istringstream parts(item);
    std::string part;
    while (std::getline(parts, part, ',')) {
      if (part.empty()) continue;
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(part.c_str(), &end, 10);
      if (*end != '\0' || errno != 0 || v < 0 || v > INT32_MAX)
        throw UsageError("--ids: \"" + part + "\" is not a token id");
      ids.push_back(static_cast<int32_t>(v));
    }
  }
  if (ids.empty()) throw UsageError("--ids: no token ids given");
  return ids;
}

void print_stats(const endor::Backend& backend, const endor::Model& model,
                 const endor::GenerationStats& st, uint64_t seed) {
  std::fprintf(stderr, "backend: %s\n", backend.name().c_str());
  std::fprintf(stderr, "seed: %llu\n", static_cast<unsigned long long>(seed));
  std::fprintf(stderr, "prefill: %zu tokens in %.2f ms (%.2f tokens/s)\n", st.n_prompt, st.prefill_ms,
               st.prefill_tokens_per_s());
  std::fprintf(stderr, "decode: %zu tokens in %.2f ms (%.2f tokens/s)\n", st.n_decode_steps,
               st.decode_ms, st.decode_tokens_per_s());
  std::fprintf(stderr, "bytes read per token: %s (%llu bytes of weights as the kernels read them)\n",
               endor::format_bytes(model.decode_bytes_per_token()).c_str(),
               static_cast<unsigned long long>(model.decode_bytes_per_token()));
  const endor::ForwardProfile& p = model.profile();
  if (p.n_calls > 0) {
    std::fprintf(stderr, "time per layer (decode, ms/token):");
    for (size_t l = 0; l < p.layer_ms.size(); ++l)
      std::fprintf(stderr, "%s%zu:%.3f", l ? " " : " ", l, p.layer_ms[l] / p.n_calls);
    std::fprintf(stderr, "\nembedding + final norm + lm_head: %.3f ms/token\n", p.head_ms / p.n_calls);
  } else {
    std::fprintf(stderr, "time per layer: not measured on this device (see the offload table)\n");
  }
}

using endor::cli::Offload;
using endor::cli::setup_offload;

// The --stats lines of MoE experts in groups of their own: runs and reads per token, the expert cache's
// hit rate, the time compute waited for expert reads (also in the blocks' stall), and the load balance
// (per block, the most-run expert's runs over the mean; 1 = even).
void print_expert_stats(const Offload& o, const endor::OffloadStats& d, double per) {
  if (o.placement.expert_groups == 0 || d.expert_counts.size() != o.groups.size()) return;
  std::map<uint32_t, std::pair<uint64_t, std::vector<uint64_t>>> by_layer;  // layer -> (runs, per expert)
  uint64_t runs = 0;
  for (size_t g = 0; g < o.groups.size(); ++g) {
    if (!o.groups[g].expert) continue;
    auto& l = by_layer[o.groups[g].layer];
    l.first += d.expert_counts[g];
    l.second.push_back(d.expert_counts[g]);
    runs += d.expert_counts[g];
  }
  double worst = 0, sum = 0;
  for (const auto& [layer, l] : by_layer) {
    const double mean = double(l.first) / double(l.second.size());
    const double r = mean > 0 ? double(*std::max_element(l.second.begin(), l.second.end())) / mean : 0;
    worst = std::max(worst, r);
    sum += r;
  }
  const uint64_t reads = d.expert_fills[int(endor::Tier::Cpu)] + d.expert_fills[int(endor::Tier::Disk)];
  const uint64_t read_bytes = d.expert_bytes[int(endor::Tier::Cpu)] + d.expert_bytes[int(endor::Tier::Disk)];
  const double hit = d.expert_uses > 0 ? double(d.expert_hits) / double(d.expert_uses) : 0;
  std::fprintf(stderr, "  experts: %.1f runs (%.1f off the fast tier), %.1f reads (%s from disk); cache hit rate %.1f %%; "
               "compute waited for expert reads %.3f ms; load balance (max/mean runs per block) %.2f mean, %.2f worst\n",
               runs * per, d.expert_uses * per, reads * per,
               endor::format_bytes(uint64_t(d.expert_bytes[int(endor::Tier::Disk)] * per)).c_str(), 100 * hit,
               d.expert_stall_s * 1e3 * per, by_layer.empty() ? 0 : sum / double(by_layer.size()), worst);
  if (d.expert_prefetch_reads > 0)
    std::fprintf(stderr, "  expert prefetch: %.1f reads (%s) of the next block's guessed experts, %.1f used by it, %.1f "
                 "evicted unused (%s wasted), %.1f wrong ones dropped before their read\n", d.expert_prefetch_reads * per,
                 endor::format_bytes(uint64_t(d.expert_prefetch_bytes * per)).c_str(), d.expert_prefetch_used * per,
                 d.expert_prefetch_wasted * per, endor::format_bytes(uint64_t(d.expert_prefetch_wasted_bytes * per)).c_str(),
                 d.expert_prefetch_cancelled * per);
  std::fprintf(stderr, "expert-summary: runs=%.2f cached_runs=%.2f hits=%.2f reads=%.2f read_bytes=%.0f disk_bytes=%.0f "
               "hit_rate=%.4f stall_ms=%.4f balance_mean=%.4f balance_worst=%.4f prefetch_reads=%.2f "
               "prefetch_bytes=%.0f prefetch_used=%.2f prefetch_wasted=%.2f prefetch_wasted_bytes=%.0f read_ms=%.4f "
               "read_gbps=%.4f prefetch_cancelled=%.2f\n",
               runs * per, d.expert_uses * per, d.expert_hits * per, reads * per, read_bytes * per,
               d.expert_bytes[int(endor::Tier::Disk)] * per, hit, d.expert_stall_s * 1e3 * per,
               by_layer.empty() ? 0 : sum / double(by_layer.size()), worst, d.expert_prefetch_reads * per,
               d.expert_prefetch_bytes * per, d.expert_prefetch_used * per, d.expert_prefetch_wasted * per,
               d.expert_prefetch_wasted_bytes * per, d.expert_disk.busy_s * 1e3 * per,
               d.expert_disk.busy_s > 0 ? double(d.expert_disk.bytes) / d.expert_disk.busy_s / 1e9 : 0.0,
               d.expert_prefetch_cancelled * per);
}

// The --stats offload table: placement, then per decode token the bytes moved per tier, copy and
// disk-read time with achieved bandwidth, compute and stall time. The last line
// ("offload-summary: key=value ...") is for scripts (bench/offload).
// `batch_extra` (throughput mode): appended to the summary line; steps are then batched steps.
void print_offload_stats(const Offload& o, const endor::OffloadStats& d, size_t steps, double decode_ms,
                         const std::string& batch_extra = "") {
  const double per = steps > 0 ? 1.0 / double(steps) : 1.0;
  const char* unit = steps == 0 ? "in all (no decode step)"
                                : batch_extra.empty() ? "per decode token" : "per batched step (one pass over the blocks)";
  const std::string device = o.weights ? o.weights->device() : "cpu";
  std::fprintf(stderr, "offload: device %s, prefetch %u, disk reads: %s\n", device.c_str(),
               o.placement.n_slots ? o.placement.n_slots - 1 : 0,
               o.weights ? o.weights->disk_path().c_str() : "none (every group read in place from the mapped file)");
  std::fprintf(stderr, "%s", endor::describe_placement(o.placement).c_str());
  std::string no_cufile;
  if (o.placement.tier_groups[int(endor::Tier::Disk)] > 0 && !endor::cufile_available(&no_cufile))
    std::fprintf(stderr, "  cuFile: not used: %s\n", no_cufile.c_str());
  const uint64_t cpu_b = d.bytes[int(endor::Tier::Cpu)], disk_b = d.bytes[int(endor::Tier::Disk)];
  const double copy_gbps = d.copy_s > 0 ? double(d.copy_bytes) / d.copy_s / 1e9 : 0;
  const double disk_gbps = d.disk.busy_s > 0 ? double(d.disk.bytes) / d.disk.busy_s / 1e9 : 0;
  std::fprintf(stderr, "%s (%zu steps, %.3f ms each):\n", unit, steps, decode_ms * per);
  std::fprintf(stderr, "  moved from cpu tier:  %s in %.1f fills\n", endor::format_bytes(uint64_t(cpu_b * per)).c_str(),
               d.fills[int(endor::Tier::Cpu)] * per);
  std::fprintf(stderr, "  moved from disk tier: %s in %.1f fills\n", endor::format_bytes(uint64_t(disk_b * per)).c_str(),
               d.fills[int(endor::Tier::Disk)] * per);
  std::fprintf(stderr, "  copies into slots: %.3f ms, %.2f GB/s achieved (%s)\n", d.copy_s * 1e3 * per, copy_gbps,
               device == "cuda" ? "host to device" : "host memcpy");
  std::fprintf(stderr, "  disk reads: %.3f ms in read calls, %.2f GB/s achieved\n", d.disk.busy_s * 1e3 * per, disk_gbps);
  std::fprintf(stderr, "  blocks: %.1f computed, compute %.3f ms, stall %.3f ms (waiting for weights), host waited "
               "for disk %.3f ms\n", d.blocks * per, d.compute_s * 1e3 * per, d.stall_s * 1e3 * per,
               d.host_wait_s * 1e3 * per);
  print_expert_stats(o, d, per);
  const endor::Placement& p = o.placement;
  std::fprintf(stderr,
               "offload-summary: device=%s steps=%zu decode_ms_per_token=%.4f moved_cpu_bytes=%.0f "
               "moved_disk_bytes=%.0f copy_ms=%.4f h2d_gbps=%.3f disk_read_ms=%.4f disk_gbps=%.3f compute_ms=%.4f "
               "stall_ms=%.4f host_wait_ms=%.4f gpu_groups=%u cpu_groups=%u disk_groups=%u gpu_bytes=%llu "
               "cpu_bytes=%llu disk_bytes=%llu disk_direct=%d%s\n",
               device.c_str(), steps, decode_ms * per, cpu_b * per, disk_b * per, d.copy_s * 1e3 * per, copy_gbps,
               d.disk.busy_s * 1e3 * per, disk_gbps, d.compute_s * 1e3 * per, d.stall_s * 1e3 * per,
               d.host_wait_s * 1e3 * per, p.tier_groups[0], p.tier_groups[1], p.tier_groups[2],
               static_cast<unsigned long long>(p.tier_bytes[0]), static_cast<unsigned long long>(p.tier_bytes[1]),
               static_cast<unsigned long long>(p.tier_bytes[2]),
               o.weights && o.weights->disk_path().rfind("O_DIRECT", 0) == 0 ? 1 : 0, batch_extra.c_str());
}

// One group's Linears (ms, at n_tokens) and bytes, averaged over groups `pick` selects, spread over
// the model (every k-th) and timed together as one pass, as a decode streams them: each group's
// weights come from memory, not from a cache that the same group's previous pass filled. Timed one
// group at a time, an MoE expert (a few MB: the 2 MB L2 of the bench VM's cores) ran from cache:
// --plan took 0.09-0.12 ms for an int4k expert of the Qwen3-30B-A3B shape where a decode spent
// about 0.2, and predicted 1.2-1.4x the measured tokens/s in RAM. On the CPU the groups together
// exceed twice the last-level cache (when the model has that many); a device backend holds them
// all at once, so there at most 128 MiB (and at least one group).
struct GroupTiming {
  double ms = 0;
  uint64_t bytes = 0;
};
uint64_t timed_bytes(endor::Backend& backend) {
  uint64_t bytes = uint64_t(128) << 20;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  const long llc = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (!endor::is_cuda_device(backend) && llc > 0) bytes = std::max(bytes, 2 * uint64_t(llc));
#else
  (void)backend;
#endif
  return bytes;
}
template <typename Pick>
GroupTiming time_groups(const endor::ContainerReader& container, endor::Backend& backend,
                        const std::vector<endor::GroupDemand>& demands, size_t n_tokens, Pick&& pick) {
  const endor::Manifest& m = container.manifest();
  const uint64_t budget = timed_bytes(backend);
  std::vector<size_t> all;
  uint64_t all_bytes = 0;
  for (size_t g = 0; g < demands.size(); ++g)
    if (pick(demands[g])) all.push_back(g), all_bytes += m.groups[g].size;
  if (all.empty()) return {};
  const size_t stride = size_t(std::max<uint64_t>(1, all_bytes / budget));
  std::vector<uint32_t> tensors;
  GroupTiming t;
  size_t n = 0;
  for (size_t i = 0; i < all.size(); i += stride, ++n) {
    const auto& group = m.groups[all[i]];
    if (n > 0 && t.bytes + group.size > budget) break;
    tensors.insert(tensors.end(), group.tensors.begin(), group.tensors.end());
    t.bytes += group.size;
  }
  t.ms = endor::time_linears(container, backend, tensors, n_tokens, 2) / double(n);
  t.bytes /= n;
  return t;
}

// --plan: measures the disk and copy bandwidths and the kernel times of this container at this
// batch, and prints the cost model's per-step and per-token prediction for the placement.
endor::CostPrediction plan_run(const endor::ContainerReader& container, endor::Backend& backend, const Offload& o,
                               uint32_t batch, bool every_core) {
  const endor::Manifest& m = container.manifest();
  const std::vector<endor::GroupDemand> demands = endor::group_demands(m);
  endor::CostInputs in;
  in.batch = batch;
  std::string disk_mode = "no disk tier";
  uint64_t max_disk = 0;
  for (size_t g = 0; g < demands.size(); ++g)
    if (o.placement.tiers[g] == endor::Tier::Disk && demands[g].loaded) max_disk = std::max(max_disk, m.groups[g].size);
  for (size_t g = 0; g < demands.size(); ++g) {
    if (o.placement.tiers[g] != endor::Tier::Disk || !demands[g].loaded) continue;
    // Reads of whole groups, as the streaming does: three of them and at least 256 MiB (experts are
    // a few MiB: fewer would time the first request's latency), or to the end of the file.
    const uint64_t offset = m.groups[g].offset;
    const uint64_t bytes = std::min<uint64_t>(std::max<uint64_t>(3 * max_disk, uint64_t(256) << 20),
                                              container.file_bytes() - offset);
    const endor::DiskProbe probe = endor::probe_disk_read(container.path(), offset, bytes, max_disk);
    in.disk_gbps = probe.gbps;
    disk_mode = probe.mode;
    break;
  }
  // MoE: experts on disk are read a few MB at a time, scattered over the file, after each router: their
  // rate is probed apart, on a spread sample of them (up to 64, 128 MiB), all queued at once.
  std::vector<std::pair<uint64_t, uint64_t>> expert_ranges;
  for (size_t g = 0; g < demands.size(); ++g)
    if (o.placement.tiers[g] == endor::Tier::Disk && demands[g].loaded && demands[g].expert)
      expert_ranges.emplace_back(m.groups[g].offset, m.groups[g].size);
  if (!expert_ranges.empty()) {
    std::vector<std::pair<uint64_t, uint64_t>> sample;
    uint64_t sampled = 0;
    const size_t n = expert_ranges.size(), stride = n % 37 == 0 ? 1 : 37;  // every 37th, wrapping: spread
    for (size_t i = 0, j = 0; i < n && sample.size() < 64 && sampled < (uint64_t(128) << 20); ++i, j = (j + stride) % n) {
      sample.push_back(expert_ranges[j]);
      sampled += expert_ranges[j].second;
    }
    in.expert_disk_gbps = endor::probe_disk_ranges(container.path(), sample).gbps;
  }
  in.copy_gbps = endor::cpu::measure_copy_bandwidth_gbps(size_t(256) << 20, 1);  // the engine copies on one thread
  {
    const GroupTiming t = time_groups(container, backend, demands, batch, [](const endor::GroupDemand& d) {
      return d.streamable && d.loaded;
    });
    in.block_ms = t.ms;
    in.block_bytes = t.bytes;
  }
  // MoE: one expert's Linears at the tokens an expert gets per step (cost_model.cpp: uniform routing).
  const endor::ModelConfig config = endor::parse_model_config(m.config, container.path());
  in.n_experts = config.n_experts;
  in.top_k = config.top_k;
  // Prefetch acts where the next block's router is in memory (its dense group not streamed).
  bool can_prefetch = true;
  for (size_t g = 0; g < demands.size(); ++g)
    if (demands[g].streamable && demands[g].loaded && o.placement.tiers[g] == endor::Tier::Disk) can_prefetch = false;
  in.expert_prefetch = o.expert_prefetch && can_prefetch;
  in.expert_reads_share_cpu = every_core && !endor::is_cuda_device(backend);
  if (in.n_experts > 0)
    in.expert_ms = time_groups(container, backend, demands, endor::expert_tokens_per_run(in.n_experts, in.top_k, batch),
                               [](const endor::GroupDemand& d) { return d.expert && d.loaded; }).ms;
  // The head's Linear: lm_head, else the token embedding it is tied to (the model registry's names).
  const endor::ModelTensors specs(config);
  for (endor::Module head : {endor::Module::LmHead, endor::Module::TokenEmbed}) {
    for (uint32_t t = 0; t < m.tensors.size(); ++t) {
      if (m.tensors[t].name != specs.get(head).name) continue;
      in.head_ms = endor::time_linears(container, backend, {t}, batch, 2);
      break;
    }
    if (in.head_ms > 0) break;
  }
  const endor::CostPrediction p = endor::predict_step(o.placement, demands, in);
  endor::CostInputs other = in;  // the other --expert-prefetch setting, for comparison
  other.expert_prefetch = can_prefetch && !in.expert_prefetch;
  const endor::CostPrediction alt = endor::predict_step(o.placement, demands, other);
  std::fprintf(stderr, "plan: batch %u; measured: disk %.3f GB/s (%s), host copy %.2f GB/s, one block's Linears %.3f ms "
               "(%s), lm_head %.3f ms\n", batch, in.disk_gbps, disk_mode.c_str(), in.copy_gbps, in.block_ms,
               endor::format_bytes(in.block_bytes).c_str(), in.head_ms);
  std::fprintf(stderr, "plan: per step: disk reads %.2f ms (%s) | copies %.2f + block compute %.2f + head %.2f ms -> "
               "%.2f ms (%s-bound); predicted %.3f ms per token\n", p.read_ms, endor::format_bytes(p.disk_bytes).c_str(),
               p.copy_ms, p.compute_ms, p.head_ms, p.step_ms, p.bound, p.token_ms);
  if (in.n_experts > 0)
    std::fprintf(stderr, "plan: experts per step (uniform routing, top-%u of %u): %.1f runs, %.1f of them on disk, cache "
                 "hit rate %.1f %% (LRU), %.1f reads (%.2f ms) | one expert %.3f ms, compute %.2f ms -> %.2f ms after "
                 "the routers (in the step above)\n", in.top_k, in.n_experts, p.expert_runs, p.expert_disk_runs,
                 100 * p.expert_hit_rate, p.expert_reads, p.expert_read_ms, in.expert_ms, p.expert_compute_ms, p.expert_ms);
  if (in.n_experts > 0 && p.expert_wasted_reads > 0)
    std::fprintf(stderr, "plan: expert prefetch: later blocks' reads queued behind the previous block's (%.0f %% guessed "
                 "right, assumed), %.1f wrong guesses read as well (in the reads above); experts read at %.3f GB/s "
                 "(scattered expert-sized reads)\n", 100 * in.expert_prefetch_accuracy, p.expert_wasted_reads,
                 in.expert_disk_gbps);
  if (in.n_experts > 0 && alt.token_ms != p.token_ms)
    std::fprintf(stderr, "plan: with --expert-prefetch %s: predicted %.3f ms per token (%.1f expert reads a step)\n",
                 other.expert_prefetch ? "on" : "off", alt.token_ms, alt.expert_reads);
  std::fprintf(stderr, "plan-summary: batch=%u probe_disk_gbps=%.4f copy_gbps=%.3f block_ms=%.4f head_ms=%.4f read_ms=%.4f "
               "compute_lane_ms=%.4f predicted_step_ms=%.4f predicted_ms_per_token=%.4f bound=%s expert_ms=%.4f "
               "expert_runs=%.3f expert_reads=%.3f expert_hit_rate=%.4f expert_step_ms=%.4f "
               "predicted_disk_bytes_per_token=%.0f expert_disk_gbps=%.4f expert_prefetch=%d "
               "expert_wasted_reads=%.3f\n", batch, in.disk_gbps,
               in.copy_gbps, in.block_ms, in.head_ms, p.read_ms, p.copy_ms + p.compute_ms + p.head_ms, p.step_ms,
               p.token_ms, p.bound, in.expert_ms, p.expert_runs, p.expert_reads, p.expert_hit_rate, p.expert_ms,
               double(p.disk_bytes) / p.batch, in.expert_disk_gbps, in.expert_prefetch ? 1 : 0, p.expert_wasted_reads);
  return p;
}

void print_plan_vs_measured(const std::optional<endor::CostPrediction>& plan, double measured_step_ms,
                            double measured_token_ms) {
  if (!plan) return;
  std::fprintf(stderr, "plan-vs-measured: predicted_step_ms=%.4f measured_step_ms=%.4f predicted_ms_per_token=%.4f "
               "measured_ms_per_token=%.4f ratio=%.4f\n", plan->step_ms, measured_step_ms, plan->token_ms,
               measured_token_ms, plan->step_ms > 0 ? measured_step_ms / plan->step_ms : 0.0);
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw endor::Error(path + ": cannot open (" + std::strerror(errno) + ")");
  if (std::filesystem::is_directory(path)) throw endor::Error(path + ": is a directory, not a text file");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw endor::Error(path + ": read failed");
  return s.str();
}

// Writes bytes to stdout now (generated text is streamed as it comes).
void emit(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// The perplexity convention of docs/algorithms.md, "Perplexity", over a whole text file: tokenized once (the
// tokenizer's post-processor puts the BOS first when it has one), non-overlapping windows of
// `ctx` tokens, tail dropped. Progress (windows done / total, tokens/s) goes to stderr; the last
// line on stdout is "perplexity: VALUE".
void run_perplexity(endor::Model& model, const endor::Tokenizer& tokenizer, const std::string& text_path,
                    size_t ctx) {
  const std::string text = read_file_bytes(text_path);
  const std::vector<int32_t> ids = tokenizer.encode(text, true);
  if (ids.size() < ctx)
    throw endor::Error(text_path + ": " + std::to_string(ids.size()) +
                       " tokens are fewer than one window of " + std::to_string(ctx) +
                       "; use a smaller --ctx or a longer text");
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  Clock::time_point last_report = t0;
  const auto progress = [&](size_t done, size_t total) {
    const Clock::time_point now = Clock::now();
    // On a terminal one line is rewritten per window; into a file (logs, tests) a line per ~2 s.
    if (!tty && done < total && now - last_report < std::chrono::seconds(2)) return;
    last_report = now;
    const double s = std::chrono::duration<double>(now - t0).count();
    std::fprintf(stderr, "%sperplexity: window %zu/%zu, %.0f tokens/s%s", tty ? "\r" : "", done, total,
                 s > 0 ? done * ctx / s : 0.0, tty && done < total ? "" : "\n");
    std::fflush(stderr);
  };
  const endor::PerplexityResult r = endor::perplexity(model, ids, ctx, progress);
  std::printf("text: %s, %zu tokens%s\n", text_path.c_str(), ids.size(),
              tokenizer.adds_bos() ? " (one BOS first)" : "");
  std::printf("windows: %zu of %zu tokens (tail of %zu tokens dropped)\n", r.n_windows, r.window,
              ids.size() - r.n_windows * r.window);
  std::printf("mean NLL: %.6f nats\n", r.mean_nll);
  std::printf("perplexity: %.6f\n", r.perplexity);
}

// The prompts of --prompts: one per non-empty line (a final line without a newline counts; "\r\n"
// line ends are accepted). Throws naming the file when it cannot be read or holds no prompt.
std::vector<std::string> read_prompt_lines(const std::string& path) {
  const std::string text = read_file_bytes(path);
  std::vector<std::string> prompts;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) prompts.push_back(std::move(line));
    begin = end + 1;
  }
  if (prompts.empty()) throw endor::Error(path + ": no prompts (the file has no non-empty line)");
  return prompts;
}

// The text of `generated` following `prompt` (decoded in context, special tokens and a final EOS
// left out), as the streaming mode prints it.
std::string continuation(const endor::Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                         const std::vector<int32_t>& generated, const std::vector<int32_t>& eos, bool stop_at_eos) {
  endor::StreamingDecoder decoder(tokenizer, /*skip_special_tokens=*/true);
  decoder.follow(prompt);
  std::string text;
  for (int32_t id : generated) {
    if (stop_at_eos && std::find(eos.begin(), eos.end(), id) != eos.end()) continue;
    text += decoder.push(id);
  }
  return text + decoder.flush();
}

// Throughput mode (--prompts): every prompt generated with up to `batch` sequences per pass over
// the blocks; results printed in prompt order as soon as every earlier prompt is done.
struct BatchRun {
  std::vector<std::string> texts;             // the prompts as given (text mode)
  std::vector<std::vector<int32_t>> prompts;  // their ids
  size_t batch = 8;
  bool jsonl = false;
};

int run_batch(endor::Model& model, const endor::Tokenizer* tokenizer, const BatchRun& br,
              const endor::SamplerOptions& sampling, const endor::GenerationOptions& gen, const Offload& offload,
              const endor::Backend& backend, bool stats, uint64_t seed,
              const std::optional<endor::CostPrediction>& plan) {
  endor::BatchGenerationOptions options;
  options.batch = br.batch;
  options.max_new_tokens = gen.max_new_tokens;
  options.stop_at_eos = gen.stop_at_eos;
  const std::vector<int32_t>& eos = model.config().eos_token_ids;
  std::vector<std::optional<std::vector<int32_t>>> done(br.prompts.size());
  size_t printed = 0;
  auto print_ready = [&]() {
    for (; printed < done.size() && done[printed]; ++printed) {
      const std::vector<int32_t>& ids = *done[printed];
      if (!tokenizer) {  // prompts given as ids: ids out
        std::string line;
        for (int32_t id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
        if (br.jsonl)
          emit(nlohmann::json({{"prompt", br.texts[printed]}, {"ids", ids}}).dump() + "\n");
        else
          emit(line + "\n");
        continue;
      }
      const std::string text = continuation(*tokenizer, br.prompts[printed], ids, eos, gen.stop_at_eos);
      if (br.jsonl) {
        // prompt_ids: the prompt as the model read it (with --chat, rendered by the chat template), so
        // prompt_ids + ids is the whole conversation (scripts/chat_calibration.py)
        nlohmann::json j = {{"prompt", br.texts[printed]}, {"prompt_ids", br.prompts[printed]}, {"text", text}, {"ids", ids}};
        emit(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
      } else {
        const std::string all = br.texts[printed] + text;
        emit(all.empty() || all.back() != '\n' ? all + "\n" : all);
      }
    }
  };
  const endor::OffloadStats before = offload.weights ? offload.weights->stats() : endor::OffloadStats{};
  endor::BatchGenerationStats st;
  endor::generate_batch(model, br.prompts, sampling, options,
                        [&](size_t index, const std::vector<int32_t>& ids) {
                          done[index] = ids;
                          print_ready();
                        },
                        &st);
  if (stats) {
    std::fprintf(stderr, "backend: %s\n", backend.name().c_str());
    std::fprintf(stderr, "seed: %llu (prompt i samples with seed + i)\n", static_cast<unsigned long long>(seed));
    std::fprintf(stderr,
                 "batch: %zu prompts (%zu prompt tokens), up to %zu together (%zu at most), %zu steps; generated %zu "
                 "tokens in %.2f ms (%.2f tokens/s, prefill included); %zu decode-only steps, %.2f ms each\n",
                 st.n_prompts, st.n_prompt_tokens, br.batch, st.max_active, st.n_steps, st.n_generated, st.total_ms,
                 st.generated_tokens_per_s(), st.n_decode_steps, st.n_decode_steps ? st.decode_ms / st.n_decode_steps : 0.0);
    endor::OffloadStats d;
    if (offload.weights) {
      offload.weights->synchronize();
      d = offload.weights->stats() - before;
    }
    char extra[128];
    std::snprintf(extra, sizeof extra, " batch=%zu generated_tokens=%zu generated_tokens_per_s=%.4f", br.batch,
                  st.n_generated, st.generated_tokens_per_s());
    print_offload_stats(offload, d, st.n_steps, st.total_ms, extra);
    // The plan models a decode step: compared with the steps no prompt joined.
    if (plan && st.n_decode_steps == 0) std::fprintf(stderr, "plan-vs-measured: no decode-only step to compare\n");
    if (st.n_decode_steps > 0)
      print_plan_vs_measured(plan, st.decode_ms / st.n_decode_steps,
                             st.decode_ms / st.n_decode_steps / std::max<size_t>(1, std::min(br.batch, st.n_prompts)));
  }
  return 0;
}

// endor-infer's modes. The command line selects exactly one (select_mode); run() opens what every mode
// shares, always in the same order (the container, its tokenizer, the backend, the placement sized for the
// mode's KV cache, the model), and dispatch() hands it to the mode's function, as endor-pack's main() hands
// argv to its subcommands. Keeping that order in one place is what keeps the errors' order stable: a
// usage error before any file is read, a refused tokenizer before the weights are placed, a refused
// prompt before anything is printed.
enum class Mode {
  Generate,    // -p TEXT or --ids "1 2 3": one prompt, its continuation streamed out
  Chat,        // --chat (turns from stdin, or the one turn -p TEXT): a conversation through the chat template
  Batch,       // --prompts FILE (with --chat: every line a one-turn chat): throughput mode
  Perplexity,  // --perplexity TEXT_FILE
};

cxxopts::Options infer_options() {
  cxxopts::Options options("endor-infer",
                           "Run a .endor model: stream generated text, or measure perplexity.\n"
                           "  endor-infer tokenize FILE     text on stdin -> ids on stdout\n"
                           "  endor-infer detokenize FILE   ids on stdin -> text on stdout");
  options.positional_help("FILE");
  options.add_options()
    ("file", "the .endor container", cxxopts::value<std::string>())
    ("p,prompt", "prompt text (encoded with the container's tokenizer.json; output is text)",
     cxxopts::value<std::string>())
    ("ids", "prompt as token ids, e.g. \"1 2 3\" (output prints as ids)", cxxopts::value<std::string>())
    ("n,n-tokens", "tokens to generate", cxxopts::value<size_t>()->default_value("64"))
    ("ignore-eos", "keep generating after an end-of-sequence token")
    ("chat", "chat through the container's chat template: user turns from stdin, one per line (or the one "
             "turn -p TEXT); each answer streams out and joins the history. The conversation holds --ctx tokens "
             "(default: 4096 or the model's context if smaller). With --prompts: every line is its own one-turn "
             "chat, answered in throughput mode")
    ("dump-prompt", "with --chat: print each turn's rendered prompt and its token ids to stderr")
    ("prompts", "throughput mode: generate for every non-empty line of this text file (output in its order; "
                "token ids \"1 2 3\" per line when the container has no tokenizer)",
     cxxopts::value<std::string>())
    ("batch", "throughput mode: sequences generated together, each block read once per step for all of them",
     cxxopts::value<size_t>()->default_value("8"))
    ("jsonl", "throughput mode: one JSON object per prompt {\"prompt\", \"prompt_ids\", \"text\", \"ids\"} instead of text")
    ("perplexity", "measure perplexity on this text file instead of generating",
     cxxopts::value<std::string>())
    ("temperature", "sampling temperature; 0 = greedy (default: the container's generation_config, "
                    "else greedy)", cxxopts::value<float>())
    ("top-k", "keep the K most likely tokens (0 = off)", cxxopts::value<uint32_t>())
    ("top-p", "keep the smallest set of tokens with probability mass >= P (1 = off)",
     cxxopts::value<float>())
    ("seed", "random seed (default: random)", cxxopts::value<uint64_t>())
    ("plan", "before running, measure disk/copy bandwidth and kernel times and print the predicted time per "
             "step and per token of this placement and batch (with --stats: predicted vs measured)")
    ("dump-logits", "write the prompt's logits [tokens, vocab] as float32 .npy",
     cxxopts::value<std::string>())
    ("stats", "print prefill/decode speed, time per layer, bytes read per token and the offload table "
              "(placement, bytes moved, bandwidth, compute and stall time per token) to stderr")
    ("h,help", "show this help");
  endor::cli::add_ctx_option(options, "perplexity window, or --chat conversation length, in tokens (default: the "
                                      "model's max_position_embeddings; for --chat 4096 if smaller)");
  endor::cli::add_placement_options(options);
  options.parse_positional({"file"});
  return options;
}

// The command line's mode. Throws UsageError, in this order, when it gives several inputs, none, or an
// option outside its mode.
Mode select_mode(const cxxopts::ParseResult& args) {
  const bool measure = args.count("perplexity") > 0;
  const bool batched = args.count("prompts") > 0;
  const bool chat = args.count("chat") > 0;
  const int n_inputs = int(args.count("prompt") > 0) + int(args.count("ids") > 0) + int(measure) + int(batched);
  if (n_inputs > 1) throw UsageError("give one of -p, --ids, --prompts and --perplexity");
  if (chat && (args.count("ids") || measure))
    throw UsageError("--chat takes its turns from stdin, -p or --prompts, not --ids or --perplexity");
  if (args.count("dump-prompt") && !chat) throw UsageError("--dump-prompt goes with --chat");
  if (n_inputs == 0 && !chat)
    throw UsageError("no prompt given (-p TEXT, --ids \"1 2 3\", --prompts FILE or --perplexity TEXT_FILE)");
  if (!batched && (args.count("batch") || args.count("jsonl"))) throw UsageError("--batch and --jsonl go with --prompts");
  if (batched && args["batch"].as<size_t>() == 0) throw UsageError("--batch must be at least 1");
  if (batched && args.count("dump-logits")) throw UsageError("--dump-logits goes with -p or --ids, not --prompts");
  if (args.count("ctx") && !measure && !chat) throw UsageError("--ctx goes with --perplexity or --chat");
  if (measure) return Mode::Perplexity;
  if (batched) return Mode::Batch;
  return chat ? Mode::Chat : Mode::Generate;
}

// The command line, checked and read before the container is opened.
struct Request {
  Mode mode = Mode::Generate;
  std::string file;                        // FILE
  bool chat = false;                       // --chat: Mode::Chat, or one-turn chats in Mode::Batch
  std::optional<size_t> ctx;               // --ctx
  bool ids = false;                        // --ids given: ids in, ids out, no tokenizer needed
  std::vector<int32_t> prompt;             // --ids, or -p TEXT once encoded (Mode::Generate)
  std::optional<std::string> prompt_text;  // -p TEXT
  std::string prompts_path;                // --prompts
  BatchRun br;                             // Mode::Batch: the lines of --prompts, --batch, --jsonl
  std::string perplexity_path;             // --perplexity
  std::string dump_logits;                 // --dump-logits ("": none)
  size_t n_new = 0;                        // --n-tokens
  bool dump_prompt = false, stats = false;
};

Request read_request(const cxxopts::ParseResult& args) {
  Request r;
  r.mode = select_mode(args);
  r.ctx = endor::cli::ctx_option(args);
  endor::cli::check_placement_options(args);
  r.ids = args.count("ids") > 0;
  if (r.ids) r.prompt = parse_ids(args["ids"].as<std::string>());
  if (r.mode == Mode::Batch) {
    r.prompts_path = args["prompts"].as<std::string>();
    r.br.texts = read_prompt_lines(r.prompts_path);  // before the model is opened
    r.br.batch = args["batch"].as<size_t>();
    r.br.jsonl = args.count("jsonl") > 0;
  }
  r.file = args["file"].as<std::string>();
  r.chat = args.count("chat") > 0;
  if (args.count("prompt")) r.prompt_text = args["prompt"].as<std::string>();
  if (r.mode == Mode::Perplexity) r.perplexity_path = args["perplexity"].as<std::string>();
  if (args.count("dump-logits")) r.dump_logits = args["dump-logits"].as<std::string>();
  r.n_new = args["n-tokens"].as<size_t>();
  r.dump_prompt = args.count("dump-prompt") > 0;
  r.stats = args.count("stats") > 0;
  return r;
}

// What the modes share, filled in run()'s order. Members that refer to others (the model to the container,
// the backend and the streaming weights) are declared after them, so they are destroyed first.
struct Session {
  std::unique_ptr<endor::ContainerReader> container;
  size_t context = 0;     // the model's context length (max_position_embeddings)
  size_t ctx_tokens = 0;  // the perplexity window, or the tokens a conversation holds
  std::optional<endor::Tokenizer> tokenizer;  // absent only for ids in and out
  std::optional<endor::cli::ChatSetup> chat_setup;
  endor::cli::Compute compute;
  Offload offload;
  std::optional<endor::CostPrediction> plan;  // --plan
  std::unique_ptr<endor::Model> model;
};

// Text in or out needs the tokenizer; checked before the weights are placed. Without one, --prompts
// lines must be token ids ("1 2 3"), and the output is ids.
void open_tokenizer(Session& s, const Request& r) {
  if (r.ids) return;
  s.tokenizer = endor::cli::container_tokenizer(*s.container);
  if (s.tokenizer) return;
  if (r.mode != Mode::Batch)
    throw endor::Error(r.file + ": the container holds no tokenizer.json, so text cannot be encoded; "
                       "give token ids with --ids \"1 2 3\"");
  for (const std::string& t : r.br.texts) {
    try {
      parse_ids(t);
    } catch (const UsageError&) {
      throw endor::Error(r.prompts_path + ": \"" + t + "\" is not a line of token ids, and " + r.file +
                         " holds no tokenizer.json to encode text");
    }
  }
}

// Mode::Generate: -p TEXT encoded, and the prompt refused when empty or longer than the context, before
// anything is printed (a refused prompt must not be half echoed).
void prepare_prompt(const Session& s, Request& r) {
  if (s.tokenizer) r.prompt = s.tokenizer->encode(r.prompt_text.value_or(""), true);
  if (r.prompt.empty()) throw endor::Error(r.file + ": the prompt has no tokens");
  if (r.prompt.size() > s.context)
    throw endor::Error(r.file + ": the prompt has " + std::to_string(r.prompt.size()) +
                       " tokens, more than the model's context length " + std::to_string(s.context) +
                       " (max_position_embeddings)");
}

// The fixed needs the placement must hold besides the weights (setup_offload): the KV cache rows of every
// sequence held at once, and the rows of the largest forward call.
struct KvNeeds {
  size_t kv_capacity = 0;
  size_t max_tokens = 0;
};

// Mode::Batch: every prompt encoded (a --chat line as one user turn through the template, tokenized as the
// chat does, without added specials); KV caches for the `batch` longest sequences at once, activations for
// every prompt of one step.
KvNeeds batch_kv_needs(const Session& s, Request& r) {
  const size_t n_new = std::max<size_t>(r.n_new, 1);
  std::vector<std::pair<size_t, size_t>> rows;  // per prompt: (KV rows, prefill rows), the KV rows at most ctx
  for (const std::string& t : r.br.texts) {
    if (r.chat) {
      const std::string text = s.chat_setup->chat_template.render_chat({{"user", t}}, true, s.chat_setup->bos_token,
                                                                       s.chat_setup->eos_token);
      r.br.prompts.push_back(s.tokenizer->encode(text, /*add_special_tokens=*/false));
    } else {
      r.br.prompts.push_back(s.tokenizer ? s.tokenizer->encode(t, true) : parse_ids(t));
    }
    const size_t prompt = r.br.prompts.back().size();
    const size_t kv = endor::kv_capacity_for(prompt, n_new, s.context);
    rows.emplace_back(kv, std::min(prompt, kv));
  }
  std::sort(rows.rbegin(), rows.rend());
  KvNeeds needs;
  for (size_t i = 0; i < std::min(r.br.batch, rows.size()); ++i) {
    needs.kv_capacity += rows[i].first;
    needs.max_tokens += rows[i].second;  // each prompt's prefill rows (was kv - n_new + 1: wrapped past ctx)
  }
  return needs;
}

// The mode's KV needs. A perplexity window and a conversation (its cache allocated whole up front) hold
// ctx_tokens; one prompt holds itself and the tokens generated after it.
KvNeeds kv_needs(const Session& s, Request& r) {
  if (r.mode == Mode::Batch) return batch_kv_needs(s, r);
  if (r.mode == Mode::Perplexity || r.mode == Mode::Chat) return {std::min(s.context, s.ctx_tokens), s.ctx_tokens};
  return {endor::kv_capacity_for(r.prompt.size(), r.n_new, s.context), r.prompt.size()};
}

// Opens everything the mode runs on, in the order the errors are reported in (see Mode).
void open_session(Session& s, Request& r, const cxxopts::ParseResult& args) {
  s.container = endor::ContainerReader::open(r.file);
  s.context = endor::parse_model_config(s.container->manifest().config, r.file).max_positions;
  if (r.ctx) endor::cli::check_ctx_fits(*r.ctx, s.context);
  open_tokenizer(s, r);
  if (r.chat) s.chat_setup = endor::cli::load_chat_setup(*s.container, *s.tokenizer);
  s.compute = endor::cli::open_compute(args);
  // A chat's KV cache is allocated whole up front: 4096 tokens unless --ctx asks for more.
  s.ctx_tokens = r.ctx.value_or(r.mode == Mode::Chat ? std::min<size_t>(s.context, 4096) : s.context);
  if (r.mode == Mode::Generate) prepare_prompt(s, r);
  const KvNeeds needs = kv_needs(s, r);
  endor::Backend& backend = *s.compute.backend;
  s.offload = setup_offload(*s.container, backend, args, needs.kv_capacity, needs.max_tokens, s.compute.kv_dtype);
  if (args.count("plan")) {
    // The compute threads take every core: 0 (the default, every core) or at least the machine's.
    const int threads = endor::cli::threads_option(args);
    const bool every_core = threads == 0 || unsigned(threads) >= std::max(1u, std::thread::hardware_concurrency());
    s.plan = plan_run(*s.container, backend, s.offload, r.mode == Mode::Batch ? uint32_t(r.br.batch) : 1u, every_core);
  }
  s.model = endor::load_model(*s.container, backend, s.offload.weights.get());
  s.model->set_kv_dtype(s.compute.kv_dtype);
}

// How the generating modes sample: the seed (random unless --seed), the container's generation_config
// overridden by --temperature/--top-k/--top-p, and when to stop.
struct Generation {
  uint64_t seed = 0;
  endor::SamplerOptions sampling;
  endor::GenerationOptions gen;
};

Generation read_generation(const cxxopts::ParseResult& args, const Session& s, const Request& r) {
  Generation g;
  g.seed = args.count("seed") ? args["seed"].as<uint64_t>() : std::random_device{}();
  g.sampling = endor::default_sampler_options(s.container->manifest().generation_config, g.seed);
  if (args.count("temperature")) g.sampling.temperature = args["temperature"].as<float>();
  if (args.count("top-k")) g.sampling.top_k = args["top-k"].as<uint32_t>();
  if (args.count("top-p")) g.sampling.top_p = args["top-p"].as<float>();
  g.gen.max_new_tokens = r.n_new;
  g.gen.stop_at_eos = args.count("ignore-eos") == 0;
  return g;
}

int run_perplexity_mode(Session& s, const Request& r) {
  run_perplexity(*s.model, *s.tokenizer, r.perplexity_path, s.ctx_tokens);
  return 0;
}

int run_batch_mode(Session& s, const Request& r, const Generation& g) {
  s.model->set_profiling(false);
  return run_batch(*s.model, s.tokenizer ? &*s.tokenizer : nullptr, r.br, g.sampling, g.gen, s.offload,
                   *s.compute.backend, r.stats, g.seed, s.plan);
}

int run_chat_mode(Session& s, const Request& r, endor::Sampler& sampler, const Generation& g) {
  endor::cli::ChatOptions chat_options;
  chat_options.prompt = r.prompt_text;
  chat_options.context = s.ctx_tokens;
  chat_options.dump_prompt = r.dump_prompt;
  chat_options.stats = r.stats;
  endor::cli::run_chat(*s.model, *s.tokenizer, *s.chat_setup, sampler, g.gen, chat_options);
  return 0;
}

// Text out: the prompt as given, then the continuation as its UTF-8 completes. The decoder is first fed the
// prompt's ids (their text discarded) so the first new token decodes in context (e.g. a SentencePiece
// leading space is kept). Special tokens (BOS, EOS) are not printed. `on_token` sees every new id first.
void stream_text(Session& s, const Request& r, endor::Sampler& sampler, const endor::GenerationOptions& gen,
                 const std::function<void()>& on_token, endor::GenerationStats* st) {
  endor::StreamingDecoder decoder(*s.tokenizer, /*skip_special_tokens=*/true);
  decoder.follow(r.prompt);
  const std::string prompt_text = r.prompt_text.value_or("");
  std::string last = prompt_text;  // what was printed last, for the final newline
  emit(prompt_text);
  const std::vector<int32_t>& eos = s.model->config().eos_token_ids;
  endor::generate(*s.model, r.prompt, sampler, gen,
                  [&](int32_t id) {
                    on_token();
                    if (gen.stop_at_eos && std::find(eos.begin(), eos.end(), id) != eos.end()) return;
                    const std::string piece = decoder.push(id);
                    if (!piece.empty()) last = piece;
                    emit(piece);
                  },
                  st);
  const std::string rest = decoder.flush();
  if (!rest.empty()) last = rest;
  emit(rest);
  if (last.empty() || last.back() != '\n') emit("\n");
}

// Ids out (the prompt was --ids): the new ids on one line, space-separated, as they come.
void stream_ids(Session& s, const Request& r, endor::Sampler& sampler, const endor::GenerationOptions& gen,
                const std::function<void()>& on_token, endor::GenerationStats* st) {
  size_t n_printed = 0;
  endor::generate(*s.model, r.prompt, sampler, gen,
                  [&](int32_t id) {
                    on_token();
                    std::printf(n_printed++ ? " %d" : "%d", id);
                    std::fflush(stdout);
                  },
                  st);
  if (n_printed) std::printf("\n");
  std::fflush(stdout);
}

int run_generate_mode(Session& s, const Request& r, endor::Sampler& sampler, Generation& g) {
  if (!r.dump_logits.empty()) {
    const std::string dump_path = r.dump_logits;
    const size_t vocab = s.model->config().vocab;
    g.gen.on_prompt_logits = [dump_path, vocab](const std::vector<float>& logits, size_t n_prompt) {
      endor::write_npy_f32(dump_path, logits.data(), n_prompt, vocab);
    };
  }
  endor::Backend& backend = *s.compute.backend;
  // Per-layer times synchronize the device after every layer; on CUDA that would stall the
  // transfers' overlap, so there the offload table's event timings (compute, stall) stand in.
  s.model->set_profiling(r.stats && !endor::is_cuda_device(backend));
  // Offload counters at the first new token (prefill done): the table reports decode steps only.
  endor::OffloadStats at_first_token;
  bool first_token = true;
  const std::function<void()> mark_token = [&]() {
    if (!first_token) return;
    first_token = false;
    if (s.offload.weights) at_first_token = s.offload.weights->stats();
  };
  endor::GenerationStats st;
  if (s.tokenizer)
    stream_text(s, r, sampler, g.gen, mark_token, &st);
  else
    stream_ids(s, r, sampler, g.gen, mark_token, &st);
  if (st.stop == endor::StopReason::Context)
    std::fprintf(stderr, "note: stopped at the context length %u (max_position_embeddings)\n",
                 s.model->config().max_positions);
  if (!r.stats) return 0;
  print_stats(backend, *s.model, st, g.seed);
  endor::OffloadStats decode;
  if (s.offload.weights) {
    s.offload.weights->synchronize();
    decode = s.offload.weights->stats() - at_first_token;
  }
  print_offload_stats(s.offload, decode, st.n_decode_steps, st.decode_ms);
  const double per = st.n_decode_steps ? st.decode_ms / st.n_decode_steps : 0;
  print_plan_vs_measured(s.plan, per, per);
  return 0;
}

// Runs the request's mode on the opened session. The sampler is made (and its options checked) for every
// mode that generates, throughput mode included.
int dispatch(Session& s, const Request& r, const cxxopts::ParseResult& args) {
  if (r.mode == Mode::Perplexity) return run_perplexity_mode(s, r);
  Generation g = read_generation(args, s, r);
  endor::Sampler sampler(g.sampling);
  switch (r.mode) {
    case Mode::Batch: return run_batch_mode(s, r, g);
    case Mode::Chat: return run_chat_mode(s, r, sampler, g);
    case Mode::Generate: return run_generate_mode(s, r, sampler, g);
    case Mode::Perplexity: break;
  }
  return 0;
}

int run(int argc, char** argv) {
  cxxopts::Options options = infer_options();
  cxxopts::ParseResult args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << "\n";
    return 0;
  }
  endor::cli::reject_unmatched(args);
  if (!args.count("file")) throw UsageError("missing FILE (a .endor container)");
  Request request = read_request(args);
  Session session;
  open_session(session, request, args);
  return dispatch(session, request, args);
}

}  // namespace

int main(int argc, char** argv) {
  endor::prefer_passive_openmp(argv);
  // Subcommands come first; anything else is the model FILE (pass a file literally named
  // "tokenize" as ./tokenize).
  const std::string first = argc > 1 ? argv[1] : "";
  if (first == "tokenize" || first == "detokenize")
    return endor::cli::run_command("endor-infer " + first, [&] {
      return first == "tokenize" ? endor::cli::run_tokenize(argc - 1, argv + 1)
                                 : endor::cli::run_detokenize(argc - 1, argv + 1);
    });
  return endor::cli::run_command("endor-infer", [&] { return run(argc, argv); });
}
