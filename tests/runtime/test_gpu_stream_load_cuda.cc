// The streaming loader (runtime/gpu_weight_stream.h) against the host path it replaces
// (load_model_weights + GpuModel(ModelWeights), routed experts from expert_checkpoint), on the
// golden checkpoints (tests/data/golden: F32 / BF16 HF forms, and mixed_quant's native FP8 +
// FP4 form), weight formats fp32 and FP8: the logits of a prefill of every position and of
// three greedy decode steps are bitwise equal, so are the routed experts on the device (kFp8)
// and the MTP drafter's logits (mixed_quant has mtp.0); the stream reports what it did (FP8
// tensors as stored, FP4 converted exactly, the rest quantised / widened) and GpuModel::load
// takes the stream for V4.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/config_parser.h"
#include "model/weight_source.h"
#include "model/weights.h"
#include "runtime/gpu_model.h"
#include "runtime/gpu_weight_stream.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
const fs::path kGolden = "tests/data/golden";

GpuModelOptions options(WeightFormat format, const std::string& dir, bool mtp) {
  GpuModelOptions o;
  o.max_sequences = 2;
  o.max_context = 512;
  o.max_batch_tokens = 128;
  o.weight_format = format;
  o.expert_format = ExpertFormat::kFp8;  // the FP4 -> FP8 path (W4A8: test_gpu_w4a8_experts_cuda)
  o.expert_checkpoint = dir;  // the host path's routed experts, as the runner factory sets it
  o.mtp = mtp;
  if (mtp) o.max_rollback = 1;
  return o;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Prefill (all logits) then three greedy decode steps; the logits of every forward.
std::vector<Tensor> run(GpuModel& m, int64_t prompt_len) {
  const int64_t V = m.config().vocab_size;
  std::vector<int32_t> prompt(prompt_len);
  for (int64_t i = 0; i < prompt_len; ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % V);
  const int64_t s = m.new_sequence();
  std::vector<Tensor> out;
  GpuChunk c{s, prompt, true};
  out.push_back(m.forward({&c, 1}));
  for (int step = 0; step < 3; ++step) {
    const Tensor& last = out.back();
    const float* row = last.f32() + (last.size(0) - 1) * V;
    int32_t next = 0;
    for (int64_t v = 1; v < V; ++v) next = row[v] > row[next] ? static_cast<int32_t>(v) : next;
    const std::vector<int32_t> tok{next};
    GpuChunk d{s, tok, false};
    out.push_back(m.forward({&d, 1}));
  }
  return out;
}

void compare(const std::string& dir, WeightFormat format, bool mtp) {
  SCOPED_TRACE(dir + (format == WeightFormat::kFp8 ? " fp8" : " fp32") + (mtp ? " mtp" : ""));
  ASSERT_TRUE(fs::exists(dir));
  const ModelConfig cfg = load_model_config(dir);
  const GpuModelOptions opt = options(format, dir, mtp);
  auto source = open_checkpoint_weights(dir, cfg);
  GpuModel host(cfg, load_model_weights(cfg, *source), opt);
  GpuWeightStreamOptions so;
  so.staging_bytes = 4 << 20;  // small halves: the embedding and head take several ranges
  GpuWeightStream stream(dir, cfg, so);
  GpuModel streamed(cfg, stream, opt);
  const GpuWeightStreamStats& st = stream.stats();
  std::printf("%s %s: %.3f MB read, %.3f MB uploaded; %lld FP8 as stored, %lld FP4 converted, "
              "%lld quantised, %lld fp32\n", dir.c_str(), format == WeightFormat::kFp8 ? "fp8" : "fp32",
              st.bytes_read / 1e6, st.bytes_uploaded / 1e6, static_cast<long long>(st.fp8_as_stored),
              static_cast<long long>(st.fp4_converted), static_cast<long long>(st.fp8_requantised),
              static_cast<long long>(st.f32_tensors));
  EXPECT_GT(st.bytes_read, 0);
  EXPECT_GT(st.f32_tensors, 0);
  const bool native = fs::path(dir).filename() == "native";
  const int64_t n_experts = 3 * cfg.num_layers * cfg.n_routed_experts + (mtp ? 3 * cfg.n_routed_experts : 0);
  if (format == WeightFormat::kFp8 && native) {
    EXPECT_EQ(st.fp4_converted, n_experts);
    EXPECT_GT(st.fp8_as_stored, 0);
  } else if (format == WeightFormat::kFp8) {
    EXPECT_EQ(st.fp8_as_stored + st.fp4_converted, 0);
    EXPECT_GT(st.fp8_requantised, 0);
  } else {
    EXPECT_EQ(st.fp8_as_stored + st.fp4_converted + st.fp8_requantised, 0);
  }
  EXPECT_EQ(streamed.device_weight_bytes(), host.device_weight_bytes());

  const std::vector<Tensor> a = run(host, 40), b = run(streamed, 40);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same(a[i], b[i])) << "forward " << i;

  if (format == WeightFormat::kFp8) {
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      for (int64_t e = 0; e < cfg.n_routed_experts; ++e) {
        for (const char* w : {"w1", "w3", "w2"}) {
          const auto x = host.download_expert_fp8(l, e, w), y = streamed.download_expert_fp8(l, e, w);
          EXPECT_TRUE(same(x.codes, y.codes) && same(x.scales, y.scales))
              << "layer " << l << " expert " << e << " " << w;
        }
      }
    }
  }
  if (mtp) {
    const std::vector<int64_t> seqs{0};
    const std::vector<int32_t> next{5};
    const auto da = host.draft(seqs, next, 2), db = streamed.draft(seqs, next, 2);
    ASSERT_EQ(da.size(), 1u);
    EXPECT_EQ(da[0].tokens, db[0].tokens);
    EXPECT_EQ(da[0].logits, db[0].logits);
  }
}

TEST(GpuStreamLoad, GoldenFp32) {
  for (const char* name : {"swa", "csa", "hca", "mixed_quant"}) {
    compare((kGolden / name / "hf").string(), WeightFormat::kF32, false);
  }
  compare((kGolden / "mixed_quant" / "native").string(), WeightFormat::kF32, false);
}

TEST(GpuStreamLoad, GoldenFp8) {
  for (const char* name : {"swa", "csa", "hca", "mixed_quant"}) {
    compare((kGolden / name / "hf").string(), WeightFormat::kFp8, false);
  }
  compare((kGolden / "mixed_quant" / "native").string(), WeightFormat::kFp8, false);
}

TEST(GpuStreamLoad, GoldenFp8WithMtpDrafter) {
  compare((kGolden / "mixed_quant" / "native").string(), WeightFormat::kFp8, true);
}

TEST(GpuStreamLoad, LoadUsesTheStreamForV4) {
  const std::string dir = (kGolden / "mixed_quant" / "native").string();
  const ModelConfig cfg = load_model_config(dir);
  const GpuModelOptions opt = options(WeightFormat::kFp8, dir, false);
  auto loaded = GpuModel::load(dir, opt);
  EXPECT_EQ(loaded->options().expert_checkpoint, dir);
  auto source = open_checkpoint_weights(dir, cfg);
  GpuModel host(cfg, load_model_weights(cfg, *source), opt);
  const std::vector<Tensor> a = run(host, 24), b = run(*loaded, 24);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same(a[i], b[i])) << "forward " << i;
}

TEST(GpuStreamLoad, OpensV41) {  // logits vs the host path: test_golden_v41_fp8_cuda
  const fs::path dir = "tests/data/golden_v41/base";
  if (!fs::exists(dir)) GTEST_SKIP() << "no V4.1 goldens";
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!fs::exists(entry.path() / "config.json")) continue;
    const ModelConfig cfg = load_model_config(entry.path().string());
    if (!cfg.is_v41()) continue;
    GpuWeightStream s(entry.path().string(), cfg, {size_t{4} << 20, false});
    EXPECT_GT(s.streamed().placeholders(), 0u);
    return;
  }
  GTEST_SKIP() << "no V4.1 checkpoint directory found";
}

}  // namespace
}  // namespace deepinfer
