// base/parallel.h: parallel_for covers [0, n) once per index in contiguous chunks whatever the
// thread count; release_idle_threads succeeds outside a parallel region, refuses inside one, and
// leaves parallel_for working (the runtime starts its threads again).
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "base/parallel.h"

namespace deepinfer {
namespace {

void expect_each_index_once(int64_t n, int64_t min_chunk) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        EXPECT_LE(begin, end);
        for (int64_t i = begin; i < end; ++i) hits[size_t(i)].fetch_add(1);
      },
      min_chunk);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[size_t(i)].load(), 1) << "index " << i << " of " << n;
}

TEST(Parallel, ParallelForCoversEveryIndexOnce) {
  for (int64_t n : {0, 1, 2, 7, 1000}) {
    for (int64_t min_chunk : {1, 4}) expect_each_index_once(n, min_chunk);
  }
}

TEST(Parallel, ReleaseIdleThreadsOutsideRegionsOnly) {
  expect_each_index_once(64, 1);  // the calling thread now has a team (more than one thread)
  EXPECT_TRUE(release_idle_threads());
  expect_each_index_once(64, 1);  // and gets one again
  // Inside a region (parallel_for runs fn there when it splits, i.e. with 2+ threads) the
  // runtime's threads are in use: refused.
  std::atomic<int> refused{0}, calls{0};
  parallel_for(2, [&](int64_t, int64_t) {
    calls.fetch_add(1);
    if (!release_idle_threads()) refused.fetch_add(1);
  });
  if (num_threads() > 1) {
    EXPECT_EQ(refused.load(), calls.load());
  } else {
    EXPECT_EQ(refused.load(), 0);  // one thread: fn runs outside any region
  }
  expect_each_index_once(1000, 4);
}

}  // namespace
}  // namespace deepinfer
