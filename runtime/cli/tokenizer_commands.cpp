// Tokenizer lookup for endor-infer and its tokenize / detokenize subcommands.
#include "tokenizer_commands.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <vector>

#include <cxxopts.hpp>

#include "endor/cli_common.h"

namespace endor::cli {
namespace {

// True when the file starts with the container magic. Throws naming `path` when it cannot be read.
bool is_container(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  if (std::filesystem::is_directory(path)) throw Error(path + ": is a directory, not a tokenizer or .endor file");
  char magic[sizeof kMagic] = {};
  in.read(magic, sizeof magic);
  return in.gcount() == static_cast<std::streamsize>(sizeof magic) &&
         std::memcmp(magic, kMagic, sizeof magic) == 0;
}

std::string read_stdin() {
  std::ostringstream s;
  s << std::cin.rdbuf();
  if (std::cin.bad()) throw Error("stdin: read failed");
  return s.str();
}

// Parses `endor-infer <subcommand> FILE [flag]`; returns FILE and whether `flag` was given.
std::pair<std::string, bool> parse_subcommand(int argc, char** argv, const std::string& summary,
                                              const std::string& flag, const std::string& flag_help) {
  const std::string name = argv[0];
  cxxopts::Options options("endor-infer " + name, summary);
  options.positional_help("FILE");
  options.add_options()
    ("file", "an .endor container holding tokenizer.json, or a tokenizer.json",
     cxxopts::value<std::vector<std::string>>())
    (flag, flag_help)
    ("h,help", "show this help");
  options.parse_positional({"file"});
  cxxopts::ParseResult args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << "\n";
    return {"", false};
  }
  if (!args.count("file")) throw UsageError("missing FILE (a .endor container or a tokenizer.json)");
  const auto files = args["file"].as<std::vector<std::string>>();
  if (files.size() != 1) throw UsageError("give one FILE; the " + std::string(name == "tokenize" ? "text" : "ids") +
                                          " come on stdin");
  return {files[0], args.count(flag) > 0};
}

}  // namespace

std::optional<Tokenizer> container_tokenizer(const ContainerReader& container) {
  const std::optional<std::string_view> json = container.file("tokenizer.json");
  if (!json) return std::nullopt;
  return Tokenizer::from_json(*json, container.path() + ":tokenizer.json");
}

Tokenizer load_tokenizer(const std::string& path) {
  if (!is_container(path)) return Tokenizer::from_file(path);
  std::unique_ptr<ContainerReader> container = ContainerReader::open(path);
  std::optional<Tokenizer> tokenizer = container_tokenizer(*container);
  if (!tokenizer) throw Error(path + ": the container holds no tokenizer.json (pack it from a folder that has one)");
  return *std::move(tokenizer);
}

int run_tokenize(int argc, char** argv) {
  const auto [path, no_special] = parse_subcommand(
      argc, argv, "Read UTF-8 text on stdin, print its token ids on one line.", "no-special",
      "do not add the post-processor's tokens (e.g. the BOS)");
  if (path.empty()) return 0;  // --help
  const Tokenizer tokenizer = load_tokenizer(path);
  const std::string text = read_stdin();
  const std::string line = format_ids(tokenizer.encode(text, !no_special)) + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  return 0;
}

int run_detokenize(int argc, char** argv) {
  const auto [path, keep_special] = parse_subcommand(
      argc, argv, "Read token ids on stdin (separated by whitespace), print their text.", "keep-special",
      "print special tokens (BOS, EOS, ...) as their text instead of skipping them");
  if (path.empty()) return 0;  // --help
  const Tokenizer tokenizer = load_tokenizer(path);
  std::vector<int32_t> ids;
  try {
    ids = parse_ids(read_stdin());
  } catch (const TokenizerError& e) {
    throw Error(std::string("stdin: ") + e.what());
  }
  const size_t vocab = tokenizer.vocab_size();
  for (int32_t id : ids)
    if (static_cast<size_t>(id) >= vocab)
      throw Error("stdin: token id " + std::to_string(id) + " is outside the vocabulary of " + path + " (" +
                  std::to_string(vocab) + " ids)");
  // The whole text is decoded before anything is written: an error leaves stdout empty.
  const std::string text = tokenizer.decode(ids, !keep_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace endor::cli
