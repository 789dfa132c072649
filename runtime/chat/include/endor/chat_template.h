// endor_chat: chat templates. A Jinja2 subset interpreter, enough for the `chat_template` of real
// Hugging Face models (ChatML / SmolLM2, Llama-2, Llama-3.x, Qwen2/3, Mistral), rendering a
// conversation byte for byte as transformers' apply_chat_template(tokenize=False) does: the
// environment is transformers' (trim_blocks, lstrip_blocks, loopcontrols, `{% generation %}`,
// raise_exception, strftime_now, namespace, tojson without HTML escaping).
//
// Supported: {{ }}, {% %}, {# #}, whitespace control (-, +); if/elif/else, for (loop.*, else,
// `if` filter, tuple unpacking), set (name, namespace attribute, block set), macro, break/continue;
// literals, + - * / // % ** ~, comparisons, and/or/not, in / not in, inline if, attribute/item
// access, slices (strings by code point, as Python).
//   filters: trim length count upper lower tojson default/d safe string int float abs list first last
//            reverse join replace capitalize title items selectattr rejectattr map unique indent
//   tests:   defined undefined none string number integer float boolean true false mapping sequence
//            iterable callable lower upper even odd divisibleby eq/equalto ne sameas in
//   methods: str strip lstrip rstrip split rsplit startswith endswith upper lower title capitalize
//            replace join find count isdigit isspace isalpha isalnum; dict items keys values get
//   globals: raise_exception strftime_now namespace dict range
// upper/lower map ASCII, Latin-1/Extended-A, Greek and Cyrillic (no final-sigma rule).
// Syntax errors and unsupported tags fail at parse time; an unsupported filter, test or method
// fails when rendering reaches it (so a tools-only branch never used here does not refuse the
// template); each with one line naming the construct and its line:column in the template.
//
// Errors: ChatTemplateError (an endor::Error), one line "SOURCE:LINE:COL: what". Untrusted input:
// template size, nesting depth, macro recursion, loop work and output size are capped, so garbage
// templates end in an error, never a crash or a hang.
// Thread safety: a parsed ChatTemplate is immutable; render() may run concurrently.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "endor/format.h"  // endor::Error

namespace endor {

class ChatTemplateError : public Error {
 public:
  using Error::Error;
};

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", ...
  std::string content;
};

class ChatTemplate {
 public:
  // Parses `source`; `source_name` names it in errors (e.g. "model.endor:tokenizer_config.json").
  // Throws ChatTemplateError on syntax errors and unsupported tags, filters or tests.
  static ChatTemplate parse(std::string_view source, const std::string& source_name);

  // Renders with `variables` (an insertion-ordered JSON object, as Python dicts are: messages, add_generation_prompt, bos_token, ...) as the
  // template's globals. Throws ChatTemplateError on runtime errors, including raise_exception().
  std::string render(const nlohmann::ordered_json& variables) const;

  // The usual call: messages as [{role, content}], add_generation_prompt, bos_token/eos_token
  // (empty strings when the tokenizer has none), tools = none.
  std::string render_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const std::string& bos_token, const std::string& eos_token) const;

  const std::string& source_name() const;

  struct Impl;  // the parsed tree; opaque

 private:
  explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// A model's chat template and the special-token strings it is rendered with.
struct ChatTemplateSource {
  std::string text;
  std::string source_name;  // where `text` came from, for errors
  std::string bos_token, eos_token;  // tokenizer_config.json's, "" when absent
};

// Finds the chat template among a model's tokenizer files, as transformers does: chat_template.jinja
// when present, else tokenizer_config.json's "chat_template" (a string, or a list of {name, template}
// of which "default" is taken). bos_token / eos_token come from tokenizer_config.json (a string or an
// {"content": ...} object). `name_prefix` starts the source names (e.g. "model.endor:"). Returns
// nullopt when neither file holds a template; throws ChatTemplateError on a malformed
// tokenizer_config.json.
std::optional<ChatTemplateSource> find_chat_template(std::optional<std::string_view> tokenizer_config_json,
                                                     std::optional<std::string_view> chat_template_jinja,
                                                     const std::string& name_prefix);

}  // namespace endor
