// Option parsing and output of the endor-pack subcommands; the work itself is endor_packer's.
#include "commands.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <omp.h>
#include <iostream>
#include <regex>
#include <sstream>

#include "cleanup.h"
#include "endor/cli_common.h"
#include "endor/export.h"
#include "endor/gguf.h"
#include "endor/calibrate.h"
#include "endor/compare.h"
#include "endor/inspect.h"
#include "endor/output_file.h"
#include "endor/pack.h"
#include "endor/prune.h"
#include "progress.h"

namespace endor::cli {

namespace {

// Runs a subcommand body, turning errors into one line and an exit code (endor/cli_common.h).
template <class F>
int guarded(const char* cmd, F&& body) {
  return run_command(std::string("endor-pack ") + cmd, body);
}

double parse_fraction(const std::string& text, const char* option) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    throw UsageError(std::string(option) + " must be a number, got '" + text + "'");
  return v;
}

void add_dtype_and_budget_options(cxxopts::Options& o) {
  o.add_options()
    ("dtype", "value type of unquantized tensors: f16, bf16 or f32 (default: the source's)", cxxopts::value<std::string>())
    ("gpu-mem", "GPU budget for tier planning, e.g. 16G (default: unlimited)", cxxopts::value<std::string>())
    ("cpu-mem", "host-memory budget for tier planning, e.g. 48G (default: unlimited)", cxxopts::value<std::string>());
}

void add_prune_options(cxxopts::Options& o) {
  o.add_options("Pruning")
    ("sparsity", "fraction of each pruned Linear to zero, in [0, 1); 0 keeps existing zeros", cxxopts::value<std::string>())
    ("method", "magnitude, wanda, sparsegpt, or gptq (quantization only, no pruning); default: sparsegpt for prune "
               "(calibrated on --calib, or without it on text the model generates itself), magnitude for compare",
     cxxopts::value<std::string>())
    ("pattern", "unstructured or N:M (zero N of every M consecutive inputs, e.g. 2:4)", cxxopts::value<std::string>()->default_value("unstructured"))
    ("sparsity-ramp", "wanda|sparsegpt, unstructured: block sparsity rises linearly from S-D (first block) to S+D (last), mean S", cxxopts::value<std::string>())
    ("scope", "row (the int(in*S) smallest |w| of each row) or matrix (one threshold)", cxxopts::value<std::string>()->default_value("row"))
    ("quant", "none, int8 (per row), int8g (per group, f16 scale: llama.cpp's Q8_0 grid at groups of 32, 8.5 bits a weight), int4 (per group, f16 scale and zero-code min) or int4k (per group, six-bit scale and float-min codes under f16 super-block scales: 4.5 bits a weight at groups of 32) for the pruned Linears (sparsegpt, gptq: with error compensation; magnitude, wanda: after pruning)", cxxopts::value<std::string>()->default_value("none"))
    ("quant-head", "none, int8, int8g, int4 or int4k for the token embedding and the lm_head (one matrix when tied), never pruned; int8g/int4/int4k use --group-size (default: int8 when --quant is given, else none)", cxxopts::value<std::string>())
    ("group-size", "int4/int4k/int8g group: consecutive input columns sharing a scale (and min) (default 128 for int4, 32 for int4k and int8g)", cxxopts::value<uint32_t>())
    ("int8", "regex (ECMAScript) of Linears quantized int8 instead of --quant (mixed precision, e.g. 'v_proj|down_proj')", cxxopts::value<std::string>())
    ("act-order", "sparsegpt, gptq: quantize columns in order of decreasing Hessian diagonal (GPTQ's act-order)")
    ("clip", "sparsegpt, gptq with int4/int4k: mse (search each group's range for the least Hessian-weighted error) or none ([min, max])", cxxopts::value<std::string>()->default_value("mse"))
    ("skip", "regex (ECMAScript, searched in the canonical tensor name) of Linears to leave unpruned and unquantized", cxxopts::value<std::string>())
    ("calib", "calibration text (UTF-8 file) for --method wanda|sparsegpt|gptq (default: the model generates its own, "
              "128 sequences of 128 tokens)", cxxopts::value<std::string>())
    ("calib-ids", "calibration as token ids instead of text: a file of whitespace-separated ids (e.g. chat "
                  "conversations rendered by the model's template: scripts/chat_calibration.py)", cxxopts::value<std::string>())
    ("calib-samples", "calibration windows drawn from --calib (default 128), or sequences the model generates (default 128)", cxxopts::value<uint64_t>())
    ("calib-seqlen", "tokens per calibration window (default: max_position_embeddings with --calib, else 128)", cxxopts::value<uint64_t>())
    ("seed", "seed of the calibration window sampling (std::mt19937_64)", cxxopts::value<uint64_t>()->default_value("0"))
    ("min-expert-tokens", "MoE, wanda|sparsegpt|gptq: an expert routed fewer calibration tokens is pruned by magnitude "
                          "(gptq: rounded to nearest) instead (default 128; docs/moe.md)", cxxopts::value<uint64_t>());
}

// The summary line's "(N <how>)": the method, and how many of those tensors were MoE experts' Linears
// that the fallback treated instead (too few calibration tokens).
std::string pruned_how(const PruneSpec& p, const PackSummary& s) {
  const bool gptq = p.method == PruneMethod::Gptq;
  std::string how = gptq ? "quantized by GPTQ" : p.active() ? "pruned by " + std::string(to_string(p.method)) : "pruned";
  if (s.fallback_tensors)
    how += ", " + std::to_string(s.fallback_tensors) + " of them " + (gptq ? "rounded to nearest" : "by magnitude");
  return how;
}

bool any_prune_option_given(const cxxopts::ParseResult& r) {
  for (const char* k : {"sparsity", "sparsity-ramp", "method", "pattern", "scope", "quant", "quant-head", "group-size", "skip", "calib", "calib-ids", "dtype", "int8", "act-order", "clip",
                        "calib-samples", "calib-seqlen", "seed", "min-expert-tokens"})
    if (r.count(k)) return true;
  return false;
}

// The method `prune` uses when --method is not given (bench/ACCURACY.md, "The default prune":
// SparseGPT on self-generated text against Wanda, by perplexity and pack time).
#ifdef ENDOR_PACK_CALIBRATION
constexpr PruneMethod kDefaultPruneMethod = PruneMethod::SparseGpt;
#else
constexpr PruneMethod kDefaultPruneMethod = PruneMethod::Magnitude;  // this build cannot calibrate
#endif

// --dtype (pack and export): the float type tensors are written in.
Dtype parse_dtype_option(const cxxopts::ParseResult& r) {
  const std::string d = r["dtype"].as<std::string>();
  if (const std::optional<Dtype> t = parse_dtype(d); t && is_float(*t)) return *t;
  throw UsageError("--dtype must be f16, bf16 or f32, got '" + d + "'");
}

// --quant, --quant-head: "none" or a quantized dtype, spelled as the manifest spells it (parse_dtype).
Quantization parse_quantization(const std::string& v, const char* flag) {
  if (v == "none") return std::nullopt;
  if (const std::optional<Dtype> d = parse_dtype(v); d && is_quantized(*d)) return d;
  throw UsageError(std::string("--") + flag + " must be none, int8, int8g, int4 or int4k, got '" + v + "'");
}

// --pattern, --sparsity (and the default method's fallback when nothing is pruned), gptq's
// no-pruning rule, --sparsity-ramp and --scope, in that order (the first error is the one reported).
void parse_sparsity_options(const cxxopts::ParseResult& r, PruneSpec& p, bool require_sparsity) {
  const std::string pattern = r["pattern"].as<std::string>();
  std::smatch m;
  static const std::regex kNM(R"((\d{1,4}):(\d{1,4}))");
  if (std::regex_match(pattern, m, kNM)) {
    p.n = uint32_t(std::stoul(m[1].str()));
    p.m = uint32_t(std::stoul(m[2].str()));
    if (p.n == 0 || p.n >= p.m) throw UsageError("--pattern N:M needs 0 < N < M, got " + pattern);
    if (r.count("scope")) throw UsageError("--scope applies to unstructured pruning; N:M groups are per row");
  } else if (pattern != "unstructured") {
    throw UsageError("--pattern must be unstructured or N:M (e.g. 2:4), got '" + pattern + "'");
  }
  if (r.count("sparsity")) {
    const double s = parse_fraction(r["sparsity"].as<std::string>(), "--sparsity");
    if (!(s >= 0.0 && s < 1.0)) throw UsageError("--sparsity must be in [0, 1), got " + r["sparsity"].as<std::string>());
    if (p.structured() && std::fabs(s - double(p.n) / double(p.m)) > 1e-9)
      throw UsageError("--sparsity " + r["sparsity"].as<std::string>() + " contradicts --pattern " + pattern + " (" +
                       std::to_string(double(p.n) / double(p.m)) + ")");
    if (!p.structured()) p.sparsity = s;
  } else if (require_sparsity && !p.structured() && p.method != PruneMethod::Gptq) {
    throw UsageError("prune needs --sparsity S (or --pattern N:M)");
  }
  // Nothing pruned (--sparsity 0, e.g. only --quant): the default method has nothing to do.
  if (!r.count("method") && !p.active()) {
    for (const char* k : {"calib", "calib-ids", "calib-samples", "calib-seqlen", "seed", "min-expert-tokens"})
      if (r.count(k)) throw UsageError(std::string("--") + k + " calibrates pruning; give --sparsity S, --pattern N:M or --method gptq");
    p.method = PruneMethod::Magnitude;
  }
  if (p.method == PruneMethod::Gptq && (p.structured() || p.sparsity > 0.0))
    throw UsageError("--method gptq quantizes without pruning; use --method sparsegpt to prune with GPTQ's error feedback");
  if (r.count("sparsity-ramp")) {
    const double d = parse_fraction(r["sparsity-ramp"].as<std::string>(), "--sparsity-ramp");
    if (p.method == PruneMethod::Magnitude) throw UsageError("--sparsity-ramp needs --method wanda|sparsegpt");
    if (p.structured()) throw UsageError("--sparsity-ramp applies to unstructured sparsity, not --pattern " + pattern);
    if (!(d >= 0.0 && p.sparsity - d >= 0.0 && p.sparsity + d < 1.0))
      throw UsageError("--sparsity-ramp " + r["sparsity-ramp"].as<std::string>() + " must keep every block's sparsity in [0, 1): " +
                       "S - D >= 0 and S + D < 1");
    p.sparsity_ramp = d;
  }
  const std::string scope = r["scope"].as<std::string>();
  if (scope == "row") p.scope = PruneScope::Row;
  else if (scope == "matrix") p.scope = PruneScope::Matrix;
  else throw UsageError("--scope must be row or matrix, got '" + scope + "'");

}

// --quant, --quant-head, --group-size, --int8, --act-order, --clip and --skip.
void parse_quant_options(const cxxopts::ParseResult& r, PackOptions& o) {
  const PruneSpec& p = o.prune;
  o.quant = parse_quantization(r["quant"].as<std::string>(), "quant");
  if (p.method == PruneMethod::Gptq && !o.quant)
    throw UsageError("--method gptq needs --quant int8, int8g, int4 or int4k");
  // The head follows --quant unless told: int8 per row (+0.1 % perplexity on SmolLM2, bench/ACCURACY.md)
  // halves the largest read of a small model's token, as llama.cpp's quantizers keep it at 8 bits.
  o.quant_head = r.count("quant-head") ? parse_quantization(r["quant-head"].as<std::string>(), "quant-head")
                 : o.quant             ? Quantization(Dtype::Int8)
                                       : std::nullopt;
  // Groups of 32 for int4k and int8g (Q4_K's and Q8_0's), 128 for int4, whichever of --quant and
  // --quant-head asks (--quant first).
  const auto wants_32 = [](const Quantization& q) { return q == Dtype::Int4k || q == Dtype::Int8g; };
  const bool k_grid = wants_32(o.quant) || (o.quant != Dtype::Int4 && wants_32(o.quant_head));
  o.group_size = r.count("group-size") ? r["group-size"].as<uint32_t>() : (k_grid ? 32 : kDefaultGroupSize);
  if (o.group_size == 0) throw UsageError("--group-size must be at least 1");
  if (r.count("int8")) {
    if (!o.quant) throw UsageError("--int8 chooses int8 for some Linears of --quant; give --quant");
    o.int8_regex = r["int8"].as<std::string>();
    try {
      std::regex re(o.int8_regex);
    } catch (const std::regex_error& e) {
      throw UsageError("--int8 is not a valid regex: '" + o.int8_regex + "'");
    }
  }
  const bool calibrated_quant = p.method == PruneMethod::SparseGpt || p.method == PruneMethod::Gptq;
  if (r.count("act-order")) {
    if (!calibrated_quant) throw UsageError("--act-order is for --method sparsegpt|gptq");
    if (p.structured()) throw UsageError("--act-order does not combine with --pattern N:M");
    o.act_order = true;
  }
  const std::string clip = r["clip"].as<std::string>();
  if (clip != "mse" && clip != "none") throw UsageError("--clip must be mse or none, got '" + clip + "'");
  if (r.count("clip") && !calibrated_quant) throw UsageError("--clip is for --method sparsegpt|gptq");
  o.mse_clip = clip == "mse";
  if (r.count("skip")) {
    o.skip_regex = r["skip"].as<std::string>();
    try {
      std::regex re(o.skip_regex);
    } catch (const std::regex_error& e) {
      throw UsageError("--skip is not a valid regex: '" + o.skip_regex + "'");
    }
  }
}

// Reads --dtype, budgets and (when `prune`) the pruning options into PackOptions. Without
// --method, pruning uses `default_method`.
PackOptions parse_pack_options(const cxxopts::ParseResult& r, bool prune, bool budgets, bool require_sparsity,
                               PruneMethod default_method = PruneMethod::Magnitude) {
  PackOptions o;
  o.tool_version = ENDOR_VERSION;
  if (r.count("dtype")) o.dtype = parse_dtype_option(r);
  if (budgets) {
    if (r.count("gpu-mem")) o.budget.gpu_bytes = parse_size_option(r, "gpu-mem");
    if (r.count("cpu-mem")) o.budget.cpu_bytes = parse_size_option(r, "cpu-mem");
  }
  if (!prune) return o;

  PruneSpec& p = o.prune;
  if (r.count("method")) {
    const std::string method = r["method"].as<std::string>();
    const std::optional<PruneMethod> m = parse_prune_method(method);
    if (!m) throw UsageError("--method must be magnitude, wanda, sparsegpt or gptq, got '" + method + "'");
    p.method = *m;
  } else {
    p.method = default_method;
  }
#ifndef ENDOR_PACK_CALIBRATION
  if (calibrated(p.method))
    throw Error(std::string("--method ") + to_string(p.method) +
                " needs calibration support, which this build lacks (runtime, tokenizer or LAPACK missing)");
#endif
  if (p.method == PruneMethod::Magnitude) {
    for (const char* k : {"calib", "calib-ids", "calib-samples", "calib-seqlen", "seed", "min-expert-tokens"})
      if (r.count(k))
        throw UsageError(std::string("--") + k + " is for --method wanda|sparsegpt|gptq; magnitude pruning needs no data");
  } else if (r.count("calib") && r.count("calib-ids")) {
    throw UsageError("--calib and --calib-ids both given; calibration comes from one of them");
  }

  parse_sparsity_options(r, p, require_sparsity);
  parse_quant_options(r, o);
  return o;
}

// What `prune` chose where the command line is silent, and what an explicit magnitude prune
// costs, as lines for stderr (printed before the long part starts).
std::vector<std::string> method_notes(const cxxopts::ParseResult& r, const PackOptions& o) {
  std::vector<std::string> lines;
  const PruneSpec& p = o.prune;
  if (o.command != "prune") return lines;
  if (o.quant && !r.count("quant-head"))
    lines.push_back("note: no --quant-head: the token embedding and lm_head are stored int8 (--quant-head none keeps them "
                    "as --dtype)");
  if (!p.active()) return lines;
  const std::string amount = p.structured() ? p.pattern() : std::to_string(int(std::lround(p.sparsity * 100))) + " %";
  if (!r.count("method"))
    lines.push_back(p.method == PruneMethod::Magnitude
                        ? "note: no --method: magnitude (this build has no calibration support)"
                        : std::string("note: no --method: ") + to_string(p.method) + ", the default (on SmolLM2-135M at 50 % it reads 2.1x the "
                          "dense perplexity where magnitude reads 12x; bench/ACCURACY.md)");
  const double fraction = p.structured() ? double(p.n) / double(p.m) : p.sparsity;
  if (r.count("method") && p.method == PruneMethod::Magnitude && fraction >= 0.3 && kDefaultPruneMethod != PruneMethod::Magnitude)
    lines.push_back("note: magnitude pruning at " + amount + " ignores how the model uses its weights and costs far more "
                    "quality than the default (SmolLM2-135M at 50 %: 12x the dense perplexity against the default's 2.0x; "
                    "bench/ACCURACY.md); leave out --method for the calibrated default");
  return lines;
}

std::string positional(const cxxopts::ParseResult& r, const char* name, const char* what) {
  if (!r.count(name)) throw UsageError(std::string("missing ") + what);
  return r[name].as<std::string>();
}

int run_pack(const char* cmd, int argc, char** argv) {
  return guarded(cmd, [&] {
    const bool prune = std::string(cmd) == "prune";
    cxxopts::Options opts(std::string("endor-pack ") + cmd,
                          prune ? "Prune (and optionally quantize) the Linears of a Hugging Face checkpoint's decoder\n"
                                  "blocks and write one .endor container. Embeddings, norms, lm_head and biases\n"
                                  "are never pruned."
                                : "Write a Hugging Face checkpoint as a dense .endor container (tokenizer, config and\n"
                                  "generation config included).");
    opts.positional_help("SRC -o OUT.endor");
    opts.add_options()
      ("src", "Hugging Face checkpoint folder or GGUF file", cxxopts::value<std::string>())
      ("o,output", "output .endor file (written to a temporary name, renamed when complete)", cxxopts::value<std::string>())
      ("h,help", "show this help");
    add_dtype_and_budget_options(opts);
    if (prune) add_prune_options(opts);
    add_threads_option(opts, prune ? "CPU threads for conversion, calibration and the pruning algorithms" : "CPU threads for conversion");
    opts.parse_positional({"src"});
    const cxxopts::ParseResult r = opts.parse(argc, argv);
    if (r.count("help")) {
      std::cout << opts.help({"", "Pruning"});
      return 0;
    }
    reject_unmatched(r);
    const std::string src = positional(r, "src", "SRC (the checkpoint folder or GGUF file)");
    if (!r.count("output")) throw UsageError("missing -o OUT.endor");
    const std::string out = r["output"].as<std::string>();
    PackOptions o = parse_pack_options(r, prune, true, true, kDefaultPruneMethod);
    o.command = cmd;
    const int threads = threads_option(r);
    if (threads > 0) omp_set_num_threads(threads);

    ProgressDisplay progress;
    PackCallbacks cb;
    // The notes on what was chosen come once the work starts: input refused before that gets its
    // one error line alone.
    std::vector<std::string> notes = method_notes(r, o);
    const auto flush_notes = [&] {
      for (const std::string& line : notes) std::fprintf(stderr, "%s\n", line.c_str());
      notes.clear();
    };
    cb.on_progress = [&](const PackProgress& p) {
      flush_notes();
      progress.update(p);
    };
    cb.on_temp_file = track_temp_file;
    cb.on_note = [&](const std::string& line) {
      flush_notes();
      progress.finish();
      std::fprintf(stderr, "note: %s\n", line.c_str());
    };
    const auto t0 = std::chrono::steady_clock::now();
#ifdef ENDOR_PACK_CALIBRATION
    const bool calibrated = prune && o.prune.method != PruneMethod::Magnitude;
    CalibrationOptions co;
    if (calibrated) {
      co.ids = r.count("calib-ids") > 0;
      if (co.ids || r.count("calib")) co.text_path = r[co.ids ? "calib-ids" : "calib"].as<std::string>();
      co.n_samples = r.count("calib-samples") ? r["calib-samples"].as<uint64_t>()
                     : co.self_generated()    ? kSelfCalibSamples
                                              : co.n_samples;
      if (co.n_samples == 0) throw UsageError("--calib-samples must be at least 1");
      if (r.count("calib-seqlen")) co.seq_len = r["calib-seqlen"].as<uint64_t>();
      if (r.count("calib-seqlen") && co.seq_len == 0) throw UsageError("--calib-seqlen must be at least 1");
      co.seed = r["seed"].as<uint64_t>();
      if (r.count("min-expert-tokens")) co.min_expert_tokens = r["min-expert-tokens"].as<uint64_t>();
      co.n_threads = threads;
    }
    const PackSummary s = calibrated ? pack_calibrated(src, out, o, co, cb) : pack_checkpoint(src, out, o, cb);
#else
    const PackSummary s = pack_checkpoint(src, out, o, cb);
#endif
    progress.finish();
    flush_notes();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const std::string& d : s.dropped) std::fprintf(stderr, "note: not packed: %s\n", d.c_str());
    if (s.source_grid_tensors)
      std::fprintf(stderr, "note: %llu tensors keep the GGUF's own Q4_0/Q4_1/Q4_K/Q8_0 codes and scales (not re-rounded)\n",
                   (unsigned long long)s.source_grid_tensors);
    if (s.experts_under)
      std::fprintf(stderr, "note: %llu experts under %llu calibration tokens (of %llu): %s instead of %s (docs/moe.md)\n",
                   (unsigned long long)s.experts_under, (unsigned long long)s.min_expert_tokens,
                   (unsigned long long)s.experts, o.prune.method == PruneMethod::Gptq ? "rounded to nearest" : "pruned by magnitude",
                   to_string(o.prune.method));
    std::printf("wrote %s: %s, %.1f%% of the %s source; %llu tensors (%llu %s) in %.1f s\n", out.c_str(),
                format_bytes(s.file_bytes).c_str(), s.source_bytes ? 100.0 * double(s.file_bytes) / double(s.source_bytes) : 0.0,
                format_bytes(s.source_bytes).c_str(), (unsigned long long)s.tensors, (unsigned long long)s.pruned_tensors,
                pruned_how(o.prune, s).c_str(), secs);
    return 0;
  });
}

std::vector<int> parse_levels(const std::string& text) {
  std::vector<int> levels;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size() || v < 1 || v > 22)
      throw UsageError("--zstd-levels takes comma-separated levels in [1, 22], got '" + text + "'");
    levels.push_back(int(v));
  }
  if (levels.empty()) throw UsageError("--zstd-levels is empty");
  return levels;
}

// Fails early (before minutes of measuring) when an output cannot be created where asked.
void check_output_folder(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error(path + ": cannot create: folder " + dir + " does not exist");
  if (::access(dir.c_str(), W_OK) != 0) throw Error(path + ": cannot create: folder " + dir + " is not writable");
}

std::string default_output_name(std::string input, const char* ext) {
  while (input.size() > 1 && input.back() == '/') input.pop_back();
  const size_t slash = input.rfind('/');
  std::string base = slash == std::string::npos ? input : input.substr(slash + 1);
  if (base.size() > 6 && base.compare(base.size() - 6, 6, ".endor") == 0) base.resize(base.size() - 6);
  if (base.size() > 5 && base.compare(base.size() - 5, 5, ".gguf") == 0) base.resize(base.size() - 5);
  if (base.empty() || base == "." || base == "..") base = "model";
  return base + ".compare." + ext;
}

}  // namespace

int run_convert(int argc, char** argv) { return run_pack("convert", argc, argv); }
int run_prune(int argc, char** argv) { return run_pack("prune", argc, argv); }

int run_inspect(int argc, char** argv) {
  return guarded("inspect", [&] {
    cxxopts::Options opts("endor-pack inspect",
                          "Show what a .endor container holds: per tensor name, shape, encoding, value type,\n"
                          "sparsity, bytes and ratio to dense in the source dtype; totals per tier; provenance.");
    opts.positional_help("FILE.endor");
    opts.add_options()
      ("file", "container", cxxopts::value<std::string>())
      ("json", "print the report as JSON")
      ("verify", "also check every group checksum and bitmap index (reads the whole file)")
      ("h,help", "show this help");
    opts.parse_positional({"file"});
    const cxxopts::ParseResult r = opts.parse(argc, argv);
    if (r.count("help")) {
      std::cout << opts.help();
      return 0;
    }
    reject_unmatched(r);
    const std::string file = positional(r, "file", "FILE (a .endor container)");
    const std::unique_ptr<ContainerReader> reader = ContainerReader::open(file);
    const nlohmann::json report = inspect_container(*reader, r.count("verify") > 0);
    if (r.count("json"))
      std::cout << report.dump(2) << "\n";
    else
      std::cout << render_inspect_text(report);
    return 0;
  });
}

int run_compare(int argc, char** argv) {
  return guarded("compare", [&] {
    cxxopts::Options opts(
        "endor-pack compare",
        "Weigh Endor against zstd on a checkpoint (packed in memory with the prune options, nothing\n"
        "written but the reports) or on a .endor file: per tensor and in total, the dense bytes of the\n"
        "(pruned) tensor in its stored value type, Endor's bytes, zstd of the dense bytes and of the\n"
        "Endor bytes at each level, and decode speed to dense (GB/s of dense output) of Endor\n"
        "(multithreaded and 1 thread) and of zstd (1 thread) on this CPU.\n"
        "Prints the table and writes CSV, JSON and an SVG chart; by default into the current\n"
        "folder as NAME.compare.csv/.json/.svg (NAME = the input's base name).");
    opts.positional_help("SRC|FILE.endor");
    opts.add_options()
      ("input", "checkpoint folder, GGUF file or .endor file", cxxopts::value<std::string>())
      ("zstd-levels", "comma-separated zstd levels", cxxopts::value<std::string>()->default_value("1,3,19"))
      ("csv", "CSV output path", cxxopts::value<std::string>())
      ("json", "JSON output path", cxxopts::value<std::string>())
      ("svg", "SVG chart output path", cxxopts::value<std::string>())
      ("min-time", "seconds each speed measurement repeats for (best run counts)", cxxopts::value<double>()->default_value("0.02"))
      ("h,help", "show this help");
    add_dtype_and_budget_options(opts);
    add_prune_options(opts);
    add_threads_option(opts, "CPU threads for Endor's multithreaded decode");
    opts.parse_positional({"input"});
    const cxxopts::ParseResult r = opts.parse(argc, argv);
    if (r.count("help")) {
      std::cout << opts.help({"", "Pruning"});
      return 0;
    }
    reject_unmatched(r);
    const std::string input = positional(r, "input", "SRC or FILE (a checkpoint folder, a GGUF file or a .endor container)");
    struct stat st {};
    const bool is_dir = (::stat(input.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) || is_gguf_file(input);
    if (!is_dir && any_prune_option_given(r))
      throw UsageError("pruning options apply when comparing a checkpoint (folder or GGUF), not a .endor file");
    PackOptions po = parse_pack_options(r, true, false, false);
    po.command = "compare";
    CompareOptions co;
    co.zstd_levels = parse_levels(r["zstd-levels"].as<std::string>());
    co.n_threads = threads_option(r);
    co.min_time_s = r["min-time"].as<double>();
    if (!(co.min_time_s >= 0 && co.min_time_s < 3600)) throw UsageError("--min-time must be in [0, 3600)");
    const std::string csv = r.count("csv") ? r["csv"].as<std::string>() : default_output_name(input, "csv");
    const std::string json = r.count("json") ? r["json"].as<std::string>() : default_output_name(input, "json");
    const std::string svg = r.count("svg") ? r["svg"].as<std::string>() : default_output_name(input, "svg");

    for (const std::string& path : {csv, json, svg}) check_output_folder(path);

    ProgressDisplay progress;
    PackCallbacks cb;
    cb.on_progress = [&](const PackProgress& p) { progress.update(p); };
    const CompareReport rep = compare_sizes(input, po, co, cb);
    progress.finish();
    std::cout << render_compare_table(rep);
    const TempFileCallback on_temp = track_temp_file;
    write_file_atomic(csv, render_compare_csv(rep), on_temp);
    write_file_atomic(json, compare_to_json(rep).dump(2) + "\n", on_temp);
    write_file_atomic(svg, render_compare_svg(rep), on_temp);
    std::cout << "\nwrote " << csv << ", " << json << ", " << svg << "\n";
    return 0;
  });
}

int run_export(int argc, char** argv) {
  return guarded("export", [&] {
    cxxopts::Options opts(
        "endor-pack export",
        "Write a .endor container out for other tools:\n"
        "  hf                  a Hugging Face folder (config, tokenizer, chat template, model.safetensors)\n"
        "                      with every weight decoded; loads in transformers\n"
        "  compressed-tensors  that folder with the int8/int4 decoder Linears kept packed on Endor's grid\n"
        "                      (pack-quantized); loads in vLLM and transformers\n"
        "  gguf                one GGUF file (llama, mistral, mixtral, qwen2, qwen3, qwen3moe) for llama.cpp: int4/int8g as\n"
        "                      Q4_1/Q4_K/Q8_0 blocks where exact, the rest F16/BF16/F32\n"
        "Pruned weights leave as explicit zeros. Written values equal the container's decoded values\n"
        "(int8/int4 tensors in their source dtype when exact there, else f32) unless --dtype is given.\n"
        "OUT must not exist; it is written under a temporary name and renamed when complete.");
    opts.positional_help("FILE.endor --to hf|compressed-tensors|gguf -o OUT");
    opts.add_options()
      ("file", "container", cxxopts::value<std::string>())
      ("to", "hf, compressed-tensors or gguf", cxxopts::value<std::string>())
      ("o,output", "output folder (hf, compressed-tensors) or .gguf file", cxxopts::value<std::string>())
      ("dtype", "f16, bf16 or f32 for every float tensor written (rounding to nearest even; default: exact)", cxxopts::value<std::string>())
      ("max-shard-size", "safetensors shard limit, e.g. 5G (hf, compressed-tensors)", cxxopts::value<std::string>()->default_value("5G"))
      ("h,help", "show this help");
    opts.parse_positional({"file"});
    const cxxopts::ParseResult r = opts.parse(argc, argv);
    if (r.count("help")) {
      std::cout << opts.help();
      return 0;
    }
    reject_unmatched(r);
    const std::string file = positional(r, "file", "FILE (a .endor container)");
    if (!r.count("to")) throw UsageError("missing --to hf|compressed-tensors|gguf");
    ExportOptions o;
    o.tool_version = ENDOR_VERSION;
    const std::optional<ExportTarget> target = parse_export_target(r["to"].as<std::string>());
    if (!target) throw UsageError("--to must be hf, compressed-tensors or gguf, got '" + r["to"].as<std::string>() + "'");
    o.target = *target;
    if (!r.count("output")) throw UsageError("missing -o OUT");
    const std::string out = r["output"].as<std::string>();
    if (r.count("dtype")) o.dtype = parse_dtype_option(r);
    if (r.count("max-shard-size") && o.target == ExportTarget::Gguf)
      throw UsageError("--max-shard-size applies to hf and compressed-tensors, not gguf");
    o.max_shard_bytes = parse_size_option(r, "max-shard-size");
    if (o.max_shard_bytes == 0) throw UsageError("--max-shard-size must be positive");
    const auto t0 = std::chrono::steady_clock::now();
    const ExportSummary s = export_container(file, out, o, track_temp_file);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const std::string& n : s.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
    std::printf("wrote %s (%s): %s, %llu tensors (%llu int8/int4 kept packed) in %.1f s\n", out.c_str(), to_string(o.target),
                format_bytes(s.bytes).c_str(), (unsigned long long)s.tensors, (unsigned long long)s.quantized_tensors, secs);
    return 0;
  });
}

}  // namespace endor::cli
