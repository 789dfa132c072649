// endor-serve's GET /metrics: request counters by route and status, and the scheduler's counters
// and gauges, in Prometheus' text exposition format (version 0.0.4).
// Thread safety: RequestCounters::count() and render() may run concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "endor/serve_scheduler.h"

namespace endor::serve {

class RequestCounters {
 public:
  // One answered request on `route` ("/v1/chat/completions", ...; "other" for unknown paths).
  void count(const std::string& route, int status);
  std::map<std::pair<std::string, int>, uint64_t> snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> counts_;
};

std::string render_prometheus(const RequestCounters& requests, const SchedulerMetrics& scheduler);

}  // namespace endor::serve
