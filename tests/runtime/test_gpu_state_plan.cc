// plan_gpu_state (runtime/gpu_state_plan.h) at V4-Flash shapes (MODEL_SPEC: 43 layers,
// compress_ratios [0, 0] + [4, 128] x 20 + [4], head_dim 512 with 64 RoPE dims, window 128,
// indexer 64 x 128) against the byte counts worked out by hand from the formats: FP8 entry
// 448 e4m3 + 64 bf16 + 8 scale bytes = 584 B, blocks of 64 padded to a multiple of 576 B
// (37440 B); bf16 entry 1024 B; FP8 indexer key 132 B. Prints bytes per token of each format.
#include <gtest/gtest.h>

#include <cstdio>

#include "io/config_parser.h"
#include "runtime/gpu_state_plan.h"

namespace deepinfer {
namespace {

ModelConfig v4_flash() {
  ModelConfig c;
  c.vocab_size = 129280;
  c.hidden_size = 4096;
  c.num_layers = 43;
  c.num_heads = 64;
  c.head_dim = 512;
  c.rope_dim = 64;
  c.sliding_window = 128;
  c.index_n_heads = 64;
  c.index_head_dim = 128;
  c.index_topk = 512;
  c.compress_ratios = {0, 0};
  for (int i = 0; i < 20; ++i) {
    c.compress_ratios.push_back(4);
    c.compress_ratios.push_back(128);
  }
  c.compress_ratios.push_back(4);
  return c;
}

// max_rollback (speculative verification): each sequence keeps W - 1 + depth window
// positions and its compressor rings hold 2m + depth positions; depth 0 is the plan above.
TEST(GpuStatePlan, RollbackDepth) {
  const ModelConfig c = v4_flash();
  GpuModelOptions o;
  o.max_sequences = 16;
  o.max_context = 65536;
  o.max_batch_tokens = 2048;
  o.numerics = Numerics::kOfficial;
  o.kv_window_block_size = 0;  // the window pool in the KV blocks of 64 (the numbers below)
  const GpuStatePlan base = plan_gpu_state(c, o);
  o.max_rollback = 4;
  const GpuStatePlan r4 = plan_gpu_state(c, o);
  EXPECT_EQ(r4.window_blocks_per_sequence, 4);  // 131 positions straddle at most 4 blocks
  EXPECT_EQ(r4.window.n_blocks, 16 * 5 + 32);
  // By hand: 4 more ring positions (a and z) of 1024 (CSA) + 256 (indexer) or 512 (HCA)
  // fp32 channels, one more window block on each of the 43 layers.
  const int64_t more = 21 * (2 * 4 * 1024 * 4 + 2 * 4 * 256 * 4) + 20 * (2 * 4 * 512 * 4) + 43 * 37440;
  EXPECT_EQ(r4.state_bytes_per_sequence(), base.state_bytes_per_sequence() + more);
  EXPECT_EQ(r4.fixed_state_bytes(), base.fixed_state_bytes());
  o.max_rollback = 1;  // 128 positions still fit in 3 blocks' straddle
  EXPECT_EQ(plan_gpu_state(c, o).window_blocks_per_sequence, 3);
  EXPECT_EQ(compressor_ring_len(4, 0), 8);
  EXPECT_EQ(compressor_ring_len(128, 5), 261);
}

TEST(GpuStatePlan, V4FlashBytes) {
  const ModelConfig c = v4_flash();
  GpuModelOptions o;
  o.max_sequences = 16;
  o.max_context = 65536;
  o.max_batch_tokens = 2048;
  o.numerics = Numerics::kOfficial;
  o.kv_window_block_size = 0;  // the window pool in the KV blocks of 64 (the numbers below)
  const GpuStatePlan fp8 = plan_gpu_state(c, o);
  EXPECT_EQ(fp8.dtype, KvCacheDtype::kFp8);
  EXPECT_TRUE(fp8.idx_paged);
  EXPECT_EQ(fp8.kv.entry_bytes(), 584);
  EXPECT_EQ(fp8.kv.block_bytes(), 37440);
  EXPECT_EQ(fp8.idx.block_bytes(), 64 * 132);
  EXPECT_EQ(fp8.window_blocks_per_sequence, 3);  // 127 positions straddle at most 3 blocks
  EXPECT_EQ(fp8.window.max_blocks, 1024);
  EXPECT_EQ(fp8.window.n_blocks, 16 * 4 + 32);
  ASSERT_EQ(fp8.compressed.size(), 2u);
  EXPECT_EQ(fp8.compressed.at(4).max_blocks, 256);    // 16384 entries
  EXPECT_EQ(fp8.compressed.at(128).max_blocks, 8);    // 512 entries
  EXPECT_EQ(fp8.compressed.at(4).n_blocks, 16 * 256);

  // Per sequence, by hand: 21 CSA layers (rings 2 x 8 x 1024 fp32 + indexer rings 2 x 8 x 256
  // fp32, 256 blocks of entries, 256 index blocks), 20 HCA layers (rings 2 x 256 x 512 fp32,
  // 8 blocks), 4 window blocks on each of the 43 layers.
  const int64_t csa = 2 * 8 * 1024 * 4 + 2 * 8 * 256 * 4 + 256 * 37440 + 256 * 64 * 132;
  const int64_t hca = 2 * 256 * 512 * 4 + 8 * 37440;
  EXPECT_EQ(fp8.state_bytes_per_sequence(), 21 * csa + 20 * hca + 43 * 4 * 37440);
  EXPECT_EQ(fp8.fixed_state_bytes(), 43 * 32 * 37440);

  o.numerics = Numerics::kReference;
  const GpuStatePlan bf16 = plan_gpu_state(c, o);
  EXPECT_EQ(bf16.dtype, KvCacheDtype::kBf16);
  EXPECT_FALSE(bf16.idx_paged);
  EXPECT_EQ(bf16.kv.entry_bytes(), 1024);
  EXPECT_EQ(bf16.kv.block_bytes(), 65536);
  o.kv_cache_dtype = KvCacheDtype::kFp8;
  EXPECT_EQ(plan_gpu_state(c, o).dtype, KvCacheDtype::kFp8);
  o.paged_kv = false;
  const GpuStatePlan plain = plan_gpu_state(c, o);
  EXPECT_FALSE(plain.paged);
  EXPECT_EQ(plain.fixed_state_bytes(), 0);

  // Entries per token (the part that grows with the context), rings and window excluded.
  auto per_token = [&](const GpuStatePlan& p) {
    const double kv = p.paged ? double(p.kv.block_bytes()) / p.block_size : 4.0 * c.head_dim;
    const double idx = p.idx_paged ? double(p.idx.block_bytes()) / p.block_size : 4.0 * c.index_head_dim;
    return 21 * (kv / 4 + idx / 4) + 20 * kv / 128;
  };
  std::printf("V4-Flash state per token of context: fp8 %.1f B, bf16 %.1f B, plain fp32 %.1f B; "
              "per sequence of 64K: fp8 %.1f MiB, bf16 %.1f MiB, plain %.1f MiB\n",
              per_token(fp8), per_token(bf16), per_token(plain),
              fp8.state_bytes_per_sequence() / 1048576.0, bf16.state_bytes_per_sequence() / 1048576.0,
              plain.state_bytes_per_sequence() / 1048576.0);
  EXPECT_LT(per_token(fp8), per_token(bf16));
  EXPECT_LT(per_token(bf16), per_token(plain));
}


// V4.1-Flash's shapes (MODEL_SPEC §C.6: 40 layers, ratios [0, 0] + [2] x 18 + [1] x 20, KV
// sources 2, 8, 14, 20, index sources 2, 8, 14, 20, 24, 28, 32, 36; head_dim 512, indexer 32 x
// 128, window 128) on the tiny config's family traits, kv_cache_dtype fp8: the window pool in
// 528-B entries, the compressed pools in 288-B entries, the index keys paged in 68-B entries;
// 890 B per context token (DeepInfer's figure: 3 * 288 / 2 + 288 + 3 * 68 / 2 + 68). Per
// sequence by hand: 40 windows of (window_blocks + 1) blocks of 64 x 528 B, the compressed and
// key blocks of the 4 owners, the fp32 compressor rings (ratio 2: 2 x (4 + R) x 512 x 4 B each
// of a and z; ratio 1: 2 x (2 + R) x 512). DeepInfer's per-request rings (43 x 134 x 528 B +
// 3 x 28672 B ~ 3.1 MB) count 134 window slots per layer; ours are whole blocks.
TEST(GpuStatePlan, V41FlashFp8Formats) {
  ModelConfig c = load_model_config("tests/data/golden_v41/base/bf16/config.json");
  ASSERT_TRUE(c.is_v41());
  c.num_layers = 40;
  c.head_dim = 512;
  c.rope_dim = 64;
  c.num_heads = 64;
  c.sliding_window = 128;
  c.index_n_heads = 32;
  c.index_head_dim = 128;
  c.index_topk = 512;
  c.compress_ratios = {0, 0};
  for (int i = 0; i < 18; ++i) c.compress_ratios.push_back(2);
  for (int i = 0; i < 20; ++i) c.compress_ratios.push_back(1);
  c.kv_source_layer_ids = {2, 8, 14, 20};
  c.index_source_layer_ids = {2, 8, 14, 20, 24, 28, 32, 36};
  c.candidate_source_layer_id = 20;
  c.plan.clear();
  GpuModelOptions o;
  o.max_sequences = 4;
  o.max_context = 65536;
  o.max_batch_tokens = 2048;
  o.numerics = Numerics::kOfficial;
  o.kv_cache_dtype = KvCacheDtype::kFp8;
  o.max_rollback = 6;
  o.kv_window_block_size = 0;  // first the window pool in the KV blocks of 64
  const GpuStatePlan p = plan_gpu_state(c, o);
  complete_model_config(&c);
  EXPECT_EQ(p.kv.format, KvEntryFormat::kE4m3Block32);
  EXPECT_EQ(p.kv.entry_bytes(), 528);
  EXPECT_EQ(p.cmp_kv.format, KvEntryFormat::kE2m1E4m3Block16);
  EXPECT_EQ(p.cmp_kv.entry_bytes(), 288);
  EXPECT_TRUE(p.idx_paged);
  EXPECT_EQ(p.idx.entry_bytes(), 68);
  EXPECT_DOUBLE_EQ(paged_bytes_per_token(c, p), 890.0);
  const int64_t B = 64, C = o.max_context, R = o.max_rollback;
  EXPECT_EQ(p.window_blocks_per_sequence, 4);  // 133 positions straddle at most 4 blocks
  const int64_t windows = 40 * (p.window_blocks_per_sequence + 1) * B * 528;
  const int64_t entries = 3 * (C / 2 / B) * B * (288 + 68) + (C / B) * B * (288 + 68);
  const int64_t rings = 3 * 2 * (4 + R) * 512 * 4 + 2 * (2 + R) * 512 * 4;
  EXPECT_EQ(p.state_bytes_per_sequence(), windows + entries + rings);
  std::printf("V4.1-Flash fp8: %.0f B per context token, %lld B per sequence of %lld tokens "
              "(%lld B windows, %lld B compressor rings)\n", paged_bytes_per_token(c, p),
              static_cast<long long>(p.state_bytes_per_sequence()), static_cast<long long>(C),
              static_cast<long long>(windows), static_cast<long long>(rings));
  // V4 keeps MODEL1 entries for both pools and the 132-B keys.
  const GpuStatePlan v4 = plan_gpu_state(v4_flash(), o);
  EXPECT_EQ(v4.kv.format, KvEntryFormat::kModel1);
  EXPECT_EQ(v4.cmp_kv.entry_bytes(), 584);
  EXPECT_EQ(v4.idx.entry_bytes(), 132);

  // kv_window_block_size 8 (the default): the window pool alone in blocks of 8. By hand: 133 positions
  // straddle at most ceil(133 / 8) + 1 = 18 blocks, + 1 per sequence: 152 slots per layer
  // (DeepInfer's rings: 134), 40 x 152 x 528 B = 3,210,240 B of windows instead of 6,758,400;
  // the compressed entries, index keys and rings unchanged, still in blocks of 64.
  GpuModelOptions ow = o;
  ow.kv_window_block_size = GpuModelOptions{}.kv_window_block_size;
  EXPECT_EQ(ow.kv_window_block_size, 8);
  const GpuStatePlan pw = plan_gpu_state(c, ow);
  EXPECT_EQ(pw.window_block_size(), 8);
  EXPECT_EQ(pw.block_size, 64);
  EXPECT_EQ(pw.kv.block_size, 8);
  EXPECT_EQ(pw.cmp_kv.block_size, 64);
  EXPECT_EQ(pw.idx.block_size, 64);
  EXPECT_EQ(pw.window_blocks_per_sequence, 18);
  EXPECT_EQ(pw.window.max_blocks, C / 8);
  const int64_t windows8 = 40 * (18 + 1) * 8 * 528;
  EXPECT_EQ(windows8, 3210240);
  EXPECT_EQ(windows, 6758400);
  EXPECT_EQ(pw.state_bytes_per_sequence(), windows8 + entries + rings);
  EXPECT_DOUBLE_EQ(paged_bytes_per_token(c, pw), 890.0);
  // The forward's transient window blocks: ceil(2048 / 8) per layer.
  EXPECT_EQ(pw.fixed_state_bytes(), 40 * (2048 / 8) * 8 * 528);
  // V4 (the compressed layout starts as a copy of the window's): the compressed pool keeps 64.
  const GpuStatePlan v4w = plan_gpu_state(v4_flash(), ow);
  EXPECT_EQ(v4w.kv.block_size, 8);
  EXPECT_EQ(v4w.cmp_kv.block_size, 64);
  EXPECT_EQ(v4w.cmp_kv.block_bytes(), v4.cmp_kv.block_bytes());
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// DeepSeek-V4.1 (tests/data/golden_v41/base: ratios [0, 2, 2, 1, 1, 1, 1], KV sources 1 and 3,
// index sources 1, 3, 5): state follows the layer plan, not the ratios. Only the sources own
// compressor rings, compressed entries and index keys (no index compressor rings: the keys come
// from the latents); reuse / reindex layers add only their window. By hand, plain fp32 state:
// 7 windows of W x d, layer 1 rings 2 x (2 * 2) x d + C/2 entries of d + C/2 keys of d_I,
// layer 3 rings 2 x (2 * 1) x d + C entries of d + C keys of d_I.
TEST(GpuStatePlan, V41FollowsTheLayerPlan) {
  const ModelConfig c = load_model_config("tests/data/golden_v41/base/bf16/config.json");
  ASSERT_TRUE(c.is_v41());
  const int64_t W = c.sliding_window, d = c.head_dim, dI = c.index_head_dim;
  GpuModelOptions o;
  o.max_sequences = 2;
  o.max_context = 256;
  o.max_batch_tokens = 64;
  o.paged_kv = false;
  const int64_t C = o.max_context;
  const GpuStatePlan plain = plan_gpu_state(c, o);
  const int64_t want = 4 * (7 * W * d + 2 * 4 * d + (C / 2) * d + (C / 2) * dI + 2 * 2 * d + C * d +
                            C * dI);
  EXPECT_EQ(plain.state_bytes_per_sequence(), want);
  EXPECT_EQ(plain.compressed.size(), 2u);  // ratios 1 and 2, each with one owner
  // Paged bf16: the same rings and fp32 keys, the entries and windows in bf16 blocks of 16.
  o.paged_kv = true;
  o.kv_cache_dtype = KvCacheDtype::kBf16;
  o.kv_block_size = 16;
  o.kv_window_block_size = 0;  // windows in the same blocks of 16
  const GpuStatePlan paged = plan_gpu_state(c, o);
  EXPECT_FALSE(paged.idx_paged);
  const int64_t block = 16 * 2 * d;  // bf16 entries
  EXPECT_EQ(paged.kv.block_bytes(), block);
  const int64_t win_blocks = paged.window_blocks_per_sequence + 1;
  const int64_t want_paged = 4 * (2 * 4 * d + (C / 2) * dI + 2 * 2 * d + C * dI) +
                             (C / 2 / 16) * block + (C / 16) * block + 7 * win_blocks * block;
  EXPECT_EQ(paged.state_bytes_per_sequence(), want_paged);
  std::printf("V4.1 base: %lld B per sequence plain, %lld paged bf16 (context %lld)\n",
              static_cast<long long>(plain.state_bytes_per_sequence()),
              static_cast<long long>(paged.state_bytes_per_sequence()), static_cast<long long>(C));
}

}  // namespace
}  // namespace deepinfer
