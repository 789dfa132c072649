// endor-serve: an OpenAI-compatible HTTP server over a .endor model, with continuous batching.
//   endor-serve MODEL.endor [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx N] [--api-key KEY]
//               [--default-max-tokens N] [--metrics] [placement options of endor-infer]
// Listens first (GET /health answers 503 while the model loads), then serves until SIGTERM/SIGINT:
// new requests are refused, in-flight streams end with a final chunk, exit 0.
// Errors at startup: one line on stderr, exit 1, or exit 2 for a malformed command line
// (endor/cli_common.h).
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include <cxxopts.hpp>

#include "chat_command.h"
#include "endor/cli_common.h"
#include "endor/openmp_policy.h"
#include "endor/serve_http.h"
#include "endor/serve_scheduler.h"
#include "placement_options.h"
#include "tokenizer_commands.h"

namespace {

using endor::cli::UsageError;

cxxopts::Options serve_options() {
  cxxopts::Options options("endor-serve",
                           "Serve a .endor model over OpenAI's HTTP API (/v1/chat/completions, /v1/completions, "
                           "/v1/models, /health, /metrics), batching concurrent requests.");
  options.positional_help("MODEL.endor");
  options.add_options()
    ("file", "the .endor container", cxxopts::value<std::string>())
    ("host", "address to listen on (loopback unless told otherwise)", cxxopts::value<std::string>()->default_value("127.0.0.1"))
    ("port", "TCP port (0 = any free port, printed at startup)", cxxopts::value<int>()->default_value("8080"))
    ("parallel", "slots: requests generated together, each block read once per step for all of them",
     cxxopts::value<size_t>()->default_value("4"))
    ("queue", "requests waiting for a slot; more are answered 429", cxxopts::value<size_t>()->default_value("64"))
    ("prefill-chunk", "prompt tokens prefilled per step (long prompts take several steps, so decoding slots "
                      "keep getting tokens)", cxxopts::value<size_t>()->default_value("256"))
    ("api-key", "require \"Authorization: Bearer KEY\" on every /v1 route", cxxopts::value<std::string>())
    ("metrics", "serve Prometheus metrics at GET /metrics")
    ("model-name", "the model's id in /v1/models and answers (default: the file name without .endor)",
     cxxopts::value<std::string>())
    ("body-limit", "largest request body, e.g. 1M; larger ones are answered 413",
     cxxopts::value<std::string>()->default_value("1M"))
    ("timeout", "seconds a client may take to send its request (and to take a response's data)",
     cxxopts::value<int>()->default_value("30"))
    ("default-max-tokens", "tokens a chat generates at most when its request sets no max_tokens (never past the "
                           "context); a completion without one gets OpenAI's 16, or N if smaller",
     cxxopts::value<int64_t>()->default_value(std::to_string(endor::serve::kDefaultMaxTokens)))
    ("h,help", "show this help");
  endor::cli::add_ctx_option(options, "tokens one request may hold, prompt and answer (default: 4096 or the model's "
                                      "context if smaller); the KV caches of --parallel such requests count against "
                                      "--cpu-mem/--gpu-mem");
  endor::cli::add_placement_options(options);
  options.parse_positional({"file"});
  return options;
}

// The command line, checked before any file is opened (usage errors: exit 2).
struct ServeArgs {
  std::string file;
  std::optional<size_t> ctx;
  endor::serve::SchedulerOptions sched;  // ctx filled in once the model's context is known
  endor::serve::HttpOptions http;
};

ServeArgs read_args(const cxxopts::ParseResult& args) {
  endor::cli::reject_unmatched(args);
  if (!args.count("file")) throw UsageError("missing MODEL.endor (the model to serve)");
  endor::cli::check_placement_options(args);
  ServeArgs a;
  a.sched.parallel = args["parallel"].as<size_t>();
  if (a.sched.parallel < 1 || a.sched.parallel > 256) throw UsageError("--parallel must be in [1, 256]");
  a.ctx = endor::cli::ctx_option(args);
  a.sched.prefill_chunk = args["prefill-chunk"].as<size_t>();
  if (a.sched.prefill_chunk < 1) throw UsageError("--prefill-chunk must be at least 1");
  const int port = args["port"].as<int>();
  if (port < 0 || port > 65535) throw UsageError("--port must be in [0, 65535]");
  if (args["timeout"].as<int>() < 1) throw UsageError("--timeout must be at least 1 second");
  if (args.count("api-key") && args["api-key"].as<std::string>().empty()) throw UsageError("--api-key must not be empty");
  const int64_t default_max_tokens = args["default-max-tokens"].as<int64_t>();
  if (default_max_tokens < 1 || default_max_tokens > std::numeric_limits<int32_t>::max())
    throw UsageError("--default-max-tokens must be in [1, 2147483647], got " + std::to_string(default_max_tokens));
  const uint64_t body_limit = endor::cli::parse_size_option(args, "body-limit");
  if (body_limit < 1024) throw UsageError("--body-limit must be at least 1K");
  a.file = args["file"].as<std::string>();
  a.sched.queue = args["queue"].as<size_t>();
  endor::serve::HttpOptions& http = a.http;
  http.host = args["host"].as<std::string>();
  http.port = port;
  if (args.count("api-key")) http.api_key = args["api-key"].as<std::string>();
  http.body_limit_bytes = body_limit;
  http.default_max_tokens = size_t(default_max_tokens);
  http.timeout_s = args["timeout"].as<int>();
  http.metrics = args.count("metrics") > 0;
  http.threads = a.sched.parallel + a.sched.queue + 8;  // each waiting or generating request holds a connection
  return a;
}

// What is read from the file before anything listens: its config, tokenizer and chat template.
struct ModelFiles {
  std::unique_ptr<endor::ContainerReader> container;
  endor::ModelConfig config;
  std::optional<endor::Tokenizer> tokenizer;
  std::optional<endor::cli::ChatSetup> chat;
  std::string chat_error;  // why chats cannot be formatted, when chat is empty
};

ModelFiles open_files(ServeArgs& a) {
  ModelFiles f;
  f.container = endor::ContainerReader::open(a.file);
  f.config = endor::parse_model_config(f.container->manifest().config, a.file);
  a.sched.ctx = a.ctx.value_or(std::min<size_t>(f.config.max_positions, 4096));
  endor::cli::check_ctx_fits(a.sched.ctx, f.config.max_positions);
  f.tokenizer = endor::cli::container_tokenizer(*f.container);
  if (!f.tokenizer) throw endor::Error(a.file + ": the container holds no tokenizer.json; endor-serve needs one for text");
  try {
    f.chat = endor::cli::load_chat_setup(*f.container, *f.tokenizer);
  } catch (const endor::Error& e) {
    const auto* file_error = dynamic_cast<const endor::FileError*>(&e);  // its hint is endor-infer's --chat
    f.chat_error = file_error ? file_error->without_hint() : std::string(e.what());
    f.chat_error += "; chats cannot be formatted (POST /v1/completions works)";
    std::fprintf(stderr, "endor-serve: note: %s\n", f.chat_error.c_str());
  }
  return f;
}

// SIGTERM/SIGINT are taken by one thread (sigwait), not by a handler: blocked before any other
// thread starts, so every thread inherits the mask.
sigset_t block_stop_signals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal
  return stop_signals;
}

// The backend, the placement and the model. Fixed needs of the placement: the KV caches of
// `parallel` requests of ctx tokens each (kv_capacity_for never gives a request more), and a
// step's rows (the prefill chunk plus a token per decoding slot).
struct Loaded {
  endor::cli::Compute compute;
  endor::cli::Offload offload;
  std::unique_ptr<endor::Model> model;
};

Loaded load(const ModelFiles& f, const ServeArgs& a, const cxxopts::ParseResult& args) {
  Loaded l;
  l.compute = endor::cli::open_compute(args);
  l.offload = endor::cli::setup_offload(*f.container, *l.compute.backend, args, a.sched.parallel * a.sched.ctx,
                                        a.sched.prefill_chunk + a.sched.parallel, l.compute.kv_dtype);
  l.model = endor::load_model(*f.container, *l.compute.backend, l.offload.weights.get());
  l.model->set_kv_dtype(l.compute.kv_dtype);
  return l;
}

endor::serve::ServedModel served_model(const ModelFiles& f, const ServeArgs& a, const cxxopts::ParseResult& args,
                                       endor::serve::Scheduler& scheduler) {
  endor::serve::ServedModel served;
  served.id = args.count("model-name") ? args["model-name"].as<std::string>()
                                       : std::filesystem::path(a.file).stem().string();
  served.tokenizer = &*f.tokenizer;
  if (f.chat) {
    served.chat_template = &f.chat->chat_template;
    served.bos_token = f.chat->bos_token;
    served.eos_token = f.chat->eos_token;
    served.chat_stop_ids = f.chat->stop_ids;
  } else {
    served.chat_error = f.chat_error;
  }
  served.defaults = endor::default_sampler_options(f.container->manifest().generation_config, 0);
  served.vocab = f.config.vocab;
  served.scheduler = &scheduler;
  return served;
}

// The listener and the signal thread, which on SIGTERM/SIGINT shuts the scheduler down (once it
// exists), drains the streams in flight and stops the server.
class ServerThreads {
 public:
  ServerThreads(endor::serve::HttpServer& server, sigset_t stop_signals) : server_(server), stop_signals_(stop_signals) {
    listener_ = std::thread([this] { server_.listen(); });
    signals_ = std::thread([this] { on_stop_signal(); });
  }
  // An exception past the start (not the load errors run() handles) must not leave threads to
  // std::terminate: they are stopped as on a load error.
  ~ServerThreads() {
    if (signals_.joinable()) stop_and_join();
  }
  ServerThreads(const ServerThreads&) = delete;
  ServerThreads& operator=(const ServerThreads&) = delete;
  // Hands the scheduler to the signal thread; shuts it down at once when a signal came first.
  void set_scheduler(endor::serve::Scheduler* scheduler) {
    std::lock_guard<std::mutex> lock(mutex_);
    scheduler_ = scheduler;
    if (stopping_) scheduler_->shutdown();
  }
  // Stops both threads without a signal from outside (a load error), then joins them.
  void stop_and_join() {
    if (!stopping_.exchange(true)) pthread_kill(signals_.native_handle(), SIGTERM);
    join();
  }
  void join() {
    signals_.join();
    listener_.join();
  }

 private:
  void on_stop_signal() {
    int sig = 0;
    sigwait(&stop_signals_, &sig);
    stopping_ = true;
    std::fprintf(stderr, "endor-serve: %s: stopping\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (scheduler_) scheduler_->shutdown();  // in-flight requests end with finish_reason "abort"
    }
    server_.drain(10);  // new requests get 503 while the streams write their final chunk
    server_.stop();     // listen() returns once the connections are closed
  }

  endor::serve::HttpServer& server_;
  sigset_t stop_signals_;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  endor::serve::Scheduler* scheduler_ = nullptr;  // under mutex_
  std::thread listener_, signals_;
};

// Listens first (GET /health answers 503 while the model loads), then serves until a stop signal.
int run(int argc, char** argv) {
  cxxopts::Options options = serve_options();
  cxxopts::ParseResult args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << "\n";
    return 0;
  }
  ServeArgs a = read_args(args);
  const ModelFiles files = open_files(a);  // the file, its tokenizer and chat template, before anything listens
  const sigset_t stop_signals = block_stop_signals();
  endor::serve::HttpServer server(a.http);
  server.bind();
  ServerThreads threads(server, stop_signals);
  std::fprintf(stderr, "endor-serve: listening on http://%s:%d (loading %s)\n", a.http.host.c_str(), server.port(),
               a.file.c_str());
  Loaded loaded;
  try {
    loaded = load(files, a, args);
  } catch (...) {
    threads.stop_and_join();  // reported once the listener and the signal thread are gone
    throw;
  }
  auto scheduler = std::make_unique<endor::serve::Scheduler>(*loaded.model, *files.tokenizer, a.sched);
  threads.set_scheduler(scheduler.get());
  const endor::serve::ServedModel served = served_model(files, a, args, *scheduler);
  server.set_ready(served);
  std::fprintf(stderr, "endor-serve: ready: %s on %s, %zu slots of %zu tokens, %s\n", served.id.c_str(),
               loaded.compute.backend->name().c_str(), a.sched.parallel, a.sched.ctx,
               a.http.api_key.empty() ? "no API key" : "API key required");
  threads.join();
  scheduler.reset();  // joins the scheduler thread before the model goes
  std::fprintf(stderr, "endor-serve: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  endor::prefer_passive_openmp(argv);
  return endor::cli::run_command("endor-serve", [&] { return run(argc, argv); });
}
