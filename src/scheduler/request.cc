#include "scheduler/request.h"

namespace deepinfer {

const char* request_status_name(RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting: return "waiting";
    case RequestStatus::kRunning: return "running";
    case RequestStatus::kPreempted: return "preempted";
    case RequestStatus::kFinishedStopped: return "finished_stopped";
    case RequestStatus::kFinishedLength: return "finished_length";
    case RequestStatus::kFinishedAborted: return "finished_aborted";
  }
  return "?";
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "?";
}

RequestStatus finished_status(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return RequestStatus::kFinishedStopped;
    case FinishReason::kLength: return RequestStatus::kFinishedLength;
    case FinishReason::kAbort: return RequestStatus::kFinishedAborted;
  }
  return RequestStatus::kFinishedAborted;
}

std::vector<int32_t> Request::output_token_ids() const {
  return std::vector<int32_t>(token_ids.begin() + num_prompt_tokens, token_ids.end());
}

bool Request::is_finished() const {
  return status == RequestStatus::kFinishedStopped || status == RequestStatus::kFinishedLength ||
         status == RequestStatus::kFinishedAborted;
}

}  // namespace deepinfer
