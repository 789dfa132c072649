// The command-line vocabulary the three programs share (endor/cli_common.h).
#include "endor/cli_common.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "endor/format.h"

namespace endor::cli {

namespace {

constexpr int kMaxThreads = 4096;

// --NAME's text (a string option, so a malformed one is named) as a whole number >= min.
uint64_t whole_number(const cxxopts::ParseResult& args, const std::string& name, uint64_t min) {
  const std::string text = args[name].as<std::string>();
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  errno = 0;
  const unsigned long long v = digits ? std::strtoull(text.c_str(), nullptr, 10) : 0;
  if (!digits || errno == ERANGE || v < min)
    throw UsageError("--" + name + " must be a whole number >= " + std::to_string(min) + ", got '" + text + "'");
  return v;
}

void print_error(const char* what, const std::string& help) {
  if (help.empty())
    std::fprintf(stderr, "error: %s\n", what);
  else
    std::fprintf(stderr, "error: %s (see %s --help)\n", what, help.c_str());
}

}  // namespace

int run_command(const std::string& command, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    print_error(e.what(), command);
    return kExitUsage;
  } catch (const cxxopts::exceptions::exception& e) {
    print_error(e.what(), command);
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    print_error("out of memory", "");
    return kExitFailure;
  } catch (const std::exception& e) {
    print_error(e.what(), "");
    return kExitFailure;
  }
}

void reject_unmatched(const cxxopts::ParseResult& args) {
  if (!args.unmatched().empty()) throw UsageError("unexpected argument '" + args.unmatched()[0] + "'");
}

void add_threads_option(cxxopts::Options& options, const std::string& what) {
  options.add_options()("threads", what + " (0 = all cores)", cxxopts::value<int>()->default_value("0"));
}

int threads_option(const cxxopts::ParseResult& args) {
  const int n = args["threads"].as<int>();
  if (n < 0 || n > kMaxThreads)
    throw UsageError("--threads must be in [0, " + std::to_string(kMaxThreads) + "] (0 = all cores), got " +
                     std::to_string(n));
  return n;
}

void add_ctx_option(cxxopts::Options& options, const std::string& help) {
  options.add_options()("ctx", help, cxxopts::value<std::string>());
}

std::optional<size_t> ctx_option(const cxxopts::ParseResult& args) {
  if (!args.count("ctx")) return std::nullopt;
  return size_t(whole_number(args, "ctx", 2));
}

void check_ctx_fits(size_t ctx, size_t model_ctx) {
  if (ctx > model_ctx)
    throw UsageError("--ctx " + std::to_string(ctx) + " exceeds the model's context length " +
                     std::to_string(model_ctx) + " (max_position_embeddings)");
}

std::optional<uint64_t> size_option(const cxxopts::ParseResult& args, const std::string& name) {
  if (!args.count(name)) return std::nullopt;
  return parse_size_option(args, name);
}

uint64_t parse_size_option(const cxxopts::ParseResult& args, const std::string& name) {
  try {
    return parse_memory_size(args[name].as<std::string>(), "--" + name);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

}  // namespace endor::cli
