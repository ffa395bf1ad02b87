// The speculative loop that proves verification forwards replayed from CUDA graphs (GpuModel
// "CUDA graphs": key (L, bucket of chunks)) equal eager ones, for any device drafter (MTP:
// test_gpu_mtp_cuda.cc, DSpark: test_gpu_dspark_cuda.cc). Both models batch-invariant, the same
// weights; three sequences (bucket 4: one padding chunk) run the same loop on `eager` and
// `graphs`: batched drafts (bitwise equal; the graph model's replayed from its draft graphs),
// the verification [y, drafts] of every sequence with
// all logits (L from VerifyGraphCase::lengths in turn; every fourth step one sequence verifies
// fewer drafts and another only y, so the chunks are shorter than the key's L) bitwise equal; a
// random prefix kept (truncate), then one EAGER decode step on both models whose logits must be
// bitwise equal (the cache state the graph verification left, rolled back, is the eager one's),
// and at the end the drafter's context keys of the window (VerifyGraphCase::keys), bitwise.
// Label cuda (included by GPU tests only).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime/gpu_model.h"
#include "../model/model_test_util.h"

namespace deepinfer::testing {

struct VerifyGraphCase {
  const char* label = "";
  std::vector<int64_t> lengths;     // L = 1 + drafts of step s: lengths[s % size]
  int64_t prompt_base = 2, prompt_step = 17;  // prompt i has prompt_base + prompt_step * i tokens
  uint32_t prompt_seed = 80, loop_seed = 21;
  // The drafter's keys that a next draft of a sequence of n tokens reads.
  std::function<std::vector<float>(const GpuModel&, int64_t seq, int64_t n)> keys;
};

inline bool same_tensor_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

inline void expect_same_draft_bits(const DraftBlock& a, const DraftBlock& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  EXPECT_EQ(a.logits, b.logits) << what;
  EXPECT_EQ(a.hidden, b.hidden) << what;
  EXPECT_EQ(a.confidence, b.confidence) << what;
}

inline void expect_verify_graphs_bitwise(GpuModel& eager, GpuModel& graphs, const VerifyGraphCase& c) {
  const int64_t V = eager.config().vocab_size;
  constexpr int64_t kSeqs = 3;
  std::vector<int64_t> se, sg;
  for (int64_t i = 0; i < kSeqs; ++i) {
    const std::vector<int32_t> p = random_tokens(c.prompt_base + c.prompt_step * i, V, c.prompt_seed + uint32_t(i));
    se.push_back(eager.new_sequence());
    sg.push_back(graphs.new_sequence());
    const GpuChunk ce{se.back(), p, false}, cg{sg.back(), p, false};
    ASSERT_TRUE(same_tensor_bits(eager.forward({&ce, 1}), graphs.forward({&cg, 1})));
    EXPECT_EQ(graphs.graph_stats().last_bucket, 0);  // a prefill chunk runs eagerly
  }
  std::mt19937 gen(c.loop_seed);
  int64_t verifies = 0, differ = 0, decode_differ = 0;
  const int64_t replays0 = graphs.graph_stats().verify_replays;
  for (int step = 0; step < 12; ++step) {
    const int64_t L = c.lengths[size_t(step) % c.lengths.size()];
    std::vector<int32_t> next;
    for (int64_t i = 0; i < kSeqs; ++i) next.push_back(int32_t(gen() % uint32_t(V)));
    const std::vector<DraftBlock> dg = graphs.draft(sg, next, L - 1), de = eager.draft(se, next, L - 1);
    std::vector<std::vector<int32_t>> tok(kSeqs);
    std::vector<GpuChunk> ce, cg;
    for (int64_t i = 0; i < kSeqs; ++i) {
      expect_same_draft_bits(dg[size_t(i)], de[size_t(i)], std::string(c.label) + " draft, step " + std::to_string(step));
      tok[size_t(i)] = {next[size_t(i)]};
      tok[size_t(i)].insert(tok[size_t(i)].end(), dg[size_t(i)].tokens.begin(), dg[size_t(i)].tokens.end());
      if (step % 4 == 3 && i > 0) tok[size_t(i)].resize(size_t(i == 1 ? 1 : L - 1));  // shorter chunks
      ce.push_back({se[size_t(i)], tok[size_t(i)], true});
      cg.push_back({sg[size_t(i)], tok[size_t(i)], true});
    }
    const Tensor le = eager.forward(ce), lg = graphs.forward(cg);
    ++verifies;
    differ += !same_tensor_bits(le, lg);
    EXPECT_EQ(eager.graph_stats().last_bucket, 0);
    EXPECT_EQ(graphs.graph_stats().last_length, L) << "step " << step;
    EXPECT_EQ(graphs.graph_stats().last_bucket, 4 * L) << "step " << step;  // 3 chunks -> bucket 4
    EXPECT_EQ(graphs.n_logits_rows(), le.shape()[0]);
    EXPECT_TRUE(std::all_of(lg.f32(), lg.f32() + lg.numel(), [](float v) { return std::isfinite(v); }));
    for (int64_t i = 0; i < kSeqs; ++i) {  // keep y and a random number of the drafts
      const auto len = int64_t(tok[size_t(i)].size());
      const int64_t keep = eager.n_tokens(se[size_t(i)]) - len + 1 + int64_t(gen() % uint32_t(len));
      eager.truncate(se[size_t(i)], keep);
      graphs.truncate(sg[size_t(i)], keep);
    }
    graphs.set_cuda_graphs(false);  // the next decode runs eagerly on both: it reads the state
    std::vector<std::vector<int32_t>> one(kSeqs);
    std::vector<GpuChunk> de1, dg1;
    for (int64_t i = 0; i < kSeqs; ++i) {
      one[size_t(i)] = {int32_t(gen() % uint32_t(V))};
      de1.push_back({se[size_t(i)], one[size_t(i)], false});
      dg1.push_back({sg[size_t(i)], one[size_t(i)], false});
    }
    decode_differ += !same_tensor_bits(eager.forward(de1), graphs.forward(dg1));
    EXPECT_EQ(graphs.graph_stats().last_bucket, 0);
    graphs.set_cuda_graphs(true);
  }
  for (int64_t i = 0; i < kSeqs; ++i) {
    const int64_t n = eager.n_tokens(se[size_t(i)]);
    ASSERT_EQ(graphs.n_tokens(sg[size_t(i)]), n);
    EXPECT_EQ(c.keys(graphs, sg[size_t(i)], n), c.keys(eager, se[size_t(i)], n)) << c.label << " sequence " << i;
  }
  // A chunk of more than max_rollback + 1 tokens with all logits runs eagerly.
  const std::vector<int32_t> longer = random_tokens(graphs.options().max_rollback + 2, V, 5);
  const GpuChunk lc{sg[0], longer, true};
  graphs.forward({&lc, 1});
  EXPECT_EQ(graphs.graph_stats().last_bucket, 0);
  const GpuGraphStats& gs = graphs.graph_stats();
  std::printf("%s verification graphs: %lld verifications, %lld differ bitwise, %lld next eager decodes differ; "
              "%lld verification graphs captured, %lld replays (all graphs: %lld captured, %.1f ms)\n",
              c.label, (long long)verifies, (long long)differ, (long long)decode_differ,
              (long long)gs.verify_captured, (long long)gs.verify_replays, (long long)gs.captured, gs.capture_ms);
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(decode_differ, 0);
  EXPECT_EQ(gs.verify_captured, int64_t(std::set<int64_t>(c.lengths.begin(), c.lengths.end()).size()));
  EXPECT_GT(gs.verify_replays - replays0, 0);
  EXPECT_EQ(eager.graph_stats().replays, 0);
}

}  // namespace deepinfer::testing
