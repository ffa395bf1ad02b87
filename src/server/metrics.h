// Metrics: Prometheus text exposition of the server's counters (GET /metrics).
//
// deepinfer's own names: deepinfer_requests_total{endpoint,status}, deepinfer_prompt_tokens_total,
// deepinfer_generation_tokens_total, deepinfer_requests_running / _queued (from the AsyncEngine),
// deepinfer_engine_steps_total, deepinfer_engine_step_seconds_total, state-cache usage
// (deepinfer_state_slots[_used], deepinfer_state_block_usage), deepinfer_preemptions_total,
// histograms deepinfer_time_to_first_token_seconds, deepinfer_time_per_output_token_seconds
// ((e2e - ttft) / (completion tokens - 1), per request) and deepinfer_e2e_request_latency_seconds.
//
// The same quantities under vLLM's names (its V1 engine's Prometheus logger), labelled
// {model_name="<served name>",engine="0"} as vLLM labels them, so that vLLM dashboards work:
//   gauges    vllm:num_requests_running (requests holding engine state), vllm:num_requests_waiting
//             (live requests not running: queued or waiting in the scheduler),
//             vllm:kv_cache_usage_perc and its older name vllm:gpu_cache_usage_perc (the fullest
//             state-cache block pool, a fraction in [0, 1] as in vLLM)
//   counters  vllm:prompt_tokens_total (prompt tokens of finished requests),
//             vllm:generation_tokens_total (tokens the engine delivered, counted as they come),
//             vllm:num_preemptions_total, vllm:request_success_total{finished_reason} (per
//             sequence: stop (tool calls included), length, abort (client gone))
//   histograms (vLLM's buckets) vllm:time_to_first_token_seconds,
//             vllm:inter_token_latency_seconds and its older name vllm:time_per_output_token_seconds
//             (one observation per gap between a sequence's token-producing steps),
//             vllm:request_time_per_output_token_seconds (per request), vllm:e2e_request_latency_seconds,
//             vllm:request_prompt_tokens, vllm:request_generation_tokens (1-2-5 buckets up to
//             max_model_len).
// Automatic prefix caching (EngineLoad's prefix_cache_*; 0 while off):
//   deepinfer_prefix_cache_block_tokens (gauge), _queries_total (lookups), _hits_total (lookups
//   that hit), _lookup_tokens_total (tokens of the requests looked up), _query_tokens_total
//   (their full blocks before the last token: what could hit), _hit_tokens_total (tokens served
//   from the cache), _hit_rate (gauge: hit / query tokens), _blocks and _blocks_in_use (gauges:
//   cached entries, those pinned by admitted hits), _bytes, _evicted_blocks_total;
//   vLLM's vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total, in tokens as vLLM
//   (>= 0.8) counts them: the tokens of each request looked up, and the tokens it hit.
// Speculative decoding's deepinfer_spec_* and vllm:spec_decode_* counters: spec_metrics.h.
// Thread-safety: every method may be called from any thread (configure() before serving).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/async_engine.h"

namespace deepinfer::server {

// One finished HTTP exchange.
struct RequestRecord {
  std::string endpoint;
  int status = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  double e2e_seconds = 0.0;
  double ttft_seconds = -1.0;  // < 0: no token was produced
  std::vector<double> inter_token_seconds;
  std::vector<std::string> finish_reasons;  // per sequence, for vllm:request_success_total
};

struct SpecDecodeCounters;

class Metrics {
 public:
  Metrics();
  // The model_name label and the token-count buckets' range.
  void configure(const std::string& model_name, int64_t max_model_len);
  void observe(const RequestRecord& r);
  // `spec`: speculative decoding's counters (spec_metrics.h), appended while it is on.
  std::string render(const AsyncEngineStats& engine, const SpecDecodeCounters* spec = nullptr) const;

 private:
  struct Histogram {
    explicit Histogram(std::vector<double> bounds = {});
    std::vector<double> bounds;
    std::vector<int64_t> counts;  // per bucket; cumulative at render time
    int64_t count = 0;
    double sum = 0.0;
    void add(double x);
  };
  static void render_histogram(std::string& out, const std::string& name, const char* help, const Histogram& h,
                               const std::string& labels = "");

  mutable std::mutex mu_;
  std::string labels_;  // model_name="...",engine="0"
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::map<std::string, int64_t> successes_;  // by vLLM finished_reason
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  Histogram ttft_, tpot_, e2e_;  // deepinfer_*
  Histogram vllm_ttft_, vllm_itl_, vllm_tpot_, vllm_e2e_, vllm_prompt_, vllm_generation_;
};

}  // namespace deepinfer::server
