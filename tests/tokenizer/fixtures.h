// Test fixtures of the tokenizer tests: committed files under tests/fixtures/tokenizers/
// (zstd-compressed where large) made by tools/make_tokenizer_refs.py.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "endor/tokenizer.h"

namespace tokenizer_test {

std::string fixture_path(const std::string& relative);
std::string read_file(const std::string& path);
// Reads a fixture, decompressing it when its name ends in .zst.
std::string read_fixture(const std::string& relative);
// refs.json.zst, parsed once.
const nlohmann::json& refs();
// The tokenizer of one family of refs.json (its fixture with the family's patch applied),
// loaded once per test binary.
const endor::Tokenizer& family_tokenizer(const std::string& family);

}  // namespace tokenizer_test
