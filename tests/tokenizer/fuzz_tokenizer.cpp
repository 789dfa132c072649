// libFuzzer target for the tokenizer (configure with CXX=clang++ -DENDOR_FUZZ=ON). The first
// byte picks what the rest is: 0 a tokenizer.json (load, encode, decode), 1 a split pattern and a
// text separated by a NUL (compile, match), 2 text and ids for the committed byte-level fixture.
// Errors must be TokenizerError / std::invalid_argument; anything else (or a crash) is a bug.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "endor/tokenizer.h"
#include "regex.h"

namespace {
const endor::Tokenizer& fixture() {
  static const endor::Tokenizer tok = [] {
    std::ifstream in(std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/tokenizers/bytebpe/tokenizer.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return endor::Tokenizer::from_json(ss.str(), "bytebpe");
  }();
  return tok;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      try {
        endor::Tokenizer tok = endor::Tokenizer::from_json(rest, "fuzz");
        auto ids = tok.encode("Hello, world! 123 \xC3\xA9\xE4\xB8\xAD <s> <|endoftext|>");
        (void)tok.decode(ids, true);
      } catch (const endor::TokenizerError&) {
      }
      break;
    case 1: {
      size_t nul = rest.find('\0');
      if (nul == std::string::npos || nul > 64) return 0;
      try {
        endor::tok::Regex re(rest.substr(0, nul));
        std::string text = rest.substr(nul + 1, 256);
        if (!endor::tok::unicode::is_valid_utf8(text)) return 0;
        for (auto [b, e] : re.find_all(text))
          if (b > e || e > text.size()) __builtin_trap();
      } catch (const std::invalid_argument&) {
      } catch (const endor::tok::Regex::BudgetExceeded&) {
      }
      break;
    }
    default: {
      const endor::Tokenizer& tok = fixture();
      auto ids = tok.encode(rest);
      std::string back = tok.decode(ids);
      if (endor::tok::unicode::is_valid_utf8(rest) && back != rest) __builtin_trap();  // byte-level round trip
      try {
        (void)tok.decode(endor::parse_ids(rest));
      } catch (const endor::TokenizerError&) {
      }
      endor::StreamingDecoder stream(tok);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      if (streamed + stream.flush() != back) __builtin_trap();
    }
  }
  return 0;
}
