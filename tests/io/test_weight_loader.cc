#include <gtest/gtest.h>

#include <cmath>
#include <set>

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

// Writes `tensors` as one safetensors file and loads it back through the file path.
WeightStore load_via_file(const std::map<std::string, Tensor>& tensors, const ModelConfig& cfg = {}) {
  TempDir dir;
  write_safetensors(dir.file("model.safetensors"), tensors);
  return WeightStore::load(dir.str(), cfg, quiet());
}

bool bit_equal(const Tensor& a, const Tensor& b) { return test::same_bytes(a, b); }

// Random e4m3 codes without the two NaN codes.
Tensor random_e4m3(Shape shape, uint32_t seed) {
  Tensor t = test::random_tensor(DType::F8_E4M3, std::move(shape), seed);
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint8_t& c = t.data<uint8_t>()[i];
    if ((c & 0x7f) == 0x7f) c = 0x3c;
  }
  return t;
}

// E8M0 codes in [lo, lo + span).
Tensor random_e8m0(Shape shape, uint32_t seed, int lo = 110, int span = 30) {
  Tensor t = test::random_tensor(DType::U8, std::move(shape), seed);
  Tensor out = Tensor::empty(DType::F8_E8M0, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    out.data<uint8_t>()[i] = static_cast<uint8_t>(lo + t.data<uint8_t>()[i] % span);
  }
  return out;
}

// Naive references written straight from MODEL_SPEC §B.1 / §B.2 with base/dtype.h.
Tensor naive_fp8(const Tensor& q, const Tensor& scale, int64_t bn, int64_t bk) {
  const int64_t n = q.size(0), k = q.size(1), sk = scale.size(1);
  Tensor out = Tensor::empty(DType::F32, {n, k});
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t si = (i / bn) * sk + j / bk;
      float s = 0;
      if (scale.dtype() == DType::F8_E8M0) {
        s = e8m0_to_f32(scale.data<uint8_t>()[si]);
      } else {
        s = scale.data<float>()[si];
      }
      out.f32()[i * k + j] = e4m3_to_f32(q.data<uint8_t>()[i * k + j]) * s;
    }
  }
  return out;
}

Tensor naive_fp4(const Tensor& packed, const Tensor& scale) {
  const int64_t n = packed.size(0), k = 2 * packed.size(1), sk = scale.size(1);
  Tensor out = Tensor::empty(DType::F32, {n, k});
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const uint8_t byte = packed.data<uint8_t>()[i * (k / 2) + j / 2];
      const uint8_t code = j % 2 == 0 ? (byte & 0xf) : (byte >> 4);
      const float s = std::ldexp(1.0f, scale.data<uint8_t>()[i * sk + j / 32] - 127);
      out.f32()[i * k + j] = e2m1_to_f32(code) * s;
    }
  }
  return out;
}

TEST(WeightLoader, Fp8BlockWithUe8m0ScalesIsBitExact) {
  // 300 x 200 with 128 x 128 blocks: partial blocks on both axes.
  const Tensor q = random_e4m3({300, 200}, 1);
  const Tensor s = random_e8m0({3, 2}, 2);
  WeightStore store = load_via_file({{"layers.0.attn.wq_a.weight", q}, {"layers.0.attn.wq_a.scale", s}});
  EXPECT_FALSE(store.has("layers.0.attn.wq_a.scale"));  // consumed
  const Tensor w = store.take("layers.0.attn.wq_a.weight", {300, 200});
  EXPECT_TRUE(bit_equal(w, naive_fp8(q, s, 128, 128)));
  EXPECT_TRUE(store.untaken().empty());
}

TEST(WeightLoader, Fp8WithHfWeightScaleInvAndConfigBlocks) {
  ModelConfig cfg;
  cfg.quant.weight_block_n = 64;
  cfg.quant.weight_block_k = 32;
  const Tensor q = random_e4m3({70, 100}, 3);
  const Tensor s = test::random_f32({2, 4}, 4);  // arbitrary fp32 multipliers
  WeightStore store = load_via_file({{"model.layers.0.self_attn.q_a_proj.weight", q},
                                     {"model.layers.0.self_attn.q_a_proj.weight_scale_inv", s},
                                     {"lm_head.weight", test::random_f32({4, 4}, 5)}},
                                    cfg);
  EXPECT_TRUE(store.loaded_hf_names());
  EXPECT_EQ(store.names(), (std::vector<std::string>{"head.weight", "layers.0.attn.wq_a.weight"}));
  EXPECT_TRUE(bit_equal(store.take("layers.0.attn.wq_a.weight", {70, 100}), naive_fp8(q, s, 64, 32)));
  // The same weight with 128-blocks in the config has the wrong scale shape.
  expect_error([&] { load_via_file({{"model.layers.0.self_attn.q_a_proj.weight", q},
                                    {"model.layers.0.self_attn.q_a_proj.weight_scale_inv", s}}); },
               ErrorKind::kInvalidInput,
               {"model.layers.0.self_attn.q_a_proj.weight", "[2, 4]", "expected [1, 1]"});
}

TEST(WeightLoader, Fp4NibbleOrderAndScalesFollowTheSpec) {
  // Row 0: byte 0x21 -> elements (code 1, code 2) = (0.5, 1.0); byte 0x9f -> (code 15, code 9)
  // = (-6, -0.5). Scale 128 = 2^1 for columns 0..31, 126 = 2^-1 for 32..63.
  Tensor packed = Tensor::zeros(DType::I8, {1, 32});
  packed.data<uint8_t>()[0] = 0x21;
  packed.data<uint8_t>()[1] = 0x9f;
  packed.data<uint8_t>()[16] = 0x7c;  // elements 32, 33: codes 0xc (-2), 0x7 (6)
  Tensor scale = Tensor::empty(DType::F8_E8M0, {1, 2});
  scale.data<uint8_t>()[0] = 128;
  scale.data<uint8_t>()[1] = 126;
  WeightStore store = load_via_file({{"layers.1.ffn.experts.3.w1.weight", packed},
                                     {"layers.1.ffn.experts.3.w1.scale", scale}});
  const Tensor w = store.take("layers.1.ffn.experts.3.w1.weight", {1, 64});
  const float* v = w.f32();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 2.0f);
  EXPECT_EQ(v[2], -12.0f);
  EXPECT_EQ(v[3], -1.0f);
  EXPECT_EQ(v[4], 0.0f);
  EXPECT_EQ(v[32], -1.0f);
  EXPECT_EQ(v[33], 3.0f);
}

TEST(WeightLoader, Fp4RandomIsBitExactIncludingAPartialScaleBlock) {
  const Tensor p1 = test::random_tensor(DType::I8, {33, 48}, 6);  // K = 96
  const Tensor s1 = random_e8m0({33, 3}, 7, 100, 50);
  const Tensor p2 = test::random_tensor(DType::U8, {17, 40}, 8);  // K = 80: last block of 16
  const Tensor s2 = random_e8m0({17, 3}, 9, 100, 50);
  WeightStore store = load_via_file({{"layers.2.ffn.experts.0.w1.weight", p1},
                                     {"layers.2.ffn.experts.0.w1.scale", s1},
                                     {"mtp.0.ffn.experts.1.w2.weight", p2},
                                     {"mtp.0.ffn.experts.1.w2.scale", s2}});
  EXPECT_TRUE(bit_equal(store.take("layers.2.ffn.experts.0.w1.weight", {33, 96}), naive_fp4(p1, s1)));
  EXPECT_TRUE(bit_equal(store.take("mtp.0.ffn.experts.1.w2.weight", {17, 80}), naive_fp4(p2, s2)));
}

TEST(WeightLoader, PlainDtypesConvertToF32AndTid2eidToI32) {
  const Tensor bf = test::random_tensor(DType::BF16, {5, 3}, 10);
  const Tensor f16 = test::random_tensor(DType::F16, {7}, 11);
  Tensor f64 = Tensor::empty(DType::F64, {3});
  for (int i = 0; i < 3; ++i) f64.data<double>()[i] = 0.1 * (i + 1);
  Tensor ids = Tensor::empty(DType::I64, {4, 2});
  for (int i = 0; i < 8; ++i) ids.data<int64_t>()[i] = 7 - i;
  const Tensor f32 = test::random_f32({2, 2}, 12);
  WeightStore store = load_via_file({{"embed.weight", bf}, {"norm.weight", f16}, {"hc_head_base", f64},
                                     {"layers.0.ffn.gate.tid2eid", ids}, {"hc_head_fn", f32}});
  const Tensor a = store.take("embed.weight", {5, 3});
  for (int i = 0; i < 15; ++i) EXPECT_EQ(a.f32()[i], bf16_to_f32(bf.data<uint16_t>()[i]));
  const Tensor b = store.take("norm.weight", {7});
  for (int i = 0; i < 7; ++i) {
    const float want = f16_to_f32(f16.data<uint16_t>()[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(b.f32()[i]));
    } else {
      EXPECT_EQ(b.f32()[i], want);
    }
  }
  const Tensor c = store.take("hc_head_base", {3});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.f32()[i], static_cast<float>(0.1 * (i + 1)));
  const Tensor t = store.take("layers.0.ffn.gate.tid2eid", {4, 2});
  ASSERT_EQ(t.dtype(), DType::I32);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(t.data<int32_t>()[i], 7 - i);
  EXPECT_TRUE(bit_equal(store.take("hc_head_fn", {2, 2}), f32));
}

// (HF name, native name) for one layer, written from modeling_deepseek_v4.py's module
// tree and MODEL_SPEC §B.5 (independently of the library's table).
std::vector<std::pair<std::string, std::string>> layer_names(int l, int ratio, bool hash) {
  const std::string h = "model.layers." + std::to_string(l) + ".";
  const std::string n = "layers." + std::to_string(l) + ".";
  std::vector<std::pair<std::string, std::string>> v = {
      {h + "input_layernorm.weight", n + "attn_norm.weight"},
      {h + "post_attention_layernorm.weight", n + "ffn_norm.weight"},
      {h + "attn_hc.fn", n + "hc_attn_fn"},
      {h + "attn_hc.base", n + "hc_attn_base"},
      {h + "attn_hc.scale", n + "hc_attn_scale"},
      {h + "ffn_hc.fn", n + "hc_ffn_fn"},
      {h + "ffn_hc.base", n + "hc_ffn_base"},
      {h + "ffn_hc.scale", n + "hc_ffn_scale"},
      {h + "self_attn.q_a_proj.weight", n + "attn.wq_a.weight"},
      {h + "self_attn.q_a_norm.weight", n + "attn.q_norm.weight"},
      {h + "self_attn.q_b_proj.weight", n + "attn.wq_b.weight"},
      {h + "self_attn.kv_proj.weight", n + "attn.wkv.weight"},
      {h + "self_attn.kv_norm.weight", n + "attn.kv_norm.weight"},
      {h + "self_attn.o_a_proj.weight", n + "attn.wo_a.weight"},
      {h + "self_attn.o_b_proj.weight", n + "attn.wo_b.weight"},
      {h + "self_attn.sinks", n + "attn.attn_sink"},
      {h + "mlp.gate.weight", n + "ffn.gate.weight"},
      {h + "mlp.shared_experts.gate_proj.weight", n + "ffn.shared_experts.w1.weight"},
      {h + "mlp.shared_experts.up_proj.weight", n + "ffn.shared_experts.w3.weight"},
      {h + "mlp.shared_experts.down_proj.weight", n + "ffn.shared_experts.w2.weight"},
  };
  if (hash) {
    v.push_back({h + "mlp.gate.tid2eid", n + "ffn.gate.tid2eid"});
  } else {
    v.push_back({h + "mlp.gate.e_score_correction_bias", n + "ffn.gate.bias"});
  }
  if (ratio > 0) {
    const std::string hc = h + "self_attn.compressor.", nc = n + "attn.compressor.";
    v.push_back({hc + "kv_proj.weight", nc + "wkv.weight"});
    v.push_back({hc + "gate_proj.weight", nc + "wgate.weight"});
    v.push_back({hc + "kv_norm.weight", nc + "norm.weight"});
    v.push_back({hc + "position_bias", nc + "ape"});
  }
  if (ratio == 4) {
    const std::string hi = h + "self_attn.compressor.indexer.", ni = n + "attn.indexer.";
    v.push_back({hi + "kv_proj.weight", ni + "compressor.wkv.weight"});
    v.push_back({hi + "gate_proj.weight", ni + "compressor.wgate.weight"});
    v.push_back({hi + "kv_norm.weight", ni + "compressor.norm.weight"});
    v.push_back({hi + "position_bias", ni + "compressor.ape"});
    v.push_back({hi + "q_b_proj.weight", ni + "wq_b.weight"});
    v.push_back({hi + "scorer.weights_proj.weight", ni + "weights_proj.weight"});
  }
  return v;
}

const std::vector<std::pair<std::string, std::string>> kGlobalNames = {
    {"model.embed_tokens.weight", "embed.weight"},
    {"model.norm.weight", "norm.weight"},
    {"lm_head.weight", "head.weight"},
    {"model.hc_head.hc_fn", "hc_head_fn"},
    {"model.hc_head.hc_base", "hc_head_base"},
    {"model.hc_head.hc_scale", "hc_head_scale"},
};

TEST(WeightNames, EveryHfParameterMapsToItsNativeName) {
  std::vector<std::pair<std::string, std::string>> all = kGlobalNames;
  for (const auto& [l, ratio, hash] : {std::tuple{0, 0, true}, {1, 4, false}, {12, 128, false}}) {
    for (const auto& p : layer_names(l, ratio, hash)) all.push_back(p);
  }
  for (const auto& [hf, native] : all) {
    EXPECT_EQ(hf_to_native(hf), native);
    EXPECT_EQ(native_to_hf(native), hf);
  }
  EXPECT_EQ(hf_to_native("model.layers.3.self_attn.o_b_proj.weight_scale_inv"), "layers.3.attn.wo_b.scale");
  EXPECT_EQ(native_to_hf("layers.3.ffn.shared_experts.w2.scale"),
            "model.layers.3.mlp.shared_experts.down_proj.weight_scale_inv");
  EXPECT_EQ(hf_to_native("mtp.0.attn.wq_a.weight"), "mtp.0.attn.wq_a.weight");
  EXPECT_EQ(hf_to_native("model.layers.0.unknown.thing"), "layers.0.unknown.thing");
  EXPECT_TRUE(uses_hf_names({"mtp.0.x", "lm_head.weight"}));
  EXPECT_FALSE(uses_hf_names({"embed.weight", "layers.0.attn.wq_a.weight", "mtp.0.e_proj.weight"}));
}

TEST(WeightLoader, HfCheckpointLoadsUnderNativeNamesWithExpertsSplit) {
  const int64_t E = 3, I = 4, D = 5;
  std::map<std::string, Tensor> hf;
  std::set<std::string> expected;
  uint32_t seed = 100;
  std::vector<std::pair<std::string, std::string>> all = kGlobalNames;
  for (const auto& p : layer_names(0, 4, true)) all.push_back(p);
  for (const auto& [h, n] : all) {
    hf[h] = n.ends_with("tid2eid") ? Tensor::zeros(DType::I64, {2, 2}) : test::random_f32({2, 3}, seed++);
    expected.insert(n);
  }
  const Tensor gate_up = test::random_f32({E, 2 * I, D}, 1);
  const Tensor down = test::random_f32({E, D, I}, 2);
  Tensor gate_up_bf16 = Tensor::empty(DType::BF16, gate_up.shape());
  for (int64_t i = 0; i < gate_up.numel(); ++i) {
    gate_up_bf16.data<uint16_t>()[i] = f32_to_bf16(gate_up.f32()[i]);
  }
  hf["model.layers.0.mlp.experts.gate_up_proj"] = gate_up_bf16;
  hf["model.layers.0.mlp.experts.down_proj"] = down;
  for (int e = 0; e < E; ++e) {
    for (const char* w : {"w1", "w2", "w3"}) expected.insert(native_expert_name(0, e, w));
  }
  WeightStore store = load_via_file(hf);
  const std::vector<std::string> names = store.names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), expected);

  for (int64_t e = 0; e < E; ++e) {
    const Tensor w1 = store.take(native_expert_name(0, e, "w1"), {I, D});
    const Tensor w3 = store.take(native_expert_name(0, e, "w3"), {I, D});
    const Tensor w2 = store.take(native_expert_name(0, e, "w2"), {D, I});
    for (int64_t r = 0; r < I; ++r) {
      for (int64_t c = 0; c < D; ++c) {
        EXPECT_EQ(w1.f32()[r * D + c], round_bf16(gate_up.f32()[(e * 2 * I + r) * D + c]));
        EXPECT_EQ(w3.f32()[r * D + c], round_bf16(gate_up.f32()[(e * 2 * I + I + r) * D + c]));
      }
    }
    for (int64_t i = 0; i < D * I; ++i) EXPECT_EQ(w2.f32()[i], down.f32()[e * D * I + i]);
  }
}

// transformers 5.17 save_pretrained on a V4 model writes the native names with `model.` in
// front (lm_head as head) and the attention's kv_norm as `attn.norm` (it reverses its
// `.norm.` -> `.kv_norm.` load rename); such a checkpoint loads under native names.
TEST(WeightLoader, SavePretrainedV4NamesLoadAsNative) {
  std::map<std::string, Tensor> saved;
  std::set<std::string> expected;
  uint32_t seed = 300;
  for (const auto& p : layer_names(1, 4, false)) {
    const std::string& native = p.second;
    std::string name = "model." + native;
    if (native == "layers.1.attn.kv_norm.weight") name = "model.layers.1.attn.norm.weight";
    saved[name] = test::random_f32({2, 3}, seed++);
    expected.insert(native);
  }
  saved["model.embed.weight"] = test::random_f32({2, 3}, seed++);
  saved["head.weight"] = test::random_f32({2, 3}, seed++);
  expected.insert("embed.weight");
  expected.insert("head.weight");
  ASSERT_TRUE(saved.count("model.layers.1.attn.compressor.norm.weight"));
  const WeightStore store = load_via_file(saved);
  const std::vector<std::string> names = store.names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), expected);
  EXPECT_EQ(hf_to_native("model.layers.7.attn.norm.weight"), "layers.7.attn.kv_norm.weight");
  EXPECT_EQ(hf_to_native("model.layers.7.attn.compressor.norm.weight"),
            "layers.7.attn.compressor.norm.weight");
}

// V4.1 checkpoints: the vision tower is skipped (text only), Engram tables stay FP8 codes
// with their e8m0 scales (views, never converted), other FP8 weights dequantise as usual.
TEST(WeightLoader, V41VisionSkippedAndEngramTablesKeptRaw) {
  ModelConfig cfg;
  cfg.model_type = "deepseek_v41";
  cfg.quant.weight_block_n = cfg.quant.weight_block_k = 32;
  std::map<std::string, Tensor> t;
  t["vision.blocks.0.attn.qkv.weight"] = test::random_f32({4, 4}, 1);
  t["aligner.fc1.weight"] = test::random_f32({4, 4}, 2);
  t["image_newline"] = test::random_f32({4}, 3);
  const Tensor codes = random_e4m3({6, 64}, 4);
  const Tensor scales = random_e8m0({6, 2}, 5);
  t["layers.1.engram.embed.weight"] = codes;
  t["layers.1.engram.embed.scale"] = scales;
  t["layers.1.engram.wkv.weight"] = random_e4m3({32, 64}, 6);
  t["layers.1.engram.wkv.scale"] = random_e8m0({1, 2}, 7);
  WeightStore store = load_via_file(t, cfg);
  EXPECT_EQ(store.names(), (std::vector<std::string>{"layers.1.engram.embed.scale",
                                                     "layers.1.engram.embed.weight",
                                                     "layers.1.engram.wkv.weight"}));
  const Tensor kept = store.take("layers.1.engram.embed.weight", {6, 64}, DType::F8_E4M3);
  EXPECT_TRUE(bit_equal(kept, codes));
  EXPECT_TRUE(bit_equal(store.take("layers.1.engram.embed.scale", {6, 2}, DType::F8_E8M0), scales));
  const Tensor wkv = store.take("layers.1.engram.wkv.weight", {32, 64});
  EXPECT_TRUE(bit_equal(wkv, naive_fp8(t["layers.1.engram.wkv.weight"], t["layers.1.engram.wkv.scale"], 32, 32)));
  // The same names in a V4 checkpoint are not skipped.
  ModelConfig v4;
  WeightStore plain = load_via_file({{"vision.x", test::random_f32({2}, 8)}}, v4);
  EXPECT_TRUE(plain.has("vision.x"));
}

}  // namespace
}  // namespace deepinfer
