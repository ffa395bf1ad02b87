#include "engine/spec_decode.h"

#include <algorithm>

#include "base/error.h"

namespace deepinfer {

double spec_uniform(uint64_t seed, int64_t position, SpecPurpose purpose) {
  const uint64_t k = static_cast<uint64_t>(purpose);
  // A distinct seed per purpose (an odd multiplier keeps purposes 1.. apart from 0 and from
  // each other for every seed); the position is mixed in by sample_uniform as usual.
  return sample_uniform(k == 0 ? seed : seed ^ (k * 0xa0761d6478bd642full), position);
}

VerifyDecision verify_draft(std::span<const float> target, const SamplingParams& params,
                            int64_t position, int32_t draft, std::span<const float> q) {
  const int64_t V = static_cast<int64_t>(target.size());
  CHECK(draft >= 0 && draft < V) << "speculative verification: draft token " << draft
                                 << " outside the vocabulary of " << V;
  CHECK(q.empty() || static_cast<int64_t>(q.size()) == V)
      << "speculative verification: the drafter's distribution has " << q.size() << " entries for "
      << V << " tokens";
  VerifyDecision d;
  if (params.temperature == 0.0f || params.top_k == 1) {
    d.token = sample_token(target, params, position);
    d.accepted = d.token == draft;
    return d;
  }
  thread_local TokenDistribution p;
  token_distribution(target, params, p);
  const double q_draft = q.empty() ? 1.0 : static_cast<double>(q[size_t(draft)]);
  CHECK(q_draft > 0.0) << "speculative verification: the drafter proposed token " << draft
                       << " with probability 0";
  double p_draft = 0.0;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    if (p.ids[i] == draft) p_draft = p.probs[i];
  }
  if (spec_uniform(params.seed, position, SpecPurpose::kAccept) * q_draft < p_draft) {
    d.accepted = true;
    d.token = draft;
    return d;
  }
  // Residual (p - q)+ over p's support (elsewhere p = 0), in p's candidate order.
  thread_local std::vector<double> residual;
  residual.resize(p.ids.size());
  double mass = 0.0;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    const int32_t t = p.ids[i];
    const double qt = q.empty() ? (t == draft ? 1.0 : 0.0) : static_cast<double>(q[size_t(t)]);
    residual[i] = std::max(p.probs[i] - qt, 0.0);
    mass += residual[i];
  }
  if (!(mass > 0.0)) {
    // p <= q everywhere means p == q (both sum to 1): then p(d) / q(d) = 1 and the draft was
    // accepted above; only rounding reaches here, where accepting is the exact answer.
    d.accepted = true;
    d.token = draft;
    return d;
  }
  const double u = spec_uniform(params.seed, position, SpecPurpose::kResidual) * mass;
  double acc = 0.0;
  bool found = false;
  for (size_t i = 0; i < p.ids.size() && !found; ++i) {
    if (residual[i] <= 0.0) continue;
    acc += residual[i];
    d.token = p.ids[i];  // the last positive entry, should rounding leave u >= acc
    found = u < acc;
  }
  ICHECK(d.token != draft) << "speculative verification: the residual gave the rejected draft";
  return d;
}

}  // namespace deepinfer
