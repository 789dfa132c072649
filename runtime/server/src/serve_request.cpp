// Parsing and checking OpenAI request bodies (serve_request.h).
#include "endor/serve_request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace endor::serve {

using nlohmann::json;

namespace {

const char* default_type(int status) {
  switch (status) {
    case 400: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "unavailable_error";
    default: return "server_error";
  }
}

ApiError bad(const std::string& param, const std::string& what) {
  return ApiError(400, (param.empty() ? "" : "'" + param + "' ") + what, "", "", param);
}

// Nesting of [ and { outside strings, checked before nlohmann parses (and later copies or
// destroys) the tree, so no depth of input can exhaust the stack.
void check_depth(std::string_view body) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw bad("", "the body nests arrays/objects deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

json parse_body(std::string_view body) {
  check_depth(body);
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    throw bad("", std::string("the body is not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) throw bad("", "the body must be a JSON object");
  return j;
}

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

bool is_integer(const json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

// An integer field in [lo, hi].
int64_t integer_field(const json& j, const char* key, int64_t lo, int64_t hi) {
  const json& v = j[key];
  if (!is_integer(v)) throw bad(key, "must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    throw bad(key, "must be at most " + std::to_string(hi));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) throw bad(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

double number_field(const json& j, const char* key) {
  const json& v = j[key];
  if (!v.is_number()) throw bad(key, "must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x)) throw bad(key, "must be finite");
  return x;
}

bool bool_field(const json& j, const char* key) {
  if (!j[key].is_boolean()) throw bad(key, "must be true or false");
  return j[key].get<bool>();
}

std::string string_field(const json& j, const char* key) {
  if (!j[key].is_string()) throw bad(key, "must be a string");
  return j[key].get<std::string>();
}

// The options both endpoints share.
void parse_common(const json& j, GenerationRequest& r) {
  if (present(j, "model")) r.model = string_field(j, "model");
  const int64_t int_max = std::numeric_limits<int32_t>::max();
  for (const char* key : {"max_tokens", "max_completion_tokens"})
    if (present(j, key)) r.max_tokens = uint32_t(integer_field(j, key, 1, int_max));
  if (present(j, "temperature")) {
    const double t = number_field(j, "temperature");
    if (t < 0 || t > 2) throw bad("temperature", "must be in [0, 2]");
    r.temperature = float(t);
  }
  if (present(j, "top_p")) {
    const double p = number_field(j, "top_p");
    if (!(p > 0 && p <= 1)) throw bad("top_p", "must be in (0, 1]");
    r.top_p = float(p);
  }
  if (present(j, "top_k")) r.top_k = uint32_t(integer_field(j, "top_k", 0, int_max));
  if (present(j, "seed")) {
    const json& v = j["seed"];
    if (!is_integer(v)) throw bad("seed", "must be an integer");
    r.seed = v.is_number_unsigned() ? v.get<uint64_t>() : uint64_t(v.get<int64_t>());
  }
  if (present(j, "n") && integer_field(j, "n", 1, int_max) != 1)
    throw bad("n", "other than 1 is not supported (one choice per request)");
  if (present(j, "best_of") && integer_field(j, "best_of", 1, int_max) != 1)
    throw bad("best_of", "other than 1 is not supported");
  if (present(j, "stop")) {
    const json& s = j["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      if (s.size() > kMaxStopStrings) throw bad("stop", "holds at most " + std::to_string(kMaxStopStrings) + " strings");
      for (const json& e : s) {
        if (!e.is_string()) throw bad("stop", "must be a string or a list of strings");
        r.stop.push_back(e.get<std::string>());
      }
    } else {
      throw bad("stop", "must be a string or a list of strings");
    }
    for (const std::string& x : r.stop) {
      if (x.empty()) throw bad("stop", "strings must not be empty");
      if (x.size() > kMaxStopBytes) throw bad("stop", "strings must be at most " + std::to_string(kMaxStopBytes) + " bytes");
    }
  }
  if (present(j, "stream")) r.stream = bool_field(j, "stream");
  if (present(j, "ignore_eos")) r.ignore_eos = bool_field(j, "ignore_eos");
  if (present(j, "stream_options")) {
    const json& o = j["stream_options"];
    if (!o.is_object()) throw bad("stream_options", "must be an object");
    if (present(o, "include_usage")) r.include_usage = bool_field(o, "include_usage");
  }
  // Fields OpenAI defines that change nothing here: type-checked, then ignored.
  if (present(j, "user")) string_field(j, "user");
  if (present(j, "store")) bool_field(j, "store");
  if (present(j, "parallel_tool_calls")) bool_field(j, "parallel_tool_calls");
  if (present(j, "metadata") && !j["metadata"].is_object()) throw bad("metadata", "must be an object");
  // Options with an effect this server does not implement: refused, not ignored.
  for (const char* key : {"presence_penalty", "frequency_penalty"})
    if (present(j, key) && number_field(j, key) != 0) throw bad(key, "is not supported (only 0)");
  // llama.cpp's and vLLM's extension, whose neutral value is 1 (a multiplier), not 0.
  if (present(j, "repetition_penalty") && number_field(j, "repetition_penalty") != 1)
    throw bad("repetition_penalty", "is not supported (only 1)");
  if (present(j, "logprobs")) {
    const json& v = j["logprobs"];
    if (!(v.is_boolean() && !v.get<bool>()) && !(is_integer(v) && v.get<int64_t>() == 0))
      throw bad("logprobs", "is not supported");
  }
  if (present(j, "top_logprobs")) throw bad("top_logprobs", "is not supported");
  if (present(j, "logit_bias") && !(j["logit_bias"].is_object() && j["logit_bias"].empty()))
    throw bad("logit_bias", "is not supported");
  if (present(j, "tools") && !(j["tools"].is_array() && j["tools"].empty())) throw bad("tools", "are not supported");
  if (present(j, "functions")) throw bad("functions", "are not supported");
  // Without tools the model may only answer in text: "none" and "auto" say just that.
  for (const char* key : {"tool_choice", "function_call"}) {
    if (!present(j, key)) continue;
    const json& v = j[key];
    if (!v.is_string() && !v.is_object()) throw bad(key, "must be a string or an object");
    if (!(v == "none" || v == "auto")) throw bad(key, "other than \"none\" or \"auto\" is not supported (no tools)");
  }
  if (present(j, "audio")) throw bad("audio", "is not supported (text only)");
  if (present(j, "modalities")) {
    const json& v = j["modalities"];
    if (!v.is_array()) throw bad("modalities", "must be a list of strings");
    for (const json& e : v) {
      if (!e.is_string()) throw bad("modalities", "must be a list of strings");
      if (e != "text") throw bad("modalities", "other than \"text\" are not supported");
    }
  }
  if (present(j, "response_format")) {
    const json& f = j["response_format"];
    if (!f.is_object() || !f.contains("type") || f["type"] != "text")
      throw bad("response_format", "other than {\"type\": \"text\"} is not supported");
  }
}

// A message's content: a string or a non-empty list of text parts. Every message needs it except
// an assistant's that carries tool_calls or function_call, as OpenAI's API has it; those fields
// are refused (no tool calls here), so in effect every message needs content. Absent and null
// are the same.
std::string message_content(const json& m, size_t index) {
  const std::string at = "messages[" + std::to_string(index) + "]";
  const std::string where = at + ".content";
  const std::string& role = m["role"].get_ref<const std::string&>();
  for (const char* key : {"name", "tool_call_id"})
    if (present(m, key) && !m[key].is_string()) throw bad(at + "." + key, "must be a string");
  if (present(m, "tool_calls")) {
    const json& t = m["tool_calls"];
    if (!t.is_array()) throw bad(at + ".tool_calls", "must be a list of tool calls");
    if (!t.empty()) throw bad(at + ".tool_calls", "are not supported (tool calls)");
  }
  if (present(m, "function_call")) throw bad(at + ".function_call", "is not supported (tool calls)");
  if (!present(m, "content")) {
    if (role == "assistant")
      throw bad(where, "is required (an assistant message may leave it out only with tool_calls)");
    throw bad(where, "is required for a " + role + " message");
  }
  const json& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw bad(where, "must be a string or a list of content parts");
  if (c.empty()) throw bad(where, "must not be an empty list");
  std::string text;
  for (const json& part : c) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      throw bad(where, "parts must be objects with a \"type\"");
    if (part["type"] != "text") throw bad(where, "parts of type " + part["type"].dump() + " are not supported (text only)");
    if (!part.contains("text") || !part["text"].is_string()) throw bad(where, "text parts need a string \"text\"");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<int32_t> token_ids(const json& a, const char* what) {
  std::vector<int32_t> ids;
  for (const json& e : a) {
    if (!is_integer(e)) throw bad("prompt", std::string(what) + " must hold only integers (token ids)");
    if (e.is_number_integer() && e.get<int64_t>() < 0) throw bad("prompt", "token ids must not be negative");
    if (e.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max()))
      throw bad("prompt", "token id " + e.dump() + " is out of range");
    ids.push_back(int32_t(e.get<int64_t>()));
  }
  return ids;
}

}  // namespace

ApiError::ApiError(int status, std::string message, std::string type, std::string code, std::string param)
    : Error(std::move(message)),
      status_(status),
      type_(type.empty() ? default_type(status) : std::move(type)),
      code_(std::move(code)),
      param_(std::move(param)) {}

std::string error_body(const ApiError& e) {
  const json body = {{"error",
                      {{"message", e.what()},
                       {"type", e.type()},
                       {"param", e.param().empty() ? json(nullptr) : json(e.param())},
                       {"code", e.code().empty() ? json(nullptr) : json(e.code())}}}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

GenerationRequest parse_chat_request(std::string_view body) {
  const json j = parse_body(body);
  GenerationRequest r;
  r.endpoint = Endpoint::Chat;
  if (!j.contains("messages")) throw bad("messages", "is required");
  const json& ms = j["messages"];
  if (!ms.is_array() || ms.empty()) throw bad("messages", "must be a non-empty list of messages");
  if (ms.size() > kMaxMessages) throw bad("messages", "holds more than " + std::to_string(kMaxMessages) + " messages");
  for (size_t i = 0; i < ms.size(); ++i) {
    const json& m = ms[i];
    if (!m.is_object()) throw bad("messages[" + std::to_string(i) + "]", "must be an object");
    if (!m.contains("role") || !m["role"].is_string() || m["role"].get_ref<const std::string&>().empty())
      throw bad("messages[" + std::to_string(i) + "].role", "must be a non-empty string");
    r.messages.push_back({m["role"].get<std::string>(), message_content(m, i)});
  }
  parse_common(j, r);
  return r;
}

GenerationRequest parse_completion_request(std::string_view body) {
  const json j = parse_body(body);
  GenerationRequest r;
  r.endpoint = Endpoint::Completion;
  if (!present(j, "prompt")) throw bad("prompt", "is required");
  const json& p = j["prompt"];
  if (p.is_string()) {
    r.prompt_text = p.get<std::string>();
  } else if (p.is_array() && !p.empty() && is_integer(p[0])) {
    r.prompt_ids = token_ids(p, "a prompt of token ids");
    r.prompt_is_ids = true;
  } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    r.prompt_text = p[0].get<std::string>();
  } else if (p.is_array() && p.size() == 1 && p[0].is_array()) {
    r.prompt_ids = token_ids(p[0], "a prompt of token ids");
    r.prompt_is_ids = true;
  } else if (p.is_array() && p.size() > 1) {
    throw bad("prompt", "holds several prompts; send one per request");
  } else {
    throw bad("prompt", "must be a string, a list of token ids, or a list of one of them");
  }
  if (r.prompt_is_ids ? r.prompt_ids.empty() : r.prompt_text.empty()) throw bad("prompt", "is empty");
  if (present(j, "echo") && bool_field(j, "echo")) throw bad("echo", "is not supported");
  if (present(j, "suffix") && !(j["suffix"].is_string() && j["suffix"].get_ref<const std::string&>().empty()))
    throw bad("suffix", "is not supported");
  parse_common(j, r);
  return r;
}

size_t default_max_tokens(Endpoint endpoint, size_t prompt_tokens, size_t ctx, size_t cap) {
  // The last sampled token is never fed back: a context of ctx positions holds ctx - prompt + 1 new ones.
  const size_t left = prompt_tokens <= ctx ? ctx - prompt_tokens + 1 : 1;
  size_t n = std::min(std::max<size_t>(cap, 1), left);
  if (endpoint == Endpoint::Completion) n = std::min(n, kCompletionDefaultMaxTokens);
  return n;
}

std::string StopStrings::push(const std::string& piece) {
  if (stopped_) return "";
  const size_t old = text_.size();
  text_ += piece;
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t from = old >= s.size() ? old - s.size() + 1 : 0;  // matches that end in the new piece
    const size_t at = text_.find(s, from);
    if (at != std::string::npos && at < cut) cut = at;
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = cut > sent_ ? text_.substr(sent_, cut - sent_) : "";
    sent_ = text_.size();
    return out;
  }
  // Hold back the longest tail of the text that begins some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_)
    for (size_t n = std::min(s.size() - 1, text_.size()); n > hold; --n)
      if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  const size_t until = std::max(sent_, text_.size() - hold);
  std::string out = text_.substr(sent_, until - sent_);
  sent_ = until;
  return out;
}

std::string StopStrings::finish() {
  if (stopped_) return "";
  std::string out = text_.substr(sent_);
  sent_ = text_.size();
  return out;
}

}  // namespace endor::serve
