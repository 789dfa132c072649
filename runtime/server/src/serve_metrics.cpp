// Prometheus text for GET /metrics (serve_metrics.h).
#include "endor/serve_metrics.h"

#include <cstdio>

namespace endor::serve {

void RequestCounters::count(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  counts_[{route, status}] += 1;
}

std::map<std::pair<std::string, int>, uint64_t> RequestCounters::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

namespace {
void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  char line[64];
  std::snprintf(line, sizeof line, "%.17g", value);
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + line + "\n";
}
}  // namespace

std::string render_prometheus(const RequestCounters& requests, const SchedulerMetrics& s) {
  std::string out =
      "# HELP endor_requests_total HTTP requests answered, by route and status.\n"
      "# TYPE endor_requests_total counter\n";
  // Routes are the server's own names (never the client's path), so no label escaping is needed.
  for (const auto& [key, n] : requests.snapshot())
    out += "endor_requests_total{route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(n) + "\n";
  metric(out, "endor_prompt_tokens_total", "counter", "Prompt tokens of the requests that got a slot.",
         double(s.prompt_tokens));
  metric(out, "endor_generated_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
  metric(out, "endor_steps_total", "counter", "Batched forward passes (one pass over the blocks each).",
         double(s.steps));
  metric(out, "endor_requests_finished_total", "counter", "Generations that ended (stop or length).",
         double(s.requests_finished));
  metric(out, "endor_requests_cancelled_total", "counter", "Generations whose client went away.",
         double(s.requests_cancelled));
  metric(out, "endor_generated_tokens_per_second", "gauge", "Tokens generated per second over the last 10 s.",
         s.generated_tokens_per_s);
  metric(out, "endor_queue_length", "gauge", "Requests waiting for a slot.", double(s.queue_length));
  metric(out, "endor_active_slots", "gauge", "Slots holding a request.", double(s.active_slots));
  metric(out, "endor_slots", "gauge", "Slots (--parallel).", double(s.parallel));
  metric(out, "endor_kv_cache_bytes", "gauge", "Bytes of the active slots' KV caches.", double(s.kv_bytes));
  return out;
}

}  // namespace endor::serve
