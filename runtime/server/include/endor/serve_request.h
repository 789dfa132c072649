// endor-serve's request side: the bodies of POST /v1/chat/completions and POST /v1/completions
// (OpenAI's shapes) parsed and checked into a GenerationRequest, and OpenAI's error bodies. Pure
// (no model, no I/O), so it is fuzzed as it is (tests/fuzz/fuzz_serve_request.cpp).
//
// Untrusted input: any bytes either parse into a request whose every field is in range, or throw
// ApiError(400) with one line saying which field is wrong (a message other than an assistant's
// without content names messages[i].content). Unknown fields are ignored; known options this
// server does not implement (n > 1, logprobs, tools, penalties, echo, suffix, ...) are refused
// rather than silently dropped.
// Thread safety: free functions over their arguments only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "endor/chat_template.h"  // ChatMessage
#include "endor/format.h"         // Error

namespace endor::serve {

// An error answered to a client: HTTP status, OpenAI's error type and code, one-line message.
class ApiError : public Error {
 public:
  ApiError(int status, std::string message, std::string type = "", std::string code = "", std::string param = "");
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& code() const { return code_; }    // "" -> null
  const std::string& param() const { return param_; }  // "" -> null

 private:
  int status_;
  std::string type_, code_, param_;
};

// {"error": {"message", "type", "param", "code"}} (serialized; invalid UTF-8 replaced).
std::string error_body(const ApiError& error);

enum class Endpoint { Chat, Completion };

struct GenerationRequest {
  Endpoint endpoint = Endpoint::Completion;
  std::string model;                    // as sent ("" when absent); answers name the served model
  std::vector<ChatMessage> messages;    // Chat: at least one
  // Completion: the prompt as text, or as token ids (prompt_ids non-empty) when sent as integers.
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  std::optional<uint32_t> max_tokens;   // max_tokens / max_completion_tokens (the latter when both), in [1, 2^31)
  std::optional<float> temperature;     // [0, 2]
  std::optional<float> top_p;           // (0, 1]
  std::optional<uint32_t> top_k;        // [0, 2^31); 0 = off
  std::optional<uint64_t> seed;         // any int64 / uint64 (negative ones wrap)
  std::vector<std::string> stop;        // up to 4 non-empty strings
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool ignore_eos = false;              // llama.cpp's and vLLM's extension: only max_tokens ends it
};

// Limits on what a request may hold before any model work (beyond the body size limit of the
// HTTP layer).
constexpr size_t kMaxJsonDepth = 64;      // nesting of arrays/objects in a body
constexpr size_t kMaxMessages = 4096;
constexpr size_t kMaxStopStrings = 4;
constexpr size_t kMaxStopBytes = 256;     // each stop string

// max_tokens of a request that sets neither max_tokens nor max_completion_tokens. A chat runs to
// its end of turn, but at most kDefaultMaxTokens tokens (endor-serve --default-max-tokens) and
// never past the context; a completion gets OpenAI's 16, or less under a smaller cap or context.
// Bounded so that a request without a limit (a model that never ends its turn) holds a slot for
// at most that many steps, not until the end of --ctx.
constexpr size_t kDefaultMaxTokens = 1024;
constexpr size_t kCompletionDefaultMaxTokens = 16;
// min(cap, context left) for a chat, min(16, cap, context left) for a completion, where the
// context left is ctx - prompt_tokens + 1 (the last token is sampled, never fed back); at least 1.
size_t default_max_tokens(Endpoint endpoint, size_t prompt_tokens, size_t ctx, size_t cap);

// Parse and check a body; throw ApiError(400) naming the offending field.
GenerationRequest parse_chat_request(std::string_view body);
GenerationRequest parse_completion_request(std::string_view body);

// Holds back generated text that may be the start of a stop string, and cuts the text at the first
// stop string (which is not returned). Text is fed as complete UTF-8 pieces.
class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends `piece`; returns the text now safe to send. stopped() turns true at a stop string.
  std::string push(const std::string& piece);
  // At the end of generation: whatever was held back (nothing after a stop).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string text_;  // everything pushed, up to a stop string
  size_t sent_ = 0;   // bytes of text_ returned so far
  bool stopped_ = false;
};

}  // namespace endor::serve
