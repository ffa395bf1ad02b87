// The DSpark drafter of V4.1 and of V4-Flash-DSpark / 0731 on the GPU (GpuModelOptions::dspark),
// mirroring the CPU reference model/dspark.cc (MODEL_SPEC §D) with GpuModel's building blocks
// (fp32 projections, mHC, RMSNorm, RoPE, sparse attention with the sink, the router and the
// grouped MoE kernels). What differs between the two comes from the config's traits, as on the
// CPU: the tap point (dspark_taps_block_output), the stages' mHC (single_pass_mhc: V4.1's pre
// threads through the sites; V4 each site with its own), the head collapse (dspark_hc_head:
// V4's last-stage hc_head, V4.1 the last site's pre), the window rounding (V4: FP8 NoPE dims,
// bf16 rope dims), the routing (router_params) and DsparkConfig's experts.
//  * weights: main_proj, main_norm, the stages (ratio-0 blocks with their own MoE of
//    dspark_n_routed_experts, top dspark_num_experts_per_tok, else the backbone's), the last
//    stage's norm (and V4's hc_head), the Markov tables and the confidence projection.
//    Embedding and head are the backbone's. Formats as the MTP-1 drafter's (gpu_mtp.cc):
//    main_proj and the stages' projections (wq_a, wq_b, wkv, wo_a groups, wo_b, shared
//    experts) DeviceLinear in the model's format, the routed experts stacked in it
//    (expert_stack: kFp8 128x128-block FP8 through moe_experts_fp8_cuda, kF32 fp32 through
//    moe_experts_f32_cuda), the router gate, norms, mHC, sinks, Markov tables and confidence
//    fp32. With weight_format kFp8 the projections' inputs are quantised per 1 x 128 into the
//    drafter's own ActScratch (GpuDspark::a). The drafter's routed experts are FP8 also when
//    the backbone's are W4A8 (expert_format kW4a8): see init_dspark.
//  * context, inside every forward (graph-safe: launches sized by the forward's rows, per-row
//    values from the row metadata on the device): dspark_tap writes each target layer's
//    streams' mean (entering the layer, V4.1; after its block, V4) into the rows' taps; after
//    the last layer dspark_write_context
//    computes m = main_norm(main_proj(taps)) and per stage kv_norm(wkv m), RoPE at the row's
//    position, official: the window entry's rounding, stored by position in the stage's ring
//    (slot pos % (W + max_rollback + 1), the chunk's last n_slots rows). So every committed
//    position's key is written (not only the last), also after a truncate.
//  * draft (GpuModel::draft): rows i * B + b hold block position i of the b-th sequence
//    (token next_b for i = 0, the noise token after) at position p_b + 1 + i. The stages run
//    over all B * block rows at once; each stage's block keys go to the scratch rows after its
//    ring, and one gather builds per sequence the contiguous key list [ring keys of
//    max(0, p - W + 1)..p, block keys 0..block-1] that sparse_attention_cuda reads as every
//    block row's chunk (its attention position set to the list's last entry, window W + block:
//    so each block row sees the whole list, bidirectionally). Then the head collapse (V4.1
//    the last site's pre, V4 hc_head), norm, head, the Markov head step by step (block
//    position i's rows are contiguous, so each step is one embedding gather, one rank-R
//    correction and one arg-max), the
//    confidences, and one copy of the results to the host (the call's one synchronisation).
//    With cuda_graphs the device part (dspark_draft_enqueue) runs as a bucket of sequences,
//    captured on first use and replayed after (graph_stats draft_captured / draft_replays).
//  * rollback: everything is kept by position and a draft writes only scratch rows, so a draft
//    changes no state and truncate() needs nothing here.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/attention/sparse_attention_cuda.h"
#include "ops/embedding/embedding_cuda.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/moe/moe_cuda.h"
#include "ops/quant/qat_cuda.h"
#include "ops/rms_norm/rms_norm_cuda.h"
#include "ops/rope/rope_cuda.h"
#include "ops/sampling/sampling_cuda.h"
#include "runtime/dspark_kernels.h"
#include "runtime/gpu_model.h"
#include "runtime/gpu_model_impl.h"
#include "runtime/mtp_kernels.h"

namespace deepinfer {
namespace {

float proj_std(int64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); }

// Sections of a draft's metadata, each `rows` ints (row i * B + b), then the key gather list
// (max_sequences * (W + block) ints: sequence b's list at b * (W + block)).
//  kQIds: block token ids; kQPos: RoPE positions p + 1 + i; kQAttn: the attention position
//  (the list's last entry); kQLo: the list's first position; kQRow0: b * (W + block); kQZero: 0.
enum DsparkSection : int { kQIds, kQPos, kQAttn, kQLo, kQRow0, kQZero, kQSections };

}  // namespace

GpuLayerW GpuModel::Impl::drafter_block(const DsparkStageWeights* b, int64_t E) {
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult, H = cfg.num_heads, d = cfg.head_dim;
  const int64_t Rq = cfg.q_lora_rank, G = cfg.o_groups, Ro = cfg.o_lora_rank, gw = H * d / G;
  const int64_t I = cfg.moe_intermediate_size, Is = I * cfg.n_shared_experts, nmix = (2 + hc) * hc;
  GpuLayerW w;
  auto hc_w = [&](const HcWeightsT* h) {
    return GpuHcW{f32(h ? &h->fn : nullptr, nmix * hc * D, 0.0f, proj_std(hc * D)),
                  f32(h ? &h->base : nullptr, nmix, 0.0f, 0.1f), f32(h ? &h->scale : nullptr, 3, 0.5f, 0.1f)};
  };
  w.attn_norm = f32(b ? &b->attn_norm : nullptr, D, 1.0f, 0.1f);
  w.ffn_norm = f32(b ? &b->ffn_norm : nullptr, D, 1.0f, 0.1f);
  w.hc_attn = hc_w(b ? &b->hc_attn : nullptr);
  w.hc_ffn = hc_w(b ? &b->hc_ffn : nullptr);
  const AttentionWeights* a = b ? &b->attn : nullptr;
  CHECK_KIND(kUnsupported, a == nullptr || !a->has_compressor)
      << "GpuModel: a drafter block has a compressor; drafter blocks are ratio 0";
  w.wq_a = linear(a ? &a->wq_a : nullptr, Rq, D, proj_std(D));
  w.q_norm = f32(a ? &a->q_norm : nullptr, Rq, 1.0f, 0.1f);
  w.wq_b = linear(a ? &a->wq_b : nullptr, H * d, Rq, proj_std(Rq));
  w.wkv = linear(a ? &a->wkv : nullptr, d, D, proj_std(D));
  w.kv_norm = f32(a ? &a->kv_norm : nullptr, d, 1.0f, 0.1f);
  if (a != nullptr) ICHECK(a->wo_a.numel() == G * Ro * gw) << "GpuModel: drafter wo_a " << a->wo_a.str();
  for (int64_t grp = 0; grp < G; ++grp) {
    w.wo_a.push_back(linear(a ? a->wo_a.f32() + grp * Ro * gw : nullptr, Ro, gw, proj_std(gw)));
  }
  w.wo_b = linear(a ? &a->wo_b : nullptr, D, G * Ro, proj_std(G * Ro));
  w.sink = f32(a ? &a->sink : nullptr, H, 0.0f, 1.0f);
  const MoeWeights* mo = b ? &b->moe : nullptr;
  CHECK_KIND(kUnsupported, mo == nullptr || (mo->bias.defined() && !mo->tid2eid.defined()))
      << "GpuModel: a drafter block's MoE must be score-routed with a bias";
  CHECK(mo == nullptr || static_cast<int64_t>(mo->experts.size()) == E)
      << "GpuModel: drafter block with " << (mo ? mo->experts.size() : 0) << " experts, expected " << E;
  w.gate = linear(mo ? &mo->gate : nullptr, E, D, proj_std(D), true);
  w.bias = f32(mo ? &mo->bias : nullptr, E, 0.0f, 0.1f);
  std::vector<const Tensor*> h1, h3, h2;
  for (int64_t e = 0; mo != nullptr && e < E; ++e) {
    h1.push_back(&mo->experts[e].w1);
    h3.push_back(&mo->experts[e].w3);
    h2.push_back(&mo->experts[e].w2);
  }
  // In the model's format (kFp8: 128x128-block FP8, init_dspark refuses other grids):
  // re-quantised from the host values as fp8_round_trip rounds them, or, for a streamed
  // checkpoint, converted by the stream (FP4 exactly, FP8 as stored).
  MoeStack s1, s3, s2;
  w.w1 = expert_stack(h1, E, I, D, proj_std(D), &s1);
  w.w3 = expert_stack(h3, E, I, D, proj_std(D), &s3);
  w.w2 = expert_stack(h2, E, D, I, proj_std(I), &s2);
  w.experts = MoeExpertsFp8Weights{s1.q, s1.s, s3.q, s3.s, s2.q, s2.s};
  w.experts_f32 = MoeExpertsF32Weights{s1.f, s3.f, s2.f};
  w.sw1 = linear(mo ? &mo->shared.w1 : nullptr, Is, D, proj_std(D));
  w.sw3 = linear(mo ? &mo->shared.w3 : nullptr, Is, D, proj_std(D));
  w.sw2 = linear(mo ? &mo->shared.w2 : nullptr, D, Is, proj_std(Is));
  return w;
}

void GpuModel::Impl::init_dspark(const ModelWeights* hw) {
  CHECK_KIND(kUnsupported, !opt.mtp) << "GpuModel: mtp and dspark are two drafters; a model has one";
  CHECK_KIND(kUnsupported, cfg.dspark.block_size > 0)
      << "GpuModel: dspark needs a config with DSpark keys (dspark_block_size, ...); this one has none";
  // weight_format kFp8: V4's 128x128 blocks only. V4.1's FP8 projections are 32x32 blocks
  // with 1 x 32 activations, and the backbone runs V4.1's routed experts only as W4A8 (FP4 as
  // stored; FP8 experts off the 128 grid are refused, gpu_model.cc): the drafter would need
  // W4A8 experts too, which drafter_block does not build (expert_stack_w4a8 reads FP4 codes
  // from a streamed placeholder or from CheckpointExperts, which names backbone experts only),
  // so V4.1 is refused here by name (the constructor refuses it before, too).
  CHECK_KIND(kUnsupported, !fp8() || fp8_weight_block(cfg) == kFp8GemmBlock)
      << "GpuModel: DSpark with weight_format fp8 needs 128x128-block FP8 (V4); this config's FP8 blocks are "
      << fp8_weight_block(cfg) << "x" << fp8_weight_block(cfg)
      << " (DeepSeek-V4.1: its routed experts run W4A8 only, not built for the drafter); use weight_format fp32";
  // Backbone experts W4A8 (expert_format kW4a8): the drafter's stay 128x128-block FP8
  // (expert_stack; a streamed FP4 checkpoint converts exactly), about twice W4A8's bytes (for
  // V4-Flash-0731's 3 stages x 256 experts ~19 GB instead of ~10 GB, fp32 ~77 GB). W4A8
  // drafter experts (expert_stack_w4a8 + moe_experts_w4a8_cuda in pieces) would need FP4
  // codes the host-weights path cannot reach (CheckpointExperts names backbone experts), and
  // no golden has W4A8-able shapes (moe_intermediate_size 16) to test them against.
  CHECK_KIND(kUnsupported, hw == nullptr || hw->has_dspark)
      << "GpuModel: dspark needs the checkpoint's DSpark tensors; this one has none";
  const DsparkWeights* w = hw != nullptr ? &hw->dspark : nullptr;
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult, d = cfg.head_dim, W = cfg.sliding_window;
  const int64_t T = opt.max_batch_tokens, Bm = opt.max_sequences, V = cfg.vocab_size;
  auto g = std::make_unique<GpuDspark>();
  g->block = cfg.dspark.block_size;
  g->rank = cfg.dspark.markov_rank;
  g->noise = cfg.dspark.noise_token_id;
  g->n_taps = static_cast<int64_t>(cfg.dspark.target_layer_ids.size());
  g->n_experts = cfg.dspark.n_routed_experts > 0 ? cfg.dspark.n_routed_experts : cfg.n_routed_experts;
  g->top_k = cfg.dspark.n_experts_per_tok > 0 ? cfg.dspark.n_experts_per_tok : cfg.n_experts_per_tok;
  // DsparkConfig::n_stages: V4.1's num_nextn_predict_layers, V4-DSpark's three.
  const int64_t n_stages = w != nullptr ? static_cast<int64_t>(w->stages.size()) : cfg.dspark.n_stages;
  CHECK_KIND(kUnsupported, n_stages >= 1 && g->n_taps >= 1 && g->rank >= 1)
      << "GpuModel: dspark needs stages (DsparkConfig::n_stages), dspark_target_layer_ids and "
         "dspark_markov_rank (got " << n_stages << ", " << g->n_taps << ", " << g->rank << ")";
  g->tap_of_layer.assign(cfg.num_layers, -1);
  for (int64_t t = 0; t < g->n_taps; ++t) g->tap_of_layer[cfg.dspark.target_layer_ids[t]] = t;
  const int64_t R = g->rank, n_taps = g->n_taps;

  g->main_proj = linear(w ? &w->main_proj : nullptr, D, n_taps * D, proj_std(n_taps * D));
  g->main_norm = f32(w ? &w->main_norm : nullptr, D, 1.0f, 0.1f);
  for (int64_t k = 0; k < n_stages; ++k) g->stages.push_back(drafter_block(w ? &w->stages[k] : nullptr, g->n_experts));
  g->norm = f32(w ? &w->norm : nullptr, D, 1.0f, 0.1f);
  if (cfg.traits.dspark_hc_head) {  // V4: the last stage's hc_head (model/dspark.cc)
    g->hc_head = {f32(w ? &w->hc_head.fn : nullptr, hc * hc * D, 0.0f, proj_std(hc * D)),
                  f32(w ? &w->hc_head.base : nullptr, hc, 0.0f, 0.1f),
                  f32(w ? &w->hc_head.scale : nullptr, 1, 0.5f, 0.1f)};
  }
  g->markov_embed = f32(w ? &w->markov_embed : nullptr, V * R, 0.0f, 1.0f);
  g->markov_head = f32(w ? &w->markov_head : nullptr, V * R, 0.0f, proj_std(R));
  g->confidence = f32(w ? &w->confidence : nullptr, D + R, 0.0f, proj_std(D + R));

  // State (in state_pools: randomize_state / clear_state cover it) and scratch.
  const int64_t S = opt.max_sequences + (opt.cuda_graphs ? 1 : 0);
  g->rows = Bm * g->block;
  g->n_slots = W + opt.max_rollback + 1;
  g->ring_stride = (S * g->n_slots + g->rows) * d;
  g->rings = state_alloc(n_stages * g->ring_stride);
  g->taps = alloc(T * n_taps * D);
  g->m = alloc(T * D);
  const int64_t rows = g->rows;
  g->Z = alloc(rows * hc * D);
  g->Z2 = alloc(rows * hc * D);
  g->keys = alloc(Bm * (W + g->block) * d);
  g->h = alloc(rows * D);
  g->hn = alloc(rows * D);
  g->head_pre = alloc(rows * hc);
  g->logits = alloc(rows * V);
  g->e = alloc(rows * R);
  g->router = alloc(rows * g->n_experts);
  g->route_ids = reinterpret_cast<int32_t*>(alloc(rows * g->top_k));
  g->route_w = alloc(rows * g->top_k);
  g->tokens = reinterpret_cast<int32_t*>(alloc(rows));
  g->conf = alloc(rows);
  g->prob = alloc(rows);
  g->meta_ints = kQSections * rows + Bm * (W + g->block);
  g->meta = reinterpret_cast<int32_t*>(alloc(g->meta_ints));
  CUDA_CHECK(cudaMallocHost(&g->meta_host, g->meta_ints * sizeof(int32_t)));
  CUDA_CHECK(cudaMallocHost(&g->out_host, 3 * rows * sizeof(float)));
  if (fp8()) {
    // FP8 activation scratch (lin / linear_run quantise into it, per 1 x fp8_weight_block):
    // the context write's rows (max_batch_tokens: main_proj over the taps, K = n_taps * D;
    // the stages' wkv, K = D) and the draft's (rows = max_sequences * block: wq_a, wkv, the
    // shared experts, the head, K = D; wq_b K = q_lora_rank; each wo_a group K = H * d / G;
    // wo_b K = G * o_lora_rank; the shared w2 K = I * n_shared_experts).
    const int64_t H = cfg.num_heads, G = cfg.o_groups, gw = H * d / G;
    const int64_t Is = cfg.moe_intermediate_size * cfg.n_shared_experts;
    const int64_t kmax = std::max({n_taps * D, D, cfg.q_lora_rank, gw, G * cfg.o_lora_rank, Is});
    const int64_t a_rows = std::max(T, rows), b = fp8_weight_block(cfg);
    g->a = ActScratch{static_cast<uint8_t*>(raw_alloc(a_rows * kmax)), alloc(a_rows * ceil_div64(kmax, b)), b};
  }
  MoeExpertsShape ms = moe_shape(rows);
  ms.n_experts = g->n_experts;
  ms.top_k = g->top_k;
  g->moe_ws = raw_alloc(static_cast<int64_t>(fp8() ? moe_experts_fp8_workspace_bytes(ms)
                                                   : moe_experts_f32_workspace_bytes(ms)));
  dspark = std::move(g);
}

void GpuModel::Impl::dspark_tap(int64_t layer, bool after_block, const float* X) {
  GpuDspark& g = *dspark;
  const int64_t t = g.tap_of_layer[layer];
  if (t < 0 || after_block != cfg.traits.dspark_taps_block_output) return;
  dspark_tap_mean_cuda(ctx.stream(), X, n_rows, cfg.hc_mult, cfg.hidden_size, g.n_taps, t, g.taps);
}

void GpuModel::Impl::dspark_write_context() {
  GpuDspark& g = *dspark;
  cudaStream_t stream = ctx.stream();
  const int64_t N = n_rows, D = cfg.hidden_size, d = cfg.head_dim, r = cfg.rope_dim;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const bool official = opt.numerics == Numerics::kOfficial;
  const ModelTraits& tr = cfg.traits;
  // kFp8: main_proj and each stage's wkv quantise their input into g.a (sized in init_dspark
  // for max_batch_tokens rows of K = n_taps * D), so the whole write stays graph-safe.
  lin(g.main_proj, g.taps, N, g.m, g.a);
  rms_norm_cuda(stream, g.m, g.main_norm, N, D, D, eps, g.m);
  for (size_t k = 0; k < g.stages.size(); ++k) {
    const GpuLayerW& w = g.stages[k];
    lin(w.wkv, g.m, N, kv, g.a);
    rms_norm_cuda(stream, kv, w.kv_norm, N, d, d, eps, kv);
    rope_cuda(stream, kv, sec(kPositions), N, 1, d, r, inv_freq_main);
    if (official) {
      fp8_roundtrip_rows_cuda(stream, kv, N, d, tr.window_fp8_all_dims ? d : d - r, tr.window_fp8_block);
    }
    mtp_key_store_cuda(stream, kv, N, d, r, sec(kPositions), sec(kSlot), sec(kChunkEnd), 0,
                       official && !tr.window_fp8_all_dims, g.rings + k * g.ring_stride, g.n_slots);
  }
}

// Everything after the metadata upload through the results on the device: launches sized by b
// (rows n = b * block) and construction-time sizes only, per-row values read from g.meta, so
// a bucket's graph replays it (dspark_draft).
void GpuModel::Impl::dspark_draft_enqueue(int64_t B, bool prob) {
  GpuDspark& g = *dspark;
  const int64_t K = g.block, n = B * K;
  const int64_t W = cfg.sliding_window, D = cfg.hidden_size, hc = cfg.hc_mult, V = cfg.vocab_size;
  const int64_t H = cfg.num_heads, d = cfg.head_dim, r = cfg.rope_dim, Rq = cfg.q_lora_rank, R = g.rank;
  const int64_t G = cfg.o_groups, Ro = cfg.o_lora_rank, gw = H * d / G;
  const int64_t Is = cfg.moe_intermediate_size * cfg.n_shared_experts;
  const int64_t S = opt.max_sequences + (opt.cuda_graphs ? 1 : 0), L = W + K;
  cudaStream_t stream = ctx.stream();
  const int32_t* sm = g.meta;
  auto section = [&](int s) { return sm + static_cast<int64_t>(s) * g.rows; };
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const bool official = opt.numerics == Numerics::kOfficial;
  const ModelTraits& tr = cfg.traits;
  RouterParams rp = router_params();
  rp.n_experts = g.n_experts;
  rp.top_k = g.top_k;
  rp.normalize = tr.route_normalize_always || (cfg.norm_topk_prob && g.top_k > 1);
  MoeExpertsShape shape = moe_shape(n);
  shape.n_experts = g.n_experts;
  shape.top_k = g.top_k;

  // Single-pass mHC (V4.1): each site collapses with the previous site's pre, the first with
  // e_0 (pre_mix); V4: each site with its own.
  const bool single_pass = tr.single_pass_mhc;
  embedding_cuda(stream, embed, section(kQIds), n, D, hc, g.Z);
  if (single_pass) {
    CUDA_CHECK(cudaMemcpyAsync(pre_mix, pre_e0, n * hc * sizeof(float), cudaMemcpyDeviceToDevice,
                               stream));
  }
  for (size_t k = 0; k < g.stages.size(); ++k) {
    const GpuLayerW& w = g.stages[k];
    float* ring = g.rings + k * g.ring_stride;
    // Attention site.
    hc_mix_cuda(ctx, g.Z, n, w.hc_attn.fn, w.hc_attn.base, w.hc_attn.scale, hp, mix_scratch, pre, post, comb);
    hc_collapse_cuda(stream, g.Z, single_pass ? pre_mix : pre, n, hc, D, u);
    rms_norm_cuda(stream, u, w.attn_norm, n, D, D, eps, x);
    lin(w.wq_a, x, n, q_r, g.a);
    rms_norm_cuda(stream, q_r, w.q_norm, n, Rq, Rq, eps, q_r);
    lin(w.wq_b, q_r, n, q, g.a);
    if (tr.per_head_q_norm) rms_norm_cuda(stream, q, nullptr, n * H, d, d, eps, q);
    lin(w.wkv, x, n, kv, g.a);
    rms_norm_cuda(stream, kv, w.kv_norm, n, d, d, eps, kv);
    rope_cuda(stream, q, section(kQPos), n, H, d, r, inv_freq_main);
    rope_cuda(stream, kv, section(kQPos), n, 1, d, r, inv_freq_main);
    if (official) {  // the window entry's rounding (model/kv_rounding.h)
      fp8_roundtrip_rows_cuda(stream, kv, n, d, tr.window_fp8_all_dims ? d : d - r, tr.window_fp8_block);
      if (!tr.window_fp8_all_dims) dspark_round_rope_bf16_cuda(stream, kv, n, d, r);
    }
    CUDA_CHECK(cudaMemcpyAsync(ring + S * g.n_slots * d, kv, n * d * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    gather_rows_cuda(stream, ring, sm + kQSections * g.rows, B * L, d, g.keys);
    SparseAttentionParams ap;
    ap.q = q;
    ap.out = o;
    ap.sinks = w.sink;
    ap.n_rows = n;
    ap.n_heads = H;
    ap.head_dim = d;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(d));
    ap.positions = section(kQAttn);
    ap.slot = section(kQZero);
    ap.chunk_start = section(kQLo);  // every key of the list is a "chunk" row of g.keys
    ap.chunk_row0 = section(kQRow0);
    ap.chunk_kv = g.keys;
    ap.ring = g.keys;  // never read: no key is older than chunk_start
    ap.window = L;
    sparse_attention_cuda(stream, ap);
    rope_cuda(stream, o, section(kQPos), n, H, d, r, inv_freq_main, /*inverse=*/true);
    for (int64_t grp = 0; grp < G; ++grp) {  // grouped output projection
      CUDA_CHECK(cudaMemcpy2DAsync(og, gw * sizeof(float), o + grp * gw, H * d * sizeof(float), gw * sizeof(float),
                                   n, cudaMemcpyDeviceToDevice, stream));
      lin(w.wo_a[grp], og, n, zg, g.a);
      CUDA_CHECK(cudaMemcpy2DAsync(zz + grp * Ro, G * Ro * sizeof(float), zg, Ro * sizeof(float), Ro * sizeof(float),
                                   n, cudaMemcpyDeviceToDevice, stream));
    }
    lin(w.wo_b, zz, n, y, g.a);
    hc_expand_cuda(stream, g.Z, y, post, comb, n, hc, D, g.Z2);
    std::swap(g.Z, g.Z2);
    // FFN site: the stage's own experts, score-routed with the (text) bias.
    // V4.1: this site's pre goes to pre_ffn (the next site's collapse) and the collapse takes
    // the attention site's; V4: the site's own pre (pre_ffn exists only with single-pass mHC).
    hc_mix_cuda(ctx, g.Z, n, w.hc_ffn.fn, w.hc_ffn.base, w.hc_ffn.scale, hp, mix_scratch,
                single_pass ? pre_ffn : pre, post, comb);
    hc_collapse_cuda(stream, g.Z, pre, n, hc, D, u);
    rms_norm_cuda(stream, u, w.ffn_norm, n, D, D, eps, x);
    lin(w.gate, x, n, g.router, g.a);
    route_cuda(stream, g.router, n, w.bias, nullptr, section(kQIds), rp, g.route_ids, g.route_w);
    lin(w.sw1, x, n, sg, g.a);
    lin(w.sw3, x, n, sv, g.a);
    swiglu_cuda(stream, sg, sv, nullptr, n, Is, static_cast<float>(cfg.swiglu_limit));
    lin(w.sw2, sg, n, ysh, g.a);
    if (fp8()) {  // the stage's experts in the model's format (drafter_block)
      moe_experts_fp8_cuda(stream, shape, x, g.route_ids, g.route_w, w.experts, ysh, g.moe_ws, y);
    } else {
      moe_experts_f32_cuda(stream, shape, x, g.route_ids, g.route_w, w.experts_f32, ysh, g.moe_ws, y);
    }
    hc_expand_cuda(stream, g.Z, y, post, comb, n, hc, D, g.Z2);
    std::swap(g.Z, g.Z2);
    if (single_pass) {
      CUDA_CHECK(cudaMemcpyAsync(pre_mix, pre_ffn, n * hc * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    }
  }
  // Head: the collapse (V4: the last stage's hc_head; V4.1: the last site's pre), the last
  // stage's norm, the backbone's head.
  if (tr.dspark_hc_head) {
    hc_head_cuda(ctx, g.Z, n, g.hc_head.fn, g.hc_head.base, g.hc_head.scale, hp, mix_scratch, g.head_pre, g.h);
  } else {
    hc_collapse_cuda(stream, g.Z, pre_mix, n, hc, D, g.h);
  }
  rms_norm_cuda(stream, g.h, g.norm, n, D, D, eps, g.hn);
  lin(head, g.hn, n, g.logits, g.a);
  // Markov head, block position by block position (tok_0 = next; rows i * B.. are contiguous).
  for (int64_t i = 0; i < K; ++i) {
    const int32_t* tok_in = i == 0 ? section(kQIds) : g.tokens + (i - 1) * B;
    embedding_cuda(stream, g.markov_embed, tok_in, B, R, 1, g.e + i * B * R);
    dspark_markov_add_cuda(stream, g.markov_head, g.e + i * B * R, B, V, R, g.logits + i * B * V);
    argmax_rows_cuda(stream, g.logits + i * B * V, B, V, g.tokens + i * B);
  }
  dspark_confidence_cuda(stream, g.h, g.e, g.confidence, n, D, R, g.conf);
  if (prob) mtp_top_probability_cuda(stream, g.logits, n, V, g.prob);
}

std::vector<DraftBlock> GpuModel::Impl::dspark_draft(std::span<const int64_t> sequences, std::span<const int32_t> next,
                                                     int64_t n_drafts, std::vector<std::vector<float>>* probabilities) {
  GpuDspark& g = *dspark;
  const int64_t B = static_cast<int64_t>(sequences.size()), K = g.block;
  const int64_t W = cfg.sliding_window, D = cfg.hidden_size, V = cfg.vocab_size;
  const int64_t S = opt.max_sequences + (opt.cuda_graphs ? 1 : 0), L = W + K;
  CHECK(B == static_cast<int64_t>(next.size())) << "draft: " << B << " sequences but " << next.size() << " next tokens";
  CHECK(n_drafts >= 1 && n_drafts <= K) << "draft: " << n_drafts << " drafts asked; the DSpark block drafts 1 to " << K;
  CHECK_KIND(kResourceExhausted, B * K <= opt.max_batch_tokens)
      << "draft: " << B << " sequences x the block of " << K << " exceed max_batch_tokens " << opt.max_batch_tokens;
  std::vector<DraftBlock> out(static_cast<size_t>(B));
  if (B == 0) return out;
  std::vector<bool> seen(seq_tokens.size(), false);
  for (int64_t i = 0; i < B; ++i) {
    const int64_t s = sequences[i];
    CHECK(s >= 0 && s < static_cast<int64_t>(seq_tokens.size()) && seq_tokens[s] >= 0)
        << "draft: " << s << " is not a live sequence";
    CHECK(!seen[s]) << "draft: sequence " << s << " appears twice";
    seen[s] = true;
    CHECK(seq_tokens[s] > 0) << "draft: sequence " << s << " has no committed position yet";
    CHECK(next[i] >= 0 && next[i] < V) << "draft: next token " << next[i] << " is outside the vocabulary [0, " << V << ")";
  }
  // Graphs (cuda_graphs, not profiling): the draft runs as a bucket Bb >= B of sequences (the
  // smallest of graph_buckets); sequences B.. Bb-1 are padding: token 0 then the noise at
  // positions 0.., attending to their own block keys only (no ring row), results ignored.
  const int64_t bucket = graphs_on && !profiling ? graph_bucket(B, K, opt.max_batch_tokens) : 0;
  const bool graph = bucket > 0;
  const int64_t Bb = graph ? bucket : B;
  // Metadata (positions are known on the host; the drafts stay on the device until the end).
  const int64_t n = Bb * K;
  int32_t* mh = g.meta_host;
  auto at = [&](int s, int64_t row) -> int32_t& { return mh[s * g.rows + row]; };
  int32_t* gather = mh + kQSections * g.rows;
  for (int64_t b = 0; b < Bb; ++b) {
    const bool pad = b >= B;
    const int64_t s = pad ? -1 : sequences[b], p = pad ? -1 : seq_tokens[s] - 1;
    const int64_t lo = pad ? 0 : std::max<int64_t>(0, p - W + 1);
    const int64_t n_keys = (p - lo + 1) + K;
    for (int64_t i = 0; i < K; ++i) {
      const int64_t row = i * Bb + b;
      at(kQIds, row) = i == 0 ? (pad ? 0 : next[b]) : static_cast<int32_t>(g.noise);
      at(kQPos, row) = static_cast<int32_t>(p + 1 + i);
      at(kQAttn, row) = static_cast<int32_t>(lo + n_keys - 1);
      at(kQLo, row) = static_cast<int32_t>(lo);
      at(kQRow0, row) = static_cast<int32_t>(b * L);
      at(kQZero, row) = 0;
    }
    int32_t* list = gather + b * L;
    for (int64_t t = 0; t < L; ++t) {  // ring rows of lo..p, the block rows, then padding (never read)
      const int64_t k = std::min(t, n_keys - 1);
      list[t] = static_cast<int32_t>(k <= p - lo ? s * g.n_slots + (lo + k) % g.n_slots
                                                 : S * g.n_slots + (k - (p - lo + 1)) * Bb + b);
    }
  }
  cudaStream_t stream = ctx.stream();
  const GpuWork saved = work;  // work() keeps describing the last forward
  CUDA_CHECK(cudaMemcpyAsync(g.meta, mh, g.meta_ints * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  const bool host_logits = probabilities == nullptr;
  if (graph) {  // captured on first use (gpu_graphs.cc): that call runs eagerly, then the capture
    const std::pair<int64_t, bool> key{Bb, !host_logits};
    auto it = g.graphs.find(key);
    cuda::Graph captured;
    const std::string what = it != g.graphs.end() ? std::string()
                                                  : "DSpark draft graph of " + std::to_string(Bb) + " sequences" +
                                                        (host_logits ? "" : " (probabilities)");
    const GraphRun run = replay_or_capture(it != g.graphs.end() ? &it->second : nullptr, &captured, what,
                                           [&] { dspark_draft_enqueue(Bb, !host_logits); });
    if (run == GraphRun::kReplayed) ++graph_stats.draft_replays;
    if (run == GraphRun::kCaptured) {
      ++graph_stats.draft_captured;
      g.graphs.emplace(key, std::move(captured));
    }
  } else {
    dspark_draft_enqueue(Bb, !host_logits);
  }
  // Results: one copy each into pinned memory (tokens, confidences, probabilities), the
  // logits and hidden rows only when asked for, then the one synchronisation.
  float* oh = g.out_host;
  CUDA_CHECK(cudaMemcpyAsync(oh, g.tokens, n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(oh + g.rows, g.conf, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  if (!host_logits) {
    CUDA_CHECK(cudaMemcpyAsync(oh + 2 * g.rows, g.prob, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  }
  std::vector<float> logits(host_logits ? static_cast<size_t>(n * V) : 0),
      hidden(host_logits ? static_cast<size_t>(n * D) : 0);
  if (host_logits) {
    CUDA_CHECK(cudaMemcpyAsync(logits.data(), g.logits, n * V * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(hidden.data(), g.h, n * D * sizeof(float), cudaMemcpyDeviceToHost, stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  work = saved;
  const int32_t* tokens = reinterpret_cast<const int32_t*>(oh);
  if (probabilities != nullptr) probabilities->assign(static_cast<size_t>(B), {});
  for (int64_t b = 0; b < B; ++b) {
    DraftBlock& ob = out[static_cast<size_t>(b)];
    for (int64_t i = 0; i < n_drafts; ++i) {
      const int64_t row = i * Bb + b;
      ob.tokens.push_back(tokens[row]);
      ob.confidence.push_back(oh[g.rows + row]);
      if (!host_logits) {
        (*probabilities)[static_cast<size_t>(b)].push_back(oh[2 * g.rows + row]);
        continue;
      }
      ob.logits.insert(ob.logits.end(), logits.begin() + row * V, logits.begin() + (row + 1) * V);
      ob.hidden.insert(ob.hidden.end(), hidden.begin() + row * D, hidden.begin() + (row + 1) * D);
    }
  }
  return out;
}

bool GpuModel::has_dspark() const { return impl_->dspark != nullptr; }
int64_t GpuModel::dspark_block_size() const { return impl_->dspark ? impl_->dspark->block : 0; }

std::vector<float> GpuModel::dspark_key(int64_t sequence, int64_t stage, int64_t position) const {
  const Impl& m = *impl_;
  CHECK_KIND(kUnsupported, m.dspark != nullptr) << "GpuModel: dspark_key() needs GpuModelOptions::dspark";
  CHECK(sequence >= 0 && sequence < static_cast<int64_t>(m.seq_tokens.size()) && m.seq_tokens[sequence] >= 0)
      << "dspark_key: " << sequence << " is not a live sequence";
  CHECK(stage >= 0 && stage < static_cast<int64_t>(m.dspark->stages.size())) << "dspark_key: stage " << stage;
  CHECK(position >= 0) << "dspark_key: position " << position;
  const GpuDspark& g = *m.dspark;
  const int64_t d = m.cfg.head_dim;
  std::vector<float> key(static_cast<size_t>(d));
  CUDA_CHECK(cudaStreamSynchronize(m.ctx.stream()));
  CUDA_CHECK(cudaMemcpy(key.data(), g.rings + stage * g.ring_stride + (sequence * g.n_slots + position % g.n_slots) * d,
                        d * sizeof(float), cudaMemcpyDeviceToHost));
  return key;
}

}  // namespace deepinfer
