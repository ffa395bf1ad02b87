#include "parallel/eplb.h"

#include <algorithm>
#include <numeric>

#include "base/error.h"

namespace deepinfer {

ExpertLoadWindow::ExpertLoadWindow(int64_t n_layers, int64_t n_experts, int64_t window)
    : n_layers_(n_layers), n_experts_(n_experts), window_(window) {
  CHECK(window > 0) << "EPLB window must be at least one step (got " << window << ")";
}

void ExpertLoadWindow::push(std::span<const int64_t> step_counts) {
  ICHECK(static_cast<int64_t>(step_counts.size()) == n_layers_ * n_experts_);
  if (static_cast<int64_t>(steps_.size()) == window_) steps_.erase(steps_.begin());
  steps_.emplace_back(step_counts.begin(), step_counts.end());
}

std::vector<int64_t> ExpertLoadWindow::layer_counts(int64_t layer) const {
  ICHECK(layer >= 0 && layer < n_layers_);
  std::vector<int64_t> out;
  out.reserve(steps_.size() * n_experts_);
  for (const std::vector<int64_t>& s : steps_) {
    out.insert(out.end(), s.begin() + layer * n_experts_, s.begin() + (layer + 1) * n_experts_);
  }
  return out;
}

std::vector<int64_t> ExpertLoadWindow::totals() const {
  std::vector<int64_t> out(n_layers_ * n_experts_, 0);
  for (const std::vector<int64_t>& s : steps_) {
    for (size_t i = 0; i < out.size(); ++i) out[i] += s[i];
  }
  return out;
}

namespace {

// Rank loads [n_steps, P] of a placement: each expert's step load split evenly over its copies.
std::vector<double> rank_loads(const ExpertPlacement& p, std::span<const int64_t> counts,
                               int64_t n_steps) {
  const int64_t E = p.n_experts(), P = p.ep_size();
  std::vector<double> loads(n_steps * P, 0.0);
  for (int64_t e = 0; e < E; ++e) {
    const std::vector<ExpertCopy>& c = p.copies(e);
    for (int64_t t = 0; t < n_steps; ++t) {
      const double share = static_cast<double>(counts[t * E + e]) / static_cast<double>(c.size());
      for (const ExpertCopy& copy : c) loads[t * P + copy.rank] += share;
    }
  }
  return loads;
}

// How many copies each expert gets: greedy on sum_t max_e per-copy load.
std::vector<int64_t> replicate(std::span<const int64_t> counts, int64_t n_steps, int64_t E,
                               int64_t P, int64_t n_extra) {
  std::vector<int64_t> n(E, 1);
  auto per_copy = [&](int64_t t, int64_t e, int64_t copies) {
    return static_cast<double>(counts[t * E + e]) / static_cast<double>(copies);
  };
  for (int64_t round = 0; round < n_extra; ++round) {
    // Per step: the largest and second-largest per-copy load and who has the largest.
    std::vector<double> max1(n_steps, 0.0), max2(n_steps, 0.0);
    std::vector<int64_t> arg(n_steps, -1);
    for (int64_t t = 0; t < n_steps; ++t) {
      for (int64_t e = 0; e < E; ++e) {
        const double v = per_copy(t, e, n[e]);
        if (arg[t] < 0 || v > max1[t]) {
          max2[t] = arg[t] < 0 ? 0.0 : max1[t];
          max1[t] = v;
          arg[t] = e;
        } else if (v > max2[t]) {
          max2[t] = v;
        }
      }
    }
    int64_t best = -1;
    double best_gain = 0.0, best_load = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      if (n[e] >= P) continue;  // a second copy on one rank would not help
      double gain = 0.0, load = 0.0;
      for (int64_t t = 0; t < n_steps; ++t) {
        load += per_copy(t, e, n[e]);
        if (arg[t] == e) gain += max1[t] - std::max(max2[t], per_copy(t, e, n[e] + 1));
      }
      if (best < 0 || gain > best_gain || (gain == best_gain && load > best_load)) {
        best = e;
        best_gain = gain;
        best_load = load;
      }
    }
    if (best < 0) break;  // every expert already has a copy on every rank
    ++n[best];
  }
  return n;
}

}  // namespace

ExpertPlacement eplb_placement(std::span<const int64_t> counts, int64_t n_steps,
                               const ExpertPlacement& current) {
  const int64_t E = current.n_experts(), P = current.ep_size(), S = current.slots_per_rank();
  ICHECK(static_cast<int64_t>(counts.size()) == n_steps * E);
  if (n_steps == 0) return current;
  const std::vector<int64_t> n = replicate(counts, n_steps, E, P, P * S - E);

  // Copies heaviest first (windowed per-copy load; ties: lower expert id).
  struct Copy {
    int64_t expert;
    double total;
  };
  std::vector<Copy> order;
  for (int64_t e = 0; e < E; ++e) {
    double total = 0.0;
    for (int64_t t = 0; t < n_steps; ++t) total += static_cast<double>(counts[t * E + e]);
    for (int64_t c = 0; c < n[e]; ++c) order.push_back({e, total / static_cast<double>(n[e])});
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const Copy& a, const Copy& b) { return a.total > b.total; });

  std::vector<double> load(n_steps * P, 0.0), step_max(n_steps, 0.0), rank_total(P, 0.0);
  std::vector<std::vector<int32_t>> held(P);
  for (const Copy& copy : order) {
    const int64_t e = copy.expert;
    auto holds_now = [&](int64_t r) {
      return std::find(held[r].begin(), held[r].end(), e) != held[r].end();
    };
    bool any_without = false;
    for (int64_t r = 0; r < P; ++r) {
      any_without = any_without || (static_cast<int64_t>(held[r].size()) < S && !holds_now(r));
    }
    int64_t best = -1;
    double best_obj = 0.0;
    bool best_was_there = false;
    for (int64_t r = 0; r < P; ++r) {
      if (static_cast<int64_t>(held[r].size()) >= S) continue;
      if (any_without && holds_now(r)) continue;
      double obj = 0.0;
      for (int64_t t = 0; t < n_steps; ++t) {
        const double share = static_cast<double>(counts[t * E + e]) / static_cast<double>(n[e]);
        obj += std::max(step_max[t], load[t * P + r] + share);
      }
      const bool was_there = current.holds(r, e);
      const bool better =
          best < 0 || obj < best_obj ||
          (obj == best_obj && (was_there != best_was_there ? was_there
                                                           : rank_total[r] < rank_total[best]));
      if (better) {
        best = r;
        best_obj = obj;
        best_was_there = was_there;
      }
    }
    ICHECK(best >= 0) << "EPLB: no free slot for a copy of expert " << e;
    held[best].push_back(static_cast<int32_t>(e));
    for (int64_t t = 0; t < n_steps; ++t) {
      const double share = static_cast<double>(counts[t * E + e]) / static_cast<double>(n[e]);
      load[t * P + best] += share;
      step_max[t] = std::max(step_max[t], load[t * P + best]);
      rank_total[best] += share;
    }
  }
  // Within a rank, slots in ascending expert order; the rest empty.
  std::vector<int32_t> table(P * S, -1);
  for (int64_t r = 0; r < P; ++r) {
    std::sort(held[r].begin(), held[r].end());
    std::copy(held[r].begin(), held[r].end(), table.begin() + r * S);
  }
  return ExpertPlacement::from_slots(E, P, S, std::move(table));
}

double placement_imbalance(const ExpertPlacement& placement, std::span<const int64_t> counts,
                           int64_t n_steps) {
  const int64_t P = placement.ep_size();
  ICHECK(static_cast<int64_t>(counts.size()) == n_steps * placement.n_experts());
  const std::vector<double> loads = rank_loads(placement, counts, n_steps);
  double sum_max = 0.0, sum_mean = 0.0;
  for (int64_t t = 0; t < n_steps; ++t) {
    const auto begin = loads.begin() + t * P;
    sum_max += *std::max_element(begin, begin + P);
    sum_mean += std::accumulate(begin, begin + P, 0.0) / static_cast<double>(P);
  }
  return sum_mean > 0.0 ? sum_max / sum_mean : 1.0;
}

}  // namespace deepinfer
