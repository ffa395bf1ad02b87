// CheckpointExperts (runtime/expert_loader.h), the source of GpuModel's kFp8 routed experts:
//  * the mixed_quant golden's FP4 experts (every layer, expert and matrix) are converted to
//    block FP8 exactly: dequantising the result gives bitwise the fp32 tensor io's WeightStore
//    loads for that name (io/dequant.h's FP4 dequant, the CPU backend's weights);
//  * block-FP8 experts are taken as stored (same bytes), bf16 / fused HF experts are kOther;
//  * an FP4 expert without an exact FP8 form, a wrong shape and a NaN scale fail with an Error
//    naming the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "base/error.h"
#include "io/config_parser.h"
#include "io/dequant.h"
#include "io/safetensors.h"
#include "io/weight_loader.h"
#include "io/weight_names.h"
#include "runtime/expert_loader.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
const char* kMixed = "tests/data/golden/mixed_quant";

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

struct Dims {
  int64_t n, k;
};
Dims dims(const ModelConfig& cfg, const std::string& w) {
  const int64_t D = cfg.hidden_size, I = cfg.moe_intermediate_size;
  return w == "w2" ? Dims{D, I} : Dims{I, D};
}

TEST(ExpertLoader, GoldenFp4ExpertsConvertExactly) {
  const std::string dir = fs::path(kMixed) / "native";
  const ModelConfig cfg = load_model_config(dir);
  ASSERT_EQ(cfg.quant.expert_dtype, "fp4");
  WeightStore store = WeightStore::load(dir, cfg, LoadOptions{LoadOptions::Progress::kOff});
  CheckpointExperts ckpt(dir, cfg);
  int64_t n_checked = 0, n_nonzero = 0;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    for (int64_t e = 0; e < cfg.n_routed_experts; ++e) {
      for (const std::string w : {"w1", "w3", "w2"}) {
        const std::string name = native_expert_name(l, e, w);
        SCOPED_TRACE(name);
        ASSERT_EQ(ckpt.storage(l, e, w), ExpertStorage::kFp4);
        const auto [n, k] = dims(cfg, w);
        const auto f = ckpt.fp8(l, e, w, n, k);
        ASSERT_TRUE(f.has_value());
        EXPECT_EQ(f->n_rounded, 0);
        ASSERT_EQ(f->weight.shape(), (Shape{n, k}));
        ASSERT_EQ(f->scale.dtype(), DType::F8_E8M0);
        const Tensor fp8_values = dequant_fp8_block(f->weight, f->scale, 128, 128, name);
        const Tensor& io_values = store.peek(name);  // io's dequant of the FP4 tensor
        EXPECT_TRUE(same_bytes(fp8_values, io_values));
        const Fp4Packed p = ckpt.fp4(l, e, w);
        EXPECT_TRUE(same_bytes(fp8_values, dequant_fp4(p.codes, p.scale, name)));
        for (int64_t i = 0; i < io_values.numel(); ++i) n_nonzero += io_values.f32()[i] != 0.0f;
        ++n_checked;
      }
    }
  }
  EXPECT_EQ(n_checked, 3 * cfg.num_layers * cfg.n_routed_experts);
  EXPECT_EQ(ckpt.n_fp4_converted(), n_checked);
  EXPECT_EQ(ckpt.n_fp8_as_stored(), 0);
  EXPECT_GT(n_nonzero, n_checked * cfg.hidden_size);  // real values, not an empty model
  std::printf("  mixed_quant: %lld FP4 expert tensors converted to block FP8 exactly\n",
              static_cast<long long>(n_checked));
}

TEST(ExpertLoader, UnquantisedExpertsAreOther) {
  const std::string dir = fs::path(kMixed) / "hf";  // bf16 fused HF experts
  const ModelConfig cfg = load_model_config(dir);
  CheckpointExperts ckpt(dir, cfg);
  EXPECT_EQ(ckpt.storage(0, 0, "w1"), ExpertStorage::kOther);
  EXPECT_FALSE(ckpt.fp8(1, 3, "w2", cfg.hidden_size, cfg.moe_intermediate_size).has_value());
}

class ExpertLoaderFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("deepinfer_expert_loader_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::map<std::string, Tensor>& tensors) {
    const std::string path = (dir_ / "model.safetensors").string();
    write_safetensors(path, tensors);
    return path;
  }
  static std::string error_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(ExpertLoaderFile, BlockFp8ExpertsAreTakenAsStored) {
  // The golden's first FP4 expert, converted, stored as a block-FP8 expert of another model.
  const std::string golden = fs::path(kMixed) / "native";
  const ModelConfig cfg = load_model_config(golden);
  CheckpointExperts src(golden, cfg);
  const auto [n, k] = dims(cfg, "w1");
  const Fp8BlockWeight f = *src.fp8(0, 0, "w1", n, k);
  const std::string name = native_expert_name(2, 5, "w1");
  const std::string scale = "layers.2.ffn.experts.5.w1.scale";
  CheckpointExperts ckpt(write({{name, f.weight}, {scale, f.scale}}), cfg);
  EXPECT_EQ(ckpt.storage(2, 5, "w1"), ExpertStorage::kFp8Block);
  EXPECT_EQ(ckpt.storage(2, 5, "w3"), ExpertStorage::kOther);
  const auto got = ckpt.fp8(2, 5, "w1", n, k);
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(same_bytes(got->weight, f.weight));
  EXPECT_TRUE(same_bytes(got->scale, f.scale));
  EXPECT_EQ(ckpt.n_fp8_as_stored(), 1);
  EXPECT_EQ(ckpt.n_fp4_converted(), 0);
  // Another shape than the model's: an Error naming the tensor.
  EXPECT_NE(error_of([&] { ckpt.fp8(2, 5, "w1", n, 2 * k); }).find(name), std::string::npos);
  // A NaN scale.
  Tensor bad = f.scale.clone();
  static_cast<uint8_t*>(bad.raw())[0] = 255;
  CheckpointExperts nan_ckpt(write({{name, f.weight}, {scale, bad}}), cfg);
  const std::string msg = error_of([&] { nan_ckpt.fp8(2, 5, "w1", n, k); });
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("NaN"), std::string::npos) << msg;
}

TEST_F(ExpertLoaderFile, InexactFp4ExpertFailsNamingTheTensor) {
  const ModelConfig cfg = load_model_config((fs::path(kMixed) / "native").string());
  const int64_t n = 32, k = 128;
  Tensor codes = Tensor::empty(DType::I8, {n, k / 2});
  std::memset(codes.raw(), 0x22, codes.nbytes());  // e2m1 code 2 = 1.0 everywhere
  Tensor scales = Tensor::empty(DType::F8_E8M0, {n, k / 32});
  std::memset(scales.raw(), 127, scales.nbytes());
  auto* s = static_cast<uint8_t*>(scales.raw());
  s[0 * 4 + 0] = 140;  // the 128x128 block's scale becomes 2^(140 - 6 - 127)
  s[1 * 4 + 1] = 125;  // 2^-9 of it: 1.0 stays exact, 0.5 falls below e4m3's subnormals
  auto* c = static_cast<uint8_t*>(codes.raw());
  c[1 * (k / 2) + 20] = 0x21;  // row 1: column 40 (low nibble) 0.5, column 41 1.0
  const std::string name = native_expert_name(3, 1, "w2");
  CheckpointExperts ckpt(write({{name, codes}, {"layers.3.ffn.experts.1.w2.scale", scales}}), cfg);
  EXPECT_EQ(ckpt.storage(3, 1, "w2"), ExpertStorage::kFp4);
  const std::string msg = error_of([&] { ckpt.fp8(3, 1, "w2", n, k); });
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("[1, 40]"), std::string::npos) << msg;
  EXPECT_EQ(ckpt.n_fp4_converted(), 0);
  // The same tensor with the 0.5 made 1.0 converts (the span alone is not an error).
  c[1 * (k / 2) + 20] = 0x22;
  CheckpointExperts ok(write({{name, codes}, {"layers.3.ffn.experts.1.w2.scale", scales}}), cfg);
  EXPECT_TRUE(ok.fp8(3, 1, "w2", n, k).has_value());
  EXPECT_EQ(ok.n_fp4_converted(), 1);
}

}  // namespace
}  // namespace deepinfer
