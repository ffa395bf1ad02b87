// Request: one generation request as the scheduler sees it: token ids and counters, no text.
//
// State machine:
//   kWaiting --admit--> kRunning --preempt--> kPreempted --admit--> kRunning ...
//   any live state --update/finish/abort--> kFinishedStopped | kFinishedLength | kFinishedAborted
// A preempted request lost its cache state: num_computed_tokens is 0 and everything in
// token_ids (prompt and the outputs generated so far) is recomputed when it is admitted again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer {

enum class RequestStatus {
  kWaiting,
  kRunning,
  kPreempted,  // waiting again after losing its state
  kFinishedStopped,
  kFinishedLength,
  kFinishedAborted,
};

enum class FinishReason {
  kStop,    // a stop token id, or a stop string found above the scheduler (finish())
  kLength,  // max_tokens outputs
  kAbort,   // cancelled by the caller
};

const char* request_status_name(RequestStatus status);
const char* finish_reason_name(FinishReason reason);
RequestStatus finished_status(FinishReason reason);

// What the caller submits. Ids are chosen by the caller and must not be reused while
// the request lives (nor while a step that scheduled it is in flight).
struct RequestSpec {
  int64_t id = 0;
  std::vector<int32_t> prompt_token_ids;  // non-empty
  int64_t max_tokens = 16;                // >= 1 outputs at most
  int64_t min_tokens = 0;                 // stop token ids are ignored before this many outputs
  std::vector<int32_t> stop_token_ids;    // EOS included by the caller unless ignore_eos
  int64_t priority = 0;                   // lower runs first (priority policy only)
};

struct Request {
  int64_t id = 0;
  RequestStatus status = RequestStatus::kWaiting;
  int64_t priority = 0;
  int64_t arrival = 0;            // order of add_request, FCFS tie-breaker
  std::vector<int32_t> token_ids; // prompt, then outputs
  int64_t num_prompt_tokens = 0;
  // Tokens whose state is in the cache (or being computed by a step already scheduled).
  int64_t num_computed_tokens = 0;
  // Outputs a scheduled step will sample that update() has not delivered yet (0 unless the
  // engine schedules step t+1 before updating step t).
  int64_t num_output_placeholders = 0;
  // Speculative tokens proposed for positions num_tokens().. (set_draft_tokens); the next
  // schedule() moves them into the request's chunk. Only without samples in flight.
  std::vector<int32_t> draft_token_ids;
  int64_t max_tokens = 0;
  int64_t min_tokens = 0;
  std::vector<int32_t> stop_token_ids;
  int64_t num_preemptions = 0;

  int64_t num_tokens() const { return int64_t(token_ids.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  // Known tokens plus in-flight samples: a chunk reaching this count samples.
  int64_t num_tokens_with_placeholders() const { return num_tokens() + num_output_placeholders; }
  // The count num_computed_tokens catches up with: the above plus draft tokens.
  int64_t num_tokens_with_drafts() const {
    return num_tokens_with_placeholders() + int64_t(draft_token_ids.size());
  }
  // Whether computing up to num_tokens_with_placeholders() would sample one more output.
  bool wants_more_outputs() const {
    return num_output_tokens() + num_output_placeholders < max_tokens;
  }
  std::vector<int32_t> output_token_ids() const;
  bool is_finished() const;
};

}  // namespace deepinfer
