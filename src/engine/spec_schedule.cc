#include "engine/spec_schedule.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <tuple>

#include "base/error.h"

namespace deepinfer {

StepTimeCurve::StepTimeCurve(std::vector<std::pair<int64_t, double>> points) : points_(std::move(points)) {
  CHECK(!points_.empty()) << "StepTimeCurve: no points";
  for (size_t i = 0; i < points_.size(); ++i) {
    const auto [n, t] = points_[i];
    CHECK(n > 0 && (i == 0 || n > points_[i - 1].first))
        << "StepTimeCurve: token counts must be positive and ascending (point " << i << ": " << n << ")";
    CHECK(std::isfinite(t) && t > 0) << "StepTimeCurve: point " << i << " has time " << t;
  }
}

double StepTimeCurve::seconds(int64_t tokens) const {
  CHECK(!points_.empty()) << "StepTimeCurve: no points";
  const auto& p = points_;
  if (tokens <= p.front().first) return p.front().second;
  if (p.size() == 1) return p.front().second * double(tokens) / double(p.front().first);
  size_t hi = 1;
  while (hi + 1 < p.size() && p[hi].first < tokens) ++hi;  // the segment [hi-1, hi], or the last
  const double x0 = double(p[hi - 1].first), x1 = double(p[hi].first);
  const double slope = (p[hi].second - p[hi - 1].second) / (x1 - x0);
  return std::max(p[hi - 1].second + slope * (double(tokens) - x0), 1e-12);
}

void StepTimeCurve::observe(int64_t tokens, double seconds, double alpha) {
  if (points_.empty() || !(seconds > 0) || !std::isfinite(seconds) || tokens <= 0) return;
  size_t best = 0;
  for (size_t i = 1; i < points_.size(); ++i) {
    if (std::llabs(points_[i].first - tokens) < std::llabs(points_[best].first - tokens)) best = i;
  }
  const double ratio = std::clamp(seconds / this->seconds(tokens), 0.25, 4.0);
  points_[best].second *= 1.0 - alpha + alpha * ratio;
}

namespace {

// The greedy order: per pick, the request and its cumulative A_{r,j}.
std::vector<std::pair<size_t, double>> greedy_order(const std::vector<std::vector<double>>& rates) {
  // (A, -j, -r): the largest A first, ties to the lower position, then the lower request.
  using Item = std::tuple<double, int64_t, int64_t>;
  std::priority_queue<Item> heap;
  std::vector<double> cum(rates.size(), 1.0);
  auto push = [&](size_t r, size_t j) {
    if (j >= rates[r].size()) return;
    const double a = rates[r][j];
    CHECK(!std::isnan(a)) << "spec scheduling: acceptance estimate " << j << " of request " << r << " is NaN";
    cum[r] *= std::clamp(a, 0.0, 1.0);
    heap.emplace(cum[r], -int64_t(j), -int64_t(r));
  };
  for (size_t r = 0; r < rates.size(); ++r) push(r, 0);
  std::vector<std::pair<size_t, double>> order;
  while (!heap.empty()) {
    const auto [a, neg_j, neg_r] = heap.top();
    heap.pop();
    order.emplace_back(size_t(-neg_r), a);
    push(size_t(-neg_r), size_t(-neg_j) + 1);
  }
  return order;
}

}  // namespace

VerifySelection select_verification(const std::vector<std::vector<double>>& rates, const StepTimeCurve& curve,
                                    int64_t base_tokens) {
  CHECK(!curve.empty()) << "spec scheduling: no step-time curve";
  const auto order = greedy_order(rates);
  const int64_t n_req = int64_t(rates.size());
  VerifySelection best;
  best.n_drafts.assign(rates.size(), 0);
  if (n_req == 0) return best;
  double expected = double(n_req);
  best.expected_tokens = expected;
  best.seconds = curve.seconds(base_tokens + n_req);
  size_t best_m = 0;
  for (size_t m = 1; m <= order.size(); ++m) {
    expected += order[m - 1].second;
    const double t = curve.seconds(base_tokens + n_req + int64_t(m));
    if (expected / t > best.expected_tokens / best.seconds) {
      best.expected_tokens = expected;
      best.seconds = t;
      best_m = m;
    }
  }
  for (size_t m = 0; m < best_m; ++m) ++best.n_drafts[order[m].first];
  return best;
}

std::vector<int64_t> distribute_drafts(const std::vector<std::vector<double>>& rates, int64_t total) {
  const auto order = greedy_order(rates);
  std::vector<int64_t> n(rates.size(), 0);
  for (size_t m = 0; m < order.size() && int64_t(m) < total; ++m) ++n[order[m].first];
  return n;
}

}  // namespace deepinfer
