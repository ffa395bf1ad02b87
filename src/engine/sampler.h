// Sampling of one token from fp32 logits (DESIGN.md §2). Deterministic: the random
// number for a request's output position i is a pure function of (seed, i), never of
// the batch slot or the step, so a seeded request samples the same tokens in any batch.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "runtime/model_runner.h"

namespace deepinfer {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  // OpenAI's logit_bias: (token id, bias) pairs, each bias in [-100, 100], added to that
  // token's raw logit first, then the penalties apply, then temperature, top-k/p and min-p
  // (vLLM's order). +100 practically forces a token, -100 practically bans it; a token listed
  // twice gets both biases. Ids must lie in the model's vocabulary (Engine::add_request checks;
  // apply_penalties skips ids outside the logits it is given). Reported log-probabilities stay
  // those of the raw logits, before bias and penalties (vLLM's default logprobs_mode,
  // "raw_logprobs").
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Constrained requests only: added (after logit_bias and the penalties) to the logits of the
  // tokens that spell a prefix of a shortest completion of the grammar from the current state,
  // and of EOS where the grammar may end (GrammarMatcher::closing_tokens): a preference for
  // finishing that the grammar derives, in [-100, 100]; 0 = off.
  float closing_bias = 0.0f;

  // Throws Error naming the first invalid field.
  void validate() const;
};

// Uniform in [0, 1) from (seed, position): a counter-based generator (splitmix64 of a
// hash of both), the same on every backend.
double sample_uniform(uint64_t seed, int64_t position);

// Applies logit_bias and the penalties (over `history`, the request's output tokens so far... and
// prompt for the repetition penalty, as callers choose) in place, on the raw logits.
void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     std::span<const int32_t> history);

// Picks a token: greedy (lowest id among ties) at temperature 0; otherwise softmax(l/T),
// filtered by top-k, top-p and min-p, and inverse-CDF sampled with sample_uniform(seed,
// position) over the candidates ordered by (probability desc, id asc).
int32_t sample_token(std::span<const float> logits, const SamplingParams& params,
                     int64_t position);

// The distribution sample_token draws from at temperature > 0 (and top_k != 1): the kept
// candidates in (probability desc, id asc) order and their probabilities, normalised over
// the kept set (after temperature, top-k, min-p, then top-p, as sample_token). Tokens not
// listed have probability 0. Greedy parameters give the argmax with probability 1.
struct TokenDistribution {
  std::vector<int32_t> ids;
  std::vector<double> probs;
};
void token_distribution(std::span<const float> logits, const SamplingParams& params,
                        TokenDistribution& out);

// A runner's kSample row (runtime/model_runner.h) sampled on the host: sample_token with the
// row's temperature, top-k, top-p, min-p and seed at its position (masks already applied).
// The sampler the engine gives CpuRunner.
int32_t sample_row_request(std::span<const float> logits, const RowRequest& row);

}  // namespace deepinfer
