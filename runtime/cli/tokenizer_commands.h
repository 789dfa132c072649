// endor-infer's text side: finding the tokenizer of a model file, and the `tokenize` /
// `detokenize` subcommands (text on stdin -> ids on stdout, and back).
#pragma once

#include <optional>
#include <string>

#include "endor/format.h"
#include "endor/tokenizer.h"

namespace endor::cli {

// The tokenizer.json stored in a container (nullopt when the container has none). Errors in the
// stored file are reported as "<container>:tokenizer.json: ...".
std::optional<Tokenizer> container_tokenizer(const ContainerReader& container);

// `path` is either an .endor container (recognised by its magic bytes, whatever its name) holding
// a tokenizer.json, or a tokenizer.json itself. Throws endor::Error naming `path` when it cannot be
// read, is not a tokenizer, or is a container without one.
Tokenizer load_tokenizer(const std::string& path);

// `endor-infer tokenize FILE [--no-special]` and `endor-infer detokenize FILE [--keep-special]`;
// argv[0] is the subcommand's name. Return the exit status; throw on errors (the caller prints
// them as one line).
int run_tokenize(int argc, char** argv);
int run_detokenize(int argc, char** argv);

}  // namespace endor::cli
