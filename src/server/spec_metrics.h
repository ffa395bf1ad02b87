// Speculative decoding's counters for GET /metrics (metrics.h): the engine's EngineStats
// copied after every step on the loop thread (SpecStatsTap) into a board that the HTTP threads
// read. Rendered only while speculative decoding is on (the engine verifies k > 0 drafts):
//   deepinfer_spec_num_speculative_tokens (gauge: k), deepinfer_spec_verifications_total,
//   deepinfer_spec_draft_tokens_total (verified), deepinfer_spec_accepted_tokens_total,
//   deepinfer_spec_verified_per_pos_total{position} / _accepted_tokens_per_pos_total{position},
//   deepinfer_spec_verify_steps_total, deepinfer_spec_verified_tokens_total (rows of the
//   [y, drafts] chunks), deepinfer_spec_draft_seconds_total;
//   vLLM's vllm:spec_decode_num_drafts_total (verifications), vllm:spec_decode_num_draft_tokens_total,
//   vllm:spec_decode_num_accepted_tokens_total, vllm:spec_decode_num_accepted_tokens_per_pos_total{position}.
// Thread-safety: SpecStatsBoard's methods from any thread; the tap runs on the loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/async_engine.h"

namespace deepinfer::server {

struct SpecDecodeCounters {
  int64_t num_speculative_tokens = 0;  // k; 0: speculative decoding off
  int64_t verifications = 0;
  int64_t draft_tokens = 0;
  int64_t accepted_tokens = 0;
  std::vector<int64_t> verified_at;    // [k]
  std::vector<int64_t> accepted_at;    // [k]
  int64_t verify_steps = 0;
  int64_t verified_tokens = 0;
  double draft_seconds = 0;
};

SpecDecodeCounters spec_counters(const EngineStats& stats);

class SpecStatsBoard {
 public:
  void set(SpecDecodeCounters counters) {
    std::lock_guard<std::mutex> lock(mu_);
    counters_ = std::move(counters);
  }
  SpecDecodeCounters get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counters_;
  }

 private:
  mutable std::mutex mu_;
  SpecDecodeCounters counters_;
};

// `engine` wrapped for AsyncEngine (make_step_engine) with its speculative counters posted to
// `board` at start and after every step.
std::unique_ptr<StepEngine> make_spec_stats_tap(std::unique_ptr<Engine> engine, std::shared_ptr<SpecStatsBoard> board);

// The Prometheus lines of `c` (nothing while off); `labels` are vLLM's model_name / engine.
std::string render_spec_metrics(const SpecDecodeCounters& c, const std::string& labels);

}  // namespace deepinfer::server
