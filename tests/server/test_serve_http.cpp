// endor-serve end to end on the sample model (samples/kjv-llama, packed with the built endor-pack),
// the server a child process on a loopback port: greedy text under concurrency equal to endor-infer
// alone (slots full, queueing, chunked prefill, streams, chats), the API key, limits and error
// codes, >= 1000 malformed requests each answered 4xx with an error body and the server alive
// after (messages without content refused at once, naming messages[i].content; max_tokens left out
// bounded by --default-max-tokens, 16 and the context), a half-sent request timed out, clients
// that leave (streamed or not, in a slot or queued) freeing their places, and SIGTERM ending
// streams with a final chunk and exit 0.
#include <atomic>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "serve_test_util.h"

using namespace endor;
using endor::test::ServerProcess;
using endor::test::TempDir;
using nlohmann::json;

namespace {

// Llama-2-like turns over the sample's own special tokens <s> and </s> (as tests/infer's chat test).
const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
    "{{ 'Question: ' + m['content'] | trim + '\\nAnswer:' }}{% elif m['role'] == 'assistant' %}"
    "{{ ' ' + m['content'] | trim + eos_token }}{% else %}{{ raise_exception('no ' + m['role'] + ' role') }}"
    "{% endif %}{% endfor %}";

// The sample with kTemplate in its tokenizer_config.json, packed with `pack_args`.
std::string pack_with_chat(const TempDir& dir, const std::string& name, const std::string& pack_args) {
  const std::string folder = dir.file(name + ".src");
  std::filesystem::create_directory(folder);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"})
    std::filesystem::copy_file(test::sample_dir() + "/" + f, folder + "/" + f);
  json config = test::read_json(test::sample_dir() + "/tokenizer_config.json");
  config["chat_template"] = kTemplate;
  std::ofstream(folder + "/tokenizer_config.json") << config.dump(1);
  const std::string out = dir.file(name);
  const auto r = test::run_capture(test::endor_pack() + " " + pack_args + " " + folder + " -o " + out, dir);
  INFO("endor-pack stderr: ", r.err);
  REQUIRE(r.status == 0);
  return out;
}

// The sample with a context of 4096 positions (its rotary embeddings take any position; the weights
// do not change), packed with `pack_args`: a generation long enough to still run when its client leaves.
std::string pack_long_context(const TempDir& dir, const std::string& name, const std::string& pack_args) {
  const std::string folder = dir.file(name + ".src");
  std::filesystem::create_directory(folder);
  for (const char* f : {"generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(test::sample_dir() + "/" + f, folder + "/" + f);
  json config = test::read_json(test::sample_dir() + "/config.json");
  config["max_position_embeddings"] = 4096;
  std::ofstream(folder + "/config.json") << config.dump(1);
  const std::string out = dir.file(name);
  const auto r = test::run_capture(test::endor_pack() + " " + pack_args + " " + folder + " -o " + out, dir);
  INFO("endor-pack stderr: ", r.err);
  REQUIRE(r.status == 0);
  return out;
}

// A connection to 127.0.0.1:port that sent `request` and reads nothing; closed by the destructor
// or close() (the client going away).
class OpenRequest {
 public:
  OpenRequest(int port, const std::string& request) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) == ssize_t(request.size()));
  }
  ~OpenRequest() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// The value of a metric line "NAME VALUE" in Prometheus text (-1 when absent).
double metric_value(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

const std::vector<std::string> kPrompts = {
    "In the beginning",
    "And God said",
    "The LORD is my shepherd",
    "Blessed are the",
    "And it came to pass, when the men of the city",
    "Thou shalt",
    "And Moses went up unto",
    "For God so loved",
    "And the earth was without form, and void; and darkness",
    "Hear, O Israel",
    "And he said unto them",
    "Let there be",
    "Behold, I stand at the door",
    "And the children of Israel",
    "Praise ye the LORD",
    "Now these are the generations",
};

// endor-infer -p PROMPT greedy: what it prints (the prompt, the continuation, and a newline when the
// text does not end in one).
std::string infer_output(const TempDir& dir, const std::string& model, const std::string& prompt, int n) {
  const auto r = test::infer(dir, model + " -p '" + prompt + "' -n " + std::to_string(n) + " --temperature 0");
  INFO(r.err);
  REQUIRE(r.status == 0);
  return r.out;
}

// What endor-infer prints for a prompt and the server's continuation of it.
std::string as_printed(const std::string& prompt, const std::string& text) {
  const std::string all = prompt + text;
  return all.empty() || all.back() != '\n' ? all + "\n" : all;
}

// POST a JSON body; returns (status, parsed body).
std::pair<int, json> post_json(int port, const std::string& path, const json& body, const std::string& key = "") {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  const auto res = cli.Post(path.c_str(), headers, body.dump(), "application/json");
  if (!res) return {-int(res.error()), json()};  // no response: minus httplib's error code
  return {res->status, json::parse(res->body, nullptr, false)};
}

// A stream's text: the SSE "data:" lines' deltas joined; finish is the last finish_reason seen.
struct StreamResult {
  int status = 0;
  std::string text, finish;
  bool done = false;  // ended with data: [DONE]
  json usage;
};
StreamResult post_stream(int port, const std::string& path, json body) {
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const std::string raw = test::raw_exchange(port, test::post(path, body.dump()), 120);
  StreamResult r;
  r.status = test::status_of(raw);
  size_t at = 0;
  while ((at = raw.find("data: ", at)) != std::string::npos) {
    const size_t end = raw.find("\n\n", at);
    if (end == std::string::npos) break;
    const std::string data = raw.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      r.done = true;
      continue;
    }
    const json chunk = json::parse(data, nullptr, false);
    if (chunk.is_discarded()) continue;
    if (chunk.contains("usage")) r.usage = chunk["usage"];
    for (const json& c : chunk.value("choices", json::array())) {
      if (c.contains("delta") && c["delta"].contains("content")) r.text += c["delta"]["content"].get<std::string>();
      if (c.contains("text")) r.text += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) r.finish = c["finish_reason"];
    }
  }
  return r;
}

// Every prompt at once (a thread each), half of them streamed; each text must equal endor-infer's.
void check_concurrent_greedy(const TempDir& dir, const std::string& model, const std::string& server_args, int n) {
  std::vector<std::string> expected;
  for (const std::string& p : kPrompts) expected.push_back(infer_output(dir, model, p, n));
  ServerProcess server(dir, "greedy");
  REQUIRE_MESSAGE(server.start(model, "--threads 1 " + server_args), server.log);
  std::vector<std::string> got(kPrompts.size());
  std::vector<int> status(kPrompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < kPrompts.size(); ++i)
    threads.emplace_back([&, i] {
      const json body = {{"prompt", kPrompts[i]}, {"max_tokens", n}, {"temperature", 0}};
      if (i % 2) {
        const StreamResult s = post_stream(server.port, "/v1/completions", body);
        status[i] = s.done ? s.status : -1;
        got[i] = s.text;
      } else {
        const auto [st, j] = post_json(server.port, "/v1/completions", body);
        status[i] = st;
        if (st == 200) got[i] = j["choices"][0]["text"];
      }
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    CAPTURE(kPrompts[i]);
    CHECK(status[i] == 200);
    CHECK(as_printed(kPrompts[i], got[i]) == expected[i]);
  }
  CHECK(server.terminate() == 0);
}

}  // namespace

TEST_CASE("endor-serve: a malformed command line is one line, exit 2, before anything listens") {
  TempDir dir;
  const std::string model = test::pack_sample(dir, "sample.endor", "convert");  // context 256
  // `timeout`: a case that wrongly starts the server fails instead of hanging the suite.
  const std::string serve = "timeout 60 " + test::endor_serve() + " ";
  const struct {
    std::string args, what;
  } cases[] = {
      {model + " --bogus", "bogus"},
      {model + " other.endor", "unexpected argument 'other.endor'"},
      {"--port 0", "missing MODEL.endor"},
      {model + " --threads -1", "--threads must be in [0, 4096] (0 = all cores), got -1"},
      {model + " --ctx 1", "--ctx must be a whole number >= 2, got '1'"},
      {model + " --ctx many", "--ctx must be a whole number >= 2, got 'many'"},
      {model + " --ctx 257", "--ctx 257 exceeds the model's context length 256 (max_position_embeddings)"},
      {model + " --cpu-mem 12Q", "--cpu-mem: invalid size '12Q'"},
      {model + " --body-limit lots", "--body-limit: invalid size 'lots'"},
      {model + " --kv-dtype f8", "--kv-dtype must be f32 or f16"},
      {model + " --parallel 0", "--parallel must be in [1, 256]"},
      {model + " --default-max-tokens 0", "--default-max-tokens must be in [1, 2147483647], got 0"},
      {model + " --default-max-tokens 2147483648", "--default-max-tokens must be in [1, 2147483647], got 2147483648"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.args);
    const auto r = test::run_capture(serve + c.args + " --port 0", dir);
    INFO("stderr: ", r.err);
    CHECK(test::is_usage_error(r, "endor-serve", c.what));
  }
  // A file that is not a model: exit 1, the file named, no help hint.
  const auto r = test::run_capture(serve + dir.file("absent.endor") + " --port 0", dir);
  CHECK(r.status == 1);
  CHECK(r.err.rfind("error: " + dir.file("absent.endor") + ": ", 0) == 0);
  CHECK(r.err.find("--help") == std::string::npos);
}

TEST_CASE("endor-serve: greedy text under concurrency equals endor-infer alone") {
  TempDir dir;
  const std::string f16 = test::pack_sample(dir, "sample-50.endor", "prune --method magnitude --sparsity 0.5");
  const std::string int8 = test::pack_sample(dir, "sample-int8.endor", "prune --method magnitude --sparsity 0.5 --quant int8");
  SUBCASE("16 slots, every request in one step (f16)") { check_concurrent_greedy(dir, f16, "--parallel 16", 40); }
  SUBCASE("16 slots, int8") { check_concurrent_greedy(dir, int8, "--parallel 16", 40); }
  SUBCASE("3 slots: requests queue, join and leave") { check_concurrent_greedy(dir, int8, "--parallel 3", 24); }
  SUBCASE("prompts prefilled in chunks of 3 tokens beside decoding slots") {
    check_concurrent_greedy(dir, f16, "--parallel 8 --prefill-chunk 3", 24);
  }
}

TEST_CASE("endor-serve: chats through the template equal endor-infer --chat") {
  TempDir dir;
  const std::string model = pack_with_chat(dir, "chat.endor", "prune --method magnitude --sparsity 0.5");
  const std::vector<std::string> questions = {"Who made the heaven?", "What is the way?", "Who is my shepherd?",
                                              "Where is the light?"};
  std::vector<std::string> expected;
  for (const std::string& q : questions) {
    const auto r = test::infer(dir, model + " --chat -p '" + q + "' -n 30 --temperature 0");
    REQUIRE(r.status == 0);
    expected.push_back(r.out.substr(0, r.out.size() - 1));  // the answer, then "\n"
  }
  ServerProcess server(dir, "chat");
  REQUIRE_MESSAGE(server.start(model, "--threads 1 --parallel 4"), server.log);
  std::vector<json> answers(questions.size());
  std::vector<StreamResult> streams(questions.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < questions.size(); ++i)
    threads.emplace_back([&, i] {
      const json body = {{"messages", {{{"role", "user"}, {"content", questions[i]}}}}, {"max_tokens", 30},
                         {"temperature", 0}};
      answers[i] = post_json(server.port, "/v1/chat/completions", body).second;
      streams[i] = post_stream(server.port, "/v1/chat/completions", body);
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < questions.size(); ++i) {
    CAPTURE(questions[i]);
    REQUIRE(answers[i].contains("choices"));
    CHECK(answers[i]["object"] == "chat.completion");
    CHECK(answers[i]["choices"][0]["message"]["role"] == "assistant");
    CHECK(answers[i]["choices"][0]["message"]["content"] == expected[i]);
    CHECK(answers[i]["usage"]["completion_tokens"].get<int>() >= 1);
    CHECK(streams[i].done);
    CHECK(streams[i].text == expected[i]);
    CHECK(streams[i].usage["completion_tokens"] == answers[i]["usage"]["completion_tokens"]);
    CHECK((streams[i].finish == "stop" || streams[i].finish == "length"));
  }
  // A role the template refuses is the client's error.
  const auto [st, j] = post_json(server.port, "/v1/chat/completions",
                                 {{"messages", {{{"role", "wizard"}, {"content", "hi"}}}}});
  CHECK(st == 400);
  CHECK(j["error"]["message"].get<std::string>().find("no wizard role") != std::string::npos);
  CHECK(server.terminate() == 0);
}

TEST_CASE("endor-serve: API key, limits, error codes, stop strings, metrics") {
  TempDir dir;
  const std::string model = test::pack_sample(dir, "sample-50.endor", "prune --method magnitude --sparsity 0.5");
  ServerProcess server(dir, "limits");
  REQUIRE_MESSAGE(server.start(model, "--threads 1 --parallel 1 --queue 1 --ctx 64 --api-key sesame "
                                      "--body-limit 4K --metrics --model-name kjv"),
                  server.log);
  const int port = server.port;
  const json ok = {{"prompt", "In the beginning"}, {"max_tokens", 8}, {"temperature", 0}};
  CHECK(post_json(port, "/v1/completions", ok).first == 401);
  CHECK(post_json(port, "/v1/completions", ok, "sesam").first == 401);
  CHECK(post_json(port, "/v1/completions", ok, "sesame!").first == 401);
  const auto [st, j] = post_json(port, "/v1/completions", ok, "sesame");
  CHECK(st == 200);
  CHECK(j["model"] == "kjv");
  CHECK(j["usage"]["completion_tokens"] == 8);
  CHECK(j["choices"][0]["finish_reason"] == "length");
  // /health and /metrics are not /v1 routes: no key.
  httplib::Client cli("127.0.0.1", port);
  auto health = cli.Get("/health");
  REQUIRE(health);
  CHECK(health->status == 200);
  auto models = cli.Get("/v1/models", {{"Authorization", "Bearer sesame"}});
  REQUIRE(models);
  CHECK(json::parse(models->body)["data"][0]["id"] == "kjv");
  // A stop string: the text ends before its first occurrence, finish_reason "stop".
  const std::string full = j["choices"][0]["text"];
  REQUIRE(full.size() > 4);
  const std::string stop = full.substr(3, 2);
  json with_stop = ok;
  with_stop["stop"] = {stop};
  const auto [st2, j2] = post_json(port, "/v1/completions", with_stop, "sesame");
  CHECK(st2 == 200);
  CHECK(j2["choices"][0]["text"] == full.substr(0, full.find(stop)));
  CHECK(j2["choices"][0]["finish_reason"] == "stop");
  // ignore_eos (llama.cpp's extension): exactly max_tokens, whatever the model emits.
  const auto [st5, j5] = post_json(port, "/v1/completions",
                                   {{"prompt", "And"}, {"max_tokens", 50}, {"ignore_eos", true}}, "sesame");
  CHECK(st5 == 200);
  CHECK(j5["usage"]["completion_tokens"] == 50);
  // Past the context (64 tokens) before any work; a token id outside the vocabulary; 413; 404.
  std::string longer;
  for (int i = 0; i < 40; ++i) longer += "and the LORD ";
  const auto [st3, j3] = post_json(port, "/v1/completions", {{"prompt", longer}}, "sesame");
  CHECK(st3 == 400);
  CHECK(j3["error"]["code"] == "context_length_exceeded");
  const auto [st4, j4] = post_json(port, "/v1/completions", {{"prompt", {1, 2, 99999}}}, "sesame");
  CHECK(st4 == 400);
  CHECK(j4["error"]["message"].get<std::string>().find("outside the vocabulary") != std::string::npos);
  const std::string big = json({{"prompt", std::string(8000, 'a')}}).dump();
  const std::string raw413 = test::raw_exchange(port, test::post("/v1/completions", big, "Authorization: Bearer sesame\r\n"));
  CHECK(test::status_of(raw413) == 413);
  CHECK(json::parse(test::body_of(raw413), nullptr, false)["error"]["message"].is_string());
  auto missing = cli.Get("/v2/anything");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK(json::parse(missing->body)["error"]["type"] == "not_found_error");
  // No chat template: the library's reason without endor-infer's advice (issue 36: the FileError's
  // hint, left off, not ", so --chat" cut out of the text), then the server's own.
  const auto [st6, j6] = post_json(port, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}},
                                   "sesame");
  CHECK(st6 == 400);
  CHECK(j6["error"]["code"] == "no_chat_template");
  CHECK(j6["error"]["message"] == model + ": the container holds no chat template (neither chat_template.jinja nor a "
                                          "\"chat_template\" in tokenizer_config.json); chats cannot be formatted "
                                          "(POST /v1/completions works)");
  // One slot, a queue of one: one request in the slot, then 7 at once: one waits, the others are
  // refused with 429. (The first is let in before the others come, so the queue is empty when they
  // do: 8 at once would also race the scheduler taking the first from the queue.)
  std::vector<int> codes(8);
  std::vector<std::thread> threads;
  auto send = [&](size_t i) {
    codes[i] = post_json(port, "/v1/completions", {{"prompt", "And"}, {"max_tokens", 60}, {"temperature", 0}},
                         "sesame").first;
  };
  threads.emplace_back(send, 0);
  for (int i = 0; i < 2000; ++i) {
    auto m = cli.Get("/metrics");
    if (m && m->body.find("endor_active_slots 1\n") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (size_t i = 1; i < codes.size(); ++i) threads.emplace_back(send, i);
  for (std::thread& t : threads) t.join();
  CHECK(std::count(codes.begin(), codes.end(), 429) >= 1);
  CHECK(std::count(codes.begin(), codes.end(), 200) >= 2);
  CHECK(std::count(codes.begin(), codes.end(), 200) + std::count(codes.begin(), codes.end(), 429) == 8);
  auto metrics = cli.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->body.find("endor_requests_total{route=\"/v1/completions\",status=\"429\"}") != std::string::npos);
  CHECK(metrics->body.find("endor_generated_tokens_total ") != std::string::npos);
  // Nothing active now (the scheduler updates its gauges just after the last answer is sent).
  for (int i = 0; i < 100 && metrics->body.find("endor_kv_cache_bytes 0\n") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    metrics = cli.Get("/metrics");
    REQUIRE(metrics);
  }
  CHECK(metrics->body.find("endor_kv_cache_bytes 0\n") != std::string::npos);
  CHECK(metrics->body.find("endor_active_slots 0\n") != std::string::npos);
  CHECK(server.terminate() == 0);
}

TEST_CASE("endor-serve: >= 1000 malformed requests, each 4xx with an error body; the server answers after") {
  TempDir dir;
  const std::string model = pack_with_chat(dir, "chat-50.endor", "prune --method magnitude --sparsity 0.5");
  ServerProcess server(dir, "malformed");
  REQUIRE_MESSAGE(server.start(model, "--threads 1 --parallel 2 --ctx 64 --api-key k --body-limit 8K --timeout 2 "
                                      "--default-max-tokens 20"),
                  server.log);
  const int port = server.port;
  const std::string auth = "Authorization: Bearer k\r\n";
  std::vector<std::pair<std::string, std::string>> requests;  // (path, body)
  const std::string chat = R"({"messages":[{"role":"user","content":"Who made the heaven?"}],"max_tokens":4,"stop":["x"]})";
  const std::string completion = R"({"prompt":"In the beginning","max_tokens":4,"temperature":0.5,"top_p":0.9})";
  // Truncated bodies: every proper prefix of two valid ones.
  for (size_t n = 0; n < chat.size(); ++n) requests.push_back({"/v1/chat/completions", chat.substr(0, n)});
  for (size_t n = 0; n < completion.size(); ++n) requests.push_back({"/v1/completions", completion.substr(0, n)});
  const std::string chat_full =
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Who made the heaven?"}]}],)"
      R"("max_completion_tokens":4,"stream":true,"stream_options":{"include_usage":true},"seed":7,"top_k":3})";
  const std::string ids = R"({"prompt":[[1,2,3,4,5,6,7,8,9,10]],"max_tokens":4,"stop":["and","the"],"stream":false,"n":1})";
  for (size_t n = 0; n < chat_full.size(); ++n) requests.push_back({"/v1/chat/completions", chat_full.substr(0, n)});
  for (size_t n = 0; n < ids.size(); ++n) requests.push_back({"/v1/completions", ids.substr(0, n)});
  // Wrong types and out-of-range values for each field.
  const std::vector<std::string> bad_values = {"\"x\"", "-1", "0", "1e400", "-1e400", "1.5", "[]", "{}", "true",
                                               "18446744073709551616", "-9223372036854775809", "99999999999"};
  for (const char* field : {"max_tokens", "max_completion_tokens", "top_k", "n"})
    for (const std::string& v : bad_values) {
      if (v == "0" && std::string(field) == "top_k") continue;  // 0 = off, valid
      requests.push_back({"/v1/completions", R"({"prompt":"a",")" + std::string(field) + "\":" + v + "}"});
      requests.push_back({"/v1/chat/completions",
                          R"({"messages":[{"role":"user","content":"a"}],")" + std::string(field) + "\":" + v + "}"});
    }
  for (const std::string v : {"\"x\"", "-0.5", "2.5", "1e400", "[]", "{}", "true"})
    for (const char* field : {"temperature", "top_p"}) requests.push_back({"/v1/completions", R"({"prompt":"a",")" + std::string(field) + "\":" + v + "}"});
  for (const std::string v : {"1", "[1]", "[\"a\",2]", "{}", "true", "[\"\"]", "[\"a\",\"b\",\"c\",\"d\",\"e\"]"})
    requests.push_back({"/v1/completions", R"({"prompt":"a","stop":)" + v + "}"});
  for (const std::string v : {"1", "null", "[]", "{}", "[{}]", "[[]]", "[\"a\",\"b\"]", "[1,-1]",
                               "[1,2147483648]", "[1,\"a\"]", "\"\"", "[[1],[2]]", "[99999]"})
    requests.push_back({"/v1/completions", R"({"prompt":)" + v + "}"});
  for (const std::string v : {"1", "\"hi\"", "null", "[]", "[1]", "[{}]", "[{\"role\":1}]", "[{\"role\":\"user\",\"content\":1}]",
                               "[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]", "[{\"role\":\"\"}]",
                               "[{\"role\":\"user\",\"content\":[]}]",
                               "[{\"role\":\"user\",\"content\":\"a\",\"name\":1}]"})
    requests.push_back({"/v1/chat/completions", R"({"messages":)" + v + "}"});
  // Fields OpenAI defines that this server ignores or cannot honour, with wrong types or values.
  for (const std::string f : {R"("user":1)", R"("store":"no")", R"("metadata":[])", R"("parallel_tool_calls":0)",
                               R"("tool_choice":"required")", R"("tool_choice":5)", R"("function_call":{"name":"f"})",
                               R"("audio":{})", R"("modalities":["audio"])", R"("repetition_penalty":1.3)",
                               R"("stream_options":{"include_usage":1})", R"("logit_bias":{"1":5})", R"("tools":[{}])"})
    requests.push_back({"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],)" + f + "}"});
  // Not objects; invalid UTF-8 in strings.
  for (const std::string v : {"[]", "1", "\"x\"", "null", "true", "{\"prompt\":\"a\"}}", "{\"prompt\":\"a\",}", "{'prompt':'a'}"})
    requests.push_back({"/v1/completions", v});
  for (const std::string bytes : {"\xff", "\xc3\x28", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xf8\x88\x80\x80\x80", "a\x01"}) {
    requests.push_back({"/v1/completions", "{\"prompt\":\"" + bytes + "\"}"});
    requests.push_back({"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"" + bytes + "\"}]}"});
  }
  // Random byte flips of the valid bodies that break them (decided by the server's own parser
  // being strict: each mutant is checked below to be invalid JSON or an invalid request).
  std::mt19937 rng(27);
  const std::string breakers = "{}[]\",:\\\x80\xff 0-";
  for (int i = 0; i < 1000; ++i) {
    std::string b = i % 2 ? chat : completion;
    const size_t at = rng() % b.size();
    b[at] = breakers[rng() % breakers.size()];
    if (!json::accept(b)) requests.push_back({i % 2 ? "/v1/chat/completions" : "/v1/completions", b});
  }
  // Deep nesting, and a body too large (413).
  requests.push_back({"/v1/completions", "{\"prompt\":\"a\",\"x\":" + std::string(3000, '[') + std::string(3000, ']') + "}"});
  requests.push_back({"/v1/completions", "{\"prompt\":\"" + std::string(9000, 'a') + "\"}"});
  REQUIRE(requests.size() >= 1000);

  size_t n_checked = 0;
  for (const auto& [path, body] : requests) {
    const std::string raw = test::raw_exchange(port, test::post(path, body, auth));
    const int status = test::status_of(raw);
    CAPTURE(path);
    CAPTURE(body);
    CHECK((status >= 400 && status < 500));
    const json err = json::parse(test::body_of(raw), nullptr, false);
    CHECK((!err.is_discarded() && err.contains("error") && err["error"]["message"].is_string()));
    ++n_checked;
  }
  // Not HTTP at all, unknown routes and methods, no key or a wrong one.
  const std::vector<std::string> raw_requests = {
      "GARBAGE\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
      "DELETE /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
      "GET /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + auth + "\r\n",
      test::post("/v1/completions", completion),
      test::post("/v1/completions", completion, "Authorization: Bearer K\r\n"),
      test::post("/v1/completions", completion, "Authorization: k\r\n"),
      test::post("/v1/chat/completions", chat, "Authorization: Basic k\r\n"),
  };
  for (const std::string& r : raw_requests) {
    const std::string raw = test::raw_exchange(port, r);
    CAPTURE(r);
    CHECK((test::status_of(raw) >= 400 && test::status_of(raw) < 500));
    CHECK(json::parse(test::body_of(raw), nullptr, false).contains("error"));
    ++n_checked;
  }
  MESSAGE(n_checked, " malformed requests answered");
  // A message without content (but an assistant's with tool calls, refused for those): 400 at once,
  // naming the field, where it once ran to the end of the context.
  const struct {
    std::string messages, param;
  } no_content[] = {
      {R"([{"role":"user"}])", "messages[0].content"},
      {R"([{"role":"user","content":"a"},{"role":"user","content":null}])", "messages[1].content"},
      {R"([{"role":"system"},{"role":"user","content":"a"}])", "messages[0].content"},
      {R"([{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"tool"}])", "messages[2].content"},
      {R"([{"role":"user","content":"a"},{"role":"assistant"},{"role":"user","content":"b"}])", "messages[1].content"},
      {R"([{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"c","type":"function"}]}])",
       "messages[1].tool_calls"},
  };
  for (const auto& c : no_content) {
    const std::string body = R"({"messages":)" + c.messages + R"(,"ignore_eos":true})";
    CAPTURE(body);
    const auto t = std::chrono::steady_clock::now();
    const std::string raw = test::raw_exchange(port, test::post("/v1/chat/completions", body, auth), 30);
    CHECK(std::chrono::steady_clock::now() - t < std::chrono::seconds(5));
    CHECK(test::status_of(raw) == 400);
    const json err = json::parse(test::body_of(raw), nullptr, false);
    REQUIRE((!err.is_discarded() && err.contains("error")));
    CHECK(err["error"]["param"] == c.param);
    CHECK(err["error"]["message"].get<std::string>().rfind("'" + c.param + "' ", 0) == 0);
  }
  // max_tokens left out (ignore_eos: only the limit ends the answer): a chat gets --default-max-tokens
  // (20), a completion OpenAI's 16, either at most the context left (--ctx 64 - prompt + 1).
  auto unlimited = [&](const std::string& path, const json& body) {
    const std::string raw = test::raw_exchange(port, test::post(path, body.dump(), auth), 60);
    CHECK(test::status_of(raw) == 200);
    const json j = json::parse(test::body_of(raw), nullptr, false);
    REQUIRE((!j.is_discarded() && j.contains("usage")));
    CHECK(j["choices"][0]["finish_reason"] == "length");
    return std::make_pair(j["usage"]["prompt_tokens"].get<int>(), j["usage"]["completion_tokens"].get<int>());
  };
  const json question = {{"messages", {{{"role", "user"}, {"content", "Who made the heaven?"}}}}, {"ignore_eos", true}};
  const auto [chat_prompt, chat_new] = unlimited("/v1/chat/completions", question);
  CHECK(chat_prompt + 20 <= 65);  // the cap, not the context, bounds it
  CHECK(chat_new == 20);
  CHECK(unlimited("/v1/completions", {{"prompt", {1, 2, 3, 4, 5, 6, 7, 8}}, {"ignore_eos", true}}).second == 16);
  std::vector<int> long_prompt(55, 5);
  CHECK(unlimited("/v1/completions", {{"prompt", long_prompt}, {"ignore_eos", true}}).second == 64 - 55 + 1);
  // Half a request: the server drops it after --timeout (2 s) and goes on answering.
  const auto t0 = std::chrono::steady_clock::now();
  const std::string half = test::raw_exchange(
      port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 100\r\n\r\n{\"prompt\":", 20);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));
  CHECK((half.empty() || test::status_of(half) >= 400));
  CHECK(server.alive());
  const std::string valid = test::raw_exchange(port, test::post("/v1/completions", completion, auth));
  CHECK(test::status_of(valid) == 200);
  CHECK(json::parse(test::body_of(valid))["choices"][0]["text"].is_string());
  CHECK(server.terminate() == 0);
  // Under the sanitizers, a report would be on stderr and the exit status non-zero.
  CHECK(server.log.find("Sanitizer") == std::string::npos);
}

TEST_CASE("endor-serve: a client that leaves frees its slot or queue place, streamed or not") {
  TempDir dir;
  const std::string model = pack_long_context(dir, "sample-4k.endor", "convert");
  ServerProcess server(dir, "disconnect");
  REQUIRE_MESSAGE(server.start(model, "--threads 1 --parallel 1 --queue 4 --ctx 4096 --metrics"), server.log);
  httplib::Client cli("127.0.0.1", server.port);
  auto metrics = [&] {
    auto m = cli.Get("/metrics");
    REQUIRE(m);
    return m->body;
  };
  // Waits up to 30 s (polling every 10 ms) for `ready` to hold on /metrics; returns the last text.
  auto wait_for = [&](const std::function<bool(const std::string&)>& ready) {
    std::string m = metrics();
    for (int i = 0; i < 3000 && !ready(m); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      m = metrics();
    }
    return m;
  };
  const int kMaxTokens = 4000;  // seconds of work for the one slot: still running when its client leaves
  const json long_answer = {{"prompt", "And"}, {"max_tokens", kMaxTokens}, {"ignore_eos", true}, {"temperature", 0}};
  json streamed = long_answer;
  streamed["stream"] = true;
  // A non-streaming request in the slot, then a streaming and a non-streaming one in the queue.
  OpenRequest in_slot(server.port, test::post("/v1/completions", long_answer.dump()));
  std::string m = wait_for([](const std::string& t) {
    return metric_value(t, "endor_active_slots") == 1 && metric_value(t, "endor_generated_tokens_total") > 0;
  });
  REQUIRE(metric_value(m, "endor_active_slots") == 1);
  OpenRequest queued_stream(server.port, test::post("/v1/completions", streamed.dump()));
  OpenRequest queued(server.port, test::post("/v1/completions", long_answer.dump()));
  m = wait_for([](const std::string& t) { return metric_value(t, "endor_queue_length") == 2; });
  REQUIRE(metric_value(m, "endor_queue_length") == 2);
  REQUIRE(metric_value(m, "endor_requests_finished_total") == 0);
  // All three clients leave; the slot and the queue empty within the bound, without finishing them.
  queued.close();
  queued_stream.close();
  in_slot.close();
  const auto left = std::chrono::steady_clock::now();
  const std::string two_499 = "endor_requests_total{route=\"/v1/completions\",status=\"499\"} 2";
  m = wait_for([&](const std::string& t) {
    return metric_value(t, "endor_active_slots") == 0 && metric_value(t, "endor_queue_length") == 0 &&
           metric_value(t, "endor_requests_cancelled_total") == 3 && t.find(two_499) != std::string::npos;
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - left).count();
  INFO(m);
  CHECK(metric_value(m, "endor_active_slots") == 0);
  CHECK(metric_value(m, "endor_queue_length") == 0);
  CHECK(metric_value(m, "endor_requests_cancelled_total") == 3);
  CHECK(metric_value(m, "endor_requests_finished_total") == 0);
  CHECK(metric_value(m, "endor_generated_tokens_total") < kMaxTokens);
  CHECK(seconds < 10);
  // The non-streaming ones are logged 499 (nginx's "client closed request").
  CHECK(m.find(two_499) != std::string::npos);
  // The slot is free: the next request is answered.
  const auto [st, j] = post_json(server.port, "/v1/completions", {{"prompt", "And"}, {"max_tokens", 8}, {"temperature", 0}});
  CHECK(st == 200);
  CHECK(j["usage"]["completion_tokens"] == 8);
  CHECK(server.terminate() == 0);
}

TEST_CASE("endor-serve: SIGTERM ends streams in flight with a final chunk and exits 0") {
  TempDir dir;
  const std::string model = test::pack_sample(dir, "sample-50.endor", "prune --method magnitude --sparsity 0.5");
  ServerProcess server(dir, "sigterm");
  // One slot with a long answer; the other streams wait in the queue.
  REQUIRE_MESSAGE(server.start(model, "--threads 1 --parallel 1 --queue 8 --metrics"), server.log);
  std::vector<StreamResult> streams(3);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < streams.size(); ++i)
    threads.emplace_back([&, i] {
      streams[i] = post_stream(server.port, "/v1/completions",
                               {{"prompt", "And"}, {"max_tokens", 250}, {"temperature", 0}, {"ignore", "unknown fields"}});
    });
  // Wait until one generates and two wait.
  httplib::Client cli("127.0.0.1", server.port);
  for (int i = 0; i < 500; ++i) {
    auto m = cli.Get("/metrics");
    if (m && m->body.find("endor_queue_length 2") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CHECK(server.terminate() == 0);
  for (std::thread& t : threads) t.join();
  size_t aborted = 0;
  for (const StreamResult& s : streams) {
    CHECK(s.status == 200);
    CHECK(s.done);  // data: [DONE] after a final chunk
    CHECK((s.finish == "abort" || s.finish == "length" || s.finish == "stop"));
    aborted += s.finish == "abort";
  }
  CHECK(aborted >= 1);
  CHECK(server.log.find("endor-serve: stopped") != std::string::npos);
}
