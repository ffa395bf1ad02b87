// Confidence-scheduled verification (engine/spec_schedule.h): the step-time curve, and the
// selection of verified drafts against a brute force over every prefix choice of small
// cases; more positions on a flat curve, fewer on a steep one.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "base/error.h"
#include "engine/spec_schedule.h"

namespace deepinfer {
namespace {

TEST(StepTimeCurve, InterpolatesAndExtrapolates) {
  const StepTimeCurve c({{1, 1.0}, {4, 2.5}, {8, 4.5}});
  EXPECT_DOUBLE_EQ(c.seconds(1), 1.0);
  EXPECT_DOUBLE_EQ(c.seconds(0), 1.0);   // flat below the first point
  EXPECT_DOUBLE_EQ(c.seconds(2), 1.5);   // slope 0.5 on [1, 4]
  EXPECT_DOUBLE_EQ(c.seconds(4), 2.5);
  EXPECT_DOUBLE_EQ(c.seconds(6), 3.5);   // slope 0.5 on [4, 8]
  EXPECT_DOUBLE_EQ(c.seconds(12), 6.5);  // the last slope beyond
  const StepTimeCurve one({{4, 2.0}});
  EXPECT_DOUBLE_EQ(one.seconds(8), 4.0);  // one point: proportional
}

TEST(StepTimeCurve, RefusesBadPoints) {
  using P = std::vector<std::pair<int64_t, double>>;
  EXPECT_THROW(StepTimeCurve(P{}), Error);
  EXPECT_THROW(StepTimeCurve(P{{2, 1.0}, {2, 2.0}}), Error);
  EXPECT_THROW(StepTimeCurve(P{{0, 1.0}}), Error);
  EXPECT_THROW(StepTimeCurve(P{{1, -1.0}}), Error);
  EXPECT_THROW(StepTimeCurve(P{{1, NAN}}), Error);
}

TEST(StepTimeCurve, ObserveMovesTheNearestPoint) {
  StepTimeCurve c({{1, 1.0}, {8, 2.0}});
  c.observe(7, 2.0 * c.seconds(7), 0.5);  // twice the prediction near point 8: it moves halfway
  EXPECT_DOUBLE_EQ(c.points()[0].second, 1.0);
  EXPECT_DOUBLE_EQ(c.points()[1].second, 3.0);
  c.observe(1, 100.0, 1.0);  // an outlier is clamped to 4x
  EXPECT_DOUBLE_EQ(c.points()[0].second, 4.0);
  c.observe(1, -1.0, 1.0);  // ignored
  c.observe(1, NAN, 1.0);
  EXPECT_DOUBLE_EQ(c.points()[0].second, 4.0);
}

// (n_requests + sum of cumulative products of the chosen prefixes) / t(base + n + chosen).
double objective(const std::vector<std::vector<double>>& rates, const std::vector<int64_t>& n,
                 const StepTimeCurve& curve, int64_t base) {
  double expected = double(rates.size());
  int64_t tokens = base + int64_t(rates.size());
  for (size_t r = 0; r < rates.size(); ++r) {
    double cum = 1;
    for (int64_t j = 0; j < n[r]; ++j) {
      cum *= rates[r][size_t(j)];
      expected += cum;
    }
    tokens += n[r];
  }
  return expected / curve.seconds(tokens);
}

double brute_force_best(const std::vector<std::vector<double>>& rates, const StepTimeCurve& curve, int64_t base) {
  std::vector<int64_t> n(rates.size(), 0);
  double best = -1;
  std::function<void(size_t)> rec = [&](size_t r) {
    if (r == rates.size()) {
      best = std::max(best, objective(rates, n, curve, base));
      return;
    }
    for (int64_t k = 0; k <= int64_t(rates[r].size()); ++k) {
      n[r] = k;
      rec(r + 1);
    }
  };
  rec(0);
  return best;
}

TEST(SelectVerification, MatchesBruteForceOnSmallCases) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int n_nontrivial = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    SCOPED_TRACE(trial);
    const int n_req = 1 + int(rng() % 4);
    std::vector<std::vector<double>> rates(static_cast<size_t>(n_req));
    for (auto& r : rates) {
      r.resize(rng() % 5);
      for (double& a : r) a = trial % 3 == 0 ? std::round(u(rng) * 4) / 4 : u(rng);  // ties too
    }
    // A random increasing curve: a fixed cost, then segments of random slopes (convex or not).
    std::vector<std::pair<int64_t, double>> pts;
    double t = 0.2 + u(rng);
    for (int64_t x = 1; x <= 24; x += 1 + int64_t(rng() % 6)) {
      pts.emplace_back(x, t);
      t += u(rng) * u(rng) * 0.6;
    }
    const StepTimeCurve curve(pts);
    const int64_t base = int64_t(rng() % 3);
    const VerifySelection sel = select_verification(rates, curve, base);
    ASSERT_EQ(sel.n_drafts.size(), rates.size());
    int64_t chosen = 0;
    for (size_t r = 0; r < rates.size(); ++r) {
      ASSERT_GE(sel.n_drafts[r], 0);
      ASSERT_LE(sel.n_drafts[r], int64_t(rates[r].size()));
      chosen += sel.n_drafts[r];
    }
    const double got = objective(rates, sel.n_drafts, curve, base);
    const double want = brute_force_best(rates, curve, base);
    EXPECT_NEAR(got, want, 1e-12 * want);
    EXPECT_NEAR(sel.expected_tokens / sel.seconds, got, 1e-12 * got);
    int64_t total = 0;
    for (const auto& r : rates) total += int64_t(r.size());
    n_nontrivial += chosen > 0 && chosen < total;
  }
  EXPECT_GT(n_nontrivial, 300);  // the cases exercise partial selections, not only all/none
}

TEST(SelectVerification, FlatCurveVerifiesMoreThanSteep) {
  const std::vector<std::vector<double>> rates = {
      {0.9, 0.8, 0.7, 0.6}, {0.5, 0.5, 0.5, 0.5}, {0.95, 0.2, 0.9, 0.9}, {0.1, 0.9, 0.9, 0.9}};
  auto selected = [&](double slope) {
    const StepTimeCurve c({{1, 1.0}, {64, 1.0 + 63 * slope}});
    int64_t n = 0;
    for (int64_t k : select_verification(rates, c).n_drafts) n += k;
    return n;
  };
  EXPECT_EQ(selected(0.0), 16);  // a flat curve: every draft is free
  EXPECT_EQ(selected(1.0), 0);   // time proportional to tokens: no draft pays (all rates < 1)
  int64_t last = 16;
  int n_between = 0;
  for (double slope : {0.001, 0.01, 0.03, 0.06, 0.1, 0.2, 0.4}) {
    const int64_t n = selected(slope);
    EXPECT_LE(n, last) << "slope " << slope;
    n_between += n > 0 && n < 16;
    last = n;
  }
  EXPECT_GE(n_between, 3);
  // A middle slope keeps the likely drafts: request 0's first ones before request 3's.
  const StepTimeCurve mid({{1, 1.0}, {64, 1.0 + 63 * 0.1}});
  const std::vector<int64_t> n = select_verification(rates, mid).n_drafts;
  EXPECT_GT(n[0], 0);
  EXPECT_EQ(n[3], 0);
  EXPECT_GE(n[0], n[1]);
}

TEST(SelectVerification, DistributeFollowsTheGreedyOrder) {
  const std::vector<std::vector<double>> rates = {{0.9, 0.9}, {0.95, 0.1}, {}, {0.5}};
  // Cumulative: r0 0.9, 0.81; r1 0.95, 0.095; r3 0.5. Order: r1j0, r0j0, r0j1, r3j0, r1j1.
  const std::vector<std::vector<int64_t>> want = {{0, 0, 0, 0}, {0, 1, 0, 0}, {1, 1, 0, 0},
                                                  {2, 1, 0, 0}, {2, 1, 0, 1}, {2, 2, 0, 1}};
  for (int64_t m = 0; m < int64_t(want.size()); ++m) EXPECT_EQ(distribute_drafts(rates, m), want[size_t(m)]);
  EXPECT_EQ(distribute_drafts(rates, 100), want.back());
  // Rates outside [0, 1] are clamped; NaN is refused.
  EXPECT_EQ(distribute_drafts({{2.0, -1.0}}, 1), (std::vector<int64_t>{1}));
  EXPECT_THROW(select_verification({{NAN}}, StepTimeCurve({{1, 1.0}})), Error);
  EXPECT_THROW(select_verification({{0.5}}, StepTimeCurve()), Error);
  EXPECT_TRUE(select_verification({}, StepTimeCurve({{1, 1.0}})).n_drafts.empty());
}

}  // namespace
}  // namespace deepinfer
