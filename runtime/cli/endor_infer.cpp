// endor-infer: run a .endor model on a prompt and stream the generated tokens.
// Errors: one line "error: ..." on stderr, exit 1 (2 for command-line usage errors).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "endor/runtime.h"

namespace {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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
  std::fprintf(stderr, "bytes read per token: %.3f MB (encoded weights)\n",
               model.decode_bytes_per_token() / 1e6);
  const endor::ForwardProfile& p = model.profile();
  if (p.n_calls > 0) {
    std::fprintf(stderr, "time per layer (decode, ms/token):");
    for (size_t l = 0; l < p.layer_ms.size(); ++l)
      std::fprintf(stderr, "%s%zu:%.3f", l ? " " : " ", l, p.layer_ms[l] / p.n_calls);
    std::fprintf(stderr, "\nembedding + final norm + lm_head: %.3f ms/token\n", p.head_ms / p.n_calls);
  }
}

int run(int argc, char** argv) {
  cxxopts::Options options("endor-infer", "Run a .endor model and stream the generated tokens.");
  options.positional_help("FILE");
  options.add_options()
    ("file", "the .endor container", cxxopts::value<std::string>())
    ("p,prompt", "prompt text", cxxopts::value<std::string>())
    ("ids", "prompt as token ids, e.g. \"1 2 3\" (output prints as ids)", cxxopts::value<std::string>())
    ("n,n-tokens", "tokens to generate", cxxopts::value<size_t>()->default_value("64"))
    ("temperature", "sampling temperature; 0 = greedy (default: the container's generation_config, "
                    "else greedy)", cxxopts::value<float>())
    ("top-k", "keep the K most likely tokens (0 = off)", cxxopts::value<uint32_t>())
    ("top-p", "keep the smallest set of tokens with probability mass >= P (1 = off)",
     cxxopts::value<float>())
    ("seed", "random seed (default: random)", cxxopts::value<uint64_t>())
    ("threads", "CPU threads (0 = all)", cxxopts::value<int>()->default_value("0"))
    ("device", "cpu, cuda or auto", cxxopts::value<std::string>()->default_value("auto"))
    ("dump-logits", "write the prompt's logits [tokens, vocab] as float32 .npy",
     cxxopts::value<std::string>())
    ("stats", "print prefill/decode speed, time per layer and bytes read per token to stderr")
    ("h,help", "show this help");
  options.parse_positional({"file"});
  cxxopts::ParseResult args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << "\n";
    return 0;
  }
  if (!args.count("file")) throw UsageError("no model file given (endor-infer FILE --ids \"1 2 3\")");
  if (args.count("prompt") && args.count("ids")) throw UsageError("give either -p or --ids, not both");
  if (!args.count("prompt") && !args.count("ids")) throw UsageError("no prompt given (-p TEXT or --ids \"1 2 3\")");
  if (args.count("prompt")) throw endor::Error("text prompts need the tokenizer; use --ids");
  const std::vector<int32_t> prompt = parse_ids(args["ids"].as<std::string>());
  if (args["threads"].as<int>() < 0) throw UsageError("--threads must be >= 0");

  std::unique_ptr<endor::Backend> backend =
      endor::make_backend(args["device"].as<std::string>(), args["threads"].as<int>());
  std::unique_ptr<endor::ContainerReader> container =
      endor::ContainerReader::open(args["file"].as<std::string>());
  std::unique_ptr<endor::Model> model = endor::load_model(*container, *backend);

  const uint64_t seed = args.count("seed") ? args["seed"].as<uint64_t>() : std::random_device{}();
  endor::SamplerOptions sampling =
      endor::default_sampler_options(container->manifest().generation_config, seed);
  if (args.count("temperature")) sampling.temperature = args["temperature"].as<float>();
  if (args.count("top-k")) sampling.top_k = args["top-k"].as<uint32_t>();
  if (args.count("top-p")) sampling.top_p = args["top-p"].as<float>();
  endor::Sampler sampler(sampling);

  endor::GenerationOptions gen;
  gen.max_new_tokens = args["n-tokens"].as<size_t>();
  const std::string dump_path = args.count("dump-logits") ? args["dump-logits"].as<std::string>() : "";
  if (!dump_path.empty()) {
    const size_t vocab = model->config().vocab;
    gen.on_prompt_logits = [dump_path, vocab](const std::vector<float>& logits, size_t n_prompt) {
      endor::write_npy_f32(dump_path, logits.data(), n_prompt, vocab);
    };
  }
  const bool stats = args.count("stats") > 0;
  model->set_profiling(stats);

  size_t n_printed = 0;
  endor::GenerationStats st;
  endor::generate(*model, prompt, sampler, gen,
                  [&](int32_t id) {
                    std::printf(n_printed++ ? " %d" : "%d", id);
                    std::fflush(stdout);
                  },
                  &st);
  if (n_printed) std::printf("\n");
  std::fflush(stdout);
  if (st.stop == endor::StopReason::Context)
    std::fprintf(stderr, "note: stopped at the context length %u (max_position_embeddings)\n",
                 model->config().max_positions);
  if (stats) print_stats(*backend, *model, st, seed);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "error: %s (see endor-infer --help)\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
