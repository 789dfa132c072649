// The BPE model of tokenizer.json: vocab, ranked merges, and the merge loop of HF tokenizers
// (lowest rank first, leftmost among equal ranks; unknown characters to byte-fallback tokens
// <0xXX> or the unk token; ignore_merges; continuing_subword_prefix / end_of_word_suffix).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace endor::tok {

struct BpeConfig {
  std::vector<std::pair<std::string, int64_t>> vocab;        // token -> id, file order
  std::vector<std::pair<std::string, std::string>> merges;  // rank = index
  std::optional<std::string> unk_token, continuing_subword_prefix, end_of_word_suffix;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
};

class BpeModel {
 public:
  // Throws TokenizerError naming `source` for ids out of range or merges referring to tokens
  // absent from the vocab.
  BpeModel(BpeConfig config, const std::string& source);
  BpeModel(const BpeModel&) = delete;  // token_ids_ holds views into token_strings_
  BpeModel& operator=(const BpeModel&) = delete;

  // Per-encode() memo of piece -> ids (pieces repeat a lot in running text).
  using Cache = std::unordered_map<std::string, std::vector<int32_t>>;
  // Long pieces (SentencePiece-style tokenizers have no pre-tokenizer, so a whole paragraph is
  // one piece) are cut where no merge can ever join across: between two characters that are
  // both tokens and never adjacent inside any vocab token. BPE of the parts equals BPE of the
  // whole, and the merge heap stays small.
  static constexpr size_t kCutPiecesAbove = 64;
  // Appends the ids of one pre-tokenized piece. Throws TokenizerError if a character has no
  // token, no byte fallback and the unk token is missing from the vocab.
  void tokenize(const std::string& piece, std::vector<int32_t>& out, Cache& cache) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr when the id has no token.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id.
  size_t id_limit() const { return id_to_index_.size(); }
  // Number of distinct tokens (HF's BPE get_vocab_size()).
  size_t token_count() const { return token_count_; }

 private:
  struct MergeValue { uint32_t rank; int32_t new_id; };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_part(std::string_view part, std::vector<int32_t>& out) const;
  const MergeValue* find_merge(int32_t a, int32_t b) const;
  std::optional<int32_t> single_char_id(std::string_view ch, char32_t cp) const;

  // Open-addressing hash tables (std::unordered_map made loading 150k-token files take seconds).
  static uint64_t mix(uint64_t x) { x *= 0x9E3779B97F4A7C15ull; return x ^ (x >> 29); }
  static uint64_t hash_bytes(std::string_view s);
  struct MergeSlot { uint64_t key; MergeValue value; };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};

  std::vector<std::string> token_strings_;  // never modified after construction
  std::vector<int32_t> id_to_index_;        // id -> index in token_strings_, -1 for gaps
  // hash(token) -> (hash tag << 32 | index in token_strings_ + 1), 0 = empty; the tag spares
  // most string comparisons (and their cache misses) on probes.
  std::vector<uint64_t> token_slots_;
  std::vector<int32_t> token_slot_ids_;     // id stored with each token_slots_ entry
  size_t token_count_ = 0;
  std::vector<MergeSlot> merge_slots_;      // hash(pair) -> merge
  std::vector<int32_t> rank_new_id_;        // merge rank -> merged token id
  std::vector<uint64_t> inner_bigrams_;     // sorted (cp1 << 32 | cp2) adjacent inside some token
  bool cut_long_pieces_ = false;
  std::vector<int32_t> single_char_ids_;    // code point < 0x10000 -> id, when no prefix/suffix
  int32_t byte_tokens_[256];                // <0xXX> ids for byte fallback, -1 if absent
  std::optional<std::string> unk_token_, prefix_, suffix_;
  bool fuse_unk_, byte_fallback_, ignore_merges_;
  std::string source_;
};

}  // namespace endor::tok
