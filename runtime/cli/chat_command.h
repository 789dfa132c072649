// endor-infer --chat: a conversation with the model through its chat template (runtime/chat).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "endor/chat_template.h"
#include "endor/format.h"
#include "endor/runtime.h"
#include "endor/tokenizer.h"

namespace endor::cli {

// What a chat needs from the container beyond the model: the template, the special-token strings
// it is rendered with, and the ids that end an assistant turn.
struct ChatSetup {
  ChatTemplate chat_template;
  std::string bos_token, eos_token;
  // End of turn: config.json's and generation_config.json's eos_token_id, tokenizer_config.json's
  // eos_token, and the well-known end-of-turn tokens (<|im_end|>, <|eot_id|>, <|end|>,
  // <end_of_turn>, <|endoftext|>, <|end_of_text|>, </s>) where the vocabulary has them as special
  // tokens.
  std::vector<int32_t> stop_ids;
};

// Reads the template from the container's chat_template.jinja / tokenizer_config.json. Throws
// endor::Error naming the file when it has none (a FileError whose hint speaks of --chat) or the
// template does not parse.
ChatSetup load_chat_setup(const ContainerReader& container, const Tokenizer& tokenizer);

struct ChatOptions {
  std::optional<std::string> prompt;  // -p TEXT: answer this one turn and return
  size_t context = 0;                 // tokens the conversation may hold (the KV cache's capacity)
  bool dump_prompt = false;           // each turn's rendered prompt and its ids to stderr
  bool stats = false;                 // per turn: tokens prefilled / reused from the cache, speed
};

// User turns come from stdin, one line each ("> " is printed first when stdin is a terminal), or
// from options.prompt. Each turn: the whole history is rendered with add_generation_prompt and
// tokenized without adding special tokens (the template writes BOS itself where the model wants
// one, as apply_chat_template does); the KV cache keeps the longest prefix of those ids it already
// holds and only the rest is prefilled; the answer is streamed to stdout until an end-of-turn id,
// `gen.max_new_tokens` or the context end, and joins the history. In a stdin session a turn that
// fails (the template raises, the context is full) is reported on stderr and dropped; with -p it
// throws.
void run_chat(Model& model, const Tokenizer& tokenizer, const ChatSetup& setup, Sampler& sampler,
              const GenerationOptions& gen, const ChatOptions& options);

}  // namespace endor::cli
