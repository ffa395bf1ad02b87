// Expert parallelism of the CPU Model across processes (run under mpirun with 2 and 4 ranks;
// parallel/expert_parallel.h). Every rank runs its own requests (prefill chunks of different
// lengths, all-logits chunks, decode rows; one rank idle in some steps) through an EP Model
// holding only its experts and, as the oracle, through a full single-process Model of the same
// weights in the same process; the logits must be:
//   * bitwise equal with batch_invariant (V4 with its hash layer, and V4.1 with Engram);
//   * within 1e-4 of max|logit| without it (the experts' GEMMs see other batches);
//   * with the FP8 wire, bitwise a world-size-1 ExpertParallel with the same wire (whose MoE is
//     act_quant_ref's quantise -> dequantise of the routed rows: test_ep_moe's
//     Fp8WireIsActQuantDequant);
// EPLB re-placement mid-run (a hot expert from a biased router, one extra slot per rank) changes
// the placement, lowers the imbalance, moves weights, and leaves every later step bitwise; a
// rank whose chunk is refused fails alone while the others' step completes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "model/model.h"
#include "model/weight_source.h"
#include "parallel/expert_parallel.h"
#include "parallel/mpi_communicator.h"
#include "parallel/single_communicator.h"
#include "../model/model_test_util.h"

namespace deepinfer {
namespace {

std::shared_ptr<Communicator> world() {
  static std::shared_ptr<Communicator> comm = MpiCommunicator::world();
  return comm;
}

ModelConfig ep_config(bool v41) {
  ModelConfig c = v41 ? testing::small_v41_config() : testing::small_config();
  c.n_routed_experts = 8;
  return c;
}

// One request of this rank, run through the EP model (state a) and the oracle (state b).
struct Request {
  std::vector<int32_t> tokens;
  int64_t prompt = 0, fed = 0;
  bool all_logits = false;
  std::unique_ptr<SequenceState> a, b;
};

struct Pair {
  std::unique_ptr<Model> ep, oracle;
  std::shared_ptr<ExpertParallel> parallel;
};

Pair make_models(const ModelConfig& cfg, bool invariant, const ExpertParallelOptions& ep_opts,
                 uint64_t seed, float hot_bias = 0.0f, int64_t hot = 0,
                 Numerics numerics = Numerics::kOfficial) {
  ModelOptions opts;
  opts.batch_invariant = invariant;
  opts.numerics = numerics;
  Pair p;
  auto weights = [&] {
    auto src = random_weights(cfg, seed);
    ModelWeights w = load_model_weights(cfg, *src);
    if (hot_bias != 0.0f) {  // a router that prefers `hot` in every score-routed layer
      for (LayerWeights& lw : w.layers) {
        if (lw.moe.bias.defined()) lw.moe.bias.f32()[hot] += hot_bias;
      }
    }
    return w;
  };
  ModelOptions o = opts;
  if (ep_opts.wire == EpWire::kFp8) {
    // The FP8 wire's oracle is the same quantisation in one process: a world-size-1
    // ExpertParallel (whose MoE is act_quant's dequantised rows, test_ep_moe).
    ExpertParallelOptions one;
    one.wire = ep_opts.wire;
    one.fp8_block = ep_opts.fp8_block;
    o.expert_parallel = ExpertParallel::create(std::make_shared<SingleCommunicator>(), cfg, one);
  }
  p.oracle = std::make_unique<Model>(cfg, weights(), o);
  ModelOptions e = opts;
  p.parallel = e.expert_parallel = ExpertParallel::create(world(), cfg, ep_opts);
  p.ep = std::make_unique<Model>(cfg, weights(), e);
  return p;
}

// This rank's requests: 2 or 3 with prompts of different lengths per rank.
std::vector<Request> make_requests(const Pair& m, int rank) {
  const int64_t V = m.oracle->config().vocab_size;
  std::vector<Request> reqs(2 + rank % 2);
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request& r = reqs[i];
    r.prompt = 3 + 4 * static_cast<int64_t>(i) + 2 * rank;
    r.tokens = testing::random_tokens(r.prompt, V, 100 * rank + static_cast<uint32_t>(i));
    r.all_logits = i % 2 == 0;
    r.a = m.ep->new_state();
    r.b = m.oracle->new_state();
  }
  return reqs;
}

// One step: each request gets its next prefill chunk (up to 5 tokens) or one decode token;
// the last rank is idle in steps 0 and 3. Returns (EP logits, oracle logits).
std::pair<Tensor, Tensor> step(const Pair& m, std::vector<Request>& reqs, int64_t s, int rank,
                               int size) {
  std::vector<SequenceChunk> ca, cb;
  if (!(rank == size - 1 && (s == 0 || s == 3))) {
    std::mt19937 gen(static_cast<uint32_t>(1000 * s + rank));
    for (Request& r : reqs) {
      if (r.fed >= r.prompt) {
        r.tokens.push_back(static_cast<int32_t>(gen() % m.oracle->config().vocab_size));
      }
      const int64_t n = r.fed < r.prompt ? std::min<int64_t>(5, r.prompt - r.fed) : 1;
      const std::span<const int32_t> t(r.tokens.data() + r.fed, n);
      const bool all = r.all_logits && r.fed < r.prompt;
      ca.push_back({r.a.get(), t, all});
      cb.push_back({r.b.get(), t, all});
      r.fed += n;
    }
  }
  return {m.ep->forward(ca), m.oracle->forward(cb)};
}

// max |a - b| / max(1, max |b|).
double rel_diff(const Tensor& a, const Tensor& b) {
  double d = 0.0, ref = 1.0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    d = std::max(d, static_cast<double>(std::abs(a.f32()[i] - b.f32()[i])));
    ref = std::max(ref, static_cast<double>(std::abs(b.f32()[i])));
  }
  return d / ref;
}

void expect_bitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(std::memcmp(a.f32(), b.f32(), b.nbytes()), 0)
      << what << ": max rel diff " << rel_diff(a, b);
}

TEST(EpModelMpi, BitwiseWithBatchInvariant) {
  const int rank = world()->rank(), size = world()->size();
  for (bool v41 : {false, true}) {
    const ModelConfig cfg = ep_config(v41);
    Pair m = make_models(cfg, true, {}, 7);
    // Memory: each rank holds its share of the routed experts only.
    const int64_t full = cfg.num_layers * cfg.n_routed_experts * 3 * cfg.moe_intermediate_size *
                         cfg.hidden_size * 4;
    EXPECT_EQ(m.parallel->metrics().expert_bytes, full / size);
    std::vector<Request> reqs = make_requests(m, rank);
    for (int64_t s = 0; s < 6; ++s) {
      auto [a, b] = step(m, reqs, s, rank, size);
      expect_bitwise(a, b, (v41 ? "V4.1" : "V4") + std::string(" step ") + std::to_string(s) +
                               " rank " + std::to_string(rank));
    }
    const ExpertParallelMetrics mt = m.parallel->metrics();
    EXPECT_EQ(mt.steps, 6);
    if (size > 1) EXPECT_GT(mt.dispatch_bytes, 0);
  }
}

// Without batch invariance the EP model's GEMMs see other row counts than the oracle's (the
// dispatched rows of every rank), so fp32 rounding differs. Reference numerics: that rounding
// alone, <= 1e-4 (measured <= 7.5e-7 at np2 and np4, 2026-12-03). Official numerics also round
// activations to e4m3 and the cache to FP8 / FP4, and one ulp can flip a code (2^-4 relative on
// one element): on an AMD EPYC machine rank 3's first request moved by 2-5e-4 on every row from
// step 1 on (one flip, then its state differs; the same at commit 5e86b22, so not a regression),
// where the machine that wrote this test saw <= 3.6e-6. Bounded by 1e-2, still far below a wrong
// or missing expert contribution (O(1) relative).
TEST(EpModelMpi, CloseWithoutBatchInvariant) {
  const int rank = world()->rank(), size = world()->size();
  for (Numerics numerics : {Numerics::kReference, Numerics::kOfficial}) {
    Pair m = make_models(ep_config(false), false, {}, 8, 0.0f, 0, numerics);
    std::vector<Request> reqs = make_requests(m, rank);
    double worst = 0.0;
    for (int64_t s = 0; s < 4; ++s) {
      auto [a, b] = step(m, reqs, s, rank, size);
      ASSERT_EQ(a.shape(), b.shape());
      worst = std::max(worst, rel_diff(a, b));
    }
    std::printf("rank %d fp32 wire, blas GEMMs, %s numerics: max |logit diff| / max |logit| = %.3g\n", rank,
                numerics_name(numerics), worst);
    EXPECT_LE(worst, numerics == Numerics::kReference ? 1e-4 : 1e-2) << numerics_name(numerics);
  }
}

TEST(EpModelMpi, Fp8WireBitwiseItsSingleProcessQuantisation) {
  const int rank = world()->rank(), size = world()->size();
  const ModelConfig cfg = ep_config(false);
  ExpertParallelOptions fp8;
  fp8.wire = EpWire::kFp8;
  Pair m = make_models(cfg, true, fp8, 8);
  Pair exact = make_models(cfg, true, {}, 8);  // for the size of the FP8 effect, printed
  std::vector<Request> reqs = make_requests(m, rank), reqs_exact = make_requests(exact, rank);
  double fp8_effect = 0.0;
  for (int64_t s = 0; s < 4; ++s) {
    auto [a, b] = step(m, reqs, s, rank, size);
    expect_bitwise(a, b, "fp8 wire step " + std::to_string(s));
    auto [c, d] = step(exact, reqs_exact, s, rank, size);
    fp8_effect = std::max(fp8_effect, rel_diff(a, d));
  }
  // The random-weight tiny model amplifies input noise and FP8 flips some later routing
  // choices: the effect is large here, it is printed, not bounded.
  std::printf("rank %d fp8 wire vs exact fp32 single process: max |logit diff| / max |logit| = "
              "%.3g\n", rank, fp8_effect);
  EXPECT_GT(fp8_effect, 0.0) << "the fp8 wire changed nothing";
}

TEST(EpModelMpi, EplbReplacementDuringARunChangesNoOutput) {
  const int rank = world()->rank(), size = world()->size();
  const ModelConfig cfg = ep_config(false);
  ExpertParallelOptions opts;
  opts.eplb.interval = 2;  // rebalances before steps 1, 3, 5
  opts.eplb.extra_slots_per_rank = 1;
  opts.eplb.window = 8;
  const int64_t hot = 1;
  Pair m = make_models(cfg, true, opts, 9, 4.0f, hot);
  const ExpertPlacement initial = m.parallel->placement(2);
  const int64_t bytes_before = m.parallel->metrics().expert_bytes;
  std::vector<Request> reqs = make_requests(m, rank);
  for (int64_t s = 0; s < 7; ++s) {
    auto [a, b] = step(m, reqs, s, rank, size);
    expect_bitwise(a, b, "step " + std::to_string(s) + " rank " + std::to_string(rank));
  }
  const ExpertParallelMetrics mt = m.parallel->metrics();
  std::printf("rank %d: %lld rebalances (last before step %lld), imbalance %.3f -> %.3f, "
              "expert bytes %lld -> %lld, weight bytes received %lld\n",
              rank, static_cast<long long>(mt.rebalances),
              static_cast<long long>(mt.last_rebalance_step), mt.imbalance_before,
              mt.imbalance_after, static_cast<long long>(bytes_before),
              static_cast<long long>(mt.expert_bytes),
              static_cast<long long>(mt.weight_bytes_received));
  if (rank == 0) std::printf("layer 2 placement: %s\n", m.parallel->placement(2).describe().c_str());
  if (size == 1) return;
  EXPECT_GE(mt.rebalances, 1);
  EXPECT_LT(mt.imbalance_after, mt.imbalance_before);
  EXPECT_FALSE(m.parallel->placement(2) == initial);
  EXPECT_GT(m.parallel->placement(2).copies(hot).size(), 1u);
  // Every rank agrees on the placement (rank 0's table, broadcast).
  std::vector<int32_t> table = m.parallel->placement(2).slot_experts();
  std::vector<int32_t> zero = table;
  world()->broadcast(zero.data(), static_cast<int64_t>(zero.size() * sizeof(int32_t)), 0);
  EXPECT_EQ(table, zero);
  // ... and on the windowed counts (all-reduced), which saw the hot expert.
  std::vector<int64_t> tokens = mt.window_tokens, tokens0 = mt.window_tokens;
  ASSERT_EQ(static_cast<int64_t>(tokens.size()), cfg.num_layers * cfg.n_routed_experts);
  world()->broadcast(tokens0.data(), static_cast<int64_t>(tokens0.size() * sizeof(int64_t)), 0);
  EXPECT_EQ(tokens, tokens0);
  const int64_t* layer2 = tokens.data() + 2 * cfg.n_routed_experts;
  EXPECT_EQ(*std::max_element(layer2, layer2 + cfg.n_routed_experts), layer2[hot]);
  int64_t received = mt.weight_bytes_received;
  world()->all_reduce(&received, &received, 1, DType::I64, ReduceOp::kSum);
  EXPECT_GT(received, 0);
}

TEST(EpModelMpi, RefusedChunkFailsAloneAndTheStepCompletes) {
  const int rank = world()->rank(), size = world()->size();
  const ModelConfig cfg = ep_config(false);
  Pair m = make_models(cfg, true, {}, 10);
  std::vector<Request> reqs = make_requests(m, rank);
  auto [a0, b0] = step(m, reqs, 0, rank, size);
  expect_bitwise(a0, b0, "step 0");
  if (rank == 0) {
    const std::vector<int32_t> bad = {static_cast<int32_t>(cfg.vocab_size)};
    const SequenceChunk c{reqs[0].a.get(), bad, false};
    EXPECT_THROW(m.ep->forward(std::span<const SequenceChunk>(&c, 1)), Error);
  } else {
    auto [a1, b1] = step(m, reqs, 1, rank, size);
    expect_bitwise(a1, b1, "step 1");
  }
  // Everyone is still in lockstep.
  auto [a2, b2] = step(m, reqs, 2, rank, size);
  expect_bitwise(a2, b2, "step 2");
  EXPECT_EQ(m.parallel->metrics().steps, 3);
}

}  // namespace
}  // namespace deepinfer
