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

int run(int argc, char** argv) {
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
  cxxopts::ParseResult args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << "\n";
    return 0;
  }
  endor::cli::reject_unmatched(args);
  if (!args.count("file")) throw UsageError("missing MODEL.endor (the model to serve)");
  endor::cli::check_placement_options(args);
  const size_t parallel = args["parallel"].as<size_t>();
  if (parallel < 1 || parallel > 256) throw UsageError("--parallel must be in [1, 256]");
  const std::optional<size_t> ctx = endor::cli::ctx_option(args);
  if (args["prefill-chunk"].as<size_t>() < 1) throw UsageError("--prefill-chunk must be at least 1");
  const int port = args["port"].as<int>();
  if (port < 0 || port > 65535) throw UsageError("--port must be in [0, 65535]");
  if (args["timeout"].as<int>() < 1) throw UsageError("--timeout must be at least 1 second");
  if (args.count("api-key") && args["api-key"].as<std::string>().empty()) throw UsageError("--api-key must not be empty");
  const int64_t default_max_tokens = args["default-max-tokens"].as<int64_t>();
  if (default_max_tokens < 1 || default_max_tokens > std::numeric_limits<int32_t>::max())
    throw UsageError("--default-max-tokens must be in [1, 2147483647], got " + std::to_string(default_max_tokens));
  const uint64_t body_limit = endor::cli::parse_size_option(args, "body-limit");
  if (body_limit < 1024) throw UsageError("--body-limit must be at least 1K");

  // The file, its tokenizer and its chat template are checked before anything listens.
  const std::string file = args["file"].as<std::string>();
  std::unique_ptr<endor::ContainerReader> container = endor::ContainerReader::open(file);
  const endor::ModelConfig config = endor::parse_model_config(container->manifest().config, file);
  const size_t ctx_tokens = ctx.value_or(std::min<size_t>(config.max_positions, 4096));
  endor::cli::check_ctx_fits(ctx_tokens, config.max_positions);
  std::optional<endor::Tokenizer> tokenizer = endor::cli::container_tokenizer(*container);
  if (!tokenizer) throw endor::Error(file + ": the container holds no tokenizer.json; endor-serve needs one for text");
  std::optional<endor::cli::ChatSetup> chat;
  std::string chat_error;
  try {
    chat = endor::cli::load_chat_setup(*container, *tokenizer);
  } catch (const endor::Error& e) {
    chat_error = e.what();
    const size_t cli_hint = chat_error.find(", so --chat");  // load_chat_setup speaks of endor-infer's options
    if (cli_hint != std::string::npos) chat_error.resize(cli_hint);
    chat_error += "; chats cannot be formatted (POST /v1/completions works)";
    std::fprintf(stderr, "endor-serve: note: %s\n", chat_error.c_str());
  }
  endor::serve::SchedulerOptions sched;
  sched.parallel = parallel;
  sched.queue = args["queue"].as<size_t>();
  sched.prefill_chunk = args["prefill-chunk"].as<size_t>();
  sched.ctx = ctx_tokens;

  // SIGTERM/SIGINT are taken by one thread (sigwait), not by a handler: blocked here, before any
  // other thread starts, so every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal

  endor::serve::HttpOptions http;
  http.host = args["host"].as<std::string>();
  http.port = port;
  if (args.count("api-key")) http.api_key = args["api-key"].as<std::string>();
  http.body_limit_bytes = body_limit;
  http.default_max_tokens = size_t(default_max_tokens);
  http.timeout_s = args["timeout"].as<int>();
  http.metrics = args.count("metrics") > 0;
  http.threads = parallel + sched.queue + 8;  // each waiting or generating request holds a connection
  endor::serve::HttpServer server(http);
  server.bind();
  std::thread listener([&] { server.listen(); });
  std::fprintf(stderr, "endor-serve: listening on http://%s:%d (loading %s)\n", http.host.c_str(), server.port(),
               file.c_str());

  std::atomic<bool> stopping{false};
  std::unique_ptr<endor::serve::Scheduler> scheduler;
  std::mutex scheduler_mutex;
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    stopping = true;
    std::fprintf(stderr, "endor-serve: %s: stopping\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    {
      std::lock_guard<std::mutex> lock(scheduler_mutex);
      if (scheduler) scheduler->shutdown();  // in-flight requests end with finish_reason "abort"
    }
    server.drain(10);  // new requests get 503 while the streams write their final chunk
    server.stop();     // listen() returns once the connections are closed
  });
  // On a load error, the listener and the signal thread are stopped before the error is reported.
  auto stop_threads = [&] {
    if (!stopping.exchange(true)) pthread_kill(signals.native_handle(), SIGTERM);
    signals.join();
    listener.join();
  };

  endor::cli::Compute compute;
  endor::cli::Offload offload;
  std::unique_ptr<endor::Model> model;
  try {
    compute = endor::cli::open_compute(args);
    // Fixed needs: the KV caches of `parallel` requests of ctx tokens, and a step's rows (the prefill
    // chunk plus a token per decoding slot).
    offload = endor::cli::setup_offload(*container, *compute.backend, args, parallel * sched.ctx,
                                        sched.prefill_chunk + parallel, compute.kv_dtype);
    model = endor::load_model(*container, *compute.backend, offload.weights.get());
    model->set_kv_dtype(compute.kv_dtype);
  } catch (...) {
    stop_threads();
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(scheduler_mutex);
    scheduler = std::make_unique<endor::serve::Scheduler>(*model, *tokenizer, sched);
    if (stopping) scheduler->shutdown();
  }
  endor::serve::ServedModel served;
  served.id = args.count("model-name") ? args["model-name"].as<std::string>()
                                       : std::filesystem::path(file).stem().string();
  served.tokenizer = &*tokenizer;
  if (chat) {
    served.chat_template = &chat->chat_template;
    served.bos_token = chat->bos_token;
    served.eos_token = chat->eos_token;
    served.chat_stop_ids = chat->stop_ids;
  } else {
    served.chat_error = chat_error;
  }
  served.defaults = endor::default_sampler_options(container->manifest().generation_config, 0);
  served.vocab = config.vocab;
  served.scheduler = scheduler.get();
  server.set_ready(served);
  std::fprintf(stderr, "endor-serve: ready: %s on %s, %zu slots of %zu tokens, %s\n", served.id.c_str(),
               compute.backend->name().c_str(), parallel, sched.ctx,
               http.api_key.empty() ? "no API key" : "API key required");
  listener.join();
  signals.join();
  scheduler.reset();  // joins the scheduler thread before the model goes
  std::fprintf(stderr, "endor-serve: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  endor::prefer_passive_openmp(argv);
  return endor::cli::run_command("endor-serve", [&] { return run(argc, argv); });
}
