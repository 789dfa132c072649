// OpenAI's routes over cpp-httplib (serve_http.h).
#include "endor/serve_http.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <ctime>
#include <mutex>
#include <random>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace endor::serve {

using nlohmann::json;

namespace {

// Compares in time that depends on the lengths only, not on where the strings differ.
bool equal_constant_time(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() != b.size();
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= unsigned(x ^ y);
  }
  return diff == 0;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(error_body(e), "application/json");
}

// cpp-httplib 0.11 listens with a backlog of 5 (compiled into Debian's library): a burst of more
// concurrent connections overflows the accept queue, and Linux then drops or resets some of them.
// The bound socket is found among this process's descriptors and given the system's maximum (a
// second listen() on a listening socket only changes its backlog).
void widen_listen_backlog(int port) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return;
  while (const dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    int listening = 0;
    socklen_t len = sizeof listening;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof addr;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) continue;
    int bound = -1;
    if (addr.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) bound = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (bound == port) ::listen(fd, SOMAXCONN);
  }
  ::closedir(dir);
}

// The socket of the connection that carried `req`: the descriptor of this process whose peer is
// req.remote_addr:remote_port and whose local port is req.local_port (a TCP connection's addresses
// name it uniquely; the handler's thread holds it open until the answer is written). cpp-httplib
// 0.11 (Debian 12) has no Request::is_connection_closed and keeps the socket private; the handlers
// use this to notice a client that left while its answer is being generated. INVALID_SOCKET when
// not found (then nothing is noticed until a write fails).
socket_t connection_socket(const httplib::Request& req) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return INVALID_SOCKET;
  socket_t found = INVALID_SOCKET;
  std::string remote = req.remote_addr.substr(0, req.remote_addr.find('%'));  // IPv6 scope dropped
  while (const dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    sockaddr_storage peer{}, local{};
    socklen_t peer_len = sizeof peer, local_len = sizeof local;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    char ip[INET6_ADDRSTRLEN] = {};
    int peer_port = -1, local_port = -1;
    if (peer.ss_family == AF_INET && local.ss_family == AF_INET) {
      const auto* p4 = reinterpret_cast<const sockaddr_in*>(&peer);
      ::inet_ntop(AF_INET, &p4->sin_addr, ip, sizeof ip);
      peer_port = ntohs(p4->sin_port);
      local_port = ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
    } else if (peer.ss_family == AF_INET6 && local.ss_family == AF_INET6) {
      const auto* p6 = reinterpret_cast<const sockaddr_in6*>(&peer);
      ::inet_ntop(AF_INET6, &p6->sin6_addr, ip, sizeof ip);
      peer_port = ntohs(p6->sin6_port);
      local_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port);
    } else {
      continue;
    }
    if (peer_port == req.remote_port && local_port == req.local_port && remote == ip) {
      found = fd;
      break;
    }
  }
  ::closedir(dir);
  return found;
}

// True when the peer closed the connection (or it failed). Called while the request's answer is
// not yet written, so nothing should arrive: readable with data means a pipelined request (the
// client is there), readable with nothing (end of stream) or an error means it left. A client that
// only shut down its sending side counts as gone too, as in cpp-httplib's later versions.
bool client_gone(socket_t sock) {
  if (sock == INVALID_SOCKET) return false;
  pollfd p{sock, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  char c = 0;
  const ssize_t n = ::recv(sock, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

std::string route_name(const std::string& path) {
  for (const char* r : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"})
    if (path == r) return r;
  return "other";
}

}  // namespace

struct HttpServer::Impl {
  HttpOptions options;
  httplib::Server server;
  int port = 0;
  std::mutex ready_mutex;
  std::optional<ServedModel> model;  // set once, when ready
  RequestCounters counters;
  std::atomic<uint64_t> next_id{1};
  std::atomic<bool> draining{false};
  std::atomic<int> in_flight{0};     // generations whose answer is not fully written
  std::mt19937_64 seeds{std::random_device{}()};
  std::mutex seeds_mutex;

  const ServedModel* ready() {
    std::lock_guard<std::mutex> lock(ready_mutex);
    return model ? &*model : nullptr;
  }

  void routes();
  void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  JobSpec job_spec(const ServedModel& m, const GenerationRequest& r);
};

// The prompt's ids and the sampling of one request; throws ApiError(400) for what cannot run.
JobSpec HttpServer::Impl::job_spec(const ServedModel& m, const GenerationRequest& r) {
  JobSpec spec;
  const size_t ctx = m.scheduler->options().ctx;
  if (r.endpoint == Endpoint::Chat) {
    if (!m.chat_template) throw ApiError(400, m.chat_error, "", "no_chat_template");
    std::string text;
    try {
      text = m.chat_template->render_chat(r.messages, /*add_generation_prompt=*/true, m.bos_token, m.eos_token);
    } catch (const ChatTemplateError& e) {
      throw ApiError(400, std::string("the chat template refused the messages: ") + e.what(), "", "", "messages");
    }
    // The template writes the special tokens itself, as apply_chat_template does (endor-infer --chat).
    spec.prompt = m.tokenizer->encode(text, /*add_special_tokens=*/false);
    spec.stop_ids = m.chat_stop_ids;
  } else if (r.prompt_is_ids) {
    for (int32_t id : r.prompt_ids)
      if (id < 0 || uint32_t(id) >= m.vocab)
        throw ApiError(400, "token id " + std::to_string(id) + " is outside the vocabulary of " +
                                std::to_string(m.vocab) + " tokens", "", "", "prompt");
    spec.prompt = r.prompt_ids;
  } else {
    spec.prompt = m.tokenizer->encode(r.prompt_text, /*add_special_tokens=*/true);  // as endor-infer -p
  }
  if (spec.prompt.empty()) throw ApiError(400, "the prompt has no tokens", "", "", r.endpoint == Endpoint::Chat ? "messages" : "prompt");
  if (spec.prompt.size() > ctx)
    throw ApiError(400, "the prompt has " + std::to_string(spec.prompt.size()) + " tokens, more than the context of " +
                            std::to_string(ctx) + " tokens (--ctx)", "", "context_length_exceeded",
                   r.endpoint == Endpoint::Chat ? "messages" : "prompt");
  // Unless told: chats to the end of their turn within a bounded default, completions 16 tokens, as OpenAI.
  spec.max_tokens = r.max_tokens ? *r.max_tokens
                                 : default_max_tokens(r.endpoint, spec.prompt.size(), ctx, options.default_max_tokens);
  spec.sampling = m.defaults;
  if (r.temperature) spec.sampling.temperature = *r.temperature;
  if (r.top_p) spec.sampling.top_p = *r.top_p;
  if (r.top_k) spec.sampling.top_k = *r.top_k;
  if (r.seed) {
    spec.sampling.seed = *r.seed;
  } else {
    std::lock_guard<std::mutex> lock(seeds_mutex);
    spec.sampling.seed = seeds();
  }
  spec.stop = r.stop;
  spec.ignore_eos = r.ignore_eos;
  return spec;
}

void HttpServer::Impl::generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  const ServedModel* m = ready();
  if (!m) throw ApiError(503, "the model is loading", "", "loading");
  const GenerationRequest r = endpoint == Endpoint::Chat ? parse_chat_request(req.body) : parse_completion_request(req.body);
  JobSpec spec = job_spec(*m, r);
  const size_t n_prompt = spec.prompt.size();
  std::shared_ptr<Job> job = m->scheduler->submit(std::move(spec));
  // Counted until the answer is written: a non-streamed one when this returns, a stream when its
  // provider is released.
  in_flight += 1;
  struct Done {
    std::atomic<int>* n;
    ~Done() {
      if (n) *n -= 1;
    }
  } done{&in_flight};
  const bool chat = endpoint == Endpoint::Chat;
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
  const int64_t created = int64_t(std::time(nullptr));
  const std::string model_id = m->id;
  auto usage = [n_prompt](size_t n) {
    return json{{"prompt_tokens", n_prompt}, {"completion_tokens", n}, {"total_tokens", n_prompt + n}};
  };

  if (!r.stream) {
    // The connection is checked each time the job moves (every step while it generates) and at
    // least every 100 ms while it waits: a client gone frees its slot (or queue place) at the
    // scheduler's next step.
    const socket_t connection = connection_socket(req);
    std::string text;
    Job::Update u;
    for (;;) {
      u = job->take(std::chrono::milliseconds(100));
      text += u.text;
      if (u.finish) break;
      if (client_gone(connection)) {
        job->cancel();
        // Nobody reads it; the status is for the logs and /metrics (nginx's "client closed request").
        throw ApiError(499, "the client closed the connection before the answer was ready", "client_closed_request");
      }
    }
    if (u.error) throw *u.error;
    json choice = {{"index", 0}, {"finish_reason", *u.finish}, {"logprobs", nullptr}};
    if (chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
    else choice["text"] = text;
    const json body = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
                       {"model", model_id}, {"choices", json::array({choice})}, {"usage", usage(u.n_generated)}};
    res.set_content(dump(body), "application/json");
    return;
  }

  // Server-sent events: a chunk per step that produced text, a last one with the finish reason,
  // the usage when asked, then [DONE]. A failed write, or a closed connection while nothing is
  // written, means the client left: the slot (or queue place) is freed.
  const bool include_usage = r.include_usage;
  auto chunk = [=](const std::string& text, const std::optional<std::string>& finish, bool role) {
    json choice = {{"index", 0}, {"finish_reason", finish ? json(*finish) : json(nullptr)}, {"logprobs", nullptr}};
    if (chat) {
      json delta = json::object();
      if (role) delta["role"] = "assistant";
      if (!text.empty() || role) delta["content"] = text;
      choice["delta"] = delta;
    } else {
      choice["text"] = text;
    }
    return "data: " + dump({{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                            {"created", created}, {"model", model_id}, {"choices", json::array({choice})}}) + "\n\n";
  };
  done.n = nullptr;  // the releaser below counts the stream out
  const socket_t connection = connection_socket(req);
  auto started = std::make_shared<bool>(false);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [=](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        if (!*started) {
          *started = true;
          if (chat && !write(chunk("", std::nullopt, true))) {
            job->cancel();
            return false;
          }
        }
        const Job::Update u = job->take(std::chrono::milliseconds(250));
        if (!u.text.empty() && !write(chunk(u.text, std::nullopt, false))) {
          job->cancel();
          return false;
        }
        // Nothing written while a stream waits in the queue or prefills: look at the connection.
        if (u.text.empty() && !u.finish && client_gone(connection)) {
          job->cancel();
          return false;
        }
        if (!u.finish) return true;
        if (u.error) {
          write("data: " + error_body(*u.error) + "\n\n");
        } else {
          write(chunk("", u.finish, false));
          if (include_usage)
            write("data: " + dump({{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                                    {"created", created}, {"model", model_id}, {"choices", json::array()},
                                    {"usage", usage(u.n_generated)}}) + "\n\n");
        }
        write("data: [DONE]\n\n");
        sink.done();
        return true;
      },
      [job, this](bool) {  // ended for any reason: nothing more is read from the job
        job->cancel();
        in_flight -= 1;
      });
}

void HttpServer::Impl::routes() {
  server.set_payload_max_length(options.body_limit_bytes);
  server.set_read_timeout(options.timeout_s, 0);
  server.set_write_timeout(options.timeout_s, 0);
  server.set_keep_alive_timeout(5);
  server.set_tcp_nodelay(true);
  const size_t threads = options.threads;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };

  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (draining) {
      send_error(res, ApiError(503, "the server is shutting down"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (options.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (equal_constant_time(req.get_header_value("Authorization"), "Bearer " + options.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)", "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Every 4xx/5xx without a body of its own (no route, body too large, bad request line) gets one.
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message;
    if (res.status == 404) message = "no route " + req.method + " " + req.path.substr(0, 200);
    else if (res.status == 413) message = "the request body is larger than the server's limit";
    else if (res.status == 400) message = "malformed HTTP request";
    else message = "HTTP status " + std::to_string(res.status);
    send_error(res, ApiError(res.status, message));
  });
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, e.what(), "server_error"));
    } catch (...) {
      send_error(res, ApiError(500, "unknown error", "server_error"));
    }
  });
  server.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    counters.count(route_name(req.path), res.status);
  });

  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!ready()) throw ApiError(503, "the model is loading", "", "loading");
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const ServedModel* m = ready();
    if (!m) throw ApiError(503, "the model is loading", "", "loading");
    const json body = {{"object", "list"},
                       {"data", json::array({{{"id", m->id}, {"object", "model"}, {"created", 0}, {"owned_by", "endor"}}})}};
    res.set_content(dump(body), "application/json");
  });
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, Endpoint::Chat);
  });
  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, Endpoint::Completion);
  });
  if (options.metrics)
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      const ServedModel* m = ready();
      const SchedulerMetrics s = m ? m->scheduler->metrics() : SchedulerMetrics{};
      res.set_content(render_prometheus(counters, s), "text/plain; version=0.0.4");
    });
}

HttpServer::HttpServer(HttpOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::bind() {
  const HttpOptions& o = impl_->options;
  if (o.port == 0) {
    impl_->port = impl_->server.bind_to_any_port(o.host);
    if (impl_->port <= 0) throw Error("cannot listen on " + o.host + " (any port)");
  } else {
    if (!impl_->server.bind_to_port(o.host, o.port))
      throw Error("cannot listen on " + o.host + ":" + std::to_string(o.port) + " (in use, or not an address here)");
    impl_->port = o.port;
  }
  widen_listen_backlog(impl_->port);
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::listen() { impl_->server.listen_after_bind(); }

void HttpServer::set_ready(const ServedModel& model) {
  std::lock_guard<std::mutex> lock(impl_->ready_mutex);
  impl_->model = model;
}

void HttpServer::drain(int timeout_s) {
  impl_->draining = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (impl_->in_flight > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void HttpServer::stop() { impl_->server.stop(); }

}  // namespace endor::serve
