// kFp8 GpuModel with its routed experts taken from the checkpoint's quantised tensors
// (GpuModelOptions::expert_checkpoint, runtime/expert_loader.h), on the mixed_quant golden's
// native checkpoint (FP4 experts, block-FP8 dense weights):
//  * GpuModel::load: every routed expert matrix on the device is bitwise the exact block-FP8
//    conversion of the FP4 tensor (codes, and the e8m0 scales expanded to the GEMM's fp32
//    layout), and decodes to bitwise io's fp32 values of that tensor (the CPU backend's
//    weights); without expert_checkpoint the same model re-quantises them with power-of-two
//    block scales (fp8_weight_quant.h): bitwise the same values, but other codes and scales
//    in some matrices (the conversion's scale is 2^(max S - 6), the re-quantiser's can be
//    one step finer; 14 of the 96 backbone matrices on the CPU, test_fp8_weight_quant.cc);
//  * logits of such a model against the CPU Model on the same weights (experts exact, the
//    other projections FP8-rounded by fp8_round_trip), every expert and every compressed
//    entry selected (no discrete choice for the FP8 activation noise to flip): per position
//    1 - cosine within the FP8 activation noise bound of test_gpu_model_cuda.cc
//    (fp8_noise_power_bound: (7 L + 1) * 7.2e-4, derived there), the mean within half of it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "base/dtype.h"
#include "io/config_parser.h"
#include "io/weight_loader.h"
#include "io/weight_names.h"
#include "model/compare_util.h"
#include "model/model.h"
#include "model/weight_source.h"
#include "ops/gemm/gemm.h"
#include "runtime/expert_loader.h"
#include "runtime/gpu_model.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
const std::string kNative = "tests/data/golden/mixed_quant/native";

// The bound of test_gpu_model_cuda.cc (see its derivation there).
constexpr double kE4m3Nmse = 7.2e-4;
double fp8_noise_power_bound(const ModelConfig& cfg) {
  return (7.0 * static_cast<double>(cfg.num_layers) + 1.0) * kE4m3Nmse;
}

GpuModelOptions small_options() {
  GpuModelOptions opt;
  opt.max_sequences = 3;
  opt.max_context = 512;
  opt.max_batch_tokens = 512;
  opt.weight_format = WeightFormat::kFp8;
  opt.expert_format = ExpertFormat::kFp8;  // the FP4 -> FP8 path (W4A8: test_gpu_w4a8_experts_cuda)
  return opt;
}

TEST(ExpertLoaderCuda, LoadedExpertsAreTheExactConversion) {
  ASSERT_TRUE(fs::exists(kNative));
  auto model = GpuModel::load(kNative, small_options());
  EXPECT_EQ(model->options().expert_checkpoint, kNative);
  const ModelConfig& cfg = model->config();
  ASSERT_EQ(cfg.quant.expert_dtype, "fp4");
  CheckpointExperts ckpt(kNative, cfg);
  WeightStore store = WeightStore::load(kNative, cfg, LoadOptions{LoadOptions::Progress::kOff});
  // The same weights without expert_checkpoint: experts re-quantised from fp32.
  GpuModelOptions plain_opt = small_options();
  auto src = open_checkpoint_weights(kNative, cfg);
  GpuModel plain(cfg, load_model_weights(cfg, *src), plain_opt);
  EXPECT_TRUE(plain.options().expert_checkpoint.empty());

  int64_t n_checked = 0, n_code_diff = 0, n_plain_differs = 0, n_plain_value_diff = 0;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    for (int64_t e = 0; e < cfg.n_routed_experts; ++e) {
      for (const std::string w : {"w1", "w3", "w2"}) {
        const std::string name = native_expert_name(l, e, w);
        SCOPED_TRACE(name);
        const int64_t n = w == "w2" ? cfg.hidden_size : cfg.moe_intermediate_size;
        const int64_t k = w == "w2" ? cfg.moe_intermediate_size : cfg.hidden_size;
        const GpuModel::ExpertFp8Copy got = model->download_expert_fp8(l, e, w);
        const auto f = ckpt.fp8(l, e, w, n, k);
        ASSERT_TRUE(f.has_value());
        ASSERT_EQ(got.codes.shape(), (Shape{n, k}));
        n_code_diff += std::memcmp(got.codes.raw(), f->weight.raw(), n * k) != 0;
        const std::vector<float> sw =
            expand_weight_scales_ue8m0(static_cast<const uint8_t*>(f->scale.raw()), n, k);
        ASSERT_EQ(got.scales.numel(), static_cast<int64_t>(sw.size()));
        EXPECT_EQ(std::memcmp(got.scales.raw(), sw.data(), sw.size() * sizeof(float)), 0);
        // Decoded device values == io's fp32 FP4 dequant, bitwise.
        const Tensor& io = store.peek(name);
        const auto* q = static_cast<const uint8_t*>(got.codes.raw());
        const float* s = got.scales.f32();
        const int64_t ld = fp8_weight_scale_ld(k);
        const GpuModel::ExpertFp8Copy requantised = plain.download_expert_fp8(l, e, w);
        const auto* pq = static_cast<const uint8_t*>(requantised.codes.raw());
        const float* ps = requantised.scales.f32();
        int64_t n_value_diff = 0;
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = 0; j < k; ++j) {
            const float v = e4m3_to_f32(q[i * k + j]) * s[(i / 128) * ld + j / 128];
            n_value_diff += std::memcmp(&v, io.f32() + i * k + j, sizeof(float)) != 0;
            const float pv = e4m3_to_f32(pq[i * k + j]) * ps[(i / 128) * ld + j / 128];
            n_plain_value_diff += std::memcmp(&pv, io.f32() + i * k + j, sizeof(float)) != 0;
          }
        }
        EXPECT_EQ(n_value_diff, 0);
        n_plain_differs += std::memcmp(requantised.codes.raw(), got.codes.raw(), n * k) != 0 ||
                           std::memcmp(requantised.scales.raw(), got.scales.raw(),
                                       got.scales.nbytes()) != 0;
        ++n_checked;
      }
    }
  }
  std::printf("  mixed_quant kFp8: %lld routed expert matrices on the device, %lld differ from the "
              "exact FP4 -> FP8 conversion; re-quantised from fp32 instead, %lld would have other "
              "codes / scales and %lld values would differ\n",
              static_cast<long long>(n_checked), static_cast<long long>(n_code_diff),
              static_cast<long long>(n_plain_differs), static_cast<long long>(n_plain_value_diff));
  EXPECT_EQ(n_checked, 3 * cfg.num_layers * cfg.n_routed_experts);
  EXPECT_EQ(n_code_diff, 0);
  EXPECT_GT(n_plain_differs, 0);  // the check above sees which path loaded the experts
  EXPECT_EQ(n_plain_value_diff, 0);  // power-of-two re-quantisation is exact here too
}

TEST(ExpertLoaderCuda, Fp8LogitsWithCheckpointExpertsMatchCpu) {
  ModelConfig cfg = load_model_config(kNative);
  auto src = open_checkpoint_weights(kNative, cfg);
  ModelWeights w = load_model_weights(cfg, *src);
  // No discrete choices: score routing everywhere (the hash layer gets a zero bias, which
  // changes no weight when every expert is selected), every expert and compressed entry.
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    MoeWeights& m = w.layers[l].moe;
    if (cfg.is_hash_layer(l)) {
      m.tid2eid = Tensor();
      m.bias = Tensor::zeros(DType::F32, {cfg.n_routed_experts});
    }
  }
  cfg.hash_layers.assign(cfg.num_layers, false);
  cfg.n_experts_per_tok = cfg.n_routed_experts;
  cfg.index_topk = 1024;
  GpuModelOptions opt = small_options();
  opt.expert_checkpoint = kNative;
  GpuModel gpu(cfg, w, opt);
  GpuModel::fp8_round_trip(cfg, w, /*routed_experts=*/false);  // experts: exact on the GPU
  const Model cpu(cfg, std::move(w), ModelOptions{Numerics::kReference, false});

  const int64_t n = 300, V = cfg.vocab_size;
  std::mt19937 gen(11);
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = static_cast<int32_t>(2 + gen() % static_cast<uint32_t>(V - 2));
  auto st = cpu.new_state();
  const SequenceChunk cc{st.get(), std::span<const int32_t>(tokens), true};
  const Tensor ref = cpu.forward(std::span<const SequenceChunk>(&cc, 1));
  const int64_t s = gpu.new_sequence();
  const int64_t p = 250;  // prefill p tokens, then decode one at a time
  const GpuChunk pre{s, std::span<const int32_t>(tokens.data(), p), true};
  Tensor got = gpu.forward(std::span<const GpuChunk>(&pre, 1));
  ASSERT_EQ(got.numel(), p * V);
  double min_cos = 1.0, sum_deficit = 0.0;
  auto add = [&](const float* row, int64_t pos) {
    const double c = cosine(row, ref.f32() + pos * V, V);
    if (!(c >= min_cos)) min_cos = c;
    sum_deficit += 1.0 - c;
  };
  for (int64_t i = 0; i < p; ++i) add(got.f32() + i * V, i);
  for (int64_t pos = p; pos < n; ++pos) {
    const GpuChunk step{s, std::span<const int32_t>(tokens.data() + pos, 1), false};
    got = gpu.forward(std::span<const GpuChunk>(&step, 1));
    add(got.f32(), pos);
  }
  const double bound = fp8_noise_power_bound(cfg), mean = sum_deficit / static_cast<double>(n);
  std::printf("  mixed_quant kFp8 (checkpoint experts) vs CPU: min cosine %.6f (1 - cos %.2e, "
              "bound %.2e), mean 1 - cos %.2e (bound %.2e) over %lld rows\n",
              min_cos, 1.0 - min_cos, bound, mean, bound / 2, static_cast<long long>(n));
  EXPECT_LE(1.0 - min_cos, bound);
  EXPECT_LE(mean, bound / 2);
}

}  // namespace
}  // namespace deepinfer
