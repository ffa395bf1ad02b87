// Metrics: Prometheus text exposition of the server's counters (GET /metrics):
//   deepinfer_requests_total{endpoint,status}, deepinfer_prompt_tokens_total,
//   deepinfer_generation_tokens_total, deepinfer_requests_running / _queued (from the
//   AsyncEngine), deepinfer_engine_steps_total, deepinfer_engine_step_seconds_total, state-cache
//   usage (deepinfer_state_slots[_used], deepinfer_state_block_usage), deepinfer_preemptions_total,
//   histograms deepinfer_time_to_first_token_seconds, deepinfer_time_per_output_token_seconds
//   ((e2e - ttft) / (completion tokens - 1), per request) and deepinfer_e2e_request_latency_seconds.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "engine/async_engine.h"

namespace deepinfer::server {

class Metrics {
 public:
  // One finished HTTP request. ttft_seconds < 0: no token was produced.
  void observe(const std::string& endpoint, int status, int64_t prompt_tokens,
               int64_t completion_tokens, double e2e_seconds, double ttft_seconds);
  std::string render(const AsyncEngineStats& engine) const;

 private:
  static constexpr std::array<double, 12> kBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                      1.0,  2.5,   5.0,  10.0, 30.0, 60.0};
  struct Histogram {
    std::array<int64_t, kBuckets.size()> counts{};  // cumulative at render time
    int64_t count = 0;
    double sum = 0.0;
    void add(double x);
  };
  static void render_histogram(std::string& out, const char* name, const char* help, const Histogram& h);

  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  Histogram ttft_, tpot_, e2e_;
};

}  // namespace deepinfer::server
