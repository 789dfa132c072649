// The tokenizer's building blocks: Unicode tables, UTF-8 repair, NFC, and the split-pattern regex.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "regex.h"
#include "unicode.h"

using endor::tok::Regex;
namespace u = endor::tok::unicode;

namespace {
// The pieces a regex cuts out of `text`.
std::vector<std::string> matches(const std::string& pattern, const std::string& text) {
  std::vector<std::string> out;
  for (auto [b, e] : Regex(pattern).find_all(text)) out.push_back(text.substr(b, e - b));
  return out;
}
using V = std::vector<std::string>;
}  // namespace

TEST_CASE("general categories and whitespace (Unicode 16, as Oniguruma)") {
  CHECK(u::category('a') == u::Category::Ll);
  CHECK(u::category('Z') == u::Category::Lu);
  CHECK(u::category('7') == u::Category::Nd);
  CHECK(u::category(0x2167) == u::Category::Nl);    // Roman numeral eight
  CHECK(u::category(0x00BD) == u::Category::No);    // one half
  CHECK(u::category(0x4E2D) == u::Category::Lo);    // CJK
  CHECK(u::category(0x0301) == u::Category::Mn);
  CHECK(u::category(0x1F600) == u::Category::So);
  CHECK(u::category(0x10D50) == u::Category::Lu);   // Garay, new in Unicode 16
  CHECK(u::category(0x323B0) == u::Category::Cn);   // assigned only in Unicode 17
  CHECK(u::category(0x10FFFF) == u::Category::Cn);
  CHECK(u::category(0x110000) == u::Category::Cn);  // beyond Unicode: treated as unassigned
  for (char32_t c : {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000})
    CHECK(u::is_whitespace(c));
  for (char32_t c : {0x1C, 0x1F, 0x180E, 0x200B, 0xFEFF, 0x61}) CHECK_FALSE(u::is_whitespace(c));
}

TEST_CASE("UTF-8 repair replaces maximal ill-formed subparts, streaming prefix stops before open sequences") {
  CHECK(u::to_valid_utf8("ok") == "ok");
  CHECK(u::to_valid_utf8("a\xFF" "b") == "a\xEF\xBF\xBD" "b");
  CHECK(u::to_valid_utf8("\xE4\xB8") == "\xEF\xBF\xBD");              // truncated: one U+FFFD
  CHECK(u::to_valid_utf8("\xE4\xB8" "A") == "\xEF\xBF\xBD" "A");
  CHECK(u::to_valid_utf8("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  CHECK(u::to_valid_utf8("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
  CHECK(u::complete_utf8_prefix("ab\xE4\xB8") == 2);
  CHECK(u::complete_utf8_prefix("ab\xE4\xB8\xAD") == 5);
  CHECK(u::complete_utf8_prefix("ab\xFF") == 3);                      // invalid, not incomplete
  CHECK(u::complete_utf8_prefix("\xF0\x9F") == 0);
  CHECK(u::is_valid_utf8("\xF0\x9F\x98\x80"));
  CHECK_FALSE(u::is_valid_utf8("\xF4\x90\x80\x80"));                  // above U+10FFFF
}

TEST_CASE("NFC and NFD (Unicode 9.0 data, as HF tokenizers)") {
  CHECK(u::nfc("e\xCC\x81") == "\xC3\xA9");                              // e + acute -> é
  CHECK(u::nfd("\xC3\xA9") == "e\xCC\x81");
  CHECK(u::nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8") == "\xEA\xB0\x81");  // jamo -> 각
  CHECK(u::nfd("\xEA\xB0\x81") == "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8");
  CHECK(u::nfc("\xE2\x84\xA6") == "\xCE\xA9");                           // Ohm sign -> Omega (singleton)
  CHECK(u::nfc("\xE0\xA5\x98") == "\xE0\xA4\x95\xE0\xA4\xBC");           // U+0958 is excluded from composition
  // Canonical ordering: U+0315 (ccc 232) moves after U+0300 (ccc 230), then a + grave composes.
  CHECK(u::nfc("a\xCC\x95\xCC\x80") == "\xC3\xA0\xCC\x95");
  // U+1DFA (ccc 218) dates from Unicode 10: unknown to the 9.0 tables, so it blocks nothing and is not reordered.
  CHECK(u::nfc("a\xE1\xB7\xBA\xCC\x96") == "a\xE1\xB7\xBA\xCC\x96");
  CHECK(u::nfc("plain ascii") == "plain ascii");
}

TEST_CASE("regex: alternation is leftmost-first, quantifiers backtrack") {
  CHECK(matches("a|ab", "ab") == V{"a"});
  CHECK(matches("ab|a", "ab") == V{"ab"});
  CHECK(matches("a+b", "aaab aab") == V{"aaab", "aab"});
  CHECK(matches("a+?", "aaa") == V{"a", "a", "a"});
  CHECK(matches("a{2,3}", "aaaaaaa") == V{"aaa", "aaa"});
  CHECK(matches("a{2}", "aaaaa") == V{"aa", "aa"});
  CHECK(matches("x{,2}y", "xxxy") == V{"xxy"});
  CHECK(matches("(?:ab)+", "ababab abx") == V{"ababab", "ab"});
  CHECK(matches("(ab|cd){2}", "abcdab") == V{"abcd"});
  CHECK(matches("\\s+(?!\\S)", "a   b") == V{"  "});
  CHECK(matches("\\s+(?=b)", "a   b") == V{"   "});
  CHECK(matches("a.c", "abc a\nc") == V{"abc"});
  CHECK(matches("[^a-c]+", "abcdefabc") == V{"def"});
  CHECK(matches("[]a]+", "a]b") == V{"a]"});
  CHECK(matches("[a-]+", "a-b") == V{"a-"});
  CHECK(matches("\\x41\\x{42}\\u0043", "ABC") == V{"ABC"});
  CHECK(matches("a*", "b").size() == 2);  // empty matches, reported and stepped over as Oniguruma does
  CHECK(matches("{", "a{b") == V{"{"});   // a brace that is not a quantifier is literal
}

TEST_CASE("regex: Unicode classes and case-insensitive groups") {
  CHECK(matches("\\p{L}+", "héllo wörld 中文") == V{"héllo", "wörld", "中文"});
  CHECK(matches("\\p{N}{1,3}", "12345") == V{"123", "45"});
  CHECK(matches("\\P{L}+", "ab12cd") == V{"12"});
  CHECK(matches("\\p{^L}+", "ab12cd") == V{"12"});
  CHECK(matches("[\\p{Lu}\\p{Nd}]+", "ABcD9e") == V{"AB", "D9"});
  CHECK(matches("\\pN+", "x٣٤y") == V{"٣٤"});
  CHECK(matches("(?i:'s|'ll)", "'S 'Ll 'ſ 'x") == V{"'S", "'Ll", "'ſ"});
  CHECK(matches("(?i)ab", "AB aB") == V{"AB", "aB"});
  CHECK(matches("a(?i:b)c", "aBc aBC") == V{"aBc"});
  CHECK(matches("\\w+", "a_b1 ü") == V{"a_b1", "ü"});
  CHECK(matches("\\d+", "a12b") == V{"12"});
}

TEST_CASE("regex: the GPT-2 and Llama-3 split patterns") {
  const std::string gpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  CHECK(matches(gpt2, "Hello world's  end!!\n\n") == V{"Hello", " world", "'s", " ", " end", "!!", "\n\n"});
  const std::string llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  CHECK(matches(llama3, "I'M 12345 ok.\n  \n  x") == V{"I", "'M", " ", "123", "45", " ok", ".\n", "  \n", " ", " x"});
}

TEST_CASE("regex: catastrophic backtracking stops at the step budget") {
  Regex bad("(?:a|a|aa)+b");
  CHECK_THROWS_AS(bad.find_all(std::string(60, 'a')), Regex::BudgetExceeded);
  CHECK(bad.find_all(std::string(10, 'a') + "b").size() == 1);
}

TEST_CASE("regex: unsupported syntax is refused with a reason") {
  for (const char* p : {"(?<=a)b", "^a", "a$", "\\bword", "(a)\\1", "a++", "[[:alpha:]]", "[a&&b]", "\\p{Greek}", "(?x)a", "(", "[ab", "a{3,2}", "(?i:é)", "(a*)*"}) {
    INFO(p);
    CHECK_THROWS_AS(Regex{p}, std::invalid_argument);
  }
  CHECK_THROWS_AS(Regex{std::string(5000, '(') + "a" + std::string(5000, ')')}, std::invalid_argument);  // depth
  CHECK_THROWS_AS(Regex{"((((a{200}){200}){200}){200})"}, std::invalid_argument);                       // size
  CHECK_NOTHROW(Regex{std::string(50, '(') + "a" + std::string(50, ')')});
}
