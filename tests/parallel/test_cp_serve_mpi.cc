// Serve's context-parallel driver across processes (parallel/dp/cp_serve.h; run under mpirun
// with 2 and 3 ranks): rank 0 is the leader, a CpuRunner whose launched steps go through a
// CpLeader; the other ranks run run_cp_follower. A script of steps exercises every rule: long
// chunks of a fresh or mirrored sequence run context-parallel (also continuing over several
// chunks), a short chunk or a decode of a mirrored sequence runs on the leader alone and
// releases the mirror, a long chunk of a sequence the followers do not mirror runs alone, a step
// with a CP chunk and other chunks is split and merged (no expert parallelism), a freed id
// reused by a fresh sequence, all_logits, empty steps. The leader's logits equal those of a plain
// CpuRunner fed the same steps bitwise (batch_invariant), and the counters match the script.
// With MoE expert parallelism over the same ranks (the followers hold experts too), a step is
// context-parallel only when its CP chunk is its only chunk, and the followers' empty forwards
// keep the EP exchanges matched. A follower's agreement ends when the leader leaves.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/tiny_model.h"
#include "model/weight_source.h"
#include "parallel/dp/cp_serve.h"
#include "parallel/dp/dp_lockstep.h"
#include "parallel/expert_parallel.h"
#include "parallel/mpi_communicator.h"
#include "runtime/cpu_runner.h"

namespace deepinfer {
namespace {

std::vector<int32_t> prompt(int64_t n, uint32_t seed) {
  std::vector<int32_t> t(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (auto& v : t) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<int32_t>((s >> 8) % 129280u);
  }
  return t;
}

std::unique_ptr<MpiCommunicator> world() {
  auto comm = MpiCommunicator::world();
  comm->set_timeout(std::chrono::seconds(240));
  return comm;
}

std::unique_ptr<Model> tiny_model(bool v41, std::shared_ptr<ExpertParallel> ep = nullptr) {
  ModelConfig cfg = v41 ? tiny_v41_model_config() : tiny_model_config();
  ModelOptions opts;
  opts.batch_invariant = true;
  opts.expert_parallel = std::move(ep);
  return Model::from_source(cfg, *random_weights(cfg, kTinySeed, false), opts);
}

// One step of the script: chunks of (sequence slot, tokens, all_logits); slots name sequences
// of the script, mapped to runner ids as they are taken.
struct Piece {
  int slot;
  std::vector<int32_t> tokens;
  bool all_logits = false;
};

int64_t first_difference(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (a.f32()[i] != b.f32()[i]) return i;
  }
  return -1;
}

// The leader: runs `steps` on a driven runner and a plain one; `frees[k]`: slots freed after
// step k. Returns the driver's stats.
dp::CpServeStats lead(std::unique_ptr<Model> driven_model, std::unique_ptr<Model> plain_model, Communicator& step,
                      std::unique_ptr<Communicator> cp, int64_t min_tokens, const std::vector<std::vector<Piece>>& steps,
                      const std::vector<std::vector<int>>& frees) {
  auto leader = std::make_shared<dp::CpLeader>(std::move(cp), min_tokens);
  CpuRunnerOptions o;
  o.step_driver = leader;
  CpuRunner driven(std::move(driven_model), o);
  CpuRunner plain(std::move(plain_model));
  std::vector<int64_t> ids_d(16, -1), ids_p(16, -1);
  for (size_t k = 0; k < steps.size(); ++k) {
    std::vector<RunnerChunk> cd, cp_;
    std::vector<RowRequest> rows;
    for (const Piece& p : steps[k]) {
      if (ids_d[p.slot] < 0) {
        ids_d[p.slot] = driven.new_sequence();
        ids_p[p.slot] = plain.new_sequence();
      }
      cd.push_back({ids_d[p.slot], p.tokens, p.all_logits, 0});
      cp_.push_back({ids_p[p.slot], p.tokens, p.all_logits, 0});
      const size_t n = p.all_logits ? p.tokens.size() : 1;
      for (size_t r = 0; r < n; ++r) rows.push_back({RowMode::kHost});
    }
    EXPECT_TRUE(dp::step_agreement(step, true).any_busy);  // the group steps (even when empty here)
    driven.launch(cd, rows);
    plain.launch(cp_, rows);
    const StepResult a = driven.collect(), b = plain.collect();
    EXPECT_EQ(first_difference(a.logits, b.logits), -1) << "step " << k;
    for (int slot : frees[k]) {
      driven.free_sequence(ids_d[slot]);
      plain.free_sequence(ids_p[slot]);
      ids_d[slot] = ids_p[slot] = -1;
    }
  }
  dp::step_agreement(step, false, true);  // leave: the followers return
  return leader->stats();
}

void follow(std::unique_ptr<Model> model, Communicator& step, Communicator& cp) {
  dp::run_cp_follower(*model, step, cp, std::chrono::milliseconds(1));
}

TEST(CpServe, LeaderEqualsPlainRunnerAndFollowsTheRules) {
  auto comm = world();
  auto step = comm->split(0, comm->rank());
  auto cp = comm->split(0, comm->rank());
  const std::vector<int32_t> a = prompt(100, 1), c = prompt(50, 3), d = prompt(48, 4);
  auto part = [](const std::vector<int32_t>& v, size_t b, size_t e) {
    return std::vector<int32_t>(v.begin() + long(b), v.begin() + long(e));
  };
  // min_tokens 16. Slot 0: A (100 tokens: 40 | 40 with B and D's first chunk | 20, then decodes);
  // slot 1: B (5 tokens, freed after step 1); slot 1 again: C fresh (50, all_logits) on B's
  // reused id; slot 2: D (8 alone-short, then 40 long but not mirrored: alone).
  const std::vector<std::vector<Piece>> steps = {
      {{0, part(a, 0, 40)}},                                          // CP (fresh)
      {{1, prompt(5, 2)}, {0, part(a, 40, 80)}, {2, part(d, 0, 8)}},  // CP A (mirrored) + split
      {{0, part(a, 80, 100)}},                                        // CP (continues)
      {{0, {7}}},                                                     // decode: alone, release A
      {},                                                             // an empty step
      {{1, c, true}},                                                 // CP, fresh on a reused id
      {{2, part(d, 8, 48)}, {0, {9}}},                                // D not mirrored: alone
      {{1, {11}}},                                                    // C's decode: release
  };
  const std::vector<std::vector<int>> frees = {{}, {1}, {}, {}, {}, {}, {}, {0, 1, 2}};
  if (comm->rank() == 0) {
    const dp::CpServeStats s = lead(tiny_model(true), tiny_model(true), *step, std::move(cp), 16, steps, frees);
    EXPECT_EQ(s.cp_size, comm->size());
    EXPECT_EQ(s.steps, int64_t(steps.size()));
    EXPECT_EQ(s.cp_chunks, 4);
    EXPECT_EQ(s.cp_tokens, 40 + 40 + 20 + 50);
    EXPECT_EQ(s.releases, 2);  // A at its decode, C at its decode
    EXPECT_EQ(s.mirrored, 0);
  } else {
    follow(tiny_model(true), *step, *cp);
  }
}

TEST(CpServe, WithExpertParallelismOnlyLoneChunksGoContextParallel) {
  auto comm = world();
  auto step = comm->split(0, comm->rank());
  auto cp = comm->split(0, comm->rank());
  const ModelConfig cfg = tiny_model_config();
  if (cfg.n_routed_experts % comm->size() != 0) GTEST_SKIP() << "experts not divisible by the ranks";
  auto ep = ExpertParallel::create(std::shared_ptr<Communicator>(comm->split(0, comm->rank())), cfg);
  const std::vector<int32_t> a = prompt(64, 5);
  const std::vector<std::vector<Piece>> steps = {
      {{0, std::vector<int32_t>(a.begin(), a.begin() + 32)}},             // CP
      {{0, std::vector<int32_t>(a.begin() + 32, a.end())}, {1, {3, 4}}},  // two chunks: alone
      {},                                                                 // empty: followers step too
      {{2, prompt(40, 6)}},                                               // CP
      {{2, {5}}},                                                         // decode alone
  };
  const std::vector<std::vector<int>> frees = {{}, {}, {}, {}, {0, 1, 2}};
  if (comm->rank() == 0) {
    const dp::CpServeStats s = lead(tiny_model(false, ep), tiny_model(false), *step, std::move(cp), 16, steps, frees);
    EXPECT_EQ(s.cp_chunks, 2);
    EXPECT_EQ(s.cp_tokens, 32 + 40);
    EXPECT_EQ(ep->metrics().steps, int64_t(steps.size()));
  } else {
    follow(tiny_model(false, ep), *step, *cp);
    EXPECT_EQ(ep->metrics().steps, int64_t(steps.size()));  // one EP step per leader step
  }
}

}  // namespace
}  // namespace deepinfer
