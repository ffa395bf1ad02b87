// ExpertPlacement (parallel/expert_placement.h): the contiguous default, slot tables, errors,
// and the copy choice (round robin over the copies, every copy used, stable for a given input).
#include <gtest/gtest.h>

#include <map>

#include "base/error.h"
#include "parallel/expert_placement.h"

namespace deepinfer {
namespace {

TEST(ExpertPlacement, ContiguousBlocks) {
  const ExpertPlacement p = ExpertPlacement::contiguous(16, 4, 1);
  EXPECT_EQ(p.slots_per_rank(), 5);
  for (int64_t e = 0; e < 16; ++e) {
    ASSERT_EQ(p.copies(e).size(), 1u) << e;
    EXPECT_EQ(p.copies(e)[0].rank, e / 4);
    EXPECT_EQ(p.copies(e)[0].slot, e % 4);
    EXPECT_EQ(p.expert_at(e / 4, e % 4), e);
    for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(p.holds(r, e), r == e / 4);
  }
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(p.expert_at(r, 4), -1);
    EXPECT_EQ(p.experts_of(r), (std::vector<int32_t>{int32_t(4 * r), int32_t(4 * r + 1),
                                                     int32_t(4 * r + 2), int32_t(4 * r + 3)}));
  }
  EXPECT_EQ(p.describe(), "rank 0: 0 1 2 3 - | rank 1: 4 5 6 7 - | rank 2: 8 9 10 11 - | "
                          "rank 3: 12 13 14 15 -");
}

TEST(ExpertPlacement, ErrorsNameTheProblem) {
  try {
    ExpertPlacement::contiguous(256, 3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("--expert-parallel-size 3 does not divide the 256 "
                                         "routed experts"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ExpertPlacement::contiguous(16, 0), Error);
  EXPECT_THROW(ExpertPlacement::contiguous(16, 2, -1), Error);
  // An expert without a copy, an id out of range, a table of the wrong size.
  try {
    ExpertPlacement::from_slots(4, 2, 2, {0, 1, 2, 2});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert 3 has no copy"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ExpertPlacement::from_slots(4, 2, 2, {0, 1, 2, 4}), Error);
  EXPECT_THROW(ExpertPlacement::from_slots(4, 2, 2, {0, 1, 2}), Error);
}

TEST(ExpertPlacement, ReplicasAndCopyChoice) {
  // Expert 0 on ranks 0, 1 and 2; expert 1 on rank 1 only.
  const ExpertPlacement p =
      ExpertPlacement::from_slots(4, 3, 2, {0, 2, 1, 0, 0, 3});
  ASSERT_EQ(p.copies(0).size(), 3u);
  EXPECT_EQ(p.copies(0)[0], (ExpertCopy{0, 0}));
  EXPECT_EQ(p.copies(0)[1], (ExpertCopy{1, 1}));
  EXPECT_EQ(p.copies(0)[2], (ExpertCopy{2, 0}));
  // Round robin from the home rank's offset: consecutive rows of one rank use every copy once
  // per cycle, and different home ranks start on different copies.
  for (int64_t home = 0; home < 3; ++home) {
    std::map<int32_t, int> uses;
    for (int64_t ordinal = 0; ordinal < 6; ++ordinal) ++uses[p.choose(0, home, ordinal).rank];
    EXPECT_EQ(uses.size(), 3u);
    for (const auto& [rank, n] : uses) EXPECT_EQ(n, 2) << "rank " << rank;
    EXPECT_EQ(p.choose(0, home, 0).rank, home);
  }
  for (int64_t ordinal = 0; ordinal < 4; ++ordinal) {
    EXPECT_EQ(p.choose(1, 2, ordinal), (ExpertCopy{1, 0}));
  }
  EXPECT_EQ(p, ExpertPlacement::from_slots(4, 3, 2, {0, 2, 1, 0, 0, 3}));
  EXPECT_FALSE(p == ExpertPlacement::from_slots(4, 3, 2, {0, 2, 1, 0, 3, 0}));
}

}  // namespace
}  // namespace deepinfer
