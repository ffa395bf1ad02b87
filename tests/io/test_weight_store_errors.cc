// WeightStore contract: taking, unexpected tensors, malformed quantised pairs, progress,
// and the equivalence of a quantised native checkpoint with its dequantised HF form.
#include <gtest/gtest.h>

#include "io/dequant.h"
#include "io/weight_loader.h"
#include "io/weight_names.h"
#include "io_test_util.h"

namespace deepinfer {
namespace {

using test::expect_error;
using test::TempDir;

LoadOptions quiet() {
  LoadOptions o;
  o.progress = LoadOptions::Progress::kOff;
  return o;
}

WeightStore from(const std::map<std::string, Tensor>& tensors, const ModelConfig& cfg = {}) {
  return WeightStore::from_tensors(tensors, cfg, "test-ckpt", quiet());
}

Tensor e8m0(Shape shape, uint8_t code) {
  Tensor t = Tensor::empty(DType::F8_E8M0, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = code;
  return t;
}

TEST(WeightStore, TakeChecksPresenceShapeAndDtype) {
  WeightStore store = from({{"layers.0.attn.wq_a.weight", test::random_f32({4, 6}, 1)},
                            {"layers.0.raw", Tensor::zeros(DType::I8, {3})}});
  expect_error([&] { store.take("layers.3.attn.wq_a.weight", {4, 6}); }, ErrorKind::kNotFound,
               {"missing tensor 'layers.3.attn.wq_a.weight'", "test-ckpt"});
  expect_error([&] { store.take("layers.0.attn.wq_a.weight", {6, 4}); }, ErrorKind::kInvalidInput,
               {"tensor 'layers.0.attn.wq_a.weight' has shape [4, 6], expected [6, 4]"});
  expect_error([&] { store.take("layers.0.raw", {3}); }, ErrorKind::kInvalidInput,
               {"'layers.0.raw'", "dtype I8, expected F32"});
  EXPECT_EQ(store.take("layers.0.raw", {3}, DType::I8).dtype(), DType::I8);
  EXPECT_FALSE(store.take_optional("layers.0.absent", {1}).defined());
  EXPECT_TRUE(store.take_optional("layers.0.attn.wq_a.weight", {4, 6}).defined());
  expect_error([&] { store.peek("nope"); }, ErrorKind::kNotFound, {"'nope'"});
}

TEST(WeightStore, UntakenTensorsAreUnexpectedExceptDrafters) {
  WeightStore store = from({{"embed.weight", test::random_f32({2, 2}, 1)},
                            {"layers.0.foo", test::random_f32({1}, 2)},
                            {"mtp.0.e_proj.weight", test::random_f32({2, 2}, 3)}});
  store.take("embed.weight", {2, 2});
  EXPECT_EQ(store.untaken(), (std::vector<std::string>{"layers.0.foo", "mtp.0.e_proj.weight"}));
  EXPECT_EQ(store.untaken("mtp."), std::vector<std::string>{"mtp.0.e_proj.weight"});
  EXPECT_EQ(store.untaken_excluding("mtp."), std::vector<std::string>{"layers.0.foo"});
  expect_error([&] { store.check_all_taken(); }, ErrorKind::kInvalidInput,
               {"unexpected tensor 'layers.0.foo'", "test-ckpt"});
  store.take("layers.0.foo", {1});
  store.check_all_taken();  // mtp.* is kept for the drafters, not unexpected
  expect_error([&] { store.check_all_taken(""); }, ErrorKind::kInvalidInput,
               {"'mtp.0.e_proj.weight'"});
}

TEST(WeightStore, UnexpectedHfTensorIsNamedBothWays) {
  WeightStore store = from({{"model.layers.0.foo", test::random_f32({1}, 1)},
                            {"lm_head.weight", test::random_f32({1}, 2)}});
  store.take("head.weight", {1});
  expect_error([&] { store.check_all_taken(); }, ErrorKind::kInvalidInput,
               {"'layers.0.foo'", "'model.layers.0.foo'"});
  expect_error([&] { store.take("layers.0.foo", {2}); }, ErrorKind::kInvalidInput,
               {"'layers.0.foo'", "'model.layers.0.foo'", "expected [2]"});
}

TEST(WeightStore, MalformedQuantisedTensorsAreErrors) {
  const Tensor q = test::random_tensor(DType::F8_E4M3, {4, 8}, 1);
  expect_error([&] { from({{"layers.0.attn.wkv.weight", q}}); }, ErrorKind::kInvalidInput,
               {"FP8 tensor 'layers.0.attn.wkv.weight'", "no scale", "layers.0.attn.wkv.scale"});
  expect_error([&] { from({{"layers.0.attn.wkv.weight", q}, {"layers.0.attn.wkv.scale", e8m0({2, 2}, 127)}}); },
               ErrorKind::kInvalidInput, {"'layers.0.attn.wkv.weight'", "[2, 2]", "expected [1, 1]"});
  expect_error([&] { from({{"layers.0.attn.wkv.weight", test::random_f32({4, 8}, 2)},
                           {"layers.0.attn.wkv.scale", e8m0({1, 1}, 127)}}); },
               ErrorKind::kInvalidInput, {"'layers.0.attn.wkv.scale'", "not quantised", "F32"});
  const Tensor packed = test::random_tensor(DType::I8, {4, 16}, 3);
  expect_error([&] { from({{"layers.0.ffn.experts.0.w1.weight", packed},
                           {"layers.0.ffn.experts.0.w1.scale", e8m0({4, 2}, 127)}}); },
               ErrorKind::kInvalidInput, {"'layers.0.ffn.experts.0.w1.weight'", "not packed FP4"});
  Tensor f32_scale = test::random_f32({4, 1}, 4);
  expect_error([&] { from({{"layers.0.ffn.experts.0.w1.weight", packed},
                           {"layers.0.ffn.experts.0.w1.scale", f32_scale}}); },
               ErrorKind::kInvalidInput, {"'layers.0.ffn.experts.0.w1.weight'", "F8_E8M0"});
  expect_error([&] { from({{"model.layers.1.mlp.experts.gate_up_proj", test::random_f32({2, 3, 4}, 5)}}); },
               ErrorKind::kInvalidInput, {"model.layers.1.mlp.experts.gate_up_proj", "even"});
  Tensor bad_ids = Tensor::empty(DType::I64, {1});
  bad_ids.data<int64_t>()[0] = -3;
  expect_error([&] { from({{"layers.0.ffn.gate.tid2eid", bad_ids}}); }, ErrorKind::kInvalidInput,
               {"'layers.0.ffn.gate.tid2eid'", "-3"});
  expect_error([&] { from({{"lm_head.weight", test::random_f32({1}, 6)}, {"model.layers.0.x", test::random_f32({1}, 7)},
                           {"layers.0.x", test::random_f32({1}, 8)}}); },
               ErrorKind::kInvalidInput, {"'layers.0.x'", "'model.layers.0.x'", "both map"});
}

TEST(WeightStore, ProgressBarOnlyWhenAsked) {
  const std::map<std::string, Tensor> t = {{"embed.weight", test::random_f32({2, 2}, 1)}};
  LoadOptions on;
  on.progress = LoadOptions::Progress::kOn;
  testing::internal::CaptureStderr();
  WeightStore::from_tensors(t, {}, "x", on);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("loading weights"), std::string::npos);
  testing::internal::CaptureStderr();
  WeightStore::from_tensors(t, {}, "x", quiet());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

// A native checkpoint with FP8 dense weights and FP4 experts, and the HF-named F32
// checkpoint of its dequantised values (fused experts), load to identical stores.
TEST(WeightStore, QuantisedNativeAndDequantisedHfCheckpointsAgree) {
  const int64_t E = 2, I = 64, D = 96;
  std::map<std::string, Tensor> native = {
      {"layers.0.attn.wq_a.weight", test::random_tensor(DType::F8_E4M3, {40, D}, 1)},
      {"layers.0.attn.wq_a.scale", e8m0({1, 1}, 120)},
      {"layers.0.ffn.shared_experts.w1.weight", test::random_tensor(DType::F8_E4M3, {I, D}, 2)},
      {"layers.0.ffn.shared_experts.w1.scale", e8m0({1, 1}, 130)},
      {"layers.0.attn_norm.weight", test::random_tensor(DType::BF16, {D}, 3)},
      {"head.weight", test::random_tensor(DType::BF16, {8, D}, 4)},
      {"mtp.0.e_proj.weight", test::random_tensor(DType::F8_E4M3, {D, D}, 5)},
      {"mtp.0.e_proj.scale", e8m0({1, 1}, 125)},
  };
  for (auto& [name, t] : native) {  // no NaN codes
    if (t.dtype() == DType::F8_E4M3) {
      for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] &= 0xbf;
    }
  }
  uint32_t seed = 10;
  for (int64_t e = 0; e < E; ++e) {
    for (const auto& [w, rows, cols] : {std::tuple{"w1", I, D}, {"w3", I, D}, {"w2", D, I}}) {
      const std::string base = "layers.0.ffn.experts." + std::to_string(e) + "." + w;
      native[base + ".weight"] = test::random_tensor(DType::I8, {rows, cols / 2}, seed++);
      Tensor s = test::random_tensor(DType::F8_E8M0, {rows, cols / 32}, seed++);
      for (int64_t i = 0; i < s.numel(); ++i) s.data<uint8_t>()[i] = 110 + s.data<uint8_t>()[i] % 30;
      native[base + ".scale"] = s;
    }
  }
  TempDir dir;
  write_safetensors(dir.file("model.safetensors"), native);
  WeightStore a = WeightStore::load(dir.str(), {}, quiet());

  // Dequantised HF form, built with the library's dequantisers (checked against naive
  // loops in test_weight_loader) and fused by hand.
  std::map<std::string, Tensor> hf;
  for (const std::string& name : a.names()) {
    if (name.find(".experts.") != std::string::npos) continue;
    hf[native_to_hf(name)] = a.peek(name);
  }
  Tensor gate_up = Tensor::empty(DType::F32, {E, 2 * I, D});
  Tensor down = Tensor::empty(DType::F32, {E, D, I});
  for (int64_t e = 0; e < E; ++e) {
    const std::string base = "layers.0.ffn.experts." + std::to_string(e) + ".";
    const Tensor w1 = dequant_fp4(native[base + "w1.weight"], native[base + "w1.scale"], "w1");
    const Tensor w3 = dequant_fp4(native[base + "w3.weight"], native[base + "w3.scale"], "w3");
    const Tensor w2 = dequant_fp4(native[base + "w2.weight"], native[base + "w2.scale"], "w2");
    std::memcpy(gate_up.f32() + e * 2 * I * D, w1.f32(), w1.nbytes());
    std::memcpy(gate_up.f32() + e * 2 * I * D + I * D, w3.f32(), w3.nbytes());
    std::memcpy(down.f32() + e * D * I, w2.f32(), w2.nbytes());
  }
  hf["model.layers.0.mlp.experts.gate_up_proj"] = gate_up;
  hf["model.layers.0.mlp.experts.down_proj"] = down;
  TempDir hf_dir;
  write_safetensors(hf_dir.file("model.safetensors"), hf);
  WeightStore b = WeightStore::load(hf_dir.str(), {}, quiet());

  EXPECT_TRUE(b.loaded_hf_names());
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& name : a.names()) {
    EXPECT_TRUE(test::same_bytes(a.peek(name), b.peek(name))) << name;
  }
  EXPECT_EQ(a.size(), 5u + 3 * E);  // scales consumed
}

}  // namespace
}  // namespace deepinfer
