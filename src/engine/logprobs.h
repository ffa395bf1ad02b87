// Log-probabilities of a logits row for RequestOutput::logprobs.
#pragma once

#include <cstdint>
#include <span>

#include "engine/engine.h"

namespace deepinfer {

// log_softmax(logits)[token] and the top `k` entries (k >= 0), best first, ties by lower id.
// Computed in double, reported as float.
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int64_t k);

}  // namespace deepinfer
