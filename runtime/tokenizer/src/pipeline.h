// The stages of tokenizer.json around the model, as HF tokenizers runs them: added-token
// splitting, normalizers, pre-tokenizers, post-processor and decoders. Each is built from its
// JSON object (throwing TokenizerError naming the source on anything unsupported) and then
// immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "regex.h"

namespace endor::tok {

// ---- added tokens ---------------------------------------------------------------------------
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// A piece of the input on its way through the pipeline: text still to tokenize, or an added
// token already recognized (id >= 0).
struct Segment {
  std::string text;
  int32_t id = -1;
  bool at_origin = false;  // starts at offset 0 of the original input (Metaspace "first")
};

// Leftmost-longest matcher of a set of added tokens (a byte trie), with HF's single_word,
// lstrip and rstrip rules.
class AddedTokenSplitter {
 public:
  // `patterns[i]` is what to look for (the content, or its normalized form) for tokens[i].
  AddedTokenSplitter(const std::vector<const AddedToken*>& tokens, const std::vector<std::string>& patterns);
  bool empty() const { return tokens_.empty(); }
  // Splits `text` into text and token segments, dropping empty ones.
  void split(const Segment& text, std::vector<Segment>& out) const;

 private:
  struct Node { std::vector<std::pair<unsigned char, int32_t>> children; int32_t token = -1; };
  std::vector<Node> nodes_;
  std::vector<const AddedToken*> tokens_;
  bool first_byte_[256] = {};
};

// ---- normalizers ------------------------------------------------------------------------------
struct Normalizer {
  enum class Kind { Sequence, Prepend, Replace, Nfc, Nfd, Strip, ByteLevel } kind;
  std::vector<Normalizer> children;    // Sequence
  std::string text, content;           // Prepend: text; Replace: literal pattern -> content
  std::shared_ptr<const Regex> regex;  // Replace with a regex pattern
  bool strip_left = false, strip_right = false;

  static Normalizer from_json(const nlohmann::json& j, const std::string& source);
  std::string apply(std::string s) const;
};

// ---- pre-tokenizers -----------------------------------------------------------------------------
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizer {
  enum class Kind { Sequence, Split, ByteLevel, Metaspace, Digits, WhitespaceSplit, Whitespace } kind;
  std::vector<PreTokenizer> children;  // Sequence
  std::shared_ptr<const Regex> regex;  // Split (regex pattern), ByteLevel (GPT-2 regex), Whitespace
  std::string literal;                 // Split with a string pattern; Metaspace replacement
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;       // ByteLevel
  bool use_regex = true;               // ByteLevel
  enum class Prepend { Always, First, Never } prepend = Prepend::Always;  // Metaspace
  bool split = true;                   // Metaspace
  bool individual_digits = false;      // Digits

  static PreTokenizer from_json(const nlohmann::json& j, const std::string& source);
  static PreTokenizer byte_level(bool add_prefix_space, bool use_regex);
  // Replaces `pieces` by their pre-tokenized pieces (empty pieces dropped).
  void apply(std::vector<Segment>& pieces) const;
};

// Byte-level alphabet of GPT-2: every byte to a printable character.
struct ByteLevelAlphabet {
  std::string byte_to_utf8[256];  // the UTF-8 of each byte's character
  static const ByteLevelAlphabet& get();
  // The byte of a character of the alphabet, or -1.
  static int byte_of(char32_t cp);
};

// ---- post-processor ---------------------------------------------------------------------------
// For single sequences every supported processor puts fixed ids around the text.
struct PostProcessor {
  std::vector<int32_t> prefix, suffix;
  static PostProcessor from_json(const nlohmann::json& j, const std::string& source);
};

// ---- decoders -------------------------------------------------------------------------------------
struct Decoder {
  enum class Kind { Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, BpeSuffix } kind;
  std::vector<Decoder> children;  // Sequence
  std::string pattern, content;   // Replace (literal); Strip content; Metaspace replacement; BPE suffix
  std::shared_ptr<const Regex> regex;
  size_t strip_start = 0, strip_stop = 0;
  bool metaspace_prepend = true;

  static Decoder from_json(const nlohmann::json& j, const std::string& source);
  // Runs the chain on token strings. Works on raw bytes: the caller repairs invalid UTF-8.
  // `open_end`: the tokens may continue (streaming), so a trailing byte-fallback run that is
  // a valid but incomplete UTF-8 prefix is kept as raw bytes instead of becoming U+FFFD.
  void apply(std::vector<std::string>& tokens, bool open_end) const;
};

}  // namespace endor::tok
