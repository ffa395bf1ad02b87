// The zigzag CP split (parallel/context_parallel.h) against its definition, written here
// independently: every offset of a chunk belongs to exactly one rank, rank r holds pieces r and
// 2cp-1-r of ceil(L / 2cp) offsets, ascending; owner() inverts offsets(); bad arguments fail.
// Also the degenerate group of one rank (SingleCommunicator): forward_context_parallel equals
// Model::forward bitwise and leaves the same state (the multi-rank case: test_cp_prefill_mpi).
#include <gtest/gtest.h>

#include <vector>

#include "base/error.h"
#include "model/model.h"
#include "model/weight_source.h"
#include "parallel/context_parallel.h"
#include "parallel/single_communicator.h"
#include "../model/model_test_util.h"

namespace deepinfer {
namespace {

TEST(ZigzagSplit, EveryOffsetExactlyOnceInMirroredPieces) {
  for (int cp = 1; cp <= 8; ++cp) {
    for (int64_t L = 0; L <= 300; ++L) {
      const ZigzagSplit split(L, cp);
      const int64_t C = (L + 2 * cp - 1) / (2 * cp);  // the piece length
      EXPECT_EQ(split.piece(), C);
      std::vector<int> seen(L, 0);
      for (int r = 0; r < cp; ++r) {
        const std::vector<int64_t> offs = split.offsets(r);
        EXPECT_LE(static_cast<int64_t>(offs.size()), split.max_rows());
        for (size_t i = 0; i < offs.size(); ++i) {
          const int64_t o = offs[i];
          ASSERT_TRUE(o >= 0 && o < L) << "L " << L << " cp " << cp << " rank " << r;
          ++seen[o];
          const int64_t piece = o / C;
          EXPECT_TRUE(piece == r || piece == 2 * cp - 1 - r) << "offset " << o << " rank " << r;
          EXPECT_EQ(split.owner(o), r);
          if (i > 0) {
            EXPECT_LT(offs[i - 1], o);
          }
        }
        // Whole pieces: rank r holds all of [r*C, (r+1)*C) and [(2cp-1-r)*C, (2cp-r)*C) below L.
        int64_t expect = 0;
        for (int64_t p : {int64_t{r}, int64_t{2 * cp - 1 - r}}) {
          expect += std::max<int64_t>(0, std::min(L, (p + 1) * C) - std::min(L, p * C));
        }
        EXPECT_EQ(static_cast<int64_t>(offs.size()), expect);
      }
      for (int64_t o = 0; o < L; ++o) ASSERT_EQ(seen[o], 1) << "L " << L << " cp " << cp << " offset " << o;
    }
  }
}

TEST(ZigzagSplit, SmallExamples) {
  // L = 7 over 2 ranks: pieces of 2: [0,2) [2,4) [4,6) [6,7); rank 0 pieces 0 and 3.
  const ZigzagSplit a(7, 2);
  EXPECT_EQ(a.offsets(0), (std::vector<int64_t>{0, 1, 6}));
  EXPECT_EQ(a.offsets(1), (std::vector<int64_t>{2, 3, 4, 5}));
  // L = 1 over 4 ranks: rank 0 has the only position, the others none.
  const ZigzagSplit b(1, 4);
  EXPECT_EQ(b.offsets(0), (std::vector<int64_t>{0}));
  for (int r = 1; r < 4; ++r) EXPECT_TRUE(b.offsets(r).empty());
  // L = 16 over 4 ranks: pieces of 2, rank 1 has pieces 1 and 6.
  EXPECT_EQ(ZigzagSplit(16, 4).offsets(1), (std::vector<int64_t>{2, 3, 12, 13}));
}

TEST(ZigzagSplit, BadArgumentsFail) {
  EXPECT_THROW(ZigzagSplit(-1, 2), Error);
  EXPECT_THROW(ZigzagSplit(4, 0), Error);
  const ZigzagSplit s(5, 2);
  EXPECT_THROW(s.offsets(2), Error);
  EXPECT_THROW(s.owner(5), Error);
}

TEST(ContextParallel, OneRankGroupGathersAndAgrees) {
  SingleCommunicator comm;
  const ContextParallel cp(comm);
  const ZigzagSplit split(5, 1);
  std::vector<float> mine{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, full(10, -1.0f);
  cp.gather_rows(split, mine.data(), 2, full.data());
  EXPECT_EQ(full, mine);
  EXPECT_NO_THROW(cp.check_agree({1, 2, 3}, "values"));
  EXPECT_THROW(cp.gather_rows(ZigzagSplit(5, 2), mine.data(), 2, full.data()), Error);
}

// cp = 1 runs every collective through the single communicator: the CP forward must then be
// Model::forward exactly, for both families, both logits modes, and a continued state.
TEST(ContextParallel, OneRankGroupEqualsForward) {
  for (const bool v41 : {false, true}) {
    ModelConfig cfg = v41 ? testing::small_v41_config() : testing::small_config();
    cfg.num_nextn_predict_layers = v41 ? 0 : 1;  // V4 with its MTP drafter (context in the state)
    ModelOptions opts;
    opts.batch_invariant = true;
    auto model = Model::from_source(cfg, *random_weights(cfg, 7, !v41), opts);
    SingleCommunicator comm;
    const ContextParallel cp(comm);
    const std::vector<int32_t> tokens = testing::random_tokens(150, cfg.vocab_size, 3);
    for (const bool all : {false, true}) {
      auto ref = model->new_state(), got = model->new_state();
      const std::span<const int32_t> head(tokens.data(), 20), tail(tokens.data() + 20, 130);
      const SequenceChunk c0{ref.get(), head, false}, c1{got.get(), head, false};
      model->forward(std::span(&c0, 1));
      model->forward(std::span(&c1, 1));
      const SequenceChunk r{ref.get(), tail, all}, g{got.get(), tail, all};
      const Tensor want = model->forward(std::span(&r, 1));
      const Tensor have = model->forward_context_parallel(g, cp);
      ASSERT_EQ(want.numel(), have.numel());
      for (int64_t i = 0; i < want.numel(); ++i) {
        ASSERT_EQ(want.f32()[i], have.f32()[i]) << (v41 ? "v41" : "v4") << " all " << all << " i " << i;
      }
      EXPECT_EQ(ref->n_tokens, got->n_tokens);
      EXPECT_EQ(ref->recent_tokens, got->recent_tokens);
      for (size_t l = 0; l < ref->layers.size(); ++l) {
        EXPECT_EQ(ref->layers[l].ring, got->layers[l].ring) << "layer " << l;
        EXPECT_EQ(ref->layers[l].compressor.entries, got->layers[l].compressor.entries) << "layer " << l;
        EXPECT_EQ(ref->layers[l].index_keys, got->layers[l].index_keys) << "layer " << l;
      }
      EXPECT_EQ(ref->mtp_ring, got->mtp_ring);
      EXPECT_EQ(ref->mtp_streams, got->mtp_streams);
    }
  }
}

}  // namespace
}  // namespace deepinfer
