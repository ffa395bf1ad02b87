// quantize_fp8_blocks (runtime/fp8_weight_quant.h), the host quantiser of kFp8 GpuModel's
// dense weights and of GpuModel::fp8_round_trip:
//  * the mixed_quant golden's native checkpoint (written by tools/make_goldens.py with numpy):
//    for every F8_E4M3 weight with its F8_E8M0 .scale, quantising io's dequantised fp32 values
//    gives back bitwise the same values (code * scale), also for wo_a cut into its o_groups
//    matrices as GpuModel quantises it, and the FP4 routed experts (io's dequant) too; codes
//    and scales are compared with the stored ones and the counts printed. The amax / 448 rule
//    the quantiser used before moves these values (so the check can fail);
//  * random blocks of many magnitudes, partial edge blocks: scales are powers of two, the
//    smallest with amax / scale <= 448, codes finite with |value| <= 448, round-trip error
//    at most half an e4m3 ulp; quantising the result again changes no value;
//  * constructed e4m3 x 2^S blocks (max code 448, in (224, 448), <= 224, subnormal, -0.0):
//    bit-exact, with the scale 2^S or smaller as the argument predicts;
//  * a non-finite weight is an Error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "io/checkpoint.h"
#include "io/config_parser.h"
#include "io/dequant.h"
#include "io/fp4_to_fp8.h"
#include "ops/gemm/gemm.h"
#include "runtime/fp8_weight_quant.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
const char* kNative = "tests/data/golden/mixed_quant/native";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// quantize_fp8_blocks of w [n, k] (not modified) and its round trip.
struct Quantised {
  std::vector<uint8_t> codes;
  std::vector<float> grid;    // [ceil(n/128), ceil(k/128)]
  std::vector<float> values;  // code * scale, as round_trip writes them
};
Quantised quantise(const float* w, int64_t n, int64_t k) {
  Quantised q{std::vector<uint8_t>(n * k),
              std::vector<float>(ceil_div64(n, 128) * ceil_div64(k, 128)),
              std::vector<float>(w, w + n * k)};
  quantize_fp8_blocks(q.values.data(), n, k, q.codes.data(), q.grid.data(), true);
  return q;
}

// Elements whose fp32 bits differ (so -0.0 vs 0.0 counts).
int64_t n_bit_diffs(const float* a, const float* b, int64_t n) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; ++i) d += std::memcmp(a + i, b + i, sizeof(float)) != 0;
  return d;
}

// The rule quantize_fp8_blocks used before (scale = amax / 448): values it gives back.
std::vector<float> amax_over_448_round_trip(const float* w, int64_t n, int64_t k) {
  std::vector<float> out(w, w + n * k);
  for (int64_t r0 = 0; r0 < n; r0 += 128) {
    for (int64_t c0 = 0; c0 < k; c0 += 128) {
      const int64_t r1 = std::min(n, r0 + 128), c1 = std::min(k, c0 + 128);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * k + c]));
      const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) out[r * k + c] = round_e4m3(w[r * k + c] / s) * s;
    }
  }
  return out;
}

TEST(Fp8WeightQuant, GoldenCheckpointFp8WeightsComeBackBitExactly) {
  const Checkpoint ckpt = Checkpoint::open(kNative);
  const ModelConfig cfg = load_model_config(kNative);
  int64_t n_tensors = 0, n_values = 0, n_value_diff = 0, n_code_identical = 0,
          n_scale_identical = 0, n_blocks = 0, n_blocks_scale_differs = 0, n_old_rule_moved = 0,
          n_wo_a = 0;
  for (const std::string& name : ckpt.names()) {
    if (ckpt.info(name).dtype != DType::F8_E4M3) continue;
    SCOPED_TRACE(name);
    ASSERT_TRUE(ends_with(name, ".weight"));
    const std::string sname = name.substr(0, name.size() - 7) + ".scale";
    ASSERT_TRUE(ckpt.has(sname));
    const Tensor q = ckpt.tensor(name), s = ckpt.tensor(sname);
    ASSERT_EQ(s.dtype(), DType::F8_E8M0);
    ASSERT_EQ(q.shape().size(), 2u);
    const int64_t n = q.size(0), k = q.size(1);
    ASSERT_EQ(s.shape(), (Shape{ceil_div64(n, 128), ceil_div64(k, 128)}));
    const Tensor io = dequant_fp8_block(q, s, 128, 128, name);  // what GpuModel is given
    const Quantised got = quantise(io.f32(), n, k);
    const int64_t diff = n_bit_diffs(got.values.data(), io.f32(), n * k);
    EXPECT_EQ(diff, 0) << "values moved by re-quantisation";
    n_value_diff += diff;
    n_values += n * k;
    n_code_identical += std::memcmp(got.codes.data(), q.raw(), n * k) == 0;
    bool scales_same = true;
    const auto* sc = static_cast<const uint8_t*>(s.raw());
    for (int64_t b = 0; b < s.numel(); ++b) {
      const bool same = got.grid[b] == e8m0_to_f32(sc[b]);
      EXPECT_LE(got.grid[b], e8m0_to_f32(sc[b])) << "block " << b;  // never coarser
      scales_same = scales_same && same;
      n_blocks_scale_differs += !same;
      ++n_blocks;
    }
    n_scale_identical += scales_same;
    const std::vector<float> old = amax_over_448_round_trip(io.f32(), n, k);
    n_old_rule_moved += n_bit_diffs(old.data(), io.f32(), n * k) > 0;
    // GpuModel quantises wo_a per output group: o_groups matrices [o_lora_rank, k].
    if (ends_with(name, "attn.wo_a.weight")) {
      const int64_t G = cfg.o_groups, Ro = cfg.o_lora_rank;
      ASSERT_EQ(n, G * Ro);
      for (int64_t g = 0; g < G; ++g) {
        const float* part = io.f32() + g * Ro * k;
        const Quantised gq = quantise(part, Ro, k);
        EXPECT_EQ(n_bit_diffs(gq.values.data(), part, Ro * k), 0) << "wo_a group " << g;
      }
      ++n_wo_a;
    }
    ++n_tensors;
  }
  std::printf("  mixed_quant native: %lld FP8 weight tensors (%lld values, %lld 128x128 blocks): "
              "%lld values differ after re-quantisation; codes identical in %lld tensors, scales "
              "in %lld (%lld blocks get a smaller scale); %lld wo_a checked per group; the old "
              "amax/448 rule moves values in %lld tensors\n",
              static_cast<long long>(n_tensors), static_cast<long long>(n_values),
              static_cast<long long>(n_blocks), static_cast<long long>(n_value_diff),
              static_cast<long long>(n_code_identical), static_cast<long long>(n_scale_identical),
              static_cast<long long>(n_blocks_scale_differs), static_cast<long long>(n_wo_a),
              static_cast<long long>(n_old_rule_moved));
  // The FP8 tensors the golden README lists: per backbone and MTP layer attn.wq_a / wq_b /
  // wkv / wo_a / wo_b and shared w1 / w2 / w3, attn.indexer.wq_b per ratio-4 layer, and each
  // MTP layer's e_proj / h_proj.
  const int64_t n_layers = cfg.num_layers + cfg.num_nextn_predict_layers;
  int64_t n_ratio4 = 0;
  for (int64_t l = 0; l < cfg.num_layers; ++l) n_ratio4 += cfg.compress_ratio(l) == 4;
  for (const int64_t r : cfg.mtp_compress_ratios) n_ratio4 += r == 4;
  ASSERT_GT(cfg.num_nextn_predict_layers, 0);
  EXPECT_EQ(n_tensors, 8 * n_layers + n_ratio4 + 2 * cfg.num_nextn_predict_layers);
  EXPECT_EQ(n_wo_a, n_layers);
  EXPECT_EQ(n_value_diff, 0);
  EXPECT_GT(n_old_rule_moved, 0);  // the check sees a quantiser that is not exact
}

TEST(Fp8WeightQuant, GoldenFp4ExpertsComeBackBitExactly) {
  // kFp8 without expert_checkpoint re-quantises io's fp32 experts with quantize_fp8_blocks.
  const Checkpoint ckpt = Checkpoint::open(kNative);
  const ModelConfig cfg = load_model_config(kNative);
  int64_t n_tensors = 0, n_exact = 0, n_same_as_conversion = 0;
  for (const std::string& name : ckpt.names()) {
    if (name.find(".ffn.experts.") == std::string::npos || !ends_with(name, ".weight")) continue;
    SCOPED_TRACE(name);
    const Tensor packed = ckpt.tensor(name);
    const Tensor scale = ckpt.tensor(name.substr(0, name.size() - 7) + ".scale");
    ASSERT_TRUE(is_fp4_pair(packed, scale));
    const Tensor io = dequant_fp4(packed, scale, name);
    const int64_t n = io.size(0), k = io.size(1);
    const Quantised got = quantise(io.f32(), n, k);
    const int64_t diff = n_bit_diffs(got.values.data(), io.f32(), n * k);
    EXPECT_EQ(diff, 0);
    n_exact += diff == 0;
    // Against the exact FP4 -> FP8 conversion GpuModel uses with expert_checkpoint.
    const Fp8BlockWeight conv = fp4_to_fp8_block(packed, scale, name);
    bool same = std::memcmp(got.codes.data(), conv.weight.raw(), n * k) == 0;
    const auto* cs = static_cast<const uint8_t*>(conv.scale.raw());
    for (int64_t b = 0; b < conv.scale.numel(); ++b) {
      same = same && got.grid[b] == e8m0_to_f32(cs[b]);
    }
    n_same_as_conversion += same;
    ++n_tensors;
  }
  std::printf("  mixed_quant native: %lld FP4 expert tensors, %lld re-quantised bit-exactly; %lld "
              "with the codes and scales of fp4_to_fp8_block\n",
              static_cast<long long>(n_tensors), static_cast<long long>(n_exact),
              static_cast<long long>(n_same_as_conversion));
  EXPECT_EQ(n_tensors,
            3 * (cfg.num_layers + cfg.num_nextn_predict_layers) * cfg.n_routed_experts);
}

// Half an e4m3 ulp at x (|x| <= 448): subnormals (below 2^-6) have ulp 2^-9, a normal in
// [2^e, 2^(e+1)) has ulp 2^(e-3).
double half_e4m3_ulp(double x) {
  const double a = std::fabs(x);
  if (a < std::ldexp(1.0, -6)) return std::ldexp(1.0, -10);
  return std::ldexp(1.0, std::ilogb(a) - 4);
}

bool is_pow2(float s) {
  int e = 0;
  return s > 0.0f && std::frexp(s, &e) == 0.5f;
}

TEST(Fp8WeightQuant, RandomBlocksPowerOfTwoScalesHalfUlpError) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-60, 60);
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 16}, {128, 128}, {130, 200}, {300, 520}, {77, 1000}}) {
    SCOPED_TRACE(std::to_string(n) + " x " + std::to_string(k));
    const int64_t n_nb = ceil_div64(n, 128), n_kb = ceil_div64(k, 128);
    // Each block its own magnitude; one block all zero, one with a heavy outlier.
    std::vector<float> block_mag(n_nb * n_kb);
    for (float& m : block_mag) m = std::ldexp(1.0f, exponent(gen));
    if (block_mag.size() > 2) block_mag[1] = 0.0f;
    std::vector<float> w(n * k);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c)
        w[r * k + c] = normal(gen) * block_mag[(r / 128) * n_kb + c / 128];
    w[0] *= 1000.0f;
    std::vector<uint8_t> codes(n * k);
    std::vector<float> grid(n_nb * n_kb), same(w);
    quantize_fp8_blocks(same.data(), n, k, codes.data(), grid.data(), false);
    EXPECT_EQ(n_bit_diffs(same.data(), w.data(), n * k), 0);  // round_trip = false: untouched
    const Quantised q = quantise(w.data(), n, k);
    EXPECT_EQ(q.codes, codes);
    EXPECT_EQ(q.grid, grid);
    int64_t n_bad = 0;
    for (int64_t bn = 0; bn < n_nb; ++bn) {
      for (int64_t bk = 0; bk < n_kb; ++bk) {
        const float s = grid[bn * n_kb + bk];
        float amax = 0.0f;
        for (int64_t r = bn * 128; r < std::min(n, bn * 128 + 128); ++r)
          for (int64_t c = bk * 128; c < std::min(k, bk * 128 + 128); ++c)
            amax = std::max(amax, std::fabs(w[r * k + c]));
        ASSERT_TRUE(is_pow2(s)) << "scale " << s << " of block (" << bn << ", " << bk << ")";
        if (amax == 0.0f) {
          EXPECT_EQ(s, 1.0f);
        } else {  // the smallest power of two with amax / s <= 448
          EXPECT_LE(static_cast<double>(amax) / s, 448.0);
          EXPECT_GT(static_cast<double>(amax) / s, 224.0);
        }
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const int64_t i = r * k + c;
        const double s = grid[(r / 128) * n_kb + c / 128];
        const float v = e4m3_to_f32(codes[i]);
        const double x = static_cast<double>(w[i]) / s;
        const bool ok = std::isfinite(v) && std::fabs(v) <= 448.0f &&
                        std::fabs(x - v) <= half_e4m3_ulp(x) &&
                        q.values[i] == static_cast<float>(v * s);
        n_bad += !ok;
        if (!ok && n_bad <= 5) {
          ADD_FAILURE() << "element (" << r << ", " << c << "): w " << w[i] << " scale " << s
                        << " code value " << v << " round trip " << q.values[i];
        }
      }
    }
    EXPECT_EQ(n_bad, 0);
    // Quantising FP8 values again changes none of them.
    const Quantised again = quantise(q.values.data(), n, k);
    EXPECT_EQ(n_bit_diffs(again.values.data(), q.values.data(), n * k), 0);
  }
}

TEST(Fp8WeightQuant, ConstructedE4m3TimesPow2BlocksAreExact) {
  // Blocks of e4m3 codes times 2^S (S per block): the largest |code| of each block picks
  // the case (all e4m3 values). The new scale is 2^S when that code is above 224, smaller
  // otherwise.
  std::mt19937 gen(9);
  const int64_t n = 260, k = 384;  // 3 x 3 blocks, the last block row partial
  const int64_t n_nb = 3, n_kb = 3;
  const std::vector<float> max_code = {448.0f, 240.0f, 288.0f, 224.0f, 104.0f,
                                       13.0f,  1.0f,   0.015625f, 0.001953125f};  // last: 2^-9
  for (const float m : max_code) ASSERT_EQ(round_e4m3(m), m) << m << " is not an e4m3 value";
  std::vector<float> w(n * k), stored_scale(n_nb * n_kb);
  for (int64_t b = 0; b < n_nb * n_kb; ++b) {
    stored_scale[b] = std::ldexp(1.0f, -20 + 5 * static_cast<int>(b));
  }
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const int64_t b = (r / 128) * n_kb + c / 128;
      // A random code no larger than the block's maximum (some -0.0), the maximum at the
      // block's first element.
      float v;
      do {
        v = e4m3_to_f32(static_cast<uint8_t>(gen() & 0xff));
      } while (!std::isfinite(v) || std::fabs(v) > max_code[b]);
      if (r % 128 == 0 && c % 128 == 0) v = -max_code[b];
      if ((r + c) % 97 == 0 && !(r % 128 == 0 && c % 128 == 0)) v = -0.0f;
      w[r * k + c] = v * stored_scale[b];
    }
  }
  const Quantised q = quantise(w.data(), n, k);
  EXPECT_EQ(n_bit_diffs(q.values.data(), w.data(), n * k), 0);
  for (int64_t b = 0; b < n_nb * n_kb; ++b) {
    SCOPED_TRACE("block " + std::to_string(b) + " max code " + std::to_string(max_code[b]));
    // The largest power of two 2^j with max_code * 2^j <= 448 scales the codes.
    const float want = stored_scale[b] / std::exp2(std::floor(std::log2(448.0 / max_code[b])));
    EXPECT_EQ(q.grid[b], want);
    EXPECT_EQ(q.grid[b] == stored_scale[b], max_code[b] > 224.0f);
  }
}

TEST(Fp8WeightQuant, NonFiniteWeightIsAnError) {
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    std::vector<float> w(130 * 16, 0.5f);
    w[129 * 16 + 3] = bad;
    std::vector<uint8_t> codes(w.size());
    std::vector<float> grid(2);
    try {
      quantize_fp8_blocks(w.data(), 130, 16, codes.data(), grid.data(), true);
      ADD_FAILURE() << "no Error for " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("block (1, 0)"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace deepinfer
