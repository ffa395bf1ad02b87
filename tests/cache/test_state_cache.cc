// Block accounting of the hybrid-attention state cache (src/cache).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "base/error.h"
#include "cache/block_pool.h"
#include "cache/cache_layout.h"
#include "cache/pool_plan.h"
#include "cache/state_cache.h"

namespace deepinfer {
namespace {

// V4-Flash's attention layers (MODEL_SPEC §0): [0,0] + [4,128]x20 + [4].
CacheLayout v4_flash_layout() {
  CacheLayout layout;
  layout.window = 128;
  layout.block_size = 64;
  layout.window_entry_bytes = 584;
  layout.compressed_entry_bytes = 584;
  layout.indexer_entry_bytes = 68;
  std::vector<int64_t> ratios = {0, 0};
  for (int i = 0; i < 20; ++i) {
    ratios.push_back(4);
    ratios.push_back(128);
  }
  ratios.push_back(4);
  for (int64_t r : ratios) {
    LayerState s;
    s.compress_ratio = r;
    s.has_indexer = r == 4;
    s.compressor_state_bytes = compressor_state_bytes(r, 512, s.has_indexer, 128);
    layout.layers.push_back(s);
  }
  return layout;
}

// A small layout: one window-only layer, one ratio-4 layer with indexer, one ratio-128 layer.
CacheLayout tiny_layout(int64_t window, int64_t block_size) {
  CacheLayout layout;
  layout.window = window;
  layout.block_size = block_size;
  layout.window_entry_bytes = 16;
  layout.compressed_entry_bytes = 16;
  layout.indexer_entry_bytes = 4;
  layout.layers = {{0, false, 0}, {4, true, 100}, {128, false, 50}};
  return layout;
}

PoolPlan fixed_plan(const CacheLayout& layout, std::vector<int64_t> n_blocks, int64_t n_slots) {
  PoolPlan plan;
  plan.n_blocks = std::move(n_blocks);
  EXPECT_EQ(plan.n_blocks.size(), layout.groups().size());
  plan.n_state_slots = n_slots;
  return plan;
}

int64_t held_blocks(const std::vector<int32_t>& table) {
  return std::count_if(table.begin(), table.end(), [](int32_t b) { return b != kNoBlock; });
}

TEST(BlockPool, AllocatesDistinctIdsAndRefusesWhenEmpty) {
  BlockPool pool(5);
  std::set<int32_t> ids;
  for (int i = 0; i < 5; ++i) ids.insert(pool.allocate());
  EXPECT_EQ(ids.size(), 5u);
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), 4);
  EXPECT_EQ(pool.num_free(), 0);
  try {
    pool.allocate();
    FAIL() << "allocate on an empty pool must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
  }
  pool.free(3);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.allocate(), 3);
}

TEST(BlockPool, DoubleFreeIsAnInternalError) {
  BlockPool pool(2);
  const int32_t b = pool.allocate();
  pool.free(b);
  try {
    pool.free(b);
    FAIL() << "double free must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  }
  EXPECT_THROW(pool.free(7), Error);
}

TEST(CacheLayout, GroupsOfV4Flash) {
  const CacheLayout layout = v4_flash_layout();
  const std::vector<StateGroup> groups = layout.groups();
  ASSERT_EQ(groups.size(), 4u);
  EXPECT_EQ(groups[0].name(), "window");
  EXPECT_EQ(groups[0].layers.size(), 43u);
  EXPECT_EQ(groups[0].block_bytes, 64 * 584 * 43);
  EXPECT_EQ(groups[1].name(), "compressed/4");
  EXPECT_EQ(groups[1].layers.size(), 21u);
  EXPECT_EQ(groups[1].layers.front(), 2);
  EXPECT_EQ(groups[1].layers.back(), 42);
  EXPECT_EQ(groups[2].name(), "compressed/128");
  EXPECT_EQ(groups[2].layers.size(), 20u);
  EXPECT_EQ(groups[2].layers.front(), 3);
  EXPECT_EQ(groups[3].name(), "indexer/4");
  EXPECT_EQ(groups[3].layers.size(), 21u);
  EXPECT_EQ(groups[3].block_bytes, 64 * 68 * 21);
  EXPECT_EQ(groups[1].n_entries(7), 1);
  EXPECT_EQ(groups[1].n_entries(8), 2);
  EXPECT_EQ(groups[2].n_entries(127), 0);
  EXPECT_EQ(groups[2].n_entries(128), 1);
}

TEST(CacheLayout, V4HelperMatchesTheHandBuiltLayout) {
  std::vector<int64_t> ratios = {0, 0};
  for (int i = 0; i < 20; ++i) {
    ratios.push_back(4);
    ratios.push_back(128);
  }
  ratios.push_back(4);
  const CacheLayout a = v4_cache_layout(ratios, 128, 64, 512, 128, 584, 584, 68);
  const CacheLayout b = v4_flash_layout();
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    EXPECT_EQ(a.layers[l].compress_ratio, b.layers[l].compress_ratio);
    EXPECT_EQ(a.layers[l].has_indexer, b.layers[l].has_indexer);
    EXPECT_EQ(a.layers[l].compressor_state_bytes, b.layers[l].compressor_state_bytes);
  }
  EXPECT_EQ(a.state_slot_bytes(), 21 * (65536 + 16384) + 20 * 524288);
  EXPECT_THROW(v4_cache_layout({0, 2}, 128, 64, 512, 128, 584, 584, 68), Error);
}

TEST(CacheLayout, CompressorStateBytesFollowTheSpec) {
  // Ratio 4: overlap c=2, 2m=8 slots of (a, z), each 2*d_c floats.
  EXPECT_EQ(compressor_state_bytes(4, 512, false, 128), 8 * 2 * 1024 * 4);
  EXPECT_EQ(compressor_state_bytes(4, 512, true, 128), 8 * 2 * 1024 * 4 + 8 * 2 * 256 * 4);
  // Ratio 128: no overlap, m slots of (a, z) of d floats.
  EXPECT_EQ(compressor_state_bytes(128, 512, false, 128), 128 * 2 * 512 * 4);
  EXPECT_EQ(compressor_state_bytes(0, 512, false, 128), 0);
}

TEST(CacheLayout, RejectsInconsistentLayers) {
  CacheLayout layout = tiny_layout(8, 4);
  layout.layers[0].has_indexer = true;  // indexer on a window-only layer
  EXPECT_THROW(layout.validate(), Error);
  layout = tiny_layout(8, 4);
  layout.compressed_entry_bytes = 0;
  EXPECT_THROW(layout.groups(), Error);
}

TEST(StateCache, GroupIndexPerLayer) {
  const CacheLayout layout = tiny_layout(8, 4);
  StateCache cache(layout, fixed_plan(layout, {10, 10, 10, 10}, 2));
  EXPECT_EQ(cache.group_index(StateKind::kWindow, 0), 0);
  EXPECT_EQ(cache.group_index(StateKind::kWindow, 2), 0);
  EXPECT_EQ(cache.group_index(StateKind::kCompressed, 0), -1);
  EXPECT_EQ(cache.group_index(StateKind::kCompressed, 1), 1);
  EXPECT_EQ(cache.group_index(StateKind::kCompressed, 2), 2);
  EXPECT_EQ(cache.group_index(StateKind::kIndexer, 1), 3);
  EXPECT_EQ(cache.group_index(StateKind::kIndexer, 2), -1);
}

// Decoding token by token keeps exactly the blocks of the last W positions.
TEST(StateCache, WindowBlocksSlideOutAsTheRequestAdvances) {
  for (int64_t window : {1, 5, 8, 13}) {
    for (int64_t bs : {1, 3, 4}) {
      const CacheLayout layout = tiny_layout(window, bs);
      StateCache cache(layout, fixed_plan(layout, {64, 64, 64, 64}, 1));
      for (int64_t t = 0; t < 100; ++t) {
        ASSERT_TRUE(cache.can_allocate(7, t, 1));
        cache.allocate(7, t, 1);
        const std::vector<int32_t>& table = cache.block_table(7, 0);
        std::set<int64_t> live;  // blocks of positions query t reads
        for (int64_t p = std::max<int64_t>(0, t - window + 1); p <= t; ++p) live.insert(p / bs);
        ASSERT_EQ(held_blocks(table), int64_t(live.size())) << "W=" << window << " bs=" << bs
                                                            << " t=" << t;
        for (int64_t b : live) ASSERT_NE(table[size_t(b)], kNoBlock);
        ASSERT_EQ(cache.num_free(0), 64 - int64_t(live.size()));
      }
      cache.free_request(7);
      EXPECT_TRUE(cache.all_free());
    }
  }
}

TEST(StateCache, PrefillChunkHoldsTheWholeChunkThenSlides) {
  const CacheLayout layout = tiny_layout(128, 64);
  StateCache cache(layout, fixed_plan(layout, {16, 16, 16, 16}, 1));
  cache.allocate(1, 0, 300);  // positions 0..299: blocks 0..4
  EXPECT_EQ(held_blocks(cache.block_table(1, 0)), 5);
  cache.allocate(1, 300, 1);  // query 300 reads 173..300: blocks 2..4
  const std::vector<int32_t>& table = cache.block_table(1, 0);
  EXPECT_EQ(table[0], kNoBlock);
  EXPECT_EQ(table[1], kNoBlock);
  EXPECT_EQ(held_blocks(table), 3);
  // A chunk from 300 of 200 tokens reads 173..499: blocks 2..7.
  cache.allocate(1, 301, 200);
  EXPECT_EQ(held_blocks(cache.block_table(1, 0)), 6);
  EXPECT_EQ(cache.num_free(0), 16 - 6);
}

// Compressed tables hold floor(n/m) entries; they grow one entry per 4 (or 128) tokens.
TEST(StateCache, CompressedBlocksGrowOneIn4AndOneIn128) {
  const int64_t bs = 4;
  const CacheLayout layout = tiny_layout(8, bs);
  StateCache cache(layout, fixed_plan(layout, {16, 400, 16, 400}, 1));
  int64_t grew4 = 0, grew128 = 0;
  size_t last4 = 0, last128 = 0;
  for (int64_t t = 0; t < 2048; ++t) {
    cache.allocate(3, t, 1);
    const int64_t n = t + 1;
    const size_t size4 = cache.block_table(3, 1).size();
    const size_t size128 = cache.block_table(3, 2).size();
    ASSERT_EQ(int64_t(size4), (n / 4 + bs - 1) / bs);
    ASSERT_EQ(int64_t(size128), (n / 128 + bs - 1) / bs);
    ASSERT_EQ(cache.block_table(3, 3).size(), size4);  // indexer keys track ratio 4
    grew4 += size4 != last4;
    grew128 += size128 != last128;
    last4 = size4;
    last128 = size128;
  }
  EXPECT_EQ(grew4, 2048 / (4 * bs));
  EXPECT_EQ(grew128, 2048 / (128 * bs));
  EXPECT_EQ(cache.num_free(1), 400 - 2048 / 16);
  EXPECT_EQ(cache.num_free(2), 16 - 4);
  // Every block id in a table is distinct.
  std::set<int32_t> ids(cache.block_table(3, 1).begin(), cache.block_table(3, 1).end());
  EXPECT_EQ(ids.size(), cache.block_table(3, 1).size());
}

TEST(StateCache, RefusesWithoutPartialAllocationAndCountsOwnSlidingBlocks) {
  const CacheLayout layout = tiny_layout(4, 2);
  StateCache cache(layout, fixed_plan(layout, {4, 1, 1, 1}, 2));
  EXPECT_TRUE(cache.can_allocate(1, 0, 8));   // window 4 blocks, 2 entries -> 1 block
  EXPECT_FALSE(cache.can_allocate(1, 0, 9));  // window needs 5 blocks
  EXPECT_EQ(cache.max_allocatable(1, 0, 100), 8);
  cache.allocate(1, 0, 8);
  EXPECT_EQ(cache.num_free(0), 0);
  // Another request cannot start: no window block is free.
  EXPECT_FALSE(cache.can_allocate(2, 0, 1));
  try {
    cache.allocate(2, 0, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
  }
  EXPECT_FALSE(cache.has_request(2));
  EXPECT_EQ(cache.num_free_slots(), 1);
  // Request 1 can continue: query 8 reads 5..8, so blocks 0 and 1 slide out first.
  EXPECT_TRUE(cache.can_allocate(1, 8, 1));
  cache.allocate(1, 8, 1);
  EXPECT_EQ(cache.num_free(0), 4 - 3);
  // Ratio-4 entries need a second block of 2 at 12 tokens (3 entries): none is free.
  EXPECT_FALSE(cache.can_allocate(1, 9, 3));
  EXPECT_TRUE(cache.can_allocate(1, 9, 2));
  EXPECT_EQ(cache.max_allocatable(1, 9, 50), 2);
  cache.free_request(1);
  EXPECT_TRUE(cache.all_free());
  // Slots: two requests, the third is refused.
  cache.allocate(1, 0, 1);
  cache.allocate(2, 0, 1);
  EXPECT_NE(cache.state_slot(1), cache.state_slot(2));
  EXPECT_FALSE(cache.can_allocate(3, 0, 1));
}

// Random requests advancing, aborting and finishing: ids never shared, counts add up,
// and the pools return to full.
TEST(StateCache, RandomTrafficReturnsPoolsToFull) {
  const CacheLayout layout = tiny_layout(6, 2);
  StateCache cache(layout, fixed_plan(layout, {40, 30, 10, 30}, 6));
  std::mt19937_64 rng(1234);
  std::vector<int64_t> pos(20, 0);
  for (int step = 0; step < 5000; ++step) {
    const int64_t id = int64_t(rng() % 20);
    if (rng() % 10 == 0) {
      cache.free_request(id);
      pos[size_t(id)] = 0;
      continue;
    }
    const int64_t n = 1 + int64_t(rng() % 9);
    if (cache.can_allocate(id, pos[size_t(id)], n)) {
      cache.allocate(id, pos[size_t(id)], n);
      pos[size_t(id)] += n;
    }
    for (int64_t g = 0; g < cache.n_groups(); ++g) {
      std::set<int32_t> seen;
      int64_t held = 0;
      for (int64_t r = 0; r < 20; ++r) {
        if (!cache.has_request(r)) continue;
        for (int32_t b : cache.block_table(r, g)) {
          if (b == kNoBlock) continue;
          ++held;
          ASSERT_TRUE(seen.insert(b).second) << "block " << b << " of group " << g << " shared";
        }
      }
      ASSERT_EQ(held + cache.num_free(g), cache.num_blocks(g));
    }
  }
  for (int64_t r = 0; r < 20; ++r) cache.free_request(r);
  EXPECT_TRUE(cache.all_free());
}

TEST(StateCache, FitsAlone) {
  const CacheLayout layout = tiny_layout(8, 4);
  StateCache cache(layout, fixed_plan(layout, {3, 2, 1, 2}, 1));
  EXPECT_TRUE(cache.fits_alone(32));   // 8 entries of ratio 4 -> 2 blocks
  EXPECT_FALSE(cache.fits_alone(36));  // 9 entries -> 3 blocks
  StateCache narrow(layout, fixed_plan(layout, {2, 9, 9, 9}, 1));
  EXPECT_TRUE(narrow.fits_alone(5));
  EXPECT_FALSE(narrow.fits_alone(9));  // a window of 8 positions spans 3 blocks of 4
}

TEST(PoolPlan, SplitsTheBudgetSoCompressedGroupsHoldEqualTokens) {
  const CacheLayout layout = v4_flash_layout();
  PoolPlanOptions options;
  options.max_num_seqs = 64;
  options.max_num_batched_tokens = 8192;
  options.max_model_len = 65536;
  const int64_t budget = int64_t(20) << 30;
  const PoolPlan plan = plan_pools(layout, budget, options);
  const std::vector<StateGroup> groups = layout.groups();
  ASSERT_EQ(plan.n_blocks.size(), groups.size());
  EXPECT_EQ(plan.n_state_slots, 64);
  EXPECT_EQ(plan.max_concurrent_requests, 64);
  EXPECT_EQ(plan.n_blocks[0], 64 * (blocks_spanned(128, 64) + 1) + 8192 / 64);
  int64_t used = plan.n_blocks[0] * groups[0].block_bytes + 64 * layout.state_slot_bytes();
  for (size_t g = 1; g < groups.size(); ++g) {
    used += plan.n_blocks[g] * groups[g].block_bytes;
    const int64_t tokens = plan.n_blocks[g] * 64 * groups[g].ratio;
    EXPECT_GE(tokens, plan.max_tokens);
    EXPECT_LE(tokens, plan.max_tokens + 64 * 128) << groups[g].name();  // one block of the coarsest
  }
  EXPECT_EQ(used, plan.used_bytes);
  EXPECT_LE(used, budget);
  // Nearly all of the budget is used (less than one block of each group is left over).
  int64_t slack = 0;
  for (const StateGroup& g : groups) slack += g.block_bytes;
  EXPECT_GT(used, budget - slack);
  EXPECT_GE(plan.max_tokens, 65536);
  StateCache cache(layout, plan);
  EXPECT_TRUE(cache.fits_alone(65536));
}

TEST(PoolPlan, LowersConcurrencyOrRefusesWhenTheBudgetIsSmall) {
  const CacheLayout layout = v4_flash_layout();
  PoolPlanOptions options;
  options.max_num_seqs = 256;
  options.max_num_batched_tokens = 2048;
  options.max_model_len = 16384;
  const PoolPlan plan = plan_pools(layout, int64_t(1) << 30, options);
  EXPECT_LT(plan.max_concurrent_requests, 256);
  EXPECT_GE(plan.max_concurrent_requests, 1);
  EXPECT_LE(plan.used_bytes, int64_t(1) << 30);
  StateCache cache(layout, plan);
  EXPECT_TRUE(cache.fits_alone(16384));
  try {
    plan_pools(layout, 10 << 20, options);
    FAIL() << "10 MiB cannot hold a 16K-token request";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
  }
}

// The capacity the plan logs is what the pools really hold: max_concurrent_requests
// requests decode side by side while one more prefill chunk of max_num_batched_tokens runs,
// and requests of max_model_len fill max_tokens.
TEST(PoolPlan, PlannedCapacityIsReachable) {
  const CacheLayout layout = tiny_layout(16, 4);
  PoolPlanOptions options;
  options.max_num_batched_tokens = 32;
  options.max_model_len = 512;  // 128 ratio-4 entries = 32 blocks, 4 ratio-128 entries = 1 block
  bool tokens_bind = false;
  for (auto [max_num_seqs, budget] : {std::pair<int64_t, int64_t>{8, 40000}, {8, 300000},
                                      {32, 70000}, {32, 100000}}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    options.max_num_seqs = max_num_seqs;
    const PoolPlan plan = plan_pools(layout, budget, options);
    tokens_bind |= plan.max_tokens / 512 < plan.max_concurrent_requests;
    ASSERT_GT(plan.max_tokens, 0);
    {
      StateCache cache(layout, plan);
      const int64_t n = plan.max_concurrent_requests;
      // n-1 requests decode 40 tokens each, interleaved, then the last prefills a full chunk.
      for (int64_t t = 0; t < 40; ++t) {
        for (int64_t id = 0; id + 1 < n; ++id) {
          ASSERT_TRUE(cache.can_allocate(id, t, 1)) << "request " << id << " at " << t;
          cache.allocate(id, t, 1);
        }
      }
      ASSERT_TRUE(cache.can_allocate(n - 1, 0, options.max_num_batched_tokens));
      cache.allocate(n - 1, 0, options.max_num_batched_tokens);
      EXPECT_FALSE(cache.can_allocate(n, 0, 1));  // no state slot left for one more
    }
    StateCache cache(layout, plan);
    int64_t n_full = 0;
    for (int64_t id = 0;; ++id) {
      bool ok = true;
      for (int64_t t = 0; t < 512 && ok; ++t) {
        ok = cache.can_allocate(id, t, 1);
        if (ok) cache.allocate(id, t, 1);
      }
      if (!ok) break;
      ++n_full;
    }
    EXPECT_EQ(n_full, std::min(plan.max_concurrent_requests, plan.max_tokens / 512));
  }
  EXPECT_TRUE(tokens_bind);
}

TEST(PoolPlan, WindowOnlyLayoutHasUnboundedTokens) {
  CacheLayout layout;
  layout.window = 16;
  layout.block_size = 4;
  layout.window_entry_bytes = 8;
  layout.layers = {{0, false, 0}, {0, false, 0}};
  PoolPlanOptions options;
  options.max_num_seqs = 4;
  options.max_num_batched_tokens = 64;
  const PoolPlan plan = plan_pools(layout, 1 << 20, options);
  EXPECT_EQ(plan.max_tokens, -1);
  EXPECT_EQ(plan.n_blocks.size(), 1u);
  EXPECT_EQ(plan.n_blocks[0], 4 * (blocks_spanned(16, 4) + 1) + 16);
}

}  // namespace
}  // namespace deepinfer
