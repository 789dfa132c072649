// A small backtracking regex engine for the split patterns of tokenizer.json (Oniguruma
// syntax, leftmost-first alternation, greedy/lazy quantifiers with backtracking, exactly the
// semantics HF tokenizers gets from Oniguruma). Supported: literals and escapes (\r \n \t \f \v
// \xHH \x{H..} \uHHHH, escaped punctuation), classes [...] with ranges and negation, \p{..}
// \P{..} for general categories (L, Lu, N, Nd, P, S, Z, M, C... and long names), \s \S \d \D
// \w \W, '.', groups (...), (?:...), (?i:...), (?i), lookahead (?=...) (?!...), quantifiers
// * + ? {n} {n,} {n,m} {,m} and their lazy forms. Anything else (anchors, lookbehind,
// backreferences, possessive quantifiers) is rejected with a message naming it.
// Input text must be valid UTF-8. Matching never allocates per character; a Regex is
// immutable and may be shared across threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "unicode.h"

namespace endor::tok {

class Regex {
 public:
  // Throws std::invalid_argument("unsupported regex ...: <why>") on syntax outside the subset.
  explicit Regex(std::string_view pattern);

  // Non-overlapping leftmost-first matches (start, end) in byte offsets, like Oniguruma's
  // find_iter: an empty match is reported and the search resumes one character later.
  // Throws BudgetExceeded when a pathological pattern backtracks more than 10^8 + 1000 steps
  // per byte of text (Oniguruma has a similar retry limit): bounded time on any input.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  class BudgetExceeded : public std::runtime_error {
   public:
    BudgetExceeded() : std::runtime_error("regex backtracking budget exceeded") {}
  };

  // A set of code points: the union of its items, complemented when `negated`.
  struct CharClass {
    enum class Kind : uint8_t { Range, Categories, Whitespace };
    struct Item { Kind kind; bool negated; char32_t lo, hi; unicode::CategoryMask mask; };
    std::vector<Item> items;
    bool negated = false;
    uint64_t ascii[2] = {0, 0};  // membership of U+0000..U+007F, filled by finalize()
    void finalize();
    bool contains(char32_t cp) const;
    bool contains_slow(char32_t cp) const;
  };
  struct Node;  // parsed pattern (regex.cpp)

 private:
  enum class Op : uint8_t { Class, ClassRepeat, Split, Jump, Look, Match };
  struct Inst {
    Op op;
    bool greedy_or_negate;  // ClassRepeat: greedy; Look: negative lookahead
    uint32_t cls;           // Class, ClassRepeat: index into classes_
    uint32_t x, y;          // Split: preferred, alternative; Jump/Look: target
    uint32_t min, max;      // ClassRepeat bounds (max == kUnbounded for none)
  };
  struct Frame { uint32_t pc; uint32_t kind; size_t pos; uint32_t count; };
  class Parser;
  static constexpr uint32_t kUnbounded = 0xFFFFFFFFu;

  uint32_t compile(const Node& node, std::vector<std::pair<uint32_t, const Node*>>& lookaheads);
  void emit_node(const Node& node, std::vector<std::pair<uint32_t, const Node*>>& lookaheads);
  bool run(uint32_t pc, std::string_view text, size_t pos, size_t& end, std::vector<Frame>& stack,
           uint64_t& budget) const;

  std::vector<CharClass> classes_;
  std::vector<Inst> program_;
};

}  // namespace endor::tok
