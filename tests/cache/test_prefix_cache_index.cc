// PrefixCache (src/cache/prefix_cache.h): chained block keys, hits, pins, leaf-first LRU
// eviction under a byte budget, the salt.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>

#include "cache/prefix_cache.h"

namespace deepinfer {
namespace {

std::vector<int32_t> seq(int64_t n, int32_t first = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::shared_ptr<const void> payload(int v) { return std::make_shared<const int>(v); }
int value(const std::shared_ptr<const void>& p) { return *static_cast<const int*>(p.get()); }

TEST(PrefixCache, KeysAreChainedAndSalted) {
  PrefixCache a({4, 1000, 1}), b({4, 1000, 2});
  std::vector<int32_t> t = seq(10);
  const auto ka = a.block_keys(t);
  ASSERT_EQ(ka.size(), 2u);
  EXPECT_NE(ka[0], ka[1]);
  EXPECT_NE(ka, b.block_keys(t));  // another model / numerics: other keys
  std::vector<int32_t> u = t;
  u[1] = 99;  // a change in block 0 changes every later key
  const auto ku = a.block_keys(u);
  EXPECT_NE(ku[0], ka[0]);
  EXPECT_NE(ku[1], ka[1]);
  u = t;
  u[9] = 99;  // beyond the full blocks: no change
  EXPECT_EQ(a.block_keys(u), ka);
}

TEST(PrefixCache, HitsTheDeepestBoundaryWithItsChain) {
  PrefixCache c({4, 1000, 0});
  std::vector<int32_t> t = seq(20);
  EXPECT_TRUE(c.insert(t, 1, 0, payload(1), 10));
  EXPECT_TRUE(c.insert(t, 3, 1, payload(3), 10));  // blocks 2-3 in one entry
  EXPECT_FALSE(c.insert(t, 3, 1, payload(33), 10));  // already cached
  {
    PrefixHit h = c.lookup(t, 19);
    EXPECT_EQ(h.n_tokens(), 12);
    ASSERT_EQ(h.payloads().size(), 2u);
    EXPECT_EQ(value(h.payloads()[0]), 1);
    EXPECT_EQ(value(h.payloads()[1]), 3);
    EXPECT_EQ(c.n_pinned(), 2);
  }
  EXPECT_EQ(c.n_pinned(), 0);
  EXPECT_EQ(c.lookup(t, 11).n_tokens(), 4);  // capped: block 3 ends past 11
  std::vector<int32_t> other = t;
  other[10] = 77;  // differs inside block 2: only block 0's entry matches
  EXPECT_EQ(c.lookup(other, 19).n_tokens(), 4);
  other[0] = 77;
  EXPECT_TRUE(c.lookup(other, 19).empty());
  const PrefixCacheStats& s = c.stats();
  EXPECT_EQ(s.n_queries, 4);
  EXPECT_EQ(s.n_hits, 3);
  EXPECT_EQ(s.n_hit_tokens, 12 + 4 + 4);
  EXPECT_EQ(s.n_query_tokens, 16 + 8 + 16 + 16);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedLeavesNeverPinned) {
  PrefixCache c({2, 30, 0});
  std::vector<int32_t> a = seq(10), b = seq(10, 100);
  ASSERT_TRUE(c.insert(a, 1, 0, payload(1), 10));
  ASSERT_TRUE(c.insert(a, 2, 1, payload(2), 10));
  ASSERT_TRUE(c.insert(b, 1, 0, payload(3), 10));
  EXPECT_EQ(c.n_bytes(), 30);
  PrefixHit pin = c.lookup(a, 4);  // a's chain is used most recently and pinned
  ASSERT_EQ(pin.n_tokens(), 4);
  ASSERT_TRUE(c.insert(b, 2, 1, payload(4), 10));  // over budget: b's leaf (itself) goes
  EXPECT_EQ(c.n_bytes(), 30);
  EXPECT_EQ(c.lookup(b, 9).n_tokens(), 2);
  EXPECT_EQ(c.stats().n_evicted, 1);
  // Pinned entries are never evicted, even far over budget; their parents neither.
  ASSERT_TRUE(c.insert(a, 3, 2, payload(5), 25));
  EXPECT_EQ(c.lookup(a, 9).n_tokens(), 4);  // the new leaf itself was the only candidate
  EXPECT_EQ(c.lookup(b, 9).n_tokens(), 0);  // b's root went first (least recently used)
  pin.release();
  EXPECT_EQ(c.n_pinned(), 0);
  EXPECT_FALSE(c.insert(a, 3, 2, payload(6), 31));  // alone over the budget
  EXPECT_LE(c.n_bytes(), 30);
}

TEST(PrefixCache, ParentsOutliveChildren) {
  PrefixCache c({1, 100, 0});
  std::vector<int32_t> t = seq(8);
  for (int64_t n = 1; n <= 8; ++n) ASSERT_TRUE(c.insert(t, n, n - 1, payload(int(n)), 10));
  // Budget 100: inserting 8 x 10 fits; shrinking by new entries evicts leaves only, so each
  // remaining entry's chain is complete.
  std::vector<int32_t> u = seq(8, 50);
  for (int64_t n = 1; n <= 5; ++n) ASSERT_TRUE(c.insert(u, n, n - 1, payload(int(10 + n)), 10));
  const int64_t ht = c.lookup(t, 8).n_tokens(), hu = c.lookup(u, 8).n_tokens();
  EXPECT_EQ(ht + hu, 10);
  PrefixHit h = c.lookup(t, 8);
  ASSERT_EQ(int64_t(h.payloads().size()), h.n_tokens());
  for (size_t i = 0; i < h.payloads().size(); ++i) EXPECT_EQ(value(h.payloads()[i]), int(i + 1));
}

TEST(PrefixCache, ClearKeepsOnlyPinnedChains) {
  PrefixCache c({2, 1000, 0});
  std::vector<int32_t> a = seq(6), b = seq(6, 40);
  ASSERT_TRUE(c.insert(a, 1, 0, payload(1), 1));
  ASSERT_TRUE(c.insert(a, 3, 1, payload(2), 1));
  ASSERT_TRUE(c.insert(b, 2, 0, payload(3), 1));
  PrefixHit h = c.lookup(a, 2);
  c.clear();
  EXPECT_EQ(c.n_entries(), 1);
  h.release();
  c.clear();
  EXPECT_EQ(c.n_entries(), 0);
  EXPECT_EQ(c.n_bytes(), 0);
}

TEST(PrefixCache, RefusesBadEntries) {
  PrefixCache c({4, 100, 0});
  std::vector<int32_t> t = seq(8);
  EXPECT_ANY_THROW(c.insert(t, 3, 0, payload(1), 1));  // beyond the tokens
  EXPECT_ANY_THROW(c.insert(t, 2, 1, payload(1), 1));  // parent not cached
  EXPECT_ANY_THROW(c.insert(t, 1, 0, nullptr, 1));
  EXPECT_ANY_THROW(PrefixCache({0, 1, 0}));
}

}  // namespace
}  // namespace deepinfer
