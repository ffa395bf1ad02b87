// Speculative verification of one draft token (issue 15 deliverable 2; MODEL_SPEC §D).
//
// A decoding request's step carries [y, d_0 .. d_{k-1}]: the token y the target chose last
// and k drafts. The forward gives the target's logits at every one of those k+1 positions;
// the engine walks them in order (row j decides output index o+j, with the penalties,
// logit_bias, grammar mask and EOS mask of the output so far, accepted drafts included) and
// calls verify_draft for each draft until one is rejected; if all k are accepted, row k gives
// a bonus token sampled exactly as a plain decode samples (sample_token). Tokens committed:
// the accepted drafts plus that one token (a correction or the bonus).
//
//  * Greedy (temperature 0 or top_k 1): the target's token is sample_token's argmax; the
//    draft is accepted iff it equals it, and the correction is the target's token. The output
//    is token for token that of non-speculative greedy decoding.
//  * Sampled: standard rejection sampling (Leviathan et al., Chen et al.). p = the target's
//    distribution after the request's temperature / top-k / min-p / top-p (token_distribution,
//    the one sample_token draws from); q = the drafter's distribution of the draft. The draft
//    d is accepted with probability min(1, p(d) / q(d)); on rejection the correction is drawn
//    from the residual (p - q)+ / |(p - q)+|. The committed tokens are then distributed
//    exactly as non-speculative sampling's (lossless), though not the same tokens.
//    The model's drafters (DSpark, MTP) draft greedily: their q is one-hot at the draft
//    (q(d) = 1), so d is accepted with probability p(d) and the residual is p with d removed,
//    renormalised. A test drafter may supply a full q (the distribution it drew d from).
//  * Random numbers: the sampler's counter RNG keyed by (seed, output index, purpose), so the
//    outcome never depends on the batch, the step or the other requests: kAccept for the
//    acceptance test, kResidual for the correction; the bonus token uses the plain stream
//    (sample_uniform(seed, output index)), kDraft is for drafters that sample.
#pragma once

#include <cstdint>
#include <span>

#include "engine/sampler.h"

namespace deepinfer {

enum class SpecPurpose : uint64_t { kSample = 0, kAccept = 1, kResidual = 2, kDraft = 3 };

// Uniform in [0, 1) for (seed, output index, purpose); kSample is sample_uniform itself.
double spec_uniform(uint64_t seed, int64_t position, SpecPurpose purpose);

struct VerifyDecision {
  bool accepted = false;
  int32_t token = 0;  // the draft when accepted, else the correction
};

// Verifies `draft` for output index `position` against `target` (the row's logits after
// penalties and masks, before temperature). `q`: the drafter's probabilities [V] that the
// draft was drawn from; empty = one-hot at the draft (a greedy drafter). Throws Error when q
// gives the draft probability 0 or has the wrong size.
VerifyDecision verify_draft(std::span<const float> target, const SamplingParams& params,
                            int64_t position, int32_t draft, std::span<const float> q);

}  // namespace deepinfer
