// Expert parallelism in one process (SingleCommunicator): the MoE refactor into route /
// contributions / ordered sum is bitwise the old accumulate-in-expert-order MoE; a Model with
// a world-size-1 ExpertParallel is bitwise the plain Model (both GEMM modes); the FP8 wire is
// exactly act_quant_ref's quantise -> dequantise of the dispatched rows; the Model checks that
// the ExpertParallel fits it. The multi-rank cases are test_ep_model_mpi.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "base/dtype.h"
#include "model/block_parts.h"
#include "model/model.h"
#include "model/weight_source.h"
#include "ops/moe/moe.h"
#include "ops/quant/act_quant.h"
#include "parallel/expert_parallel.h"
#include "parallel/single_communicator.h"
#include "../model/model_test_util.h"

namespace deepinfer {
namespace {

ModelConfig ep_config() {
  ModelConfig c = testing::small_config();
  c.n_routed_experts = 8;
  return c;
}

std::vector<float> random_rows(int64_t n, int64_t d, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n * d);
  for (float& v : x) v = dist(gen);
  return x;
}

bool bitwise_equal(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// The MoE as it was before the refactor: every expert accumulates into `out` in expert order,
// then the shared expert.
void old_moe(const MoeWeights& w, const MoeShape& s, const float* x, int64_t N,
             const int32_t* tokens, float* out, GemmMode mode) {
  const int64_t k = s.top_k;
  std::vector<int32_t> ids(N * k);
  std::vector<float> weights(N * k);
  moe_route(w, s, x, N, tokens, ids.data(), weights.data(), mode);
  std::memset(out, 0, N * s.dim * sizeof(float));
  std::vector<std::vector<int64_t>> rows(s.n_experts);
  std::vector<std::vector<float>> rw(s.n_experts);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      rows[ids[r * k + j]].push_back(r);
      rw[ids[r * k + j]].push_back(weights[r * k + j]);
    }
  }
  for (int64_t e = 0; e < s.n_experts; ++e) {
    const ExpertWeightsT& ew = w.experts[e];
    expert_ffn_accumulate_ref(x, s.dim, rows[e], rw[e], {ew.w1.f32(), ew.w3.f32(), ew.w2.f32()},
                              s.inter, s.limit, out, mode);
  }
  std::vector<int64_t> all(N);
  for (int64_t r = 0; r < N; ++r) all[r] = r;
  expert_ffn_accumulate_ref(x, s.dim, all, std::vector<float>(N, 1.0f),
                            {w.shared.w1.f32(), w.shared.w3.f32(), w.shared.w2.f32()},
                            s.shared_inter, s.limit, out, mode);
}

TEST(EpMoe, RefactoredMoeIsBitwiseTheAccumulatingOne) {
  const ModelConfig cfg = ep_config();
  auto src = random_weights(cfg, 11);
  const ModelWeights w = load_model_weights(cfg, *src);
  const int64_t N = 37, D = cfg.hidden_size;
  const std::vector<float> x = random_rows(N, D, 3);
  const std::vector<int32_t> tokens = testing::random_tokens(N, cfg.vocab_size, 5);
  for (GemmMode mode : {GemmMode::kBlas, GemmMode::kFixedOrder}) {
    for (int64_t layer : {0, 1}) {  // hash-routed and score-routed
      const MoeShape s = moe_shape(cfg, cfg.is_hash_layer(layer));
      std::vector<float> a(N * D), b(N * D);
      old_moe(w.layers[layer].moe, s, x.data(), N, tokens.data(), a.data(), mode);
      moe_forward(w.layers[layer].moe, s, x.data(), N, tokens.data(), b.data(), mode);
      EXPECT_TRUE(bitwise_equal(a.data(), b.data(), N * D)) << "layer " << layer;
    }
  }
}

TEST(EpMoe, WorldOfOneIsBitwiseThePlainModel) {
  for (const ModelConfig& base : {ep_config(), testing::small_v41_config()}) {
    ModelConfig cfg = base;
    cfg.n_routed_experts = 8;
    for (bool invariant : {false, true}) {
      ModelOptions plain_opts;
      plain_opts.batch_invariant = invariant;
      ModelOptions ep_opts = plain_opts;
      ep_opts.expert_parallel =
          ExpertParallel::create(std::make_shared<SingleCommunicator>(), cfg);
      auto s1 = random_weights(cfg, 21), s2 = random_weights(cfg, 21);
      auto plain = Model::from_source(cfg, *s1, plain_opts);
      auto ep = Model::from_source(cfg, *s2, ep_opts);
      const std::vector<int32_t> tokens = testing::random_tokens(19, cfg.vocab_size, 9);
      EXPECT_EQ(testing::run_chunked(*plain, tokens, 7), testing::run_chunked(*ep, tokens, 7))
          << cfg.model_type << " batch_invariant " << invariant;
      // A forward with no chunks still runs the step (and returns no rows).
      EXPECT_EQ(ep->forward({}).shape()[0], 0);
      const ExpertParallelMetrics m = ep_opts.expert_parallel->metrics();
      EXPECT_EQ(m.steps, 4);  // 3 chunks + the empty forward
      EXPECT_EQ(m.expert_bytes, cfg.num_layers * cfg.n_routed_experts * 3 *
                                    cfg.moe_intermediate_size * cfg.hidden_size * 4);
    }
  }
}

TEST(EpMoe, Fp8WireIsActQuantDequant) {
  const ModelConfig cfg = ep_config();
  auto src = random_weights(cfg, 31);
  ModelWeights w = load_model_weights(cfg, *src);
  const int64_t N = 23, D = cfg.hidden_size, k = cfg.n_experts_per_tok, layer = 2;
  ExpertParallelOptions opts;
  opts.wire = EpWire::kFp8;
  opts.fp8_block = 48;  // a partial last block (D = 64)
  auto ep = ExpertParallel::create(std::make_shared<SingleCommunicator>(), cfg, opts);
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    for (int64_t e = 0; e < cfg.n_routed_experts; ++e) {
      const ExpertWeightsT& x = w.layers[l].moe.experts[e];
      ep->set_expert(l, e, {x.w1, x.w3, x.w2});
    }
  }
  ep->check_loaded(D, cfg.moe_intermediate_size);
  std::vector<float> x = random_rows(N, D, 4);
  x[5] = 1000.0f;  // a large value in one block: that block's scale grows, the others' do not
  const MoeShape s = moe_shape(cfg, false);
  std::vector<int32_t> ids(N * k);
  std::vector<float> weights(N * k);
  moe_route(w.layers[layer].moe, s, x.data(), N, nullptr, ids.data(), weights.data(),
            GemmMode::kFixedOrder);
  // The oracle: the local contributions over q * s.
  std::vector<uint8_t> q(N * D);
  const int64_t n_kb = (D + 47) / 48;
  std::vector<float> scale(N * n_kb), xq(N * D);
  act_quant_ref(x.data(), N, D, 48, q.data(), scale.data());
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t c = 0; c < D; ++c) xq[r * D + c] = e4m3_to_f32(q[r * D + c]) * scale[r * n_kb + c / 48];
  }
  for (GemmMode mode : {GemmMode::kFixedOrder, GemmMode::kBlas}) {
    std::vector<float> want(N * k * D), got(N * k * D);
    moe_local_contributions(w.layers[layer].moe, s, xq.data(), N, ids.data(), weights.data(),
                            want.data(), mode);
    ep->begin_step();
    for (int64_t l = 0; l < layer; ++l) {
      ep->routed_contributions(l, nullptr, 0, D, s.inter, s.limit, nullptr, nullptr, k, nullptr,
                               mode);
    }
    ep->routed_contributions(layer, x.data(), N, D, s.inter, s.limit, ids.data(), weights.data(),
                             k, got.data(), mode);
    ep->end_step();
    EXPECT_TRUE(bitwise_equal(want.data(), got.data(), N * k * D));
    // And the fp32 contributions differ (the wire did quantise).
    std::vector<float> exact(N * k * D);
    moe_local_contributions(w.layers[layer].moe, s, x.data(), N, ids.data(), weights.data(),
                            exact.data(), mode);
    EXPECT_FALSE(bitwise_equal(exact.data(), got.data(), N * k * D));
  }
}

TEST(EpMoe, ModelRefusesAnExpertParallelOfAnotherShape) {
  const ModelConfig cfg = ep_config();
  ModelConfig other = cfg;
  other.n_routed_experts = 16;
  ModelOptions opts;
  opts.expert_parallel = ExpertParallel::create(std::make_shared<SingleCommunicator>(), other);
  auto src = random_weights(cfg, 1);
  try {
    Model::from_source(cfg, *src, opts);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert parallelism was set up for 4 layers of 16 "
                                         "experts, the model has 4 of 8"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_ep_wire("bf16"), Error);
  EXPECT_EQ(parse_ep_wire("fp8"), EpWire::kFp8);
}

}  // namespace
}  // namespace deepinfer
