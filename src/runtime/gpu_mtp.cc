// V4's MTP-1 drafter on the GPU (GpuModelOptions::mtp), mirroring the CPU reference
// model/mtp.cc (MODEL_SPEC §A.9, §D.7) with GpuModel's building blocks (DeviceLinear
// projections in the model's format, mHC, RMSNorm, RoPE, sparse attention with the sink, the
// router and the grouped MoE kernels):
//  * weights: mtp.0 (e_proj, h_proj in the model's format; enorm, hnorm, norm, hc_head and the
//    block's small tensors fp32; the block's projections and experts as the backbone's).
//    Embedding and head are the backbone's.
//  * context, inside every forward (mtp_write_context, after the last layer; graph-safe: all
//    launches sized by the forward's rows, every per-step value read from the row metadata on
//    the device): a row at position pos >= 1 pairs its token with X^L[pos - 1] (the chunk's
//    previous row, or for the chunk's first row the streams the sequence kept from its last
//    forward), computes the MTP block's K=V (mHC attention-site collapse, attn_norm, wkv,
//    kv_norm, RoPE at pos - 1, official: the window entry's FP8 / bf16 rounding) and stores it
//    in slot (pos - 1) % (W + max_rollback + 1); then the chunk's last max_rollback + 1 streams
//    are kept. So every committed position's key is written (not only the last), by the
//    forward that sees its next token.
//  * draft (GpuModel::draft): batched over sequences, one small eager forward of B rows per
//    chained step: the input streams (step 0: the kept X^L[p]; then the block's own output
//    streams), the token (step 0: next; then the step's argmax), the full V4 block (attention
//    over the W keys up to its position: the step's own key goes to the sequence's chain
//    slots (j), then the row's window keys, committed ones from the ring and the chain's, are
//    gathered into a contiguous list that sparse_attention_cuda reads as the row's chunk),
//    the MoE, hc_head, norm, head, argmax. With cuda_graphs (no trace installed) the call runs
//    as a bucket of sequences (graph_bucket, at most max_sequences) and each chained step j's
//    device work (mtp_draft_enqueue) as the graph of key (bucket, j, probabilities), captured
//    on first use and replayed after (gpu_graphs.cc replay_or_capture; graph_stats
//    draft_captured / draft_replays). Padding sequences draft in the scratch slot (position j
//    of its chain slots, token 0, the call's first sequence's streams read as input); their
//    results are ignored.
//  * rollback: everything is kept by position, and a draft writes only its chain slots (never
//    the ring), so it changes no state a later forward or draft reads; truncate() needs
//    nothing here (the next forward rewrites the keys from the new length - 1 on).
//  * test instrumentation: with a GpuMtpTrace installed (gpu_mtp_trace.h), one draft step's
//    row 0 is copied to the host after every stage (synchronising); off, trace_row returns at once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/attention/sparse_attention_cuda.h"
#include "ops/embedding/embedding_cuda.h"
#include "ops/gemm/gemm.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/moe/moe_cuda.h"
#include "ops/quant/qat_cuda.h"
#include "ops/rms_norm/rms_norm_cuda.h"
#include "ops/rope/rope_cuda.h"
#include "ops/sampling/sampling_cuda.h"
#include "runtime/gpu_model.h"
#include "runtime/gpu_model_impl.h"
#include "runtime/gpu_mtp_trace.h"
#include "runtime/mtp_kernels.h"
#include "runtime/ring_store.h"

namespace deepinfer {
namespace {

float proj_std(int64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); }

// Chain slots per sequence at least (drafts of one call: max(max_rollback + 1, this)).
constexpr int64_t kMinChain = 4;

// Sections of a draft step's metadata, each max_sequences ints, then the window key rows.
// kDStep / kDStepEnd: the chain slot j (and j + 1) the step's key is stored at.
enum DraftSection : int { kDPos, kDSlot, kDLo, kDRow0, kDStep, kDStepEnd, kDZero, kDStreamRow, kDNext,
                          kDSections };

// Test instrumentation (gpu_mtp_trace.h): the installed trace and the step draft() runs now.
GpuMtpTrace* g_trace = nullptr;
int64_t g_trace_step_now = -1;

// Records row 0 of a device array of n floats (or int32 ids) under `name` when tracing this step.
template <typename T>
void trace_row(cudaStream_t stream, const char* name, const T* dev, int64_t n) {
  if (g_trace == nullptr || g_trace_step_now != g_trace->step) return;
  std::vector<T> host(static_cast<size_t>(n));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
  g_trace->values[name] = std::vector<float>(host.begin(), host.end());
}

}  // namespace

void set_gpu_mtp_trace(GpuMtpTrace* trace) { g_trace = trace; }

void GpuModel::Impl::init_mtp(const ModelWeights* hw) {
  CHECK_KIND(kUnsupported, !cfg.is_v41())
      << "GpuModel: mtp is V4's MTP-1 drafter; V4.1 checkpoints carry DSpark";
  CHECK_KIND(kUnsupported, hw == nullptr || hw->has_mtp)
      << "GpuModel: mtp needs the checkpoint's mtp.0 tensors (num_nextn_predict_layers >= 1 and "
         "mtp.0.* present); this one has none";
  const MtpWeights* m = hw != nullptr ? &hw->mtp : nullptr;
  const DsparkStageWeights* b = m != nullptr ? &m->block : nullptr;
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult, H = cfg.num_heads, d = cfg.head_dim;
  const int64_t Rq = cfg.q_lora_rank, G = cfg.o_groups, Ro = cfg.o_lora_rank, gw = H * d / G;
  const int64_t E = cfg.n_routed_experts, I = cfg.moe_intermediate_size;
  const int64_t Is = I * cfg.n_shared_experts, nmix = (2 + hc) * hc, W = cfg.sliding_window;
  const int64_t T = opt.max_batch_tokens, Bm = opt.max_sequences, V = cfg.vocab_size;
  auto g = std::make_unique<GpuMtp>();
  g->e_proj = linear(m ? &m->e_proj : nullptr, D, D, proj_std(D));
  g->h_proj = linear(m ? &m->h_proj : nullptr, D, D, proj_std(D));
  g->enorm = f32(m ? &m->enorm : nullptr, D, 1.0f, 0.1f);
  g->hnorm = f32(m ? &m->hnorm : nullptr, D, 1.0f, 0.1f);
  g->norm = f32(m ? &m->norm : nullptr, D, 1.0f, 0.1f);
  g->hc_head = {f32(m ? &m->hc_head.fn : nullptr, hc * hc * D, 0.0f, proj_std(hc * D)),
                f32(m ? &m->hc_head.base : nullptr, hc, 0.0f, 0.1f),
                f32(m ? &m->hc_head.scale : nullptr, 1, 0.5f, 0.1f)};
  GpuLayerW& w = g->block;
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
      << "GpuModel: the MTP block has a compressor (mtp_compress_ratios != 0); MTP-1 is ratio 0";
  w.wq_a = linear(a ? &a->wq_a : nullptr, Rq, D, proj_std(D));
  w.q_norm = f32(a ? &a->q_norm : nullptr, Rq, 1.0f, 0.1f);
  w.wq_b = linear(a ? &a->wq_b : nullptr, H * d, Rq, proj_std(Rq));
  w.wkv = linear(a ? &a->wkv : nullptr, d, D, proj_std(D));
  w.kv_norm = f32(a ? &a->kv_norm : nullptr, d, 1.0f, 0.1f);
  if (a != nullptr) ICHECK(a->wo_a.numel() == G * Ro * gw) << "GpuModel: mtp wo_a " << a->wo_a.str();
  for (int64_t grp = 0; grp < G; ++grp) {
    w.wo_a.push_back(linear(a ? a->wo_a.f32() + grp * Ro * gw : nullptr, Ro, gw, proj_std(gw)));
  }
  w.wo_b = linear(a ? &a->wo_b : nullptr, D, G * Ro, proj_std(G * Ro));
  w.sink = f32(a ? &a->sink : nullptr, H, 0.0f, 1.0f);
  const MoeWeights* mo = b ? &b->moe : nullptr;
  CHECK_KIND(kUnsupported, mo == nullptr || (mo->bias.defined() && !mo->tid2eid.defined()))
      << "GpuModel: the MTP block's MoE must be score-routed with a bias";
  w.gate = linear(mo ? &mo->gate : nullptr, E, D, proj_std(D), true);
  w.bias = f32(mo ? &mo->bias : nullptr, E, 0.0f, 0.1f);
  std::vector<const Tensor*> h1, h3, h2;
  for (int64_t e = 0; mo != nullptr && e < E; ++e) {
    h1.push_back(&mo->experts[e].w1);
    h3.push_back(&mo->experts[e].w3);
    h2.push_back(&mo->experts[e].w2);
  }
  MoeStack s1, s3, s2;  // re-quantised from the host values (fp8_round_trip does the same)
  w.w1 = expert_stack(h1, E, I, D, proj_std(D), &s1);
  w.w3 = expert_stack(h3, E, I, D, proj_std(D), &s3);
  w.w2 = expert_stack(h2, E, D, I, proj_std(I), &s2);
  w.experts = MoeExpertsFp8Weights{s1.q, s1.s, s3.q, s3.s, s2.q, s2.s};
  w.experts_f32 = MoeExpertsF32Weights{s1.f, s3.f, s2.f};
  w.sw1 = linear(mo ? &mo->shared.w1 : nullptr, Is, D, proj_std(D));
  w.sw3 = linear(mo ? &mo->shared.w3 : nullptr, Is, D, proj_std(D));
  w.sw2 = linear(mo ? &mo->shared.w2 : nullptr, D, Is, proj_std(Is));

  // State (in state_pools: randomize_state / clear_state cover it) and scratch.
  const int64_t S = opt.max_sequences + (opt.cuda_graphs ? 1 : 0);
  g->n_slots = W + opt.max_rollback + 1;
  g->n_chain = std::max<int64_t>(opt.max_rollback + 1, kMinChain);
  g->ring = state_alloc(S * (g->n_slots + g->n_chain) * d);  // the ring, then the chain slots
  g->chain = g->ring + S * g->n_slots * d;
  g->n_stream_slots = opt.max_rollback + 1;
  g->streams = state_alloc(S * g->n_stream_slots * hc * D);
  g->rows = std::max(T, Bm);
  const int64_t rows = g->rows;
  g->H = alloc(rows * hc * D);
  g->hn = alloc(rows * hc * D);
  g->hp = alloc(rows * hc * D);
  g->Z = alloc(rows * hc * D);
  g->Z2 = alloc(rows * hc * D);
  g->e = alloc(rows * D);
  g->ep = alloc(rows * D);
  g->key_pos = reinterpret_cast<int32_t*>(alloc(rows));
  g->keys = alloc(Bm * W * d);
  g->logits = alloc(Bm * V);
  g->h = alloc(Bm * D);
  g->hnorm_out = alloc(Bm * D);
  g->head_pre = alloc(Bm * hc);
  g->tokens = reinterpret_cast<int32_t*>(alloc(Bm));
  g->prob = alloc(Bm);
  g->meta_ints = g->n_chain * (kDSections * Bm + Bm * W);
  g->meta = reinterpret_cast<int32_t*>(alloc(g->meta_ints));
  CUDA_CHECK(cudaMallocHost(&g->meta_host, g->meta_ints * sizeof(int32_t)));
  if (fp8()) {
    const int64_t kmax = std::max({D, Rq, gw, G * Ro, Is});
    g->a = ActScratch{static_cast<uint8_t*>(raw_alloc(rows * hc * kmax)),
                      alloc(rows * hc * ceil_div64(kmax, kFp8GemmBlock))};
  }
  const MoeExpertsShape ms = moe_shape(Bm);
  g->moe_ws = raw_alloc(static_cast<int64_t>(fp8() ? moe_experts_fp8_workspace_bytes(ms)
                                                   : moe_experts_f32_workspace_bytes(ms)));
  mtp = std::move(g);
}

// Z [n, n_hc, D] = e_proj(enorm(embed(tokens))) + h_proj(hnorm(streams_in)) per stream.
void GpuModel::Impl::mtp_input(int64_t n, const int32_t* tokens_dev, const float* streams_in, float* Z) {
  GpuMtp& g = *mtp;
  cudaStream_t stream = ctx.stream();
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  trace_row(stream, "h_in", streams_in, hc * D);
  embedding_cuda(stream, embed, tokens_dev, n, D, 1, g.e);
  rms_norm_cuda(stream, g.e, g.enorm, n, D, D, eps, g.e);
  trace_row(stream, "e", g.e, D);
  lin(g.e_proj, g.e, n, g.ep, g.a);
  trace_row(stream, "ep", g.ep, D);
  rms_norm_cuda(stream, streams_in, g.hnorm, n * hc, D, D, eps, g.hn);
  trace_row(stream, "hn", g.hn, hc * D);
  lin(g.h_proj, g.hn, n * hc, g.hp, g.a);
  trace_row(stream, "hp", g.hp, hc * D);
  mtp_input_add_cuda(stream, g.ep, g.hp, n, hc, D, Z);
  trace_row(stream, "z_in", Z, hc * D);
}

void GpuModel::Impl::mtp_write_context() {
  GpuMtp& g = *mtp;
  cudaStream_t stream = ctx.stream();
  const int64_t N = n_rows, D = cfg.hidden_size, hc = cfg.hc_mult, d = cfg.head_dim, r = cfg.rope_dim;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const GpuLayerW& w = g.block;
  // X^L[pos - 1] of every row (before the chunks' streams are kept: a chunk's first row may
  // read the slot its own last rows overwrite).
  mtp_prev_streams_cuda(stream, X, g.streams, g.n_stream_slots, hc * D, sec(kPositions), sec(kSlot),
                        sec(kChunkStart), sec(kChunkRow0), N, g.H);
  ring_store_cuda(stream, X, N, hc * D, sec(kPositions), sec(kSlot), sec(kChunkEnd), g.streams,
                  g.n_stream_slots);
  mtp_input(N, sec(kTokens), g.H, g.Z);
  hc_mix_cuda(ctx, g.Z, N, w.hc_attn.fn, w.hc_attn.base, w.hc_attn.scale, hp, mix_scratch, pre, post, comb);
  hc_collapse_cuda(stream, g.Z, pre, N, hc, D, u);
  rms_norm_cuda(stream, u, w.attn_norm, N, D, D, eps, x);
  lin(w.wkv, x, N, kv, g.a);
  rms_norm_cuda(stream, kv, w.kv_norm, N, d, d, eps, kv);
  mtp_shift_positions_cuda(stream, sec(kPositions), N, 1, g.key_pos);
  rope_cuda(stream, kv, g.key_pos, N, 1, d, r, inv_freq_main);
  const bool official = opt.numerics == Numerics::kOfficial;
  if (official) fp8_roundtrip_rows_cuda(stream, kv, N, d, d - r, cfg.traits.window_fp8_block);
  mtp_key_store_cuda(stream, kv, N, d, r, sec(kPositions), sec(kSlot), sec(kChunkEnd), 1, official, g.ring,
                     g.n_slots);
}

// One chained draft step over b rows: input streams g.H and tokens g.tokens; output streams
// in g.Z, hidden in g.h, logits in g.logits, argmax in g.tokens.
void GpuModel::Impl::mtp_draft_step(int64_t b, const int32_t* sm) {
  GpuMtp& g = *mtp;
  cudaStream_t stream = ctx.stream();
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult, H = cfg.num_heads, d = cfg.head_dim;
  const int64_t r = cfg.rope_dim, Rq = cfg.q_lora_rank, W = cfg.sliding_window, V = cfg.vocab_size;
  const int64_t G = cfg.o_groups, Ro = cfg.o_lora_rank, gw = H * d / G, Bm = opt.max_sequences;
  const int64_t Is = cfg.moe_intermediate_size * cfg.n_shared_experts;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const bool official = opt.numerics == Numerics::kOfficial;
  const GpuLayerW& w = g.block;
  auto section = [&](int s) { return sm + static_cast<int64_t>(s) * Bm; };
  const int32_t* pos = section(kDPos);

  mtp_input(b, g.tokens, g.H, g.Z);
  // Attention site.
  hc_mix_cuda(ctx, g.Z, b, w.hc_attn.fn, w.hc_attn.base, w.hc_attn.scale, hp, mix_scratch, pre, post, comb);
  hc_collapse_cuda(stream, g.Z, pre, b, hc, D, u);
  rms_norm_cuda(stream, u, w.attn_norm, b, D, D, eps, x);
  trace_row(stream, "x_attn", x, D);
  lin(w.wq_a, x, b, q_r, g.a);
  trace_row(stream, "q_r", q_r, Rq);
  rms_norm_cuda(stream, q_r, w.q_norm, b, Rq, Rq, eps, q_r);
  trace_row(stream, "q_rn", q_r, Rq);
  lin(w.wq_b, q_r, b, q, g.a);
  if (cfg.traits.per_head_q_norm) rms_norm_cuda(stream, q, nullptr, b * H, d, d, eps, q);
  trace_row(stream, "q", q, H * d);
  lin(w.wkv, x, b, kv, g.a);
  trace_row(stream, "kv_raw", kv, d);
  rms_norm_cuda(stream, kv, w.kv_norm, b, d, d, eps, kv);
  trace_row(stream, "kv", kv, d);
  rope_cuda(stream, q, pos, b, H, d, r, inv_freq_main);
  rope_cuda(stream, kv, pos, b, 1, d, r, inv_freq_main);
  if (official) fp8_roundtrip_rows_cuda(stream, kv, b, d, d - r, cfg.traits.window_fp8_block);
  mtp_key_store_cuda(stream, kv, b, d, r, section(kDStep), section(kDSlot), section(kDStepEnd), 0, official,
                     g.chain, g.n_chain);
  gather_rows_cuda(stream, g.ring, sm + kDSections * Bm, b * W, d, g.keys);
  SparseAttentionParams ap;
  ap.q = q;
  ap.out = o;
  ap.sinks = w.sink;
  ap.n_rows = b;
  ap.n_heads = H;
  ap.head_dim = d;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(d));
  ap.positions = pos;
  ap.slot = section(kDZero);
  ap.chunk_start = section(kDLo);  // every window key is a "chunk" row of g.keys
  ap.chunk_row0 = section(kDRow0);
  ap.chunk_kv = g.keys;
  ap.ring = g.keys;  // never read: no key is older than chunk_start
  ap.window = W;
  sparse_attention_cuda(stream, ap);
  rope_cuda(stream, o, pos, b, H, d, r, inv_freq_main, /*inverse=*/true);
  trace_row(stream, "o", o, H * d);
  for (int64_t grp = 0; grp < G; ++grp) {  // grouped output projection
    CUDA_CHECK(cudaMemcpy2DAsync(og, gw * sizeof(float), o + grp * gw, H * d * sizeof(float), gw * sizeof(float),
                                 b, cudaMemcpyDeviceToDevice, stream));
    lin(w.wo_a[grp], og, b, zg, g.a);
    CUDA_CHECK(cudaMemcpy2DAsync(zz + grp * Ro, G * Ro * sizeof(float), zg, Ro * sizeof(float), Ro * sizeof(float),
                                 b, cudaMemcpyDeviceToDevice, stream));
  }
  lin(w.wo_b, zz, b, y, g.a);
  trace_row(stream, "y_attn", y, D);
  hc_expand_cuda(stream, g.Z, y, post, comb, b, hc, D, g.Z2);
  std::swap(g.Z, g.Z2);
  trace_row(stream, "z_attn", g.Z, hc * D);
  // FFN site: score routing with the bias, shared expert, grouped routed experts.
  hc_mix_cuda(ctx, g.Z, b, w.hc_ffn.fn, w.hc_ffn.base, w.hc_ffn.scale, hp, mix_scratch, pre, post, comb);
  hc_collapse_cuda(stream, g.Z, pre, b, hc, D, u);
  rms_norm_cuda(stream, u, w.ffn_norm, b, D, D, eps, x);
  trace_row(stream, "x_ffn", x, D);
  lin(w.gate, x, b, router, g.a);
  trace_row(stream, "router", router, cfg.n_routed_experts);
  route_cuda(stream, router, b, w.bias, nullptr, g.tokens,
             RouterParams{cfg.n_routed_experts, cfg.n_experts_per_tok, static_cast<float>(cfg.routed_scaling_factor)},
             route_ids, route_w);
  trace_row(stream, "route_ids", route_ids, cfg.n_experts_per_tok);
  trace_row(stream, "route_w", route_w, cfg.n_experts_per_tok);
  lin(w.sw1, x, b, sg, g.a);
  lin(w.sw3, x, b, sv, g.a);
  swiglu_cuda(stream, sg, sv, nullptr, b, Is, static_cast<float>(cfg.swiglu_limit));
  trace_row(stream, "shared_act", sg, Is);
  lin(w.sw2, sg, b, ysh, g.a);
  trace_row(stream, "y_shared", ysh, D);
  const MoeExpertsShape shape = moe_shape(b);
  if (fp8()) {
    moe_experts_fp8_cuda(stream, shape, x, route_ids, route_w, w.experts, ysh, g.moe_ws, y);
  } else {
    moe_experts_f32_cuda(stream, shape, x, route_ids, route_w, w.experts_f32, ysh, g.moe_ws, y);
  }
  trace_row(stream, "y_moe", y, D);
  hc_expand_cuda(stream, g.Z, y, post, comb, b, hc, D, g.Z2);
  std::swap(g.Z, g.Z2);
  trace_row(stream, "z_out", g.Z, hc * D);
  // Head: the MTP's own hc_head and norm, the backbone's head; the chain's next token.
  hc_head_cuda(ctx, g.Z, b, g.hc_head.fn, g.hc_head.base, g.hc_head.scale, hp, mix_scratch, g.head_pre, g.h);
  trace_row(stream, "h", g.h, D);
  rms_norm_cuda(stream, g.h, g.norm, b, D, D, eps, g.hnorm_out);
  trace_row(stream, "h_norm", g.hnorm_out, D);
  lin(head, g.hnorm_out, b, g.logits, g.a);
  trace_row(stream, "logits", g.logits, V);
  argmax_rows_cuda(stream, g.logits, b, V, g.tokens);
}

void GpuModel::Impl::mtp_draft_enqueue(int64_t b, const int32_t* step_meta, bool prob) {
  GpuMtp& g = *mtp;
  cudaStream_t stream = ctx.stream();
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult;
  mtp_draft_step(b, step_meta);
  if (prob) mtp_top_probability_cuda(stream, g.logits, b, cfg.vocab_size, g.prob);
  // The next step continues from the block's own output streams (after the last step the
  // copy is unused: H is scratch, mtp_write_context rewrites it).
  CUDA_CHECK(cudaMemcpyAsync(g.H, g.Z, b * hc * D * sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

bool GpuModel::has_mtp() const { return impl_->mtp != nullptr; }

std::vector<DraftBlock> GpuModel::draft(std::span<const int64_t> sequences, std::span<const int32_t> next,
                                        int64_t n_drafts, std::vector<std::vector<float>>* probabilities) {
  Impl& m = *impl_;
  if (m.dspark) return m.dspark_draft(sequences, next, n_drafts, probabilities);  // gpu_dspark.cc
  CHECK_KIND(kUnsupported, m.mtp != nullptr)
      << "GpuModel: draft() needs a drafter (GpuModelOptions::mtp or dspark)";
  GpuMtp& g = *m.mtp;
  const ModelConfig& cfg = m.cfg;
  const int64_t B = static_cast<int64_t>(sequences.size()), Bm = m.opt.max_sequences;
  const int64_t W = cfg.sliding_window, D = cfg.hidden_size, hc = cfg.hc_mult, V = cfg.vocab_size;
  const int64_t S = m.opt.max_sequences + (m.opt.cuda_graphs ? 1 : 0);
  CHECK(B == static_cast<int64_t>(next.size()))
      << "draft: " << B << " sequences but " << next.size() << " next tokens";
  CHECK(n_drafts >= 1 && n_drafts <= g.n_chain)
      << "draft: " << n_drafts << " drafts asked; this model drafts 1 to max(max_rollback + 1, "
      << kMinChain << ") = " << g.n_chain;
  CHECK_KIND(kResourceExhausted, B <= m.opt.max_batch_tokens)
      << "draft: " << B << " sequences exceed max_batch_tokens " << m.opt.max_batch_tokens;
  std::vector<DraftBlock> out(static_cast<size_t>(B));
  if (B == 0) return out;
  std::vector<bool> seen(m.seq_tokens.size(), false);
  for (int64_t i = 0; i < B; ++i) {
    const int64_t s = sequences[i];
    CHECK(s >= 0 && s < static_cast<int64_t>(m.seq_tokens.size()) && m.seq_tokens[s] >= 0)
        << "draft: " << s << " is not a live sequence";
    CHECK(!seen[s]) << "draft: sequence " << s << " appears twice";
    seen[s] = true;
    CHECK(m.seq_tokens[s] > 0) << "draft: sequence " << s << " has no committed position yet";
    CHECK(next[i] >= 0 && next[i] < V) << "draft: next token " << next[i] << " is outside the vocabulary [0, "
                                       << V << ")";
  }
  // Graphs (cuda_graphs, not profiling, no trace): a bucket Bb >= B of sequences, B.. Bb-1
  // padding in the scratch slot (see the header comment).
  const int64_t bucket =
      m.graphs_on && !m.profiling && g_trace == nullptr ? m.graph_bucket(B, 1, m.opt.max_batch_tokens) : 0;
  const bool graph = bucket > 0 && bucket <= Bm;
  const int64_t Bb = graph ? bucket : B;
  // Every step's metadata up front (positions are known; tokens stay on the device).
  const int64_t per_step = kDSections * Bm + Bm * W;
  for (int64_t j = 0; j < n_drafts; ++j) {
    int32_t* sm = g.meta_host + j * per_step;
    for (int64_t i = 0; i < Bb; ++i) {
      const bool pad = i >= B;
      const int64_t s = pad ? m.scratch_slot : sequences[i], p = pad ? 0 : m.seq_tokens[s] - 1, pos = p + j;
      const int64_t lo = std::max<int64_t>(0, pos - W + 1);
      sm[kDPos * Bm + i] = static_cast<int32_t>(pos);
      sm[kDSlot * Bm + i] = static_cast<int32_t>(s);
      sm[kDLo * Bm + i] = static_cast<int32_t>(lo);
      sm[kDRow0 * Bm + i] = static_cast<int32_t>(i * W);
      sm[kDStep * Bm + i] = static_cast<int32_t>(j);
      sm[kDStepEnd * Bm + i] = static_cast<int32_t>(j + 1);
      sm[kDZero * Bm + i] = 0;
      sm[kDStreamRow * Bm + i] =
          pad ? sm[kDStreamRow * Bm] : static_cast<int32_t>(s * g.n_stream_slots + p % g.n_stream_slots);
      sm[kDNext * Bm + i] = pad ? 0 : next[i];
      int32_t* keys = sm + kDSections * Bm + i * W;
      const int64_t chain0 = S * g.n_slots + s * g.n_chain;  // rows of the ring buffer
      for (int64_t t = 0; t < W; ++t) {  // positions lo..pos, then padding (never read)
        const int64_t at = std::min(lo + t, pos);
        keys[t] = static_cast<int32_t>(at < p ? s * g.n_slots + at % g.n_slots : chain0 + (at - p));
      }
    }
  }
  cudaStream_t stream = m.ctx.stream();
  const GpuWork saved = m.work;  // work() keeps describing the last forward
  CUDA_CHECK(cudaMemcpyAsync(g.meta, g.meta_host, n_drafts * per_step * sizeof(int32_t), cudaMemcpyHostToDevice,
                             stream));
  gather_rows_cuda(stream, g.streams, g.meta + kDStreamRow * Bm, Bb, hc * D, g.H);
  CUDA_CHECK(cudaMemcpyAsync(g.tokens, g.meta + kDNext * Bm, Bb * sizeof(int32_t), cudaMemcpyDeviceToDevice, stream));
  const bool host_logits = probabilities == nullptr;
  std::vector<float> logits(host_logits ? static_cast<size_t>(n_drafts * B * V) : 0),
      hidden(host_logits ? static_cast<size_t>(n_drafts * B * D) : 0), prob(static_cast<size_t>(n_drafts * B));
  std::vector<int32_t> tokens(static_cast<size_t>(n_drafts * B));
  for (int64_t j = 0; j < n_drafts; ++j) {
    const int32_t* step_meta = g.meta + j * per_step;
    auto enqueue = [&] { m.mtp_draft_enqueue(Bb, step_meta, !host_logits); };
    if (graph) {  // captured on first use (gpu_graphs.cc): that call runs eagerly, then the capture
      const std::tuple<int64_t, int64_t, bool> key{Bb, j, !host_logits};
      auto it = g.graphs.find(key);
      cuda::Graph captured;
      const std::string what = it != g.graphs.end() ? std::string()
                                                    : "MTP draft graph of " + std::to_string(Bb) + " sequences, step " +
                                                          std::to_string(j) + (host_logits ? "" : " (probabilities)");
      const Impl::GraphRun run =
          m.replay_or_capture(it != g.graphs.end() ? &it->second : nullptr, &captured, what, enqueue);
      if (run == Impl::GraphRun::kReplayed) ++m.graph_stats.draft_replays;
      if (run == Impl::GraphRun::kCaptured) {
        ++m.graph_stats.draft_captured;
        g.graphs.emplace(key, std::move(captured));
      }
    } else {
      g_trace_step_now = j;
      enqueue();
      g_trace_step_now = -1;
    }
    if (host_logits) {
      CUDA_CHECK(cudaMemcpyAsync(logits.data() + j * B * V, g.logits, B * V * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream));
      CUDA_CHECK(cudaMemcpyAsync(hidden.data() + j * B * D, g.h, B * D * sizeof(float), cudaMemcpyDeviceToHost,
                                 stream));
    } else {
      CUDA_CHECK(cudaMemcpyAsync(prob.data() + j * B, g.prob, B * sizeof(float), cudaMemcpyDeviceToHost, stream));
    }
    CUDA_CHECK(cudaMemcpyAsync(tokens.data() + j * B, g.tokens, B * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  m.work = saved;
  if (probabilities != nullptr) probabilities->assign(static_cast<size_t>(B), {});
  for (int64_t i = 0; i < B; ++i) {
    DraftBlock& o = out[static_cast<size_t>(i)];
    for (int64_t j = 0; j < n_drafts; ++j) {
      o.tokens.push_back(tokens[j * B + i]);
      if (!host_logits) {
        (*probabilities)[static_cast<size_t>(i)].push_back(prob[j * B + i]);
        continue;
      }
      const float* row = logits.data() + (j * B + i) * V;
      o.logits.insert(o.logits.end(), row, row + V);
      const float* hrow = hidden.data() + (j * B + i) * D;
      o.hidden.insert(o.hidden.end(), hrow, hrow + D);
    }
  }
  return out;
}

std::vector<float> GpuModel::mtp_key(int64_t sequence, int64_t position) const {
  const Impl& m = *impl_;
  CHECK_KIND(kUnsupported, m.mtp != nullptr) << "GpuModel: mtp_key() needs GpuModelOptions::mtp";
  CHECK(sequence >= 0 && sequence < static_cast<int64_t>(m.seq_tokens.size()) && m.seq_tokens[sequence] >= 0)
      << "mtp_key: " << sequence << " is not a live sequence";
  CHECK(position >= 0) << "mtp_key: position " << position;
  const int64_t d = m.cfg.head_dim;
  std::vector<float> key(static_cast<size_t>(d));
  CUDA_CHECK(cudaStreamSynchronize(m.ctx.stream()));
  CUDA_CHECK(cudaMemcpy(key.data(), m.mtp->ring + (sequence * m.mtp->n_slots + position % m.mtp->n_slots) * d,
                        d * sizeof(float), cudaMemcpyDeviceToHost));
  return key;
}

}  // namespace deepinfer
