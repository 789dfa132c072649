// libFuzzer target for endor-serve's request parsing: the bodies of /v1/chat/completions and
// /v1/completions, and the stop-string cutter over the parsed stop strings.
// Oracle: besides sanitizer reports, a body either throws ApiError(400) with a non-empty message
// and a parseable error body, or parses into a request whose fields are in their documented
// ranges; the stop cutter never returns more text than it was given, and never a stop string.
#include <cstring>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "endor/serve_request.h"

using namespace endor::serve;

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void check_request(const GenerationRequest& r, const std::string& input) {
  check(!r.max_tokens || (*r.max_tokens >= 1 && *r.max_tokens <= 0x7fffffffu));
  check(!r.temperature || (*r.temperature >= 0 && *r.temperature <= 2));
  check(!r.top_p || (*r.top_p > 0 && *r.top_p <= 1));
  check(!r.top_k || *r.top_k <= 0x7fffffffu);
  check(r.stop.size() <= kMaxStopStrings);
  if (r.endpoint == Endpoint::Chat) check(!r.messages.empty());
  else check(r.prompt_is_ids ? !r.prompt_ids.empty() : !r.prompt_text.empty());
  for (int32_t id : r.prompt_ids) check(id >= 0);
  // The stop cutter: fed the input in pieces, it returns a prefix of it without any stop string.
  StopStrings stops(r.stop);
  std::string out;
  for (size_t i = 0; i < input.size(); i += 7) out += stops.push(input.substr(i, 7));
  out += stops.finish();
  check(out.size() <= input.size() && input.compare(0, out.size(), out) == 0);
  for (const std::string& s : r.stop) check(out.find(s) == std::string::npos);
}

void exercise(std::string_view body, bool chat) {
  try {
    const GenerationRequest r = chat ? parse_chat_request(body) : parse_completion_request(body);
    check_request(r, std::string(body));
  } catch (const ApiError& e) {
    check(e.status() == 400 && std::strlen(e.what()) > 0);
    check(nlohmann::json::parse(error_body(e)).contains("error"));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  exercise(body, true);
  exercise(body, false);
  return 0;
}
