// endor-serve's HTTP layer (cpp-httplib): OpenAI's routes over the scheduler, API-key check, body
// limit, timeouts, OpenAI error bodies for every 4xx/5xx, and server-sent events for streams.
//
//   POST /v1/chat/completions   POST /v1/completions   GET /v1/models
//   GET /health (503 while the model loads, 200 when ready)   GET /metrics (with --metrics)
//
// The server listens before the model is loaded (so /health answers 503 meanwhile); set_ready()
// hands it the model. Thread safety: set_ready() and stop() may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "endor/runtime.h"
#include "endor/serve_metrics.h"
#include "endor/serve_request.h"
#include "endor/serve_scheduler.h"
#include "endor/tokenizer.h"

namespace endor::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                 // "" = no check; else "Authorization: Bearer KEY" on /v1 routes
  size_t body_limit_bytes = 1 << 20;   // larger bodies: 413
  int timeout_s = 30;                  // read/write timeouts (a client sending half a request)
  bool metrics = false;                // serve GET /metrics
  size_t threads = 16;                 // connections handled at once
  size_t default_max_tokens = kDefaultMaxTokens;  // cap of max_tokens when a request sets none
};

// The loaded model as the routes need it. Everything must outlive the server.
struct ServedModel {
  std::string id;                          // the model's name in /v1/models and in answers
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: /v1/chat/completions answers 400 with chat_error
  std::string chat_error;
  std::string bos_token, eos_token;        // the template's special-token strings
  std::vector<int32_t> chat_stop_ids;      // end-of-turn ids of chats
  SamplerOptions defaults;                 // the container's generation_config (seed drawn per request)
  uint32_t vocab = 0;
  Scheduler* scheduler = nullptr;
};

class HttpServer {
 public:
  explicit HttpServer(HttpOptions options);
  ~HttpServer();
  // Binds host:port; throws endor::Error when it cannot. Then listen() serves until stop().
  void bind();
  int port() const;
  void listen();  // blocks
  void set_ready(const ServedModel& model);
  // For a graceful stop: answers new requests 503 and waits (up to `timeout_s`) until the
  // generations in flight have written their last byte (streams their final chunk and [DONE]).
  void drain(int timeout_s);
  // Stops accepting; listen() returns once the connections in flight are answered.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace endor::serve
