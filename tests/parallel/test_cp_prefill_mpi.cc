// Context-parallel prefill across processes (run under mpirun with 2 and 4 ranks; issue 19's
// acceptance "CP prefill equals single-rank prefill"). The built-in tiny V4 (with an MTP-1
// drafter, whose context the state carries) and tiny V4.1 (ratio 2 / 1 sources, reuse and
// reindex layers, candidate blocks, Engram) with batch_invariant on: for prompt lengths awkward
// for the zigzag and the compress ratios (1: three of four ranks own nothing; 7; 129: one past
// the sliding window and the first ratio-128 entry; 300), Model::forward_context_parallel's
// logits equal a single-rank Model::forward of the same prompt bitwise on every rank, the state
// it leaves equals the single-rank state in every array, and 8 greedy decode steps from it give
// bitwise the single-rank logits (also with MoE expert parallelism over the CP ranks); the drafter's draft from it is the single-rank draft. The
// small V4.1 DSpark checkpoint (window 8) runs the same cases. Also: all_logits, a CP chunk continuing a state, two CP groups
// of 2 inside 4 ranks, and ranks that disagree on the chunk failing alike.
// Every rank computes the single-rank reference itself (no rank is trusted for it).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/model.h"
#include "model/tiny_model.h"
#include "model/weight_source.h"
#include "parallel/context_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/mpi_communicator.h"

namespace deepinfer {
namespace {

std::vector<int32_t> prompt(int64_t n, uint32_t seed, int64_t vocab = 129280) {
  std::vector<int32_t> t(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (auto& v : t) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(vocab));
  }
  return t;
}

const Model& tiny(const std::string& family) {
  static std::map<std::string, std::unique_ptr<Model>> models;
  auto& m = models[family];
  if (!m && family == "dspark") {
    // The small V4.1 checkpoint with a DSpark drafter (tests/data/golden_v41; window 8, ratios
    // 2 / 1, vocabulary 64): its taps and draft rings are in the state.
    ModelOptions opts;
    opts.batch_invariant = true;
    m = Model::load("tests/data/golden_v41/dspark_quant/bf16", opts);
  }
  if (!m) {
    ModelConfig cfg = family == "v41" ? tiny_v41_model_config() : tiny_model_config();
    const bool mtp = family == "v4";
    if (mtp) cfg.num_nextn_predict_layers = 1;
    ModelOptions opts;
    opts.batch_invariant = true;
    m = Model::from_source(cfg, *random_weights(cfg, kTinySeed, mtp), opts);
  }
  return *m;
}

std::unique_ptr<MpiCommunicator> world() {
  auto comm = MpiCommunicator::world();
  comm->set_timeout(std::chrono::seconds(240));  // 4 ranks on 2 cores compute references too
  return comm;
}

// The first index where two logits tensors differ, or -1.
int64_t first_difference(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (a.f32()[i] != b.f32()[i]) return i;
  }
  return -1;
}

void expect_same_state(const SequenceState& want, const SequenceState& got, const std::string& what) {
  EXPECT_EQ(want.n_tokens, got.n_tokens) << what;
  EXPECT_EQ(want.recent_tokens, got.recent_tokens) << what;
  for (size_t l = 0; l < want.layers.size(); ++l) {
    const SequenceLayerState &a = want.layers[l], &b = got.layers[l];
    EXPECT_TRUE(a.ring == b.ring) << what << " layer " << l << " window ring";
    EXPECT_TRUE(a.compressor.entries == b.compressor.entries) << what << " layer " << l << " entries";
    EXPECT_EQ(a.compressor.n_entries, b.compressor.n_entries) << what << " layer " << l;
    EXPECT_TRUE(a.compressor.rows_a == b.compressor.rows_a && a.compressor.rows_z == b.compressor.rows_z)
        << what << " layer " << l << " compressor rows";
    EXPECT_TRUE(a.index_compressor.rows_a == b.index_compressor.rows_a &&
                a.index_compressor.rows_z == b.index_compressor.rows_z)
        << what << " layer " << l << " index compressor rows";
    EXPECT_TRUE(a.index_keys == b.index_keys) << what << " layer " << l << " index keys";
  }
  EXPECT_TRUE(want.mtp_ring == got.mtp_ring) << what << " MTP ring";
  EXPECT_TRUE(want.mtp_streams == got.mtp_streams) << what << " MTP streams";
  EXPECT_TRUE(want.draft_rings == got.draft_rings) << what << " DSpark rings";
}

int32_t argmax(const Tensor& logits, int64_t row) {
  const int64_t V = logits.size(1);
  const float* p = logits.f32() + row * V;
  return static_cast<int32_t>(std::max_element(p, p + V) - p);
}

// Prefill `tokens` (after `prefix`, run single-rank on both states) by CP on one state and
// single-rank on the other, compare logits and states, then decode `steps` greedy tokens on both.
// `cp_model` (default: `model`) runs the CP side and its decode steps: the same weights with
// expert parallelism, say.
void check_cp_prefill(const Model& model, const ContextParallel& cp, const std::vector<int32_t>& prefix,
                      const std::vector<int32_t>& tokens, bool all_logits, int steps,
                      const std::string& what, const Model* cp_model = nullptr) {
  const Model& other = cp_model != nullptr ? *cp_model : model;
  auto ref = model.new_state(), got = other.new_state();
  if (!prefix.empty()) {
    const SequenceChunk a{ref.get(), prefix, false}, b{got.get(), prefix, false};
    model.forward(std::span(&a, 1));
    other.forward(std::span(&b, 1));
  }
  const SequenceChunk rc{ref.get(), tokens, all_logits}, gc{got.get(), tokens, all_logits};
  const Tensor want = model.forward(std::span(&rc, 1));
  const Tensor have = other.forward_context_parallel(gc, cp);
  ASSERT_EQ(have.size(0), all_logits ? static_cast<int64_t>(tokens.size()) : 1) << what;
  ASSERT_EQ(first_difference(want, have), -1)
      << what << ": CP prefill logits differ at " << first_difference(want, have);
  expect_same_state(*ref, *got, what + " after the prefill");
  if (model.has_drafter()) {  // the drafter reads the context the CP prefill wrote
    const DraftBlock a = model.draft(*ref, 3), b = other.draft(*got, 3);
    EXPECT_EQ(a.tokens, b.tokens) << what;
    EXPECT_TRUE(a.logits == b.logits) << what << ": draft logits differ";
  }
  int32_t next = argmax(want, want.size(0) - 1);
  for (int s = 0; s < steps; ++s) {
    const std::vector<int32_t> one{next};
    const SequenceChunk a{ref.get(), one, false}, b{got.get(), one, false};
    const Tensor wl = model.forward(std::span(&a, 1));
    const Tensor gl = other.forward(std::span(&b, 1));
    ASSERT_EQ(first_difference(wl, gl), -1) << what << ": decode step " << s << " differs";
    next = argmax(wl, 0);
  }
  expect_same_state(*ref, *got, what + " after decoding");
}

class CpPrefill : public ::testing::TestWithParam<std::string> {};

TEST_P(CpPrefill, LastRowLogitsStateAndDecodeEqualSingleRank) {
  auto comm = world();
  const ContextParallel cp(*comm);
  const Model& model = tiny(GetParam());
  const int64_t V = model.config().vocab_size;
  for (int64_t L : {1, 7, 129, 300}) {
    check_cp_prefill(model, cp, {}, prompt(L, static_cast<uint32_t>(L), V), false, 8,
                     GetParam() + " L=" + std::to_string(L) + " cp=" + std::to_string(cp.size()));
  }
}

TEST_P(CpPrefill, AllLogitsAndAContinuedState) {
  auto comm = world();
  const ContextParallel cp(*comm);
  const Model& model = tiny(GetParam());
  const int64_t V = model.config().vocab_size;
  check_cp_prefill(model, cp, {}, prompt(13, 5, V), true, 2, GetParam() + " all_logits");
  // A state that already holds 70 positions (ring and compressor windows part-filled), then
  // a CP chunk crossing the window and the ratio-128 boundary.
  check_cp_prefill(model, cp, prompt(70, 6, V), prompt(90, 7, V), false, 8, GetParam() + " continued");
}

INSTANTIATE_TEST_SUITE_P(Families, CpPrefill, ::testing::Values("v4", "v41", "dspark"));

TEST(CpPrefillGroups, TwoGroupsOfTwoRunDifferentPrompts) {
  auto comm = world();
  if (comm->size() % 2 != 0 || comm->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const int group = comm->rank() / 2;
  auto sub = comm->split(group, comm->rank());
  const ContextParallel cp(*sub);
  ASSERT_EQ(cp.size(), 2);
  check_cp_prefill(tiny("v41"), cp, {}, prompt(40 + 31 * group, 11 + group), false, 2,
                   "group " + std::to_string(group));
}

// CP with MoE expert parallelism over the same ranks (parallel/expert_parallel.h): each CP
// rank's rows go through the EP exchange; the result is still the single-rank, all-experts one.
TEST(CpPrefillGroups, WithExpertParallelism) {
  auto comm = world();
  for (const std::string family : {"v4", "v41"}) {
    ModelConfig cfg = family == "v41" ? tiny_v41_model_config() : tiny_model_config();
    ModelOptions opts;
    opts.batch_invariant = true;
    opts.expert_parallel = ExpertParallel::create(std::shared_ptr<Communicator>(comm->split(0, comm->rank())), cfg);
    auto ep_model = Model::from_source(cfg, *random_weights(cfg, kTinySeed, false), opts);
    ModelOptions plain;
    plain.batch_invariant = true;
    auto model = Model::from_source(cfg, *random_weights(cfg, kTinySeed, false), plain);
    const ContextParallel cp(*comm);
    check_cp_prefill(*model, cp, {}, prompt(141, 21), false, 8, family + " cp+ep", ep_model.get());
  }
}

TEST(CpPrefillErrors, RanksThatDisagreeAllFail) {
  auto comm = world();
  const ContextParallel cp(*comm);
  const Model& model = tiny("v41");
  auto st = model.new_state();
  // The last rank's prompt differs in one token.
  std::vector<int32_t> tokens = prompt(9, 3);
  if (comm->rank() == comm->size() - 1) tokens[4] += 1;
  const SequenceChunk c{st.get(), tokens, false};
  try {
    model.forward_context_parallel(c, cp);
    FAIL() << "ranks with different prompts ran a CP prefill";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("disagree"), std::string::npos) << e.what();
  }
  EXPECT_EQ(st->n_tokens, 0);
  // A token outside the vocabulary on every rank: every rank fails the same check.
  std::vector<int32_t> bad = prompt(5, 4);
  bad[2] = 200000;
  const SequenceChunk b{st.get(), bad, false};
  EXPECT_THROW(model.forward_context_parallel(b, cp), Error);
  EXPECT_EQ(st->n_tokens, 0);
  comm->barrier();  // the communicator still works
}

}  // namespace
}  // namespace deepinfer
