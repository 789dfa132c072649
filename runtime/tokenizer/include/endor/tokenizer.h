// endor_tokenizer: Hugging Face `tokenizer.json` BPE tokenizers (byte-level BPE as in GPT-2/OPT,
// Llama-3 and Qwen; SentencePiece-style BPE with byte fallback as in Llama-2/Mistral), encode,
// decode and streaming decode, reproducing the `tokenizers` library (0.23) id for id.
//
// Errors: loading reports bad or unsupported input by throwing endor::TokenizerError (an
// endor::Error) whose what() is one line naming the source and what is wrong. encode() accepts
// any bytes (invalid UTF-8 is first replaced by U+FFFD); decode() skips ids without a token and
// returns valid UTF-8 (invalid byte sequences become U+FFFD, as HF's from_utf8_lossy).
// Split regexes of the file run on a backtracking matcher, like Oniguruma in HF: a pattern
// with catastrophic backtracking is as slow here as there.
// Thread safety: a Tokenizer is immutable after loading; copies share the loaded tables and
// encode()/decode() may run concurrently. A StreamingDecoder is single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "endor/format.h"  // endor::Error

namespace endor {

class TokenizerError : public Error {
 public:
  using Error::Error;
};

class Tokenizer {
 public:
  // `json` is the text of a tokenizer.json (e.g. read out of an .endor container);
  // `source_name` names it in error messages. Cost: parses the file and builds the vocab and
  // merge tables (~0.5 s for a 150k-token vocab).
  static Tokenizer from_json(std::string_view json, const std::string& source_name);
  static Tokenizer from_file(const std::string& path);
  // GPT-2 style checkpoints that ship only vocab.json + merges.txt: byte-level BPE with the
  // GPT-2 split regex, no prefix space, ByteLevel decoder, nothing added around a sequence.
  // Tokens of `special_tokens` present in the vocab are split out of the text first and are
  // special (skipped by decode(..., true)).
  static Tokenizer from_vocab_merges(std::string_view vocab_json, std::string_view merges_txt,
                                     const std::string& source_name,
                                     const std::vector<std::string>& special_tokens = {"<|endoftext|>"});
  static Tokenizer from_vocab_merges_files(const std::string& vocab_path, const std::string& merges_path,
                                           const std::vector<std::string>& special_tokens = {"<|endoftext|>"});

  // Text (UTF-8) -> ids, as `tokenizers` encode(text, add_special_tokens). With
  // add_special_tokens the post-processor's tokens (e.g. Llama-2's BOS) are added.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Ids -> text, as `tokenizers` decode(ids, skip_special_tokens). Ids without a token are skipped.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // The BOS the post-processor puts first, else a well-known BOS token of the vocab
  // (<|begin_of_text|>, <s>, <|endoftext|> in that order). Overridable with set_bos_eos().
  std::optional<int32_t> bos_id() const { return bos_id_; }
  // The EOS the post-processor puts last, else a well-known EOS token of the vocab
  // (<|end_of_text|>, </s>, <|endoftext|>). Overridable with set_bos_eos().
  std::optional<int32_t> eos_id() const { return eos_id_; }
  void set_bos_eos(std::optional<int32_t> bos, std::optional<int32_t> eos) { bos_id_ = bos; eos_id_ = eos; }
  // Whether encode(text, true) puts bos_id() first.
  bool adds_bos() const;

  // One past the largest id of the model vocab and the added tokens (the embedding rows).
  size_t vocab_size() const;
  // The token's string as stored in the file (byte-level tokens in their mapped form, e.g.
  // "Ġthe"); empty for an id without a token.
  std::string_view token_text(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view token) const;
  bool is_special(int32_t id) const;

  struct Impl;  // the loaded tables; opaque

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
  std::optional<int32_t> bos_id_, eos_id_;
  friend class StreamingDecoder;
};

// Incremental detokenizer for generation: push() returns the text that the new id completes.
// Text is emitted only once its UTF-8 is complete (a character split over several byte tokens
// is held back), and the concatenation of all push() results and flush() equals
// decode(all ids) — except for byte-fallback runs mixing valid characters and invalid bytes,
// where decode() turns the whole run into U+FFFD per byte and the stream has already emitted
// the valid characters. Holds a reference to the Tokenizer's tables (the Tokenizer may die first).
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int32_t id);
  // The stream continues `context` (e.g. the prompt): its last ids are decoded with the next ones but
  // never emitted, so the first new token's text is what it adds in decode(context + ids) -- a leading
  // space that a Metaspace/Strip decoder drops at the start of a sequence is kept. Drops what is held.
  void follow(const std::vector<int32_t>& context);
  // Emits what is still held (incomplete UTF-8 becomes U+FFFD) and starts a new stream.
  std::string flush();

 private:
  std::shared_ptr<const Tokenizer::Impl> impl_;
  bool skip_special_;
  std::vector<int32_t> ids_;  // ids from prefix_ on; the window re-decoded on each push
  size_t prefix_ = 0;         // ids_[0, prefix_) were emitted and only give context
  std::string prefix_bytes_;  // decode of ids_[0, prefix_) (raw bytes before U+FFFD repair)
};

// "1 2 3" <-> {1, 2, 3}: ids on one line separated by single spaces (for endor-infer's
// tokenize/detokenize). parse_ids accepts any ASCII whitespace between ids and throws
// TokenizerError on anything that is not a non-negative 32-bit integer.
std::string format_ids(const std::vector<int32_t>& ids);
std::vector<int32_t> parse_ids(std::string_view text);

}  // namespace endor
