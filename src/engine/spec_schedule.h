// Confidence-scheduled verification (issue 15 deliverable 4; DSpark paper §5.2;
// EngineArgs::spec_scheduling "confidence").
//
// Each step, every speculative request r has drafts d_0..d_{k_r-1} with per-position
// acceptance estimates a_{r,j} in [0, 1]: the probability that d_j is accepted given that
// d_0..d_{j-1} were (DSpark: sigma(c_j) of its confidence head; MTP: the drafter's own softmax
// probability of d_j; engine_spec.cc says where else they come from). Verifying the first n_r
// drafts of r commits in expectation 1 + sum_{j < n_r} prod_{i <= j} a_{r,i} tokens (the
// target's own token always; draft j only if it and every draft before it are accepted).
//
// The step's time t(T) as a function of the tokens T it computes is a StepTimeCurve: profiled
// at start-up on the actual runner, corrected online with the measured step times.
//
// select_verification() picks the n_r that maximise expected committed tokens per second,
//   (n_requests + sum_r sum_{j < n_r} A_{r,j}) / t(base_tokens + n_requests + sum_r n_r),
// A_{r,j} = prod_{i <= j} a_{r,i}. For a fixed total M = sum_r n_r the best numerator takes the
// M largest A_{r,j} (each request's A is non-increasing in j, so prefixes are never worse
// than other subsets), so the greedy order (all (r, j) by A, ties to the lower j then the lower
// r; r's j only after its j-1) evaluated at every M from 0 to sum_r k_r finds the optimum
// exactly. distribute_drafts() hands out a given total M in that same order (with overlap the
// total could come from older estimates and be distributed with the newest ones).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace deepinfer {

// Step time in seconds vs the tokens a step computes: piecewise linear through points (tokens
// ascending), flat below the first point, the last segment's slope beyond the last (a single
// point: proportional).
class StepTimeCurve {
 public:
  StepTimeCurve() = default;
  // Throws Error unless tokens are positive and strictly ascending and seconds positive and
  // finite; at least one point.
  explicit StepTimeCurve(std::vector<std::pair<int64_t, double>> points);

  bool empty() const { return points_.empty(); }
  double seconds(int64_t tokens) const;
  // Online correction with a measured step of `tokens` taking `seconds`: the point nearest to
  // `tokens` moves by the EMA weight `alpha` towards the measurement scaled to that point
  // along the current curve (t_b <- t_b * (1 - alpha + alpha * measured / t(tokens))). The
  // ratio is clamped to [1/4, 4], so one descheduled step on a loaded machine cannot wreck
  // the curve. Ignores non-positive or non-finite measurements.
  void observe(int64_t tokens, double seconds, double alpha = 0.1);
  const std::vector<std::pair<int64_t, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<int64_t, double>> points_;
};

struct VerifySelection {
  std::vector<int64_t> n_drafts;  // per request: drafts to verify (a prefix of its drafts)
  double expected_tokens = 0;     // n_requests + the sum of the chosen A_{r,j}
  double seconds = 0;             // t(base_tokens + n_requests + chosen drafts)
};

// `rates[r]`: a_{r,0..k_r-1} (each clamped to [0, 1]). `base_tokens`: the step's other tokens.
// Throws Error for a NaN rate or an empty curve.
VerifySelection select_verification(const std::vector<std::vector<double>>& rates, const StepTimeCurve& curve,
                                    int64_t base_tokens = 0);

// The first `total` (r, j) of the greedy order (at most all drafts): drafts per request.
std::vector<int64_t> distribute_drafts(const std::vector<std::vector<double>>& rates, int64_t total);

}  // namespace deepinfer
