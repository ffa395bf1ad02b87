// Greedy speculative decoding of one sequence on the CPU model (MODEL_SPEC §D; issue 15
// deliverables 2-3 at the model level; the engine's batched, overlapped version is next):
// each step drafts k tokens after the token y the target chose last, verifies [y, drafts]
// in ONE forward (logits at every position), accepts drafts while they equal the target's
// argmax, appends the target's token at the first mismatch (or after the last draft), and
// rolls the state back to the committed positions with Model::truncate. The output is
// exactly that of greedy_plain (token by token); in batch-invariant mode the committed
// logits are bitwise equal too.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/model.h"

namespace deepinfer {

// Draft tokens for the positions after `next` (the target's token for the position after
// the state's last committed one); may return fewer than asked, never more.
using Drafter = std::function<std::vector<int32_t>(const SequenceState& state, int32_t next, int64_t k)>;

// The checkpoint's own drafter (Model::draft), greedy, whichever kind it has: DSpark drafts its
// block and keeps the first k; MTP-1 chains k steps (Model::draft with n_drafts = k). Throws
// when the model has no drafter.
Drafter model_drafter(const Model& model);
// The same; kept for the DSpark callers.
Drafter dspark_drafter(const Model& model);

struct SpeculativeStats {
  int64_t steps = 0;     // verification forwards
  int64_t drafted = 0;   // draft tokens verified
  int64_t accepted = 0;  // of those, accepted
  std::vector<int64_t> accepted_at;  // [k]: how often draft i was accepted
  // Committed tokens per verification step (accepted drafts + the target's token).
  double mean_acceptance_length() const {
    return steps ? static_cast<double>(accepted + steps) / static_cast<double>(steps) : 0.0;
  }
};

struct GreedyOutput {
  std::vector<int32_t> tokens;  // the continuation, max_new_tokens of them
  std::vector<float> logits;    // [max_new_tokens, V]: the logits each token was chosen from
  SpeculativeStats stats;
};

// Prefills `prompt` into the fresh `state` and continues greedily for max_new_tokens.
GreedyOutput greedy_plain(const Model& model, SequenceState& state, std::span<const int32_t> prompt,
                          int64_t max_new_tokens);
// The same output with k drafts per step (k <= model.rollback_depth()).
GreedyOutput greedy_speculative(const Model& model, SequenceState& state,
                                std::span<const int32_t> prompt, int64_t max_new_tokens, int64_t k,
                                const Drafter& drafter);

}  // namespace deepinfer
