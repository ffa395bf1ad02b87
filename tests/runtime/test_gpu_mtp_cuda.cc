// V4's MTP-1 drafter on the GPU (GpuModelOptions::mtp, runtime/gpu_mtp.cc) against the
// float64 reference and the CPU drafter (model/mtp.cc):
//  * tests/data/golden_mtp (tools/mtp_reference.py: a tiny V4 checkpoint with mtp.0), fp32
//    weights: per-position drafts (decoding token by token, next = the sequence's token), the
//    MTP keys the forwards wrote, and 3 chained drafts at the fixture's positions, against the
//    float64 reference and against Model::draft. Reference numerics on the fp32 per-sequence
//    state (paged_kv off): per row max|diff| <= 1e-4 * max|ref| (as the CPU test); official on
//    the paged bf16 KV cache (exactly the official rounding's values): 1e-3 * max|ref| per row
//    and one bf16 step per key value (the window keys' QAT rounding, see
//    tests/model/test_mtp.cc), tokens equal.
//  * FP8 weights (official, FP8 cache) against the CPU with the same FP8-rounded weights
//    (GpuModel::fp8_round_trip) under the emulation of the GPU's 1x128 activation
//    quantisation before every FP8 projection (fp8_act_emulation.h): golden_mtp 1 - cosine
//    per draft logits row <= 1e-3 and tokens equal; models/trained-v4 (whose discrete choices
//    a last-bit difference can flip) the activation noise bound. The GPU vs the plain CPU is
//    printed. No GPU needed: the emulation itself (inputs quantised exactly as act_quant_ref,
//    fp32 projections untouched) and the size of the noise on the CPU alone (emulated vs plain
//    drafter; emulated under summation-order and +-1 / 16-ulp input changes), measured and
//    printed.
//  * FP8 localisation (Fp8StagesAgainstTheEmulation, golden_mtp, FP8 and bf16 KV cache): the
//    backbone's logits, the MTP's inputs and keys, and every stage of the first draft step fed
//    the GPU's own traced input (gpu_mtp_trace.h), GPU vs the CPU under the emulation.
//  * models/trained-v4 (its trained MTP drafter from drafter.safetensors via the index), fp32
//    reference numerics: chained drafts (3) at several positions of a prompt vs Model::draft,
//    1e-4 * max|ref| per row, tokens equal. Skipped when the model is absent.
//  * rollback (random small V4 with MTP, paged, batch-invariant): a decode loop that drafts 3,
//    verifies [y, d0, d1, d2], keeps a random prefix and truncates leaves the MTP keys of every
//    committed position in the window and the next draft bitwise those of a fresh sequence fed
//    the committed tokens; a draft changes no key (keys and a second draft equal).
//  * MODEL_SPEC §E.17: the backbone's logits are bitwise the same with the drafter on (drafts
//    interleaved) and off.
//  * CUDA graph decode steps write the same keys and give the same drafts as eager ones
//    (batch-invariant, bitwise); verification forwards [y, drafts] replayed from graphs (keys
//    (L, bucket), golden_mtp and the small V4 with ratios 4 / 128) give bitwise the eager logits
//    and, after a rollback, the next eager decode's logits and the MTP keys bitwise the eager
//    model's; a batched draft equals one-by-one drafts (bitwise), also replayed from the draft
//    graphs (a bucket of sequences, one graph per chained step, with and without the device
//    probabilities; counted in graph_stats captured / draft_captured / draft_replays); the
//    device-side draft probabilities (CudaRunner's) are the softmax of the logits (1e-5).
//  * bad requests fail with Error.
// Label cuda: needs a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include "base/error.h"
#include "io/config_parser.h"
#include "io/safetensors.h"
#include "model/block_parts.h"
#include "model/model.h"
#include "model/sequence_state.h"
#include "model/weight_source.h"
#include "ops/linear/linear.h"
#include "ops/moe/moe.h"
#include "ops/quant/act_quant.h"
#include "ops/rms_norm/rms_norm.h"
#include "runtime/gpu_model.h"
#include "runtime/gpu_mtp_trace.h"
#include "../model/golden_data.h"
#include "../model/model_test_util.h"
#include "fp8_act_emulation.h"
#include "verify_graphs_test_util.h"

namespace deepinfer {
namespace {

constexpr const char* kGoldenMtp = "tests/data/golden_mtp";
constexpr const char* kTrainedV4 = "models/trained-v4";

using testing::random_tokens;
using testing::expect_verify_graphs_bitwise;
using testing::VerifyGraphCase;

float max_abs_of(const float* a, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i]));
  return m;
}

double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb + 1e-300);
}

// Per row max|diff| <= bound * max|want|; prints the worst ratio.
void expect_rows(const std::vector<float>& got, const std::vector<float>& want, int64_t width, float bound,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float worst = 0;
  for (size_t r = 0; r < want.size() / size_t(width); ++r) {
    const float* w = &want[r * size_t(width)];
    float diff = 0;
    for (int64_t i = 0; i < width; ++i) diff = std::max(diff, std::abs(got[r * size_t(width) + size_t(i)] - w[i]));
    worst = std::max(worst, diff / max_abs_of(w, width));
    EXPECT_LE(diff, bound * max_abs_of(w, width)) << what << " row " << r;
  }
  std::printf("%s: worst row max|diff| / max|ref| = %.3g (bound %.0e)\n", what.c_str(), worst, bound);
}

struct HostModel {
  ModelConfig cfg;
  ModelWeights weights;
};

HostModel load_host(const std::string& dir) {
  HostModel h;
  h.cfg = load_model_config(dir);
  auto src = open_checkpoint_weights(dir, h.cfg);
  h.weights = load_model_weights(h.cfg, *src);
  return h;
}

GpuModelOptions mtp_options(Numerics numerics, bool paged, int64_t max_rollback, bool batch_invariant = false) {
  GpuModelOptions o;
  o.max_sequences = 4;
  o.max_context = 512;
  o.max_batch_tokens = 256;
  o.numerics = numerics;
  o.paged_kv = paged;
  o.max_rollback = max_rollback;
  o.batch_invariant = batch_invariant;
  o.mtp = true;
  return o;
}

Tensor gpu_run(GpuModel& g, int64_t seq, const std::vector<int32_t>& tokens, bool all = false) {
  const GpuChunk c{seq, tokens, all};
  return g.forward(std::span<const GpuChunk>(&c, 1));
}

void cpu_run(const Model& m, SequenceState& st, const std::vector<int32_t>& tokens) {
  const SequenceChunk c{&st, tokens, false};
  m.forward(std::span<const SequenceChunk>(&c, 1));
}

DraftBlock gpu_draft(GpuModel& g, int64_t seq, int32_t next, int64_t n) {
  const int64_t s[1] = {seq};
  const int32_t x[1] = {next};
  return std::move(g.draft(s, x, n)[0]);
}

// --- golden_mtp: float64 reference and CPU --------------------------------------------------

class GpuMtpGolden : public ::testing::TestWithParam<Numerics> {
 protected:
  void SetUp() override {
    ref_ = SafetensorsFile::open(std::string(kGoldenMtp) + "/mtp_reference.safetensors");
    ids_ = testing::read_ids(*ref_, "input_ids");
    const bool official = GetParam() == Numerics::kOfficial;
    // Reference: the fp32 per-sequence state (no KV rounding at all); official: the paged
    // bf16 cache, which holds the official rounding's values exactly (FP8-rounded NoPE dims and
    // bf16 rope dims; indexer keys stay fp32). The FP8 cache is the FP8-weights test's.
    GpuModelOptions o = mtp_options(GetParam(), official, 0);
    if (official) o.kv_cache_dtype = KvCacheDtype::kBf16;
    gpu_ = GpuModel::load(std::string(kGoldenMtp) + "/model", o);
    cpu_ = Model::load(std::string(kGoldenMtp) + "/model", {GetParam(), false});
  }
  std::vector<float> golden(const std::string& name) const {
    return testing::read_f32(*ref_, name + (GetParam() == Numerics::kOfficial ? "_official" : ""));
  }
  std::vector<int32_t> golden_ids(const std::string& name) const {
    return testing::read_ids(*ref_, name + (GetParam() == Numerics::kOfficial ? "_official" : ""));
  }
  float bound() const { return GetParam() == Numerics::kOfficial ? 1e-3f : 1e-4f; }
  std::shared_ptr<SafetensorsFile> ref_;
  std::vector<int32_t> ids_;
  std::unique_ptr<GpuModel> gpu_;
  std::unique_ptr<Model> cpu_;
};

TEST_P(GpuMtpGolden, DraftsAtEveryPositionAndKeys) {
  ASSERT_TRUE(gpu_->has_mtp());
  const ModelConfig& cfg = gpu_->config();
  const int64_t V = cfg.vocab_size, D = cfg.hidden_size, d = cfg.head_dim;
  const int64_t T = static_cast<int64_t>(ids_.size());
  std::vector<float> got, got_hidden, cpu_logits;
  const int64_t s = gpu_->new_sequence();
  auto st = cpu_->new_state();
  for (int64_t p = 0; p + 1 < T; ++p) {
    gpu_run(*gpu_, s, {ids_[size_t(p)]});
    cpu_run(*cpu_, *st, {ids_[size_t(p)]});
    const DraftBlock b = gpu_draft(*gpu_, s, ids_[size_t(p + 1)], 1);
    ASSERT_EQ(b.tokens.size(), 1u);
    got.insert(got.end(), b.logits.begin(), b.logits.end());
    got_hidden.insert(got_hidden.end(), b.hidden.begin(), b.hidden.end());
    const DraftBlock c = cpu_->draft(*st, ids_[size_t(p + 1)], 1);
    cpu_logits.insert(cpu_logits.end(), c.logits.begin(), c.logits.end());
    EXPECT_EQ(b.tokens, c.tokens) << "position " << p;
  }
  expect_rows(got, golden("mtp_logits"), V, bound(), "GPU MTP draft logits vs float64");
  expect_rows(got_hidden, golden("mtp_hidden"), D, bound(), "GPU MTP hidden vs float64");
  expect_rows(got, cpu_logits, V, bound(), "GPU MTP draft logits vs CPU");
  // The keys the forwards wrote for the positions a next draft reads.
  const auto keys = golden("mtp_keys");
  const bool official = GetParam() == Numerics::kOfficial;
  int64_t checked = 0;
  for (int64_t t = std::max<int64_t>(0, T - 1 - cfg.sliding_window); t < T - 2; ++t, ++checked) {
    const std::vector<float> g = gpu_->mtp_key(s, t);
    const float* w = &keys[size_t(t * d)];
    for (int64_t i = 0; i < d; ++i) {
      const float step = official ? std::abs(w[i]) * 0x1p-7f : 0.0f;  // one bf16 step
      ASSERT_NEAR(g[size_t(i)], w[i], 1e-4f * max_abs_of(w, d) + step) << "key " << t << " dim " << i;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST_P(GpuMtpGolden, ChainedDrafts) {
  const int64_t V = gpu_->config().vocab_size;
  const auto positions = testing::read_ids(*ref_, "chain_positions");
  const auto anchors = golden_ids("chain_anchors");
  const auto tokens = golden_ids("chain_tokens");
  const auto logits = golden("chain_logits");
  const int64_t n = static_cast<int64_t>(tokens.size() / positions.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    SCOPED_TRACE("p = " + std::to_string(positions[i]));
    const std::vector<int32_t> prefix(ids_.begin(), ids_.begin() + positions[i] + 1);
    const int64_t s = gpu_->new_sequence();
    gpu_run(*gpu_, s, prefix);
    const DraftBlock b = gpu_draft(*gpu_, s, anchors[i], n);
    gpu_->free_sequence(s);
    expect_rows(b.logits, std::vector<float>(&logits[i * size_t(n * V)], &logits[(i + 1) * size_t(n * V)]), V,
                bound(), "GPU chained draft logits vs float64");
    EXPECT_EQ(b.tokens, std::vector<int32_t>(&tokens[i * size_t(n)], &tokens[(i + 1) * size_t(n)]));
    auto st = cpu_->new_state();
    cpu_run(*cpu_, *st, prefix);
    const DraftBlock c = cpu_->draft(*st, anchors[i], n);
    expect_rows(b.logits, c.logits, V, bound(), "GPU chained draft logits vs CPU");
    EXPECT_EQ(b.tokens, c.tokens);
  }
}

INSTANTIATE_TEST_SUITE_P(Numerics, GpuMtpGolden, ::testing::Values(Numerics::kReference, Numerics::kOfficial),
                         [](const ::testing::TestParamInfo<Numerics>& info) {
                           return std::string(numerics_name(info.param));
                         });

// Chained drafts of two drafters after prefixes of `tokens`: min cosine and worst
// max|diff| / max|ref| per draft logits row (b is the reference), printed.
struct DraftCompare {
  double min_cos = 1.0;
  float worst_rel = 0;
  int64_t rows = 0, same_tokens = 0;
};

// A fresh sequence fed `prefix`, then n chained drafts from `next`.
using DraftFn = std::function<DraftBlock(const std::vector<int32_t>& prefix, int32_t next, int64_t n)>;

DraftFn gpu_drafter(GpuModel& gpu) {
  return [&gpu](const std::vector<int32_t>& prefix, int32_t next, int64_t n) {
    const int64_t s = gpu.new_sequence();
    gpu_run(gpu, s, prefix);
    DraftBlock d = gpu_draft(gpu, s, next, n);
    gpu.free_sequence(s);
    return d;
  };
}

// The CPU drafter, under the FP8 activation emulation when `e` is set.
DraftFn cpu_drafter(const Model& cpu, testing::Fp8ActivationEmulation* e = nullptr) {
  return [&cpu, e](const std::vector<int32_t>& prefix, int32_t next, int64_t n) {
    const testing::EmulationScope on(e);
    auto st = cpu.new_state();
    cpu_run(cpu, *st, prefix);
    return cpu.draft(*st, next, n);
  };
}

DraftCompare compare_drafts(int64_t V, const DraftFn& got, const DraftFn& want, const std::vector<int32_t>& tokens,
                            const std::vector<int64_t>& cuts, int64_t n, const std::string& what) {
  DraftCompare r;
  for (int64_t cut : cuts) {
    const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + cut);
    const int32_t next = tokens[size_t(cut)];
    const DraftBlock g = got(prefix, next, n);
    const DraftBlock c = want(prefix, next, n);
    for (int64_t j = 0; j < n; ++j) {
      const float* a = g.logits.data() + j * V;
      const float* b = c.logits.data() + j * V;
      r.min_cos = std::min(r.min_cos, cosine(a, b, V));
      float diff = 0;
      for (int64_t t = 0; t < V; ++t) diff = std::max(diff, std::abs(a[t] - b[t]));
      r.worst_rel = std::max(r.worst_rel, diff / max_abs_of(b, V));
      ++r.rows;
      r.same_tokens += g.tokens[size_t(j)] == c.tokens[size_t(j)];
      if (g.tokens[size_t(j)] != c.tokens[size_t(j)]) break;  // the chains continue differently
    }
  }
  std::printf("  %-44s %2lld draft rows: min cosine %.6f (1 - cos %.2e), worst max|diff| / max|ref| %.3g, "
              "%lld tokens equal\n",
              what.c_str(), (long long)r.rows, r.min_cos, 1.0 - r.min_cos, r.worst_rel, (long long)r.same_tokens);
  return r;
}

// The FP8-weights comparisons' models, prompt and draft cuts.
std::vector<std::string> fp8_dirs() {
  std::vector<std::string> dirs = {std::string(kGoldenMtp) + "/model"};
  if (std::filesystem::exists(std::string(kTrainedV4) + "/config.json")) dirs.push_back(kTrainedV4);
  return dirs;
}
const std::vector<int64_t> kFp8Cuts = {1, 7, 40, 129, 180};
constexpr int64_t kFp8Drafts = 3;

// No GPU needed: the emulation quantises the input of an FP8 projection's linear_ref per row
// and 1x128 block (as act_quant_ref's codes times scales) and leaves fp32 projections alone.
TEST(GpuMtp, Fp8ActivationEmulationQuantisesTheFp8ProjectionsOnly) {
  HostModel h = load_host(std::string(kGoldenMtp) + "/model");
  testing::Fp8ActivationEmulation e(h.cfg, h.weights);
  const int64_t M = 3, K = h.cfg.hidden_size, Nh = h.cfg.vocab_size, Ng = h.cfg.n_routed_experts;
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(M * K));
  for (auto& v : x) v = nd(gen) * (1.0f + 40.0f * float(&v - x.data() == 5));  // one outlier
  // The GPU's quantised input: act_quant_ref codes times scales.
  std::vector<uint8_t> q(x.size());
  std::vector<float> sc(size_t(M * ((K + 127) / 128))), xq(x.size());
  act_quant_ref(x.data(), M, K, 128, q.data(), sc.data(), ScaleLayout::kRowMajor);
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t i = 0; i < K; ++i) {
      xq[size_t(r * K + i)] = e4m3_to_f32(q[size_t(r * K + i)]) * sc[size_t(r * ((K + 127) / 128) + i / 128)];
    }
  }
  std::vector<float> want(size_t(M * Nh)), plain(size_t(M * Nh)), got(size_t(M * Nh));
  std::vector<float> gate(size_t(M * Ng)), gate_plain(size_t(M * Ng));
  const float* head = h.weights.head.f32();
  const float* gate_w = h.weights.layers[0].moe.gate.f32();
  linear_ref(xq.data(), M, K, head, Nh, want.data());
  linear_ref(x.data(), M, K, head, Nh, plain.data());
  linear_ref(x.data(), M, K, gate_w, Ng, gate_plain.data());
  {
    const testing::EmulationScope on(&e);
    linear_ref(x.data(), M, K, head, Nh, got.data());
    EXPECT_EQ(got, want) << "an FP8 projection's input is quantised";
    linear_ref(x.data(), M, K, gate_w, Ng, gate.data());
    EXPECT_EQ(gate, gate_plain) << "the router gate stays fp32";
  }
  EXPECT_NE(plain, want) << "the quantisation changes the product";
  linear_ref(x.data(), M, K, head, Nh, got.data());
  EXPECT_EQ(got, plain) << "inactive: linear_ref as is";
  EXPECT_EQ(e.quantised_calls(), 1);
  EXPECT_EQ(e.plain_calls(), 1);
}

// No GPU needed: the size of what the GPU comparison below measures, on the CPU alone, with
// the same FP8-rounded weights. The emulated CPU drafter vs the plain one is the whole FP8
// activation noise (what the GPU vs the plain CPU shows); the emulated drafter in GEMM order
// kBlas vs kFixedOrder (batch_invariant) is the part a different fp32 summation order leaves
// (roundings it tips), the kind of difference the GPU vs the emulation may show.
TEST(GpuMtp, Fp8ActivationNoiseOfTheCpuDrafter) {
  for (const std::string& dir : fp8_dirs()) {
    SCOPED_TRACE(dir);
    HostModel h = load_host(dir);
    ASSERT_TRUE(h.weights.has_mtp);
    GpuModel::fp8_round_trip(h.cfg, h.weights);
    testing::Fp8ActivationEmulation e(h.cfg, h.weights);
    const ModelWeights& w = h.weights;
    const Model cpu(h.cfg, w, ModelOptions{Numerics::kOfficial, false});
    const Model cpu_fixed(h.cfg, w, ModelOptions{Numerics::kOfficial, true});
    const auto tokens = random_tokens(200, h.cfg.vocab_size, 17);
    const int64_t V = h.cfg.vocab_size;
    std::printf("%s, fp8 weights, official, on the CPU:\n", dir.c_str());
    const DraftCompare noise = compare_drafts(V, cpu_drafter(cpu, &e), cpu_drafter(cpu), tokens, kFp8Cuts,
                                              kFp8Drafts, "emulated FP8 activations vs plain");
    const DraftCompare order = compare_drafts(V, cpu_drafter(cpu, &e), cpu_drafter(cpu_fixed, &e), tokens,
                                              kFp8Cuts, kFp8Drafts, "emulated, kBlas vs kFixedOrder");
    double worst_tipped = 1.0 - order.min_cos;
    for (uint32_t seed : {1u, 2u, 3u}) {
      const int ulps = seed == 3 ? 16 : 1;
      testing::Fp8ActivationEmulation jittered(h.cfg, w);
      jittered.set_jitter(seed, ulps);
      const DraftCompare j =
          compare_drafts(V, cpu_drafter(cpu, &jittered), cpu_drafter(cpu, &e), tokens, kFp8Cuts, kFp8Drafts,
                         "emulated, inputs +-" + std::to_string(ulps) + " ulp (seed " + std::to_string(seed) + ")");
      worst_tipped = std::max(worst_tipped, 1.0 - j.min_cos);
    }
    std::printf("  worst 1 - cos from tipped roundings %.2e; whole activation noise %.2e\n", worst_tipped,
                1.0 - noise.min_cos);
    std::printf("  %lld of %lld FP8 projections used\n", (long long)e.projections_used(),
                (long long)e.fp8_projections());
    if (dir == fp8_dirs()[0]) {
      EXPECT_EQ(e.projections_used(), e.fp8_projections());
    }
    EXPECT_GT(1.0 - noise.min_cos, 0.0) << "the emulation changes the drafts";
    // Measured here (golden_mtp / trained-v4): whole noise 6.2e-2 / 5.9e-3 (the GPU vs the
    // plain CPU showed 4.5e-2 / 6.4e-3 on the H200: the same size, so no sign of a bug);
    // tipped roundings 0 (bitwise equal drafts at +-1 and +-16 ulps, and kBlas vs
    // kFixedOrder) / 1.1e-3 at +-1 ulp or kFixedOrder but 2.3e-2 at +-16 ulps (trained-v4's
    // discrete choices, router and indexer top-k and the chain's argmax, flip: a min cosine
    // there is a flip's size, not a rounding's). Asserted where it holds tightly: golden_mtp.
    if (dir == fp8_dirs()[0]) {
      EXPECT_LE(worst_tipped, 1e-2 * (1.0 - noise.min_cos))
          << "golden_mtp: last-bit differences should leave the emulated drafts (nearly) unchanged";
    }
  }
}

TEST(GpuMtp, Fp8WeightsMatchTheCpuWithTheSameWeights) {
  for (const std::string& dir : fp8_dirs()) {
    SCOPED_TRACE(dir);
    HostModel h = load_host(dir);
    ASSERT_TRUE(h.weights.has_mtp);
    GpuModel::fp8_round_trip(h.cfg, h.weights);
    GpuModelOptions o = mtp_options(Numerics::kOfficial, true, 3);
    o.weight_format = WeightFormat::kFp8;
    GpuModel gpu(h.cfg, h.weights, o);
    testing::Fp8ActivationEmulation e(h.cfg, h.weights);
    const int64_t V = h.cfg.vocab_size;
    const Model cpu(h.cfg, std::move(h.weights), ModelOptions{Numerics::kOfficial, false});
    const auto tokens = random_tokens(200, V, 17);
    std::printf("%s, fp8 weights, official:\n", dir.c_str());
    // Against the plain CPU: the whole FP8 activation noise (printed; its size on the CPU
    // alone is Fp8ActivationNoiseOfTheCpuDrafter's).
    compare_drafts(V, gpu_drafter(gpu), cpu_drafter(cpu), tokens, kFp8Cuts, kFp8Drafts, "GPU vs plain CPU");
    // Against the CPU under the emulation of the GPU's activation quantisation: only
    // summation order and the roundings it tips remain.
    const DraftCompare r = compare_drafts(V, gpu_drafter(gpu), cpu_drafter(cpu, &e), tokens, kFp8Cuts, kFp8Drafts,
                                          "GPU vs CPU with emulated FP8 activations");
    if (dir == fp8_dirs()[0]) {
      // golden_mtp: the whole chain is printed, not bounded. On the H200 (d4f305b) it was
      // 1 - cos 5.5e-2 (9 of 12 tokens) against the emulation while every FP8 stage fed the
      // GPU's own input equals the emulated CPU op to <= 1e-4 (Fp8StagesAgainstTheEmulation,
      // which asserts it) and no routed expert differs: the chain starts from backbone streams
      // that already differ by 5e-4 (tensor-core FP8 accumulation order; backbone logits
      // 3.5e-4) and MTP window keys by 1.9e-3, and this random-weight block amplifies that
      // ~100x through its FP8 activation roundings. So the stage test is the exact check.
      EXPECT_EQ(e.projections_used(), e.fp8_projections());
    } else {
      // trained-v4: a last-bit difference can flip a discrete choice (see the CPU test: 2.3e-2
      // at +-16 ulps), so only the activation noise bound of test_gpu_model_cuda holds: 7
      // roundings per layer (the backbone's and the MTP block's) plus e_proj / h_proj and the
      // head, each 1 - cos <= kE4m3Nmse (7.2e-4).
      EXPECT_LE(1.0 - r.min_cos, (7.0 * double(h.cfg.num_layers + 1) + 3.0) * 7.2e-4);
    }
  }
}

// Localisation of the FP8 drafter's difference from its emulation (issue 15; the H200 showed
// golden_mtp GPU vs emulated CPU 1 - cos 5.5e-2 where the emulation predicts <= 1e-3):
// golden_mtp, FP8 weights, official numerics, with the FP8 KV cache (the default, as in
// Fp8WeightsMatchTheCpuWithTheSameWeights) and with the bf16 one (exactly the official
// values), at the prefixes kFp8Cuts. Printed as worst 1 - cos and max|diff| / max|ref| over
// the cuts:
//  (a) the backbone: the prefix's last-row logits, GPU vs the CPU under the emulation (and vs
//      the plain CPU), before any MTP;
//  (b) the MTP's inputs: X^L[p] the draft starts from (the GPU's traced h_in vs the emulated
//      CPU's mtp_streams) and the MTP keys of the window the draft reads (mtp_key vs the
//      CPU's mtp_ring);
//  (c) each stage of the first draft step, alone: the CPU op under the emulation fed the GPU's
//      own recorded input (gpu_mtp_trace.h) vs the GPU's recorded output, so a difference
//      cannot come from an earlier stage. With identical inputs, the FP8 stages' activation
//      codes are identical and only the GEMM's accumulation remains (fp32 order; on Hopper's
//      FP8 tensor cores a narrower accumulator, ~2^-14 relative): asserted <= 1e-3 of
//      max|ref| per stage, which a structural difference (a block, scale or operand that is
//      not the emulation's) exceeds by far (router choices: the same experts);
//  (d) the drafts over the cuts, GPU vs emulated CPU, with the bf16 cache (printed).
TEST(GpuMtp, Fp8StagesAgainstTheEmulation) {
  const std::string dir = std::string(kGoldenMtp) + "/model";
  for (KvCacheDtype kv_dtype : {KvCacheDtype::kFp8, KvCacheDtype::kBf16}) {
    SCOPED_TRACE(kv_cache_dtype_name(kv_dtype));
    HostModel h = load_host(dir), ops = load_host(dir);  // the Model's copy and the stage ops'
    GpuModel::fp8_round_trip(h.cfg, h.weights);
    GpuModel::fp8_round_trip(ops.cfg, ops.weights);
    GpuModelOptions o = mtp_options(Numerics::kOfficial, true, 3);
    o.weight_format = WeightFormat::kFp8;
    o.kv_cache_dtype = kv_dtype;
    GpuModel gpu(h.cfg, h.weights, o);
    const ModelConfig& cfg = gpu.config();  // completed (traits, plan)
    testing::Fp8ActivationEmulation e(h.cfg, h.weights), es(ops.cfg, ops.weights);
    const ModelWeights& w = ops.weights;
    const Model cpu(h.cfg, std::move(h.weights), ModelOptions{Numerics::kOfficial, false});
    const int64_t V = cfg.vocab_size, D = cfg.hidden_size, hc = cfg.hc_mult, H = cfg.num_heads;
    const int64_t d = cfg.head_dim, Rq = cfg.q_lora_rank, E = cfg.n_routed_experts, W = cfg.sliding_window;
    const int64_t k = cfg.n_experts_per_tok, Is = cfg.moe_intermediate_size * cfg.n_shared_experts;
    const float eps = static_cast<float>(cfg.rms_norm_eps);
    const GemmMode mode = GemmMode::kBlas;
    const auto tokens = random_tokens(200, V, 17);
    struct Worst {
      double one_minus_cos = 0;
      double rel = 0;
      int64_t n = 0;
    };
    std::vector<std::pair<std::string, Worst>> table;
    auto note = [&](const std::string& name, const float* got, const float* want, int64_t n) {
      auto it = std::find_if(table.begin(), table.end(), [&](const auto& p) { return p.first == name; });
      if (it == table.end()) it = table.insert(table.end(), {name, Worst{}});
      float diff = 0;
      for (int64_t i = 0; i < n; ++i) diff = std::max(diff, std::abs(got[i] - want[i]));
      it->second.one_minus_cos = std::max(it->second.one_minus_cos, 1.0 - cosine(got, want, n));
      it->second.rel = std::max(it->second.rel, double(diff) / std::max(1e-30f, max_abs_of(want, n)));
      ++it->second.n;
    };
    int64_t route_differs = 0;
    for (int64_t cut : kFp8Cuts) {
      const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + cut);
      const int32_t next = tokens[size_t(cut)];
      const int64_t p = cut - 1;
      // (a) the backbone's last-row logits.
      const int64_t s = gpu.new_sequence();
      const Tensor gl = gpu_run(gpu, s, prefix);
      auto st = cpu.new_state();
      Tensor cl;
      {
        const testing::EmulationScope on(&e);
        const SequenceChunk c{st.get(), prefix, false};
        cl = cpu.forward(std::span<const SequenceChunk>(&c, 1));
      }
      auto plain_st = cpu.new_state();
      const SequenceChunk pc{plain_st.get(), prefix, false};
      const Tensor pl = cpu.forward(std::span<const SequenceChunk>(&pc, 1));
      note("(a) backbone logits, GPU vs emulated CPU", gl.f32(), cl.f32(), V);
      note("(a) backbone logits, GPU vs plain CPU", gl.f32(), pl.f32(), V);
      note("(a) backbone logits, emulated vs plain CPU", cl.f32(), pl.f32(), V);
      // (b) the MTP keys the draft reads (positions max(0, p - W + 1) .. p - 1).
      for (int64_t t = std::max<int64_t>(0, p - W + 1); t < p; ++t) {
        const std::vector<float> gk = gpu.mtp_key(s, t);
        note("(b) MTP window keys, GPU vs emulated CPU", gk.data(), &st->mtp_ring[size_t((t % st->n_mtp_slots) * d)],
             d);
      }
      // (c) the first draft step, traced.
      GpuMtpTrace trace;
      set_gpu_mtp_trace(&trace);
      const DraftBlock gd = gpu_draft(gpu, s, next, 1);
      set_gpu_mtp_trace(nullptr);
      gpu.free_sequence(s);
      DraftBlock cd;
      {
        const testing::EmulationScope on(&e);
        cd = cpu.draft(*st, next, 1);
      }
      auto tv = [&](const char* name, int64_t n) -> const std::vector<float>& {
        const auto it = trace.values.find(name);
        EXPECT_TRUE(it != trace.values.end()) << "stage " << name << " not traced";
        static const std::vector<float> none;
        if (it == trace.values.end()) return none;
        EXPECT_EQ(int64_t(it->second.size()), n) << name;
        return it->second;
      };
      const auto& h_in = tv("h_in", hc * D);
      if (h_in.size() != size_t(hc * D)) return;
      note("(b) X^L[p] (draft input streams), GPU vs emulated CPU", h_in.data(),
           &st->mtp_streams[size_t((p % st->n_mtp_stream_slots) * hc * D)], hc * D);
      std::vector<float> y(size_t(std::max({V, H * d, hc * D, E}))), y2(y.size());
      const testing::EmulationScope on(&es);
      // The MTP input: enorm / hnorm (fp32), e_proj / h_proj (FP8).
      std::vector<float> emb(w.embed.f32() + int64_t(next) * D, w.embed.f32() + int64_t(next + 1) * D);
      rms_norm_ref(emb.data(), w.mtp.enorm.f32(), 1, D, D, eps, y.data());
      note("(c) enorm(embed(next))", tv("e", D).data(), y.data(), D);
      linear_ref(tv("e", D).data(), 1, D, w.mtp.e_proj.f32(), D, y.data(), mode);
      note("(c) e_proj [FP8]", tv("ep", D).data(), y.data(), D);
      rms_norm_ref(h_in.data(), w.mtp.hnorm.f32(), hc, D, D, eps, y.data());
      note("(c) hnorm(X^L[p])", tv("hn", hc * D).data(), y.data(), hc * D);
      linear_ref(tv("hn", hc * D).data(), hc, D, w.mtp.h_proj.f32(), D, y.data(), mode);
      note("(c) h_proj [FP8]", tv("hp", hc * D).data(), y.data(), hc * D);
      for (int64_t j = 0; j < hc; ++j) {
        for (int64_t i = 0; i < D; ++i) y[size_t(j * D + i)] = tv("ep", D)[size_t(i)] + tv("hp", hc * D)[size_t(j * D + i)];
      }
      note("(c) e_proj + h_proj", tv("z_in", hc * D).data(), y.data(), hc * D);
      // Attention projections (FP8) and norms, the output projection (FP8).
      const AttentionWeights& a = w.mtp.block.attn;
      linear_ref(tv("x_attn", D).data(), 1, D, a.wq_a.f32(), Rq, y.data(), mode);
      note("(c) wq_a [FP8]", tv("q_r", Rq).data(), y.data(), Rq);
      rms_norm_ref(tv("q_r", Rq).data(), a.q_norm.f32(), 1, Rq, Rq, eps, y.data());
      note("(c) q_norm", tv("q_rn", Rq).data(), y.data(), Rq);
      linear_ref(tv("q_rn", Rq).data(), 1, Rq, a.wq_b.f32(), H * d, y.data(), mode);
      if (cfg.traits.per_head_q_norm) rms_norm_ref(y.data(), nullptr, H, d, d, eps, y.data());
      note("(c) wq_b [FP8] (+ per-head norm)", tv("q", H * d).data(), y.data(), H * d);
      linear_ref(tv("x_attn", D).data(), 1, D, a.wkv.f32(), d, y.data(), mode);
      note("(c) wkv [FP8]", tv("kv_raw", d).data(), y.data(), d);
      rms_norm_ref(tv("kv_raw", d).data(), a.kv_norm.f32(), 1, d, d, eps, y.data());
      note("(c) kv_norm", tv("kv", d).data(), y.data(), d);
      attention_output(cfg, a, tv("o", H * d).data(), 1, mode, y.data());
      note("(c) wo_a / wo_b [FP8]", tv("y_attn", D).data(), y.data(), D);
      // The MoE: router (fp32), shared expert, routed experts (FP8).
      const MoeWeights& mo = w.mtp.block.moe;
      const auto& x_ffn = tv("x_ffn", D);
      linear_ref(x_ffn.data(), 1, D, mo.gate.f32(), E, y.data(), mode);
      note("(c) router gate [fp32]", tv("router", E).data(), y.data(), E);
      const MoeShape ms = moe_shape(cfg, /*hash=*/false);
      std::vector<int32_t> ids(static_cast<size_t>(k));
      std::vector<float> rw(static_cast<size_t>(k));
      RouterParams rp{ms.n_experts, k, ms.routed_scale, ms.inv_temp, ms.sum_eps,
                      ms.normalize_always || (ms.norm_topk_prob && k > 1)};
      route_ref(x_ffn.data(), 1, D, mo.gate.f32(), mo.bias.f32(), nullptr, &next, rp, ids.data(), rw.data(), mode);
      for (int64_t j = 0; j < k; ++j) route_differs += int32_t(tv("route_ids", k)[size_t(j)]) != ids[size_t(j)];
      note("(c) routing weights", tv("route_w", k).data(), rw.data(), k);
      std::fill(y.begin(), y.end(), 0.0f);
      expert_ffn_accumulate_ref(x_ffn.data(), D, {0}, {1.0f}, {mo.shared.w1.f32(), mo.shared.w3.f32(), mo.shared.w2.f32()},
                                Is, ms.limit, y.data(), mode);
      note("(c) shared expert [FP8]", tv("y_shared", D).data(), y.data(), D);
      moe_forward(mo, ms, x_ffn.data(), 1, &next, y.data(), mode);
      note("(c) MoE: routed + shared [FP8]", tv("y_moe", D).data(), y.data(), D);
      // The head.
      rms_norm_ref(tv("h", D).data(), w.mtp.norm.f32(), 1, D, D, eps, y.data());
      note("(c) norm(hc_head)", tv("h_norm", D).data(), y.data(), D);
      linear_ref(tv("h_norm", D).data(), 1, D, w.head.f32(), V, y.data(), mode);
      note("(c) head [FP8]", tv("logits", V).data(), y.data(), V);
      // The ends of the step, whole (GPU vs the emulated CPU's own chain).
      note("(c) whole step: hc_head output, GPU vs emulated CPU", tv("h", D).data(), cd.hidden.data(), D);
      note("(c) whole step: draft logits, GPU vs emulated CPU", gd.logits.data(), cd.logits.data(), V);
    }
    std::printf("golden_mtp, fp8 weights, official, %s KV cache, cuts %zu:\n", kv_cache_dtype_name(kv_dtype),
                kFp8Cuts.size());
    for (const auto& [name, r] : table) {
      std::printf("  %-58s 1 - cos %.2e, max|diff| / max|ref| %.3g (%lld)\n", name.c_str(), r.one_minus_cos, r.rel,
                  (long long)r.n);
      if (name.rfind("(c)", 0) == 0 && name.find("whole") == std::string::npos) {
        EXPECT_LE(r.rel, 1e-3) << name << ": the GPU stage differs from the CPU op fed the same input";
      }
    }
    std::printf("  (c) routed experts chosen differently: %lld of %lld\n", (long long)route_differs,
                (long long)(k * int64_t(kFp8Cuts.size())));
    EXPECT_EQ(route_differs, 0);
    // (d) the drafts over the cuts.
    compare_drafts(V, gpu_drafter(gpu), cpu_drafter(cpu, &e), tokens, kFp8Cuts, kFp8Drafts,
                   std::string("GPU vs emulated CPU, ") + kv_cache_dtype_name(kv_dtype) + " KV");
  }
}

TEST(GpuMtp, TrainedV4MatchesTheCpu) {
  if (!std::filesystem::exists(std::string(kTrainedV4) + "/config.json")) GTEST_SKIP() << "no " << kTrainedV4;
  HostModel h = load_host(kTrainedV4);
  ASSERT_TRUE(h.weights.has_mtp) << "models/trained-v4 should ship its MTP drafter";
  GpuModel gpu(h.cfg, h.weights, mtp_options(Numerics::kReference, false, 0));
  const Model cpu(h.cfg, std::move(h.weights), ModelOptions{Numerics::kReference, false});
  const auto tokens = random_tokens(300, h.cfg.vocab_size, 23);
  std::printf("%s, fp32 weights, reference:\n", kTrainedV4);
  const DraftCompare r = compare_drafts(h.cfg.vocab_size, gpu_drafter(gpu), cpu_drafter(cpu), tokens,
                                        {1, 2, 50, 127, 128, 129, 250}, 3, "GPU vs CPU");
  EXPECT_LE(r.worst_rel, 1e-4f);
  EXPECT_EQ(r.same_tokens, r.rows);
}

// --- rollback, §E.17, graphs, batching on a random small V4 with MTP --------------------------

// The engine tests' small V4 (window 8, ratios 0 / 4 / 128 / 4, a hash layer) with MTP-1.
ModelConfig small_mtp_config() {
  ModelConfig c = testing::small_config();
  c.num_nextn_predict_layers = 1;
  c.mtp_compress_ratios = {0};
  return c;
}

ModelWeights small_mtp_weights(const ModelConfig& cfg) {
  auto src = random_weights(cfg, 31, /*with_mtp=*/true);
  return load_model_weights(cfg, *src);
}

// Keys of the positions a next draft of a sequence of n tokens reads: max(0, n-1-W) .. n-2.
std::vector<float> window_keys(const GpuModel& g, int64_t seq, int64_t n) {
  std::vector<float> all;
  for (int64_t t = std::max<int64_t>(0, n - 1 - g.config().sliding_window); t <= n - 2; ++t) {
    const auto k = g.mtp_key(seq, t);
    all.insert(all.end(), k.begin(), k.end());
  }
  return all;
}

void expect_same_draft(const DraftBlock& a, const DraftBlock& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.logits.size(), b.logits.size()) << what;
  size_t differ = 0;
  for (size_t i = 0; i < a.logits.size(); ++i) differ += a.logits[i] != b.logits[i];
  EXPECT_EQ(differ, 0u) << what << ": draft logits differ";
}

TEST(GpuMtp, RejectedDraftsLeaveTheStateOfAPlainRun) {
  const ModelConfig cfg = small_mtp_config();
  const ModelWeights w = small_mtp_weights(cfg);
  for (Numerics numerics : {Numerics::kReference, Numerics::kOfficial}) {
    SCOPED_TRACE(numerics_name(numerics));
    constexpr int64_t kDepth = 3;
    GpuModel g(cfg, w, mtp_options(numerics, true, kDepth, /*batch_invariant=*/true));
    std::mt19937 gen(5);
    for (int64_t prompt : {1, 3, 9, 30, 126}) {
      std::vector<int32_t> committed = random_tokens(prompt, cfg.vocab_size, uint32_t(prompt));
      const int64_t a = g.new_sequence();
      gpu_run(g, a, committed);
      int32_t next = int32_t(gen() % uint32_t(cfg.vocab_size));
      int64_t rolled_back = 0;
      for (int step = 0; step < 12; ++step) {
        const int64_t n = int64_t(committed.size());
        const auto keys_before = window_keys(g, a, n);
        const DraftBlock d = gpu_draft(g, a, next, kDepth);
        ASSERT_EQ(window_keys(g, a, n), keys_before) << "a draft changed a committed key";
        expect_same_draft(gpu_draft(g, a, next, kDepth), d, "the same draft twice");
        // Verify [next, d0 .. d2]; keep next and a random number of the drafts (some wrong:
        // the committed continuation after them is random).
        std::vector<int32_t> chunk = {next};
        chunk.insert(chunk.end(), d.tokens.begin(), d.tokens.end());
        gpu_run(g, a, chunk, true);
        const int64_t keep = 1 + int64_t(gen() % uint32_t(chunk.size()));
        committed.insert(committed.end(), chunk.begin(), chunk.begin() + keep);
        g.truncate(a, int64_t(committed.size()));
        rolled_back += int64_t(chunk.size()) - keep;
        next = int32_t(gen() % uint32_t(cfg.vocab_size));
      }
      const int64_t b = g.new_sequence();
      gpu_run(g, b, committed);
      const int64_t n = int64_t(committed.size());
      const auto got = window_keys(g, a, n), want = window_keys(g, b, n);
      size_t differ = 0;
      for (size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i];
      std::printf("%s, prompt %lld: %lld positions rolled back, %zu of %zu key values differ\n",
                  numerics_name(numerics), (long long)prompt, (long long)rolled_back, differ, want.size());
      EXPECT_EQ(differ, 0u) << "prompt " << prompt;
      EXPECT_GT(rolled_back, 0);
      expect_same_draft(gpu_draft(g, a, next, kDepth), gpu_draft(g, b, next, kDepth), "draft after the loop");
      g.free_sequence(a);
      g.free_sequence(b);
    }
  }
}

TEST(GpuMtp, DraftingNeverChangesBackboneLogits) {
  const ModelConfig cfg = small_mtp_config();
  const ModelWeights w = small_mtp_weights(cfg);
  for (WeightFormat format : {WeightFormat::kF32, WeightFormat::kFp8}) {
    GpuModelOptions on = mtp_options(Numerics::kOfficial, true, 2);
    on.weight_format = format;
    GpuModelOptions off = on;
    off.mtp = false;
    GpuModel with(cfg, w, on), without(cfg, w, off);
    EXPECT_FALSE(without.has_mtp());
    const auto prompt = random_tokens(40, cfg.vocab_size, 3);
    const int64_t s1 = with.new_sequence(), s2 = without.new_sequence();
    Tensor l1 = gpu_run(with, s1, prompt, true), l2 = gpu_run(without, s2, prompt, true);
    size_t differ = 0;
    for (int64_t i = 0; i < l1.numel(); ++i) differ += l1.f32()[i] != l2.f32()[i];
    std::vector<int32_t> toks = random_tokens(20, cfg.vocab_size, 4);
    for (int32_t t : toks) {
      gpu_draft(with, s1, t, 3);  // drafts interleaved on one model only
      l1 = gpu_run(with, s1, {t});
      l2 = gpu_run(without, s2, {t});
      for (int64_t i = 0; i < l1.numel(); ++i) differ += l1.f32()[i] != l2.f32()[i];
    }
    std::printf("%s: %zu backbone logits differ with the drafter on\n", format == WeightFormat::kFp8 ? "fp8" : "fp32",
                differ);
    EXPECT_EQ(differ, 0u);
  }
}

TEST(GpuMtp, GraphStepsAndBatchedDraftsAreBitwiseTheEagerOnes) {
  const ModelConfig cfg = small_mtp_config();
  const ModelWeights w = small_mtp_weights(cfg);
  GpuModelOptions eager_o = mtp_options(Numerics::kOfficial, true, 3, /*batch_invariant=*/true);
  GpuModelOptions graph_o = eager_o;
  graph_o.cuda_graphs = true;
  GpuModel eager(cfg, w, eager_o), graphs(cfg, w, graph_o);
  constexpr int64_t kSeqs = 3;
  std::vector<int64_t> se, sg;
  std::vector<int32_t> last;
  std::vector<int64_t> len;
  for (int64_t i = 0; i < kSeqs; ++i) {
    const auto p = random_tokens(5 + 11 * i, cfg.vocab_size, 50 + uint32_t(i));
    se.push_back(eager.new_sequence());
    sg.push_back(graphs.new_sequence());
    gpu_run(eager, se.back(), p);
    gpu_run(graphs, sg.back(), p);
    len.push_back(int64_t(p.size()));
  }
  std::mt19937 gen(8);
  for (int step = 0; step < 10; ++step) {  // decode steps of all sequences: graph-replayed
    std::vector<std::vector<int32_t>> tok(kSeqs);
    std::vector<GpuChunk> ce, cg;
    for (int64_t i = 0; i < kSeqs; ++i) {
      tok[size_t(i)] = {int32_t(gen() % uint32_t(cfg.vocab_size))};
      ce.push_back({se[size_t(i)], tok[size_t(i)], false});
      cg.push_back({sg[size_t(i)], tok[size_t(i)], false});
      ++len[size_t(i)];
    }
    eager.forward(ce);
    graphs.forward(cg);
  }
  EXPECT_GT(graphs.graph_stats().replays, 0);
  std::vector<int32_t> next;
  for (int64_t i = 0; i < kSeqs; ++i) {
    EXPECT_EQ(window_keys(graphs, sg[size_t(i)], len[size_t(i)]), window_keys(eager, se[size_t(i)], len[size_t(i)]))
        << "sequence " << i;
    next.push_back(int32_t(gen() % uint32_t(cfg.vocab_size)));
  }
  // The graph model drafts 3 sequences as a bucket of 4 (one padding sequence in the scratch
  // slot), each chained step from its own graph: the first call runs eagerly and captures, the
  // second replays; both bitwise the one-by-one eager drafts (logits and hidden states too).
  // Draft captures count in captured / capture_ms with the forwards'.
  const int64_t forward_captures = graphs.graph_stats().captured;
  for (int call = 0; call < 2; ++call) {
    const std::vector<DraftBlock> batched = graphs.draft(sg, next, 3);
    for (int64_t i = 0; i < kSeqs; ++i) {
      const DraftBlock one = gpu_draft(eager, se[size_t(i)], next[size_t(i)], 3);
      const std::string what = "batched graph-model draft (call " + std::to_string(call) +
                               ") vs one-by-one eager draft, sequence " + std::to_string(i);
      expect_same_draft(batched[size_t(i)], one, what);
      EXPECT_EQ(batched[size_t(i)].hidden, one.hidden) << what;
    }
  }
  EXPECT_EQ(graphs.graph_stats().draft_captured, 3);  // one graph per chained step
  EXPECT_EQ(graphs.graph_stats().draft_replays, 3);
  EXPECT_EQ(graphs.graph_stats().captured, forward_captures + 3);
  // CudaRunner's form (device probabilities, no logits): its own graphs, replayed bitwise.
  std::vector<std::vector<float>> pe, pg1, pg2;
  const std::vector<DraftBlock> le = eager.draft(se, next, 3, &pe);
  const std::vector<DraftBlock> lg1 = graphs.draft(sg, next, 3, &pg1), lg2 = graphs.draft(sg, next, 3, &pg2);
  for (int64_t i = 0; i < kSeqs; ++i) {
    EXPECT_EQ(lg1[size_t(i)].tokens, le[size_t(i)].tokens) << "sequence " << i;
    EXPECT_EQ(lg2[size_t(i)].tokens, le[size_t(i)].tokens) << "sequence " << i;
    EXPECT_EQ(pg1[size_t(i)], pe[size_t(i)]) << "sequence " << i;
    EXPECT_EQ(pg2[size_t(i)], pe[size_t(i)]) << "sequence " << i;
  }
  EXPECT_EQ(graphs.graph_stats().draft_captured, 6);
  EXPECT_EQ(graphs.graph_stats().draft_replays, 6);
  // A shorter chain replays the first step's graph; two sequences are bucket 2 (no padding),
  // a graph of its own.
  const std::vector<DraftBlock> short_chain = graphs.draft(sg, next, 1);
  EXPECT_EQ(graphs.graph_stats().draft_captured, 6);
  EXPECT_EQ(graphs.graph_stats().draft_replays, 7);
  const std::vector<int64_t> two(sg.begin(), sg.begin() + 2);
  const std::vector<int32_t> next2(next.begin(), next.begin() + 2);
  const std::vector<DraftBlock> pair = graphs.draft(two, next2, 1);
  EXPECT_EQ(graphs.graph_stats().draft_captured, 7);
  for (int64_t i = 0; i < kSeqs; ++i) {
    const DraftBlock one = gpu_draft(eager, se[size_t(i)], next[size_t(i)], 1);
    expect_same_draft(short_chain[size_t(i)], one, "one-step graph draft, sequence " + std::to_string(i));
    if (i < 2) expect_same_draft(pair[size_t(i)], one, "one-step graph draft of two, sequence " + std::to_string(i));
  }
  EXPECT_EQ(eager.graph_stats().draft_captured, 0);
  EXPECT_EQ(eager.graph_stats().captured, 0);
}

// The verification-graph loop (verify_graphs_test_util.h) with the MTP keys of the window;
// L = 2 .. 4 (max_rollback 3).
VerifyGraphCase mtp_verify_case() {
  VerifyGraphCase c;
  c.label = "MTP";
  c.lengths = {2, 3, 4};
  c.prompt_base = 3, c.prompt_step = 13, c.prompt_seed = 60, c.loop_seed = 12;
  c.keys = [](const GpuModel& g, int64_t seq, int64_t n) { return window_keys(g, seq, n); };
  return c;
}

GpuModelOptions verify_graph_options(bool graphs) {
  GpuModelOptions o = mtp_options(Numerics::kOfficial, true, 3, /*batch_invariant=*/true);
  o.cuda_graphs = graphs;
  return o;
}

TEST(GpuMtp, VerificationGraphsAreBitwiseTheEagerForwardsGolden) {  // golden_mtp: window layers only
  const std::string dir = std::string(kGoldenMtp) + "/model";
  auto eager = GpuModel::load(dir, verify_graph_options(false));
  auto graphs = GpuModel::load(dir, verify_graph_options(true));
  expect_verify_graphs_bitwise(*eager, *graphs, mtp_verify_case());
}

TEST(GpuMtp, VerificationGraphsAreBitwiseTheEagerForwardsCompressed) {  // ratios 4 / 128, indexer
  const ModelConfig cfg = small_mtp_config();
  const ModelWeights w = small_mtp_weights(cfg);
  GpuModel eager(cfg, w, verify_graph_options(false)), graphs(cfg, w, verify_graph_options(true));
  expect_verify_graphs_bitwise(eager, graphs, mtp_verify_case());
}

// The device-side probabilities (CudaRunner's path: no logits copied back) against the softmax
// of the host logits of the same draft, in double: within 1e-5 (fp32 sums over 300 exps).
TEST(GpuMtp, DeviceDraftProbabilitiesAreTheSoftmaxOfTheLogits) {
  const ModelConfig cfg = small_mtp_config();
  const ModelWeights w = small_mtp_weights(cfg);
  GpuModel g(cfg, w, mtp_options(Numerics::kOfficial, true, 3, /*batch_invariant=*/true));
  std::vector<int64_t> seqs;
  std::vector<int32_t> next;
  for (int64_t i = 0; i < 3; ++i) {
    seqs.push_back(g.new_sequence());
    gpu_run(g, seqs.back(), random_tokens(4 + 9 * i, cfg.vocab_size, 70 + uint32_t(i)));
    next.push_back(int32_t(7 * i + 3));
  }
  const std::vector<DraftBlock> full = g.draft(seqs, next, 3);
  std::vector<std::vector<float>> prob;
  const std::vector<DraftBlock> lean = g.draft(seqs, next, 3, &prob);
  const int64_t V = cfg.vocab_size;
  ASSERT_EQ(prob.size(), seqs.size());
  double worst = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    EXPECT_EQ(lean[i].tokens, full[i].tokens);
    EXPECT_TRUE(lean[i].logits.empty());
    ASSERT_EQ(prob[i].size(), 3u);
    for (int64_t j = 0; j < 3; ++j) {
      const float* row = full[i].logits.data() + j * V;
      const double mx = *std::max_element(row, row + V);
      double total = 0;
      for (int64_t t = 0; t < V; ++t) total += std::exp(double(row[t]) - mx);
      const double want = std::exp(double(row[full[i].tokens[size_t(j)]]) - mx) / total;
      worst = std::max(worst, std::abs(double(prob[i][size_t(j)]) - want));
      EXPECT_NEAR(prob[i][size_t(j)], want, 1e-5) << "sequence " << i << " draft " << j;
    }
  }
  std::printf("device draft probabilities: max |diff| %.3g against the host softmax\n", worst);
}

TEST(GpuMtp, BadRequestsFailCleanly) {
  const ModelConfig cfg = small_mtp_config();
  const ModelWeights w = small_mtp_weights(cfg);
  GpuModel g(cfg, w, mtp_options(Numerics::kReference, true, 2));
  const int64_t fresh = g.new_sequence();
  EXPECT_THROW(gpu_draft(g, fresh, 5, 1), Error);  // nothing committed yet
  const int64_t s = g.new_sequence();
  gpu_run(g, s, {3, 4, 5});
  EXPECT_THROW(gpu_draft(g, s, int32_t(cfg.vocab_size), 1), Error);
  EXPECT_THROW(gpu_draft(g, s, -1, 1), Error);
  EXPECT_THROW(gpu_draft(g, s, 5, 0), Error);
  EXPECT_THROW(gpu_draft(g, s, 5, 5), Error);  // more than max(max_rollback + 1, 4)
  EXPECT_THROW(gpu_draft(g, s + 2, 5, 1), Error);  // not live
  const int64_t twice[2] = {s, s};
  const int32_t nx[2] = {5, 6};
  EXPECT_THROW(g.draft(twice, nx, 1), Error);
  EXPECT_THROW(g.draft(std::span<const int64_t>(twice, 1), nx, 1), Error);  // 1 sequence, 2 tokens
  EXPECT_EQ(gpu_draft(g, s, 5, 4).tokens.size(), 4u);
  GpuModelOptions off = mtp_options(Numerics::kReference, true, 2);
  off.mtp = false;
  GpuModel plain(cfg, w, off);
  const int64_t t = plain.new_sequence();
  gpu_run(plain, t, {3, 4, 5});
  EXPECT_THROW(gpu_draft(plain, t, 5, 1), Error);
  // A checkpoint without mtp.0 cannot have the drafter.
  ModelConfig none = cfg;
  none.num_nextn_predict_layers = 0;
  none.mtp_compress_ratios.clear();
  auto src = random_weights(none, 31, false);
  const ModelWeights nw = load_model_weights(none, *src);
  EXPECT_THROW(GpuModel(none, nw, mtp_options(Numerics::kReference, true, 2)), Error);
}

}  // namespace
}  // namespace deepinfer
