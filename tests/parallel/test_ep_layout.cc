// The expert-parallel layout planner (parallel/ep_layout.h) on the host:
//  * the send plan: every routed slot goes exactly once to a rank whose slot holds its expert,
//    a peer's rows are in ascending slot order, counted positions are packed in rank order and
//    fixed-capacity ones start at p * cap; copies of a replicated expert alternate as
//    ExpertPlacement::choose says; the combine order is ascending (expert, j);
//  * the receive grouping against a direct bucket sort;
//  * the whole exchange emulated over 1, 2 and 4 ranks (ep_test_util.h): dispatch -> a
//    per-expert op -> combine equals the output written from the definition exactly, for both
//    exchanges, at awkward token counts; bad input fails clearly.
#include <gtest/gtest.h>

#include <map>

#include "base/error.h"
#include "ep_test_util.h"

namespace deepinfer {
namespace {

using ep_test::Geometry;
using ep_test::RankInput;

// 256 experts over 4 ranks of 64 + 2 extra slots; experts 3 and 200 get a second copy (on
// ranks 2 and 0), expert 7 a third (rank 3).
ExpertPlacement replicated_placement() {
  const int64_t P = 4, per = 64, slots = per + 2;
  std::vector<int32_t> table(P * slots, -1);
  for (int64_t e = 0; e < 256; ++e) table[(e / per) * slots + e % per] = static_cast<int32_t>(e);
  table[2 * slots + 64] = 3;
  table[0 * slots + 64] = 200;
  table[3 * slots + 64] = 7;
  table[2 * slots + 65] = 7;
  return ExpertPlacement::from_slots(256, P, slots, table);
}

TEST(EpLayout, RecordFormat) {
  EXPECT_EQ(ep_scale_blocks(4096, 128), 32);
  EXPECT_EQ(ep_record_meta_offset(4096, 128), 4096 + 128);
  EXPECT_EQ(ep_record_bytes(4096, 128), 4240);  // 4232 rounded up to 16
  EXPECT_EQ(ep_record_bytes(64, 32), 80);       // 64 + 8 + 8
  EXPECT_EQ(ep_record_bytes(80, 128), 96);      // 80 + 4 + 8 = 92 -> 96
  EXPECT_THROW(ep_record_bytes(100, 128), Error);
  EXPECT_EQ(ep_grouped_rows_cap(10, 256, 64), 10 + 10 * 63);
  EXPECT_EQ(ep_grouped_rows_cap(1000, 8, 64), 1000 + 8 * 63);
}

TEST(EpLayout, SendPlanPlacesEverySlotOnceInSlotOrder) {
  const ExpertPlacement pl = replicated_placement();
  std::mt19937 rng(7);
  for (int64_t T : {0, 1, 7, 300}) {
    const RankInput in = ep_test::random_input(rng, T, 6, 256, 16, 1, /*invalid_every=*/11);
    for (int64_t rank = 0; rank < 4; ++rank) {
      for (int64_t cap : {int64_t{0}, ep_peer_capacity(300, 6)}) {
        const EpSendPlan plan = ep_plan_send(pl, rank, in.ids.data(), T, 6, cap);
        std::vector<int64_t> rows(4, 0), last(4, -1);
        std::map<int64_t, int> seen;
        std::map<int32_t, int64_t> ordinal;
        for (int64_t s = 0; s < T * 6; ++s) {
          const int32_t e = in.ids[s];
          if (e < 0) {
            EXPECT_EQ(plan.slot_peer[s], -1);
            EXPECT_EQ(plan.slot_pos[s], -1);
            continue;
          }
          const int32_t p = plan.slot_peer[s];
          ASSERT_GE(p, 0);
          EXPECT_EQ(pl.expert_at(p, plan.slot_local[s]), e) << "slot " << s;
          const ExpertCopy& c = pl.choose(e, rank, ordinal[e]++);
          EXPECT_EQ(c.rank, p);
          EXPECT_EQ(c.slot, plan.slot_local[s]);
          EXPECT_GT(plan.slot_pos[s], last[p]) << "rows of a peer in slot order";
          last[p] = plan.slot_pos[s];
          ++rows[p];
          EXPECT_EQ(seen[plan.slot_pos[s]]++, 0) << "position used twice";
        }
        for (int64_t p = 0; p < 4; ++p) EXPECT_EQ(plan.peer_rows[p], rows[p]);
        // Positions: packed in rank order, or blocks of cap.
        int64_t start = 0;
        for (int64_t p = 0; p < 4; ++p) {
          const int64_t b = cap > 0 ? p * cap : start;
          int64_t i = 0;
          for (int64_t s = 0; s < T * 6; ++s) {
            if (plan.slot_peer[s] == p) {
              EXPECT_EQ(plan.slot_pos[s], b + i++);
            }
          }
          start += rows[p];
        }
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t m = 1; m < 6; ++m) {
            const int32_t a = plan.slot_order[t * 6 + m - 1], b = plan.slot_order[t * 6 + m];
            EXPECT_LT(in.ids[t * 6 + a], in.ids[t * 6 + b]);
          }
        }
      }
    }
  }
}

TEST(EpLayout, ReplicatedExpertUsesAllItsCopies) {
  const ExpertPlacement pl = replicated_placement();
  std::vector<int32_t> ids(9, 7);  // 9 tokens, top_k 1, all to expert 7 (3 copies)
  for (int64_t rank = 0; rank < 4; ++rank) {
    const EpSendPlan plan = ep_plan_send(pl, rank, ids.data(), 9, 1, 0);
    std::map<int32_t, int> per_rank;
    for (int32_t p : plan.slot_peer) ++per_rank[p];
    EXPECT_EQ(per_rank.size(), 3u);
    for (auto [p, n] : per_rank) EXPECT_EQ(n, 3) << "rank " << p;
  }
}

TEST(EpLayout, FixedCapacityOverflowIsAnError) {
  const ExpertPlacement pl = ExpertPlacement::contiguous(8, 2);
  std::vector<int32_t> ids = {0, 1, 2, 3, 0, 1};  // 3 tokens x 2, all to rank 0
  EXPECT_NO_THROW(ep_plan_send(pl, 0, ids.data(), 3, 2, 6));
  EXPECT_THROW(ep_plan_send(pl, 0, ids.data(), 3, 2, 5), Error);
  EXPECT_THROW(ep_plan_send(pl, 2, ids.data(), 3, 2, 0), Error);  // no rank 2
}

TEST(EpLayout, GroupingIsABucketSortPaddedToTiles) {
  std::mt19937 rng(3);
  for (int64_t n : {0, 1, 5, 333}) {
    std::vector<int32_t> slot(n);
    for (int32_t& l : slot) l = static_cast<int32_t>(rng() % 9) - 1;  // -1 .. 7
    const EpRecvGrouping g = ep_group_recv(slot.data(), n, 8, 4);
    int64_t r0 = 0;
    for (int32_t l = 0; l < 8; ++l) {
      std::vector<int32_t> rows;
      for (int64_t i = 0; i < n; ++i) {
        if (slot[i] == l) rows.push_back(static_cast<int32_t>(i));
      }
      EXPECT_EQ(g.counts[l], static_cast<int64_t>(rows.size()));
      EXPECT_EQ(g.offsets[l], r0);
      for (size_t m = 0; m < rows.size(); ++m) {
        EXPECT_EQ(g.row_recv[r0 + m], rows[m]);
        EXPECT_EQ(g.recv_row[rows[m]], r0 + static_cast<int64_t>(m));
      }
      const int64_t padded = (static_cast<int64_t>(rows.size()) + 3) / 4 * 4;
      for (int64_t m = static_cast<int64_t>(rows.size()); m < padded; ++m) {
        EXPECT_EQ(g.row_recv[r0 + m], -1);
      }
      r0 += padded;
    }
    EXPECT_EQ(g.offsets[8], r0);
    for (int64_t i = 0; i < n; ++i) {
      if (slot[i] < 0) {
        EXPECT_EQ(g.recv_row[i], -1);
      }
    }
  }
  std::vector<int32_t> bad = {0, 8};
  EXPECT_THROW(ep_group_recv(bad.data(), 2, 8, 4), Error);
}

// Emulated exchange over P ranks with unequal token counts (some ranks idle).
void check_exchange(const ExpertPlacement& pl, const std::vector<int64_t>& tokens) {
  const Geometry g{6, 64, 32, 300};
  std::mt19937 rng(11 + static_cast<unsigned>(tokens.size()));
  std::vector<RankInput> in;
  for (int64_t T : tokens) in.push_back(ep_test::random_input(rng, T, 6, 256, g.D, g.n_sb(), 13));
  const auto counted = ep_test::emulate(pl, in, EpExchange::kCounted, g);
  const auto fixed = ep_test::emulate(pl, in, EpExchange::kFixedCapacity, g);
  for (size_t r = 0; r < tokens.size(); ++r) {
    const std::vector<float> want = ep_test::expected_output(in[r], 6, g.D, g.scale_block);
    ASSERT_EQ(counted[r].out.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(counted[r].out[i], want[i]) << "rank " << r << " element " << i;
      ASSERT_EQ(fixed[r].out[i], want[i]) << "rank " << r << " element " << i;
    }
    // Same rows per local expert whichever exchange.
    EXPECT_EQ(counted[r].grouping.counts, fixed[r].grouping.counts);
    EXPECT_EQ(counted[r].grouping.offsets, fixed[r].grouping.offsets);
  }
}

TEST(EpLayout, EmulatedExchangeEqualsTheDefinition) {
  check_exchange(ExpertPlacement::contiguous(256, 1), {0});
  check_exchange(ExpertPlacement::contiguous(256, 1), {1});
  check_exchange(ExpertPlacement::contiguous(256, 1), {7});
  check_exchange(ExpertPlacement::contiguous(256, 1), {300});
  check_exchange(ExpertPlacement::contiguous(256, 2), {7, 300});
  check_exchange(replicated_placement(), {300, 0, 1, 7});
}

TEST(EpLayout, MemoryOfBothExchanges) {
  // V4-Flash decode shape: D 4096, k 6, 64 tokens per rank, EP 8 (32 slots per rank).
  const EpMemory c = ep_memory(EpExchange::kCounted, 8, 64, 6, 256, 32, 4096, 128, 64);
  const EpMemory f = ep_memory(EpExchange::kFixedCapacity, 8, 64, 6, 256, 32, 4096, 128, 64);
  EXPECT_EQ(c.send_rows, 384);
  EXPECT_EQ(f.send_rows, 8 * 384);
  EXPECT_EQ(c.recv_rows, 8 * 384);
  EXPECT_EQ(f.send_bytes, 8 * 384 * 4240);
  EXPECT_EQ(f.combine_bytes, 2 * 8 * 384 * 4096 * 2);
  EXPECT_EQ(c.grouped_rows, 8 * 384 + 32 * 63);
  EXPECT_GT(f.total(), c.total());
}

}  // namespace
}  // namespace deepinfer
