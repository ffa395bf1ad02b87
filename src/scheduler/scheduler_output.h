// What schedule() hands the engine for one step, and what update() hands back.
#pragma once

#include <cstdint>
#include <vector>

#include "scheduler/request.h"

namespace deepinfer {

// Compute positions [start_position, start_position + n_tokens) of one request this step.
// The input token at position p is Request::token_ids[p], except
//   * p == num_tokens() of a request with an in-flight sample (overlap scheduling): that
//     token is the one the previous step samples, which the engine takes from the device;
//   * the chunk's last draft_token_ids.size() positions, whose inputs are the drafts.
// start_position == 0 means the request starts from empty state (new or preempted before):
// its compressor state slot must be reset.
struct ScheduledChunk {
  int64_t request_id = 0;
  int64_t start_position = 0;
  int64_t n_tokens = 0;
  // The chunk reaches the last known token: the step samples one output from that
  // position's logits, delivered to update(). False for a prefill chunk that stops earlier.
  bool samples = false;
  // Speculative tokens at the chunk's last positions: the step verifies them, sampling at
  // the last known position and at every draft position; update() takes the accepted
  // drafts plus one token.
  std::vector<int32_t> draft_token_ids;
};

struct SchedulerOutput {
  int64_t step = 0;                       // 0, 1, 2, ... per schedule() call
  // Running requests with one known token left (decodes, maybe with drafts) first, then
  // running prefill chunks, then newly admitted requests; at most one chunk per request.
  std::vector<ScheduledChunk> scheduled;
  int64_t n_scheduled_tokens = 0;         // sum of n_tokens
  std::vector<int64_t> preempted_ids;     // lost their state during this schedule()
  // Finished (any reason) since the previous schedule(): drop per-request engine state.
  std::vector<int64_t> finished_ids;
};

struct FinishedRequest {
  int64_t id = 0;
  FinishReason reason = FinishReason::kAbort;
  std::vector<int32_t> output_token_ids;  // with the stop token when reason is kStop
  int64_t num_preemptions = 0;
};

}  // namespace deepinfer
