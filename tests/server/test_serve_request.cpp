// endor-serve's request parsing (serve_request.h): OpenAI bodies of both endpoints into checked
// requests, each kind of bad field refused with 400 naming it, unknown fields ignored, OpenAI's
// error body, and the stop-string cutter.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "endor/serve_request.h"

using namespace endor::serve;

namespace {

// The ApiError a body raises ("" when it parses); `chat` picks the endpoint.
std::string refusal(const std::string& body, bool chat) {
  try {
    chat ? parse_chat_request(body) : parse_completion_request(body);
  } catch (const ApiError& e) {
    CHECK(e.status() == 400);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("serve request: a full chat body parses into every field") {
  const GenerationRequest r = parse_chat_request(
      R"({"model":"x","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}],"name":"ann"},{"role":"assistant","content":"","tool_calls":[]}],
          "max_completion_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,"seed":-1,"stop":"\n","stream":true,
          "stream_options":{"include_usage":true},"n":1,"user":"ignored","metadata":{"a":1},"presence_penalty":0,
          "repetition_penalty":1,"tool_choice":"none","parallel_tool_calls":false,"store":false,"modalities":["text"],
          "ignore_eos":true})");
  CHECK(r.endpoint == Endpoint::Chat);
  CHECK(r.model == "x");
  REQUIRE(r.messages.size() == 3);
  CHECK(r.messages[1].role == "user");
  CHECK(r.messages[1].content == "Hi there");
  CHECK(r.messages[2].role == "assistant");
  CHECK(r.messages[2].content == "");
  CHECK(*r.max_tokens == 7);
  CHECK(*r.temperature == doctest::Approx(0.5));
  CHECK(*r.top_p == doctest::Approx(0.9));
  CHECK(*r.top_k == 40);
  CHECK(*r.seed == ~uint64_t(0));
  CHECK(r.stop == std::vector<std::string>{"\n"});
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.ignore_eos);
}

TEST_CASE("serve request: completion prompts as text, token ids, or a list of one") {
  CHECK(parse_completion_request(R"({"prompt":"In the"})").prompt_text == "In the");
  const GenerationRequest ids = parse_completion_request(R"({"prompt":[1,2,3],"max_tokens":2,"stop":["a","b"]})");
  CHECK(ids.prompt_is_ids);
  CHECK(ids.prompt_ids == std::vector<int32_t>{1, 2, 3});
  CHECK(ids.stop.size() == 2);
  CHECK(parse_completion_request(R"({"prompt":["one"]})").prompt_text == "one");
  CHECK(parse_completion_request(R"({"prompt":[[4,5]]})").prompt_ids == std::vector<int32_t>{4, 5});
  CHECK(!parse_completion_request(R"({"prompt":"x"})").max_tokens);
}

TEST_CASE("serve request: each bad field is refused with 400 naming it") {
  struct Case {
    const char* body;
    bool chat;
    const char* says;
  };
  const Case cases[] = {
      {"", true, "not valid JSON"},
      {"{\"messages\":", true, "not valid JSON"},
      {"[1]", false, "must be a JSON object"},
      {"{}", true, "'messages' is required"},
      {R"({"messages":[]})", true, "non-empty list"},
      {R"({"messages":"hi"})", true, "non-empty list"},
      {R"({"messages":[1]})", true, "'messages[0]' must be an object"},
      {R"({"messages":[{"content":"x"}]})", true, "'messages[0].role'"},
      {R"({"messages":[{"role":"user","content":5}]})", true, "'messages[0].content'"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", true, "text only"},
      // Content: required of every message but an assistant's carrying tool calls (which are refused).
      {R"({"messages":[{"role":"user"}]})", true, "'messages[0].content' is required for a user message"},
      {R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":null}]})", true,
       "'messages[1].content' is required for a user message"},
      {R"({"messages":[{"role":"system"},{"role":"user","content":"a"}]})", true,
       "'messages[0].content' is required for a system message"},
      {R"({"messages":[{"role":"user","content":"a"},{"role":"tool","tool_call_id":"c"}]})", true,
       "'messages[1].content' is required for a tool message"},
      {R"({"messages":[{"role":"user","content":"a"},{"role":"assistant"},{"role":"user","content":"b"}]})", true,
       "'messages[1].content' is required (an assistant message may leave it out only with tool_calls)"},
      {R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]})",
       true, "'messages[1].tool_calls' are not supported"},
      {R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":{}}]})", true,
       "'messages[1].tool_calls' must be a list"},
      {R"({"messages":[{"role":"assistant","function_call":{"name":"f"}}]})", true,
       "'messages[0].function_call' is not supported"},
      {R"({"messages":[{"role":"user","content":[]}]})", true, "'messages[0].content' must not be an empty list"},
      {R"({"messages":[{"role":"user","content":"a","name":5}]})", true, "'messages[0].name' must be a string"},
      {R"({"messages":[{"role":"tool","content":"a","tool_call_id":[]}]})", true,
       "'messages[0].tool_call_id' must be a string"},
      // Fields OpenAI defines that change nothing here are still type-checked.
      {R"({"messages":[{"role":"user","content":"a"}],"user":7})", true, "'user' must be a string"},
      {R"({"messages":[{"role":"user","content":"a"}],"store":"yes"})", true, "'store' must be true or false"},
      {R"({"messages":[{"role":"user","content":"a"}],"parallel_tool_calls":1})", true,
       "'parallel_tool_calls' must be true or false"},
      {R"({"messages":[{"role":"user","content":"a"}],"metadata":[]})", true, "'metadata' must be an object"},
      {R"({"messages":[{"role":"user","content":"a"}],"tool_choice":"required"})", true,
       "'tool_choice' other than \"none\" or \"auto\" is not supported"},
      {R"({"messages":[{"role":"user","content":"a"}],"tool_choice":{"type":"function","function":{"name":"f"}}})",
       true, "'tool_choice' other than"},
      {R"({"messages":[{"role":"user","content":"a"}],"tool_choice":3})", true, "'tool_choice' must be a string or an object"},
      {R"({"messages":[{"role":"user","content":"a"}],"function_call":{"name":"f"}})", true, "'function_call' other than"},
      {R"({"messages":[{"role":"user","content":"a"}],"audio":{"voice":"x"}})", true, "'audio' is not supported"},
      {R"({"messages":[{"role":"user","content":"a"}],"modalities":["text","audio"]})", true,
       "'modalities' other than \"text\" are not supported"},
      {R"({"messages":[{"role":"user","content":"a"}],"modalities":"text"})", true, "'modalities' must be a list"},
      {R"({"prompt":"x","repetition_penalty":1.1})", false, "'repetition_penalty' is not supported (only 1)"},
      {R"({"prompt":"x","repetition_penalty":0})", false, "'repetition_penalty' is not supported (only 1)"},
      {R"({"prompt":"x","user":{}})", false, "'user' must be a string"},
      {R"({"messages":[{"role":"user","content":"x"}],"n":2})", true, "'n' other than 1"},
      {R"({"prompt":"x","max_tokens":0})", false, "'max_tokens' must be in [1, 2147483647]"},
      {R"({"prompt":"x","max_tokens":-5})", false, "'max_tokens' must be in"},
      {R"({"prompt":"x","max_tokens":1e9})", false, "'max_tokens' must be an integer"},
      {R"({"prompt":"x","max_tokens":99999999999999999999})", false, "'max_tokens' must be an integer"},
      {R"({"prompt":"x","max_tokens":18446744073709551615})", false, "'max_tokens' must be at most"},
      {R"({"prompt":"x","max_tokens":"8"})", false, "'max_tokens' must be an integer"},
      {R"({"prompt":"x","temperature":2.5})", false, "'temperature' must be in [0, 2]"},
      {R"({"prompt":"x","temperature":"hot"})", false, "'temperature' must be a number"},
      {R"({"prompt":"x","top_p":0})", false, "'top_p' must be in (0, 1]"},
      {R"({"prompt":"x","top_k":-1})", false, "'top_k' must be in"},
      {R"({"prompt":"x","seed":1.5})", false, "'seed' must be an integer"},
      {R"({"prompt":"x","stop":5})", false, "'stop' must be a string"},
      {R"({"prompt":"x","stop":["a","b","c","d","e"]})", false, "at most 4"},
      {R"({"prompt":"x","stop":[""]})", false, "must not be empty"},
      {R"({"prompt":"x","stream":"yes"})", false, "'stream' must be true or false"},
      {R"({"prompt":"x","stream_options":3})", false, "'stream_options' must be an object"},
      {R"({"prompt":"x","logprobs":5})", false, "'logprobs' is not supported"},
      {R"({"prompt":"x","echo":true})", false, "'echo' is not supported"},
      {R"({"prompt":"x","frequency_penalty":0.5})", false, "'frequency_penalty' is not supported"},
      {R"({"prompt":""})", false, "'prompt' is empty"},
      {R"({"prompt":[]})", false, "'prompt' must be"},
      {R"({"prompt":[1,-2]})", false, "must not be negative"},
      {R"({"prompt":[1,4294967296]})", false, "out of range"},
      {R"({"prompt":[1,"a"]})", false, "only integers"},
      {R"({"prompt":["a","b"]})", false, "several prompts"},
      {R"({"prompt":5})", false, "'prompt' must be"},
      {"{\"prompt\":\"\xff\"}", false, "not valid JSON"},       // invalid UTF-8
      {"{\"prompt\":\"\xc0\xaf\"}", false, "not valid JSON"},   // overlong encoding
      {"{\"prompt\":\"\xed\xa0\x80\"}", false, "not valid JSON"},  // a surrogate
  };
  for (const Case& c : cases) {
    CAPTURE(c.body);
    CHECK(refusal(c.body, c.chat).find(c.says) != std::string::npos);
  }
  // Nesting deep enough to matter is refused before the JSON parser sees it.
  const std::string deep = R"({"prompt":"x","extra":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  CHECK(refusal(deep, false).find("deeper than 64") != std::string::npos);
  // Brackets inside strings do not count.
  CHECK(refusal(R"({"prompt":")" + std::string(1000, '[') + "\"}", false).empty());
}

TEST_CASE("serve request: a message's content, and what may leave it out") {
  // An empty string is content (OpenAI takes it); so is an assistant turn of text between user turns.
  const GenerationRequest r = parse_chat_request(
      R"({"messages":[{"role":"user","content":""},{"role":"assistant","content":"x"},{"role":"user","content":"y"}]})");
  REQUIRE(r.messages.size() == 3);
  CHECK(r.messages[0].content.empty());
  // The error names the field as OpenAI's `param`.
  try {
    parse_chat_request(R"({"messages":[{"role":"user","content":"a"},{"role":"user"}]})");
    FAIL("a user message without content was accepted");
  } catch (const ApiError& e) {
    CHECK(e.status() == 400);
    CHECK(e.param() == "messages[1].content");
  }
}

TEST_CASE("serve request: max_tokens left out gets a bounded default") {
  // Which of max_tokens / max_completion_tokens counts when both are set: the latter.
  CHECK(*parse_completion_request(R"({"prompt":"x","max_tokens":5,"max_completion_tokens":9})").max_tokens == 9);
  CHECK(*parse_completion_request(R"({"prompt":"x","max_tokens":5,"max_completion_tokens":null})").max_tokens == 5);
  // Chats: the cap, or the context left (ctx - prompt + 1) when less.
  CHECK(default_max_tokens(Endpoint::Chat, 10, 4096, kDefaultMaxTokens) == 1024);
  CHECK(default_max_tokens(Endpoint::Chat, 3500, 4096, kDefaultMaxTokens) == 597);
  CHECK(default_max_tokens(Endpoint::Chat, 4096, 4096, kDefaultMaxTokens) == 1);
  CHECK(default_max_tokens(Endpoint::Chat, 10, 64, 20) == 20);
  CHECK(default_max_tokens(Endpoint::Chat, 50, 64, 20) == 15);
  CHECK(default_max_tokens(Endpoint::Chat, 10, 1 << 20, 1u << 31) == (1u << 20) - 9);
  // Completions: OpenAI's 16, under the same two bounds.
  CHECK(default_max_tokens(Endpoint::Completion, 10, 4096, kDefaultMaxTokens) == 16);
  CHECK(default_max_tokens(Endpoint::Completion, 10, 4096, 8) == 8);
  CHECK(default_max_tokens(Endpoint::Completion, 4090, 4096, kDefaultMaxTokens) == 7);
  // Never 0, even for a prompt past the context (refused before this is asked) or a cap of 0.
  CHECK(default_max_tokens(Endpoint::Completion, 5000, 4096, kDefaultMaxTokens) == 1);
  CHECK(default_max_tokens(Endpoint::Chat, 10, 4096, 0) == 1);
}

TEST_CASE("serve request: OpenAI's error body") {
  const ApiError e(429, "busy", "", "", "");
  const nlohmann::json j = nlohmann::json::parse(error_body(e));
  CHECK(j["error"]["message"] == "busy");
  CHECK(j["error"]["type"] == "rate_limit_error");
  CHECK(j["error"]["code"].is_null());
  CHECK(j["error"]["param"].is_null());
  const nlohmann::json k = nlohmann::json::parse(error_body(ApiError(400, "bad", "", "some_code", "prompt")));
  CHECK(k["error"]["type"] == "invalid_request_error");
  CHECK(k["error"]["code"] == "some_code");
  CHECK(k["error"]["param"] == "prompt");
}

TEST_CASE("serve request: stop strings cut the text before them, across pieces") {
  StopStrings s({"END", "\n\n"});
  std::string out = s.push("Hello E");
  CHECK(out == "Hello ");  // "E" may start "END": held back
  out += s.push("N");
  CHECK(out == "Hello ");
  out += s.push("Dless");
  CHECK(s.stopped());
  CHECK(out == "Hello ");
  CHECK(s.push("more").empty());
  CHECK(s.finish().empty());

  StopStrings t({"END"});
  std::string u = t.push("The EN");
  u += t.push("emy");  // not a stop after all: released
  CHECK(!t.stopped());
  u += t.finish();
  CHECK(u == "The ENemy");

  StopStrings none({});
  CHECK(none.push("abc") == "abc");
  CHECK(none.finish().empty());

  // The stop that begins first wins, whichever is listed first.
  StopStrings w({"bc", "abcd"});
  CHECK(w.push("xxabcd") == "xx");
}
