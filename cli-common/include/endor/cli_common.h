// The command-line vocabulary of endor-pack, endor-infer and endor-serve: the same concept has the
// same flag, the same checks, the same message and the same exit code in each program.
//
// Exit codes: 0 success; 1 the work failed (a file, the machine, a budget): "error: FILE: WHAT";
// 2 the command line is malformed: "error: WHAT (see PROGRAM [SUBCOMMAND] --help)". Always one line
// on stderr. Sizes print with format_bytes and read with parse_byte_size (endor/format.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include <cxxopts.hpp>

namespace endor::cli {

enum ExitCode : int { kExitOk = 0, kExitFailure = 1, kExitUsage = 2 };

// A malformed command line: an option unknown, missing, malformed, out of range or not going with
// another. what() says which; run_command adds where the help is.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs one command (`command`: how its help is asked for, e.g. "endor-pack prune") and turns what
// escapes it into one line on stderr and the exit code: UsageError and cxxopts' parse errors
// "error: WHAT (see COMMAND --help)", 2; std::bad_alloc "error: out of memory", 1; any other
// exception "error: WHAT", 1. Returns body's code otherwise.
int run_command(const std::string& command, const std::function<int()>& body);

// UsageError for the first argument no option took (a stray positional).
void reject_unmatched(const cxxopts::ParseResult& args);

// --threads N: CPU threads, 0 (the default) = all cores (OMP_NUM_THREADS when set). `what` heads
// the help line. threads_option: the value; UsageError unless in [0, 4096].
void add_threads_option(cxxopts::Options& options, const std::string& what = "CPU threads");
int threads_option(const cxxopts::ParseResult& args);

// --ctx N: tokens of context (`help` says of what). ctx_option: nullopt when not given; UsageError
// unless a whole number >= 2. check_ctx_fits: UsageError "--ctx N exceeds the model's context
// length M (max_position_embeddings)" when ctx > model_ctx.
void add_ctx_option(cxxopts::Options& options, const std::string& help);
std::optional<size_t> ctx_option(const cxxopts::ParseResult& args);
void check_ctx_fits(size_t ctx, size_t model_ctx);

// --NAME SIZE in parse_byte_size's binary units (3G, 512M, 1.5T, 4096). size_option: nullopt when
// not given; parse_size_option: the value given or the option's default. UsageError
// "--NAME: invalid size 'x' (examples: ...)" when malformed.
std::optional<uint64_t> size_option(const cxxopts::ParseResult& args, const std::string& name);
uint64_t parse_size_option(const cxxopts::ParseResult& args, const std::string& name);

}  // namespace endor::cli
