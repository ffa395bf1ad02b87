// GpuModel beyond the fp32 golden path (test_golden_cuda.cc):
//  * kFp8 against the CPU Model with the same FP8-rounded weights (GpuModel::fp8_round_trip)
//    on each golden tiny config with random weights, every expert and every compressed entry
//    selected (no discrete choice for the FP8 activation noise to flip, as bench_gpu_forward's
//    check): min cosine of the logits per position >= 0.99, for a full prefill and for a
//    prefill + decode batched with a second sequence;
//  * batch_invariant (kF32 and kFp8, golden HF weights, hash + score routing, top-k
//    selection): a sequence's logits are bitwise equal run alone and inside batches of 5
//    mixed prefill / decode chunks;
//  * device dummy weights: finite logits, the same seed gives bitwise the same logits, another
//    seed different ones; set_sequence_length / forward_device / copy_logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "base/error.h"
#include "io/config_parser.h"
#include "model/model.h"
#include "model/weight_source.h"
#include "runtime/gpu_model.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
const char* kGoldenDir = "tests/data/golden";

std::vector<std::string> golden_models() {
  std::vector<std::string> names;
  if (!fs::exists(kGoldenDir)) return names;
  for (const auto& entry : fs::directory_iterator(kGoldenDir)) {
    if (fs::exists(entry.path() / "hf" / "config.json")) names.push_back(entry.path().filename());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> t(n);
  for (auto& v : t) v = static_cast<int32_t>(2 + gen() % static_cast<uint32_t>(vocab - 2));
  return t;
}

double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb + 1e-300);
}

class GpuModelCudaTest : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path hf_dir() const { return fs::path(kGoldenDir) / GetParam() / "hf"; }
};

TEST_P(GpuModelCudaTest, Fp8MatchesCpuWithFp8Weights) {
  ModelConfig cfg = load_model_config(hf_dir().string());
  cfg.hash_layers.assign(cfg.num_layers, false);     // random weights: score routing everywhere
  cfg.n_experts_per_tok = cfg.n_routed_experts;      // every expert selected
  cfg.index_topk = 1024;                             // every compressed entry selected
  auto src = random_weights(cfg, 7);
  ModelWeights w = load_model_weights(cfg, *src);
  GpuModel::fp8_round_trip(cfg, w);
  GpuModelOptions opt;
  opt.max_sequences = 3;
  opt.max_context = 512;
  opt.max_batch_tokens = 512;
  opt.weight_format = WeightFormat::kFp8;
  GpuModel gpu(cfg, w, opt);
  const Model cpu(cfg, std::move(w), ModelOptions{Numerics::kReference, false});
  const int64_t n = 300, V = cfg.vocab_size, p = 250;
  const auto tokens = random_tokens(n, V, 11);
  auto st = cpu.new_state();
  const SequenceChunk cc{st.get(), std::span<const int32_t>(tokens), true};
  const Tensor ref = cpu.forward(std::span<const SequenceChunk>(&cc, 1));

  const int64_t s0 = gpu.new_sequence();
  const GpuChunk full{s0, std::span<const int32_t>(tokens), true};
  const Tensor got = gpu.forward(std::span<const GpuChunk>(&full, 1));
  gpu.free_sequence(s0);
  ASSERT_EQ(got.numel(), n * V);
  double min_full = 1.0;
  for (int64_t i = 0; i < n; ++i) min_full = std::min(min_full, cosine(got.f32() + i * V, ref.f32() + i * V, V));

  // Prefill p tokens next to another sequence, then decode both in the same batches.
  std::vector<int32_t> other(tokens.begin() + 1, tokens.end());
  other.push_back(5);
  const int64_t s1 = gpu.new_sequence(), s2 = gpu.new_sequence();
  const GpuChunk pre[2] = {{s1, std::span<const int32_t>(tokens.data(), p), false},
                           {s2, std::span<const int32_t>(other.data(), p), false}};
  double min_dec = cosine(gpu.forward(pre).f32(), ref.f32() + (p - 1) * V, V);
  for (int64_t pos = p; pos < n; ++pos) {
    const GpuChunk step[2] = {{s2, std::span<const int32_t>(other.data() + pos, 1), false},
                              {s1, std::span<const int32_t>(tokens.data() + pos, 1), false}};
    const Tensor l = gpu.forward(step);
    min_dec = std::min(min_dec, cosine(l.f32() + V, ref.f32() + pos * V, V));
  }
  std::printf("  %s kFp8 vs CPU (FP8 weights): min cosine full prefill %.6f, prefill + batched "
              "decode %.6f\n", GetParam().c_str(), min_full, min_dec);
  EXPECT_GE(min_full, 0.99);
  EXPECT_GE(min_dec, 0.99);
}

// Logits rows of sequence `t` across the steps, alone or batched with four other sequences.
std::vector<float> run_target(GpuModel& m, const std::vector<int32_t>& tokens, bool batched) {
  const int64_t V = m.config().vocab_size;
  const int64_t t = m.new_sequence();
  std::vector<int64_t> o;
  for (int i = 0; i < 4 && batched; ++i) o.push_back(m.new_sequence());
  const auto other = random_tokens(200, V, 5);
  auto span = [&](int64_t at, int64_t len) { return std::span<const int32_t>(other.data() + at, len); };
  if (batched) {  // o[0], o[1] are decoding by the time the target prefills
    const GpuChunk pre[2] = {{o[0], span(0, 20), false}, {o[1], span(20, 50), false}};
    m.forward(pre);
  }
  std::vector<float> out;
  auto keep = [&](const Tensor& l, int64_t row0, int64_t rows) {
    out.insert(out.end(), l.f32() + row0 * V, l.f32() + (row0 + rows) * V);
  };
  const int64_t P = 37;
  const GpuChunk target_pre{t, std::span<const int32_t>(tokens.data(), P), true};
  if (batched) {
    const GpuChunk step[5] = {{o[0], span(70, 1), false}, {o[2], span(71, 25), false}, target_pre,
                              {o[1], span(96, 1), false}, {o[3], span(97, 60), true}};
    keep(m.forward(step), 2, P);
  } else {
    keep(m.forward(std::span<const GpuChunk>(&target_pre, 1)), 0, P);
  }
  for (int64_t i = 0; i < 4; ++i) {
    const GpuChunk target{t, std::span<const int32_t>(tokens.data() + P + i, 1), false};
    if (batched) {
      const GpuChunk step[5] = {{o[2], span(160 + i, 1), false}, {o[0], span(165 + i, 1), false},
                                {o[3], span(170 + 5 * i, 5), false}, target,
                                {o[1], span(190 + i, 1), false}};
      keep(m.forward(step), 3, 1);
    } else {
      keep(m.forward(std::span<const GpuChunk>(&target, 1)), 0, 1);
    }
  }
  m.free_sequence(t);
  for (int64_t s : o) m.free_sequence(s);
  return out;
}

TEST_P(GpuModelCudaTest, BatchInvariantLogitsAreBitwiseEqual) {
  for (WeightFormat format : {WeightFormat::kF32, WeightFormat::kFp8}) {
    const char* name = format == WeightFormat::kF32 ? "kF32" : "kFp8";
    SCOPED_TRACE(GetParam() + " " + name);
    GpuModelOptions opt;
    opt.max_sequences = 6;
    opt.max_context = 512;
    opt.max_batch_tokens = 256;
    opt.weight_format = format;
    opt.batch_invariant = true;
    auto model = GpuModel::load(hf_dir().string(), opt);
    const auto tokens = random_tokens(64, model->config().vocab_size, 3);
    const auto alone = run_target(*model, tokens, false);
    const auto batched = run_target(*model, tokens, true);
    ASSERT_EQ(alone.size(), batched.size());
    int64_t n_diff = 0;
    for (size_t i = 0; i < alone.size(); ++i) {
      n_diff += std::memcmp(&alone[i], &batched[i], sizeof(float)) != 0;
    }
    std::printf("  %s %s batch_invariant: %lld of %zu logits differ bitwise\n", GetParam().c_str(),
                name, static_cast<long long>(n_diff), alone.size());
    EXPECT_EQ(n_diff, 0);
    // Sanity: the logits are finite and not all equal.
    EXPECT_TRUE(std::all_of(alone.begin(), alone.end(), [](float v) { return std::isfinite(v); }));
    EXPECT_NE(*std::min_element(alone.begin(), alone.end()), *std::max_element(alone.begin(), alone.end()));
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, GpuModelCudaTest, ::testing::ValuesIn(golden_models()));
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuModelCudaTest);

TEST(GpuModelCuda, DummyWeightsAreDeterministic) {
  const auto names = golden_models();
  ASSERT_FALSE(names.empty());
  ModelConfig cfg = load_model_config((fs::path(kGoldenDir) / names.front() / "hf").string());
  cfg.hash_layers.assign(cfg.num_layers, false);  // dummy weights have no tid2eid
  for (WeightFormat format : {WeightFormat::kF32, WeightFormat::kFp8}) {
    SCOPED_TRACE(format == WeightFormat::kF32 ? "kF32" : "kFp8");
    GpuModelOptions opt;
    opt.max_sequences = 2;
    opt.max_context = 256;
    opt.max_batch_tokens = 64;
    opt.weight_format = format;
    opt.batch_invariant = true;  // the 40-row prefill and the 1-row step below share kernels
    const auto tokens = random_tokens(40, cfg.vocab_size, 9);
    auto logits_of = [&](uint64_t seed) {
      GpuModel m(cfg, seed, opt);
      const int64_t s = m.new_sequence();
      const GpuChunk c{s, std::span<const int32_t>(tokens), false};
      m.forward_device(std::span<const GpuChunk>(&c, 1));
      EXPECT_EQ(m.n_logits_rows(), 1);
      EXPECT_EQ(m.n_tokens(s), 40);
      EXPECT_GT(m.work().gemm_flops, 0.0);
      EXPECT_GT(m.work().weight_bytes, 0.0);
      Tensor a = m.copy_logits();
      // A synthetic context: back to 39 tokens, the last token again: the same logits.
      m.set_sequence_length(s, 39);
      const GpuChunk again{s, std::span<const int32_t>(tokens.data() + 39, 1), false};
      Tensor b = m.forward(std::span<const GpuChunk>(&again, 1));
      EXPECT_LT(std::abs(cosine(a.f32(), b.f32(), cfg.vocab_size) - 1.0), 1e-5);
      EXPECT_THROW(m.set_sequence_length(s, opt.max_context + 1), Error);
      return std::vector<float>(a.f32(), a.f32() + a.numel());
    };
    const auto a = logits_of(1), b = logits_of(1), c = logits_of(2);
    EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](float v) { return std::isfinite(v); }));
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    EXPECT_NE(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);
  }
}

}  // namespace
}  // namespace deepinfer
