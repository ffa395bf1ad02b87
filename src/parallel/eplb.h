// EPLB, the expert-parallel load balancer (issue 19 deliverable 4; the policy DeepInfer uses,
// ../shared/research/deepinfer-source.md §7, written here from its description):
//   * a sliding window of per-step, per-logical-expert token counts of every MoE layer
//     (ExpertLoadWindow; ExpertParallel counts on the home rank and all-reduces, so every rank
//     holds the same window);
//   * the policy (eplb_placement): with P ranks of S slots, P*S - E redundant copies are given
//     one at a time to the expert whose extra copy most lowers sum over the window's steps of
//     the largest per-copy load (an expert's step load split evenly over its copies; ties: the
//     larger windowed per-copy load, then the lower expert id; at most one copy per rank), then
//     the copies, heaviest first, are packed greedily onto the rank (with a free slot, not yet
//     holding that expert) that gives the smallest sum over steps of the largest rank load
//     (ties: a rank that already held the expert in the current placement, so fewer weights
//     move; then the lighter rank; then the lower rank);
//   * imbalance = sum_t max_r load[t][r] / sum_t mean_r load[t][r] (1 = perfectly balanced; a
//     step costs what its busiest rank costs).
// Re-placement itself (moving weights, switching tables between steps) is ExpertParallel's.
//
// Pure functions and a value type; thread-safe to call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "parallel/expert_placement.h"

namespace deepinfer {

struct EplbOptions {
  // Rebalance every `interval` steps (the first after max(1, interval / 4) steps); 0: off
  // (DeepInfer's default).
  int64_t interval = 0;
  // Redundant expert slots per rank (0: no replication, re-packing only).
  int64_t extra_slots_per_rank = 0;
  // Steps of counts the policy sees.
  int64_t window = 100;
};

// The last `window` steps of counts of every layer, oldest first.
class ExpertLoadWindow {
 public:
  ExpertLoadWindow() = default;
  ExpertLoadWindow(int64_t n_layers, int64_t n_experts, int64_t window);

  // Appends one step: counts [n_layers * n_experts] (layer-major); drops the oldest step
  // when the window is full.
  void push(std::span<const int64_t> step_counts);
  int64_t n_steps() const { return static_cast<int64_t>(steps_.size()); }
  int64_t n_layers() const { return n_layers_; }
  int64_t n_experts() const { return n_experts_; }
  // Layer `layer`'s counts [n_steps, n_experts], oldest first.
  std::vector<int64_t> layer_counts(int64_t layer) const;
  // Per layer, per expert, summed over the window: [n_layers * n_experts].
  std::vector<int64_t> totals() const;

 private:
  int64_t n_layers_ = 0, n_experts_ = 0, window_ = 0;
  std::vector<std::vector<int64_t>> steps_;
};

// The policy on one layer's counts [n_steps, E] (see the header comment). Deterministic: the
// same counts and current placement give the same result on every rank. `current` supplies
// E, P and S and the movement tie-break. With n_steps == 0 returns `current`.
ExpertPlacement eplb_placement(std::span<const int64_t> counts, int64_t n_steps,
                               const ExpertPlacement& current);

// Imbalance of `placement` under counts [n_steps, E] (1 when there is no load).
double placement_imbalance(const ExpertPlacement& placement, std::span<const int64_t> counts,
                           int64_t n_steps);

}  // namespace deepinfer
