// endor-pack: Hugging Face checkpoint -> pruned/quantized .endor container, and the tools to
// look inside one (inspect) and to weigh it against zstd (compare).
#include <cstdio>
#include <cstring>
#include <string>

#include "cleanup.h"
#include "endor/cli_common.h"
#include "endor/openmp_policy.h"
#include "commands.h"

namespace {

const char kUsage[] =
    "endor-pack " ENDOR_VERSION " - pack Hugging Face checkpoints into .endor containers\n"
    "\n"
    "usage: endor-pack <command> [options]   (endor-pack <command> --help for its options)\n"
    "\n"
    "commands:\n"
    "  convert SRC -o OUT.endor [--dtype f16|bf16|f32]   dense container of a checkpoint\n"
    "  prune   SRC -o OUT.endor --sparsity S [...]       pruning (magnitude, wanda, sparsegpt) and/or\n"
    "          SRC -o OUT.endor --method gptq [...]      quantization (int8, int4, int4k; gptq: calibrated)\n"
    "  inspect FILE [--json] [--verify]                  tensors, encodings, sizes, tiers\n"
    "  compare SRC|FILE [--zstd-levels 1,3,19] [...]     Endor vs zstd: sizes and decode speed\n"
    "  export  FILE --to hf|compressed-tensors|gguf -o OUT  back to transformers, vLLM or llama.cpp\n"
    "\n"
    "SRC is a Hugging Face checkpoint folder (config.json + *.safetensors) or a GGUF file\n"
    "(llama/qwen2/qwen3; F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K-Q6_K, IQ4_NL, IQ4_XS tensors, dequantized;\n"
    "default --dtype f16).\n";

}  // namespace

int main(int argc, char** argv) {
  endor::prefer_passive_openmp(argv, /*openblas=*/true);
  endor::cli::install_cleanup_handlers();
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return endor::cli::kExitUsage;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("endor-pack %s\n", ENDOR_VERSION);
    return 0;
  }
  // Subcommands see argv without the program name: argv[0] = "endor-pack <cmd>".
  if (cmd == "convert") return endor::cli::run_convert(argc - 1, argv + 1);
  if (cmd == "prune") return endor::cli::run_prune(argc - 1, argv + 1);
  if (cmd == "inspect") return endor::cli::run_inspect(argc - 1, argv + 1);
  if (cmd == "compare") return endor::cli::run_compare(argc - 1, argv + 1);
  if (cmd == "export") return endor::cli::run_export(argc - 1, argv + 1);
  return endor::cli::run_command("endor-pack", [&]() -> int {
    throw endor::cli::UsageError("unknown command '" + cmd + "': the commands are convert, prune, inspect, compare and export");
  });
}
