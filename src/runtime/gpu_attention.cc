// Attention block on the GPU, mirroring Model::attention_block (src/model/attention_block.cc,
// compressed_entries.cc, index_selection.cc): low-rank q with norms (the per-head q norm when
// the family has it), shared K=V with RoPE, compressors (entries emitted before the attention
// reads them), the indexer top-k of scoring layers, sparse attention with sinks, inverse RoPE,
// grouped output projection. What a layer owns and reads comes from its LayerPlan
// (io/layer_plan.h): V4.1 reuse / reindex layers read their source's compressed entries and
// index keys and the latest index source's top-k (no copies); numerics that differ per
// family come from cfg.traits. State: paged caches (window pool by position,
// compressed pool, FP8 indexer keys; slot lists from paged_indices_cuda, attention by
// paged_attention_cuda, paged_attention_mma_cuda or sm90_paged_decode_cuda) or, with
// paged_kv off, the plain fp32 ring / dense entries read by
// sparse_attention_cuda (window ring updated after the attention). Projections through
// DeviceLinear (fp32 or FP8); in FP8 the block input x_in is quantised once for wq_a, wkv and
// the compressors, and q_r once for wq_b and the indexer's wq_b.
#include <cmath>
#include <cstdlib>
#include <string>

#include "cuda/cuda_check.h"
#include "ops/attention/sparse_attention_cuda.h"
#include "ops/compressor/compress_pool_cuda.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_fp8_gemv_cuda.h"
#include "ops/indexer/candidates_cuda.h"
#include "ops/indexer/index_keys_cuda.h"
#include "ops/indexer/indexer_cuda.h"
#include "ops/kv_cache/index_cache_cuda.h"
#include "ops/kv_cache/kv_cache_cuda.h"
#include "ops/quant/fp4_rows_cuda.h"
#include "ops/quant/qat_cuda.h"
#include "ops/rms_norm/rms_norm_cuda.h"
#include "ops/rope/rope_cuda.h"
#include "runtime/gpu_model_impl.h"
#include "runtime/gpu_state_plan.h"
#include "runtime/ring_store.h"

namespace deepinfer {
namespace {

// DEEPINFER_ATTN_DECODE=simt keeps decode attention on the fp32 SIMT kernel (the path before
// sm90_paged_decode_cuda; read once per process). Any other value or unset: the fast path.
bool fast_decode_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("DEEPINFER_ATTN_DECODE");
    return v == nullptr || std::string(v) != "simt";
  }();
  return on;
}

// A decode step's grouped output projection (FP8, M <= kFp8GemvMaxM, not batch-invariant)
// runs as one gemm_fp8_gemv_grouped_cuda launch instead of G copies + GEMMs + copies (3 G
// launches): on the H200 it took V4.1 B=64 32K from 24.68 to 23.42 ms a step (attention 7.86 ->
// 6.57 ms; bench/results/gpu-v41-wo-a-grouped-h200-2026-12-04-7bd3a57.md). DEEPINFER_WO_A=loop
// keeps the per-group loop (read once per process), for A/B runs.
bool grouped_wo_a_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("DEEPINFER_WO_A");
    return v == nullptr || std::string(v) != "loop";
  }();
  return on;
}

}  // namespace

void GpuModel::Impl::run_compressor(const GpuCompressorW& w, int64_t ratio, int64_t width,
                                    float* ring_a, float* ring_z, float* entries,
                                    int64_t max_entries, const float* x_in, bool indexer,
                                    float* latent_out) {
  cudaStream_t stream = ctx.stream();
  const int64_t N = n_rows;
  const bool overlap = ratio == 4;
  const int64_t cw = (overlap ? 2 : 1) * width;
  lin_in(w.wkv, x_in, a_in, N, ca);
  if (w.wgate.n > 0) {
    lin_in(w.wgate, x_in, a_in, N, cz);
  } else {  // no gate (V4.1 ratio 1): z = 0, the single slot's softmax weight is exactly 1
    CUDA_CHECK(cudaMemsetAsync(cz, 0, N * cw * sizeof(float), stream));
  }
  if (w.ape != nullptr) compressor_add_ape_cuda(stream, cz, w.ape, sec(kPositions), N, ratio, cw);
  CompressorEmitParams p;
  p.a = ca;
  p.z = cz;
  p.ring_a = ring_a;
  p.ring_z = ring_z;
  p.entries = entries != nullptr ? entries : (indexer ? idx_stage : ent_stage);
  p.max_entries = max_entries;
  p.entries_by_row = entries == nullptr;
  p.ratio = ratio;
  p.width = width;
  p.overlap = overlap;
  p.emit_rows = sec(emit_section.at(ratio));
  // Graph-safe (F1): in a graph-bucket step (graph_stats.last_bucket > 0; captured once,
  // replayed with other counts) the launch covers every row and the kernel reads the real
  // count from counts(); eager forwards launch exactly the host count. The paged store of
  // the emitted entries (attention_block) covers all rows with per-row slots (-1: the row
  // emits nothing), so it needs no count.
  p.n_emit = graph_stats.last_bucket > 0 ? N : emit_counts.at(ratio);
  p.n_emit_device = counts() + kEmitCounts + (emit_section.at(ratio) - kNumFixedSections);
  p.positions = sec(kPositions);
  p.slot = sec(kSlot);
  p.chunk_start = sec(kChunkStart);
  p.chunk_row0 = sec(kChunkRow0);
  p.norm_w = w.norm;
  p.eps = static_cast<float>(cfg.rms_norm_eps);
  p.rope_dim = cfg.rope_dim;
  p.inv_freq = inv_freq_compress;
  if (opt.numerics == Numerics::kOfficial) {  // as round_compressed_entry (model/kv_rounding.h)
    p.qat = indexer                    ? CompressorQat::kHadamardFp4
            : cfg.traits.compressed_fp4 ? CompressorQat::kFp4E4m3
                                        : CompressorQat::kFp8Nope;
  }
  p.latent_by_row = latent_out;
  const int64_t ring_len = compressor_ring_len(ratio, opt.max_rollback);
  p.ring_len = ring_len;
  if (p.n_emit > 0) compressor_emit_cuda(stream, p);
  ring_store_cuda(stream, ca, N, cw, sec(kPositions), sec(kSlot), sec(kChunkEnd), ring_a, ring_len);
  ring_store_cuda(stream, cz, N, cw, sec(kPositions), sec(kSlot), sec(kChunkEnd), ring_z, ring_len);
}

void GpuModel::Impl::attention_block(int64_t layer, const float* x_in, float* out) {
  cudaStream_t stream = ctx.stream();
  const GpuLayerW& w = layers[layer];
  GpuLayerState& st = states[layer];
  const LayerPlan& lp = cfg.plan[layer];
  const ModelTraits& tr = cfg.traits;
  const int64_t N = n_rows, D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim;
  const int64_t r = cfg.rope_dim, Rq = cfg.q_lora_rank, dI = cfg.index_head_dim;
  const int64_t ratio = lp.ratio;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const float* inv_freq = ratio > 0 ? inv_freq_compress : inv_freq_main;
  const int32_t* positions = sec(kPositions);

  if (fp8()) act_quantize(ctx, x_in, N, D, a_in);  // shared by wq_a, wkv and the compressors
  lin_in(w.wq_a, x_in, a_in, N, q_r);
  rms_norm_cuda(stream, q_r, w.q_norm, N, Rq, Rq, eps, q_r);
  if (fp8()) act_quantize(ctx, q_r, N, Rq, a_r);  // shared by wq_b and the indexer's wq_b
  lin_in(w.wq_b, q_r, a_r, N, q);
  if (tr.per_head_q_norm) rms_norm_cuda(stream, q, nullptr, N * H, d, d, eps, q);  // V4 only
  lin_in(w.wkv, x_in, a_in, N, kv);
  rms_norm_cuda(stream, kv, w.kv_norm, N, d, d, eps, kv);
  rope_cuda(stream, q, positions, N, H, d, r, inv_freq);
  rope_cuda(stream, kv, positions, N, 1, d, r, inv_freq);
  const bool official = opt.numerics == Numerics::kOfficial;
  // Official: the window entry as its cache holds it (model/kv_rounding.h; V4: the NoPE dims
  // in 64-blocks, V4.1: all dims in 32-blocks).
  if (official) {
    fp8_roundtrip_rows_cuda(stream, kv, N, d, tr.window_fp8_all_dims ? d : d - r,
                            tr.window_fp8_block);
  }
  // Paged: the chunk's keys go into the window pool before attention reads them (rows of
  // padding / no slot carry -1); compressed entries are emitted into the staging rows and
  // stored at the emitting rows' slots (-1 for rows that emit none).
  const bool paged = plan.paged;
  if (paged) kv_store_cuda(stream, plan.kv, kv, N, d, sec(kWinSlot), st.win_cache);

  if (w.has_compressor) {
    // V4.1 KV+index sources also keep the pre-RoPE latents: their index keys come from them.
    const bool latent_keys = w.idx_wk.n > 0;  // plan.owns_index_keys, no own compressor
    run_compressor(w.cmp, ratio, d, st.cmp_a, st.cmp_z, paged ? nullptr : st.cmp_entries,
                   st.cmp_max_entries, x_in, false, latent_keys ? latent_stage : nullptr);
    if (paged) {
      kv_store_cuda(stream, plan.cmp_kv, ent_stage, N, d, sec(cmp_slot_section.at(ratio)),
                    st.cmp_cache);
    }
    if (latent_keys) emit_index_keys(layer);
  }
  if (w.idx_cmp.wkv.n > 0) {  // V4 ratio 4: the index keys' own compressor (own_index_compressor)
    run_compressor(w.idx_cmp, 4, dI, st.idx_a, st.idx_z, plan.idx_paged ? nullptr : st.idx_entries,
                   st.idx_max_entries, x_in, true);
    if (plan.idx_paged) {
      index_store_cuda(stream, plan.idx, idx_stage, N, dI, sec(cmp_slot_section.at(4)),
                       st.idx_cache);
    }
  }
  if (w.has_indexer) run_indexer(layer, x_in);

  mark_part(layer, 2);
  if (paged) {
    paged_attention(layer, ratio);
  } else {
    plain_attention(layer, ratio);
  }
  mark_part(layer, 3);
  rope_cuda(stream, o, positions, N, H, d, r, inv_freq, /*inverse=*/true);
  output_projection(layer, out);
}

void GpuModel::Impl::emit_index_keys(int64_t layer) {
  cudaStream_t stream = ctx.stream();
  const GpuLayerW& w = layers[layer];
  GpuLayerState& st = states[layer];
  const int64_t N = n_rows, dI = cfg.index_head_dim, ratio = cfg.plan[layer].ratio;
  // key = k_norm(wk . latent) for every row (rows that emit nothing are computed and not
  // stored), then RoPE at ratio * entry, FP4 (official) and the store: into the dense fp32
  // keys, or (paged fp8) back into key_stage's emitting rows and from there into the paged
  // index cache at the rows' compressed slots (-1 for rows that emit none).
  lin(w.idx_wk, latent_stage, N, key_stage, a_gen);
  rms_norm_cuda(stream, key_stage, w.idx_k_norm, N, dI, dI, static_cast<float>(cfg.rms_norm_eps),
                key_stage);
  IndexKeysFinishParams p;
  p.keys_in = key_stage;
  p.keys = plan.idx_paged ? key_stage : st.idx_entries;  // by row: each block reads its row first
  p.by_row = plan.idx_paged;
  p.max_entries = st.idx_max_entries;
  p.width = dI;
  p.rope_dim = cfg.rope_dim;
  p.ratio = ratio;
  p.inv_freq = inv_freq_compress;
  p.fp4 = opt.numerics == Numerics::kOfficial;
  const int section = emit_section.at(ratio);
  p.emit_rows = sec(section);
  // Graph-safe as the compressor emission (run_compressor).
  p.n_emit = graph_stats.last_bucket > 0 ? N : emit_counts.at(ratio);
  p.n_emit_device = counts() + kEmitCounts + (section - kNumFixedSections);
  p.positions = sec(kPositions);
  p.slot = sec(kSlot);
  index_keys_finish_cuda(stream, p);
  if (plan.idx_paged) {
    index_store_cuda(stream, plan.idx, key_stage, N, dI, sec(cmp_slot_section.at(ratio)), st.idx_cache);
  }
}

void GpuModel::Impl::run_indexer(int64_t layer, const float* x_in) {
  cudaStream_t stream = ctx.stream();
  const GpuLayerW& w = layers[layer];
  GpuLayerState& st = states[layer];
  const LayerPlan& lp = cfg.plan[layer];
  // The keys scored: those of the layer's key owner (itself, or for a V4.1 reindex layer its
  // KV source), never a copy.
  const GpuLayerState& owner = states[lp.index_keys_from];
  const int64_t N = n_rows, HI = cfg.index_n_heads, dI = cfg.index_head_dim;
  const int64_t r = cfg.rope_dim, ratio = lp.ratio;
  const int32_t* positions = sec(kPositions);
  const bool official = opt.numerics == Numerics::kOfficial;

  mark_part(layer, 0);
  lin_in(w.idx_wq_b, q_r, a_r, N, qi);
  lin(w.idx_wproj, x_in, N, gi, a_gen);  // fp32
  rope_cuda(stream, qi, positions, N, HI, dI, r, inv_freq_compress);
  if (official) {  // V4: Hadamard then FP4; V4.1: FP4 only (MODEL_SPEC §C.7)
    if (cfg.traits.indexer_hadamard) {
      hadamard_fp4_rows_cuda(stream, qi, N * HI, dI, 32);
    } else {
      fp4_roundtrip_rows_cuda(stream, qi, N * HI, dI, 32);
    }
  }
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(HI));
  const float key_scale = 1.0f / std::sqrt(static_cast<float>(dI));
  if (plan.idx_paged) {
    const KvBlockPool& pool = cmp_pools.at(ratio);
    IndexerPagedScoresParams ip;
    ip.q = qi;
    ip.g = gi;
    ip.n_rows = N;
    ip.n_heads = HI;
    ip.head_scale = head_scale;
    ip.scale = key_scale;
    ip.positions = positions;
    ip.seq = sec(kSlot);
    ip.ratio = ratio;
    ip.cache = owner.idx_cache;
    ip.layout = plan.idx;
    ip.block_table = pool.device_table();
    ip.max_blocks = pool.max_blocks();
    ip.scores = scores;
    ip.score_stride = score_stride;
    if (opt.mma_attention && !opt.batch_invariant && indexer_paged_scores_mma_preferred(ip)) {
      indexer_paged_scores_mma_cuda(stream, ip);  // tensor cores for 32+ rows
    } else {
      indexer_paged_scores_cuda(stream, ip);
    }
  } else {
    IndexerScoresParams ip;
    ip.q = qi;
    ip.g = gi;
    ip.n_rows = N;
    ip.n_heads = HI;
    ip.head_dim = dI;
    ip.head_scale = head_scale;
    ip.scale = key_scale;
    ip.positions = positions;
    ip.slot = sec(kSlot);
    ip.ratio = ratio;
    ip.keys = owner.idx_entries;
    ip.max_entries = owner.idx_max_entries;
    ip.scores = scores;
    ip.score_stride = score_stride;
    indexer_scores_cuda(stream, ip);
  }
  // V4.1 candidate blocks: the source publishes its blocks from its own (unrestricted)
  // scores; the layers after it score only inside them.
  if (lp.candidate_source) {
    CandidateBlocksParams cp;
    cp.scores = scores;
    cp.score_stride = score_stride;
    cp.n_rows = N;
    cp.positions = positions;
    cp.ratio = ratio;
    cp.block = cfg.candidate_block_size;
    cp.n_pick = cfg.candidate_topk_blocks;
    cp.max_blocks = cand_max_blocks;
    cp.block_max = cand_block_max;
    cp.n_blocks = cand_n_blocks;
    cp.picked = cand_picked;
    cp.n_picked = cand_n_picked;
    cp.mask = cand_mask;
    candidate_blocks_cuda(stream, cp);
  }
  if (lp.candidates_from >= 0) {
    candidate_restrict_cuda(stream, scores, score_stride, N, positions, ratio, cand_mask,
                            cand_max_blocks, cfg.candidate_block_size);
  }
  sel = st.sel;
  n_sel = st.n_sel;
  topk_rows_cuda(stream, scores, N, score_stride, positions, ratio, nullptr, cfg.index_topk, sel,
                 n_sel);
  if (lp.candidates_from >= 0) {  // entries outside the candidates are never attended
    drop_unscored_picks_cuda(stream, scores, score_stride, N, sel, n_sel, cfg.index_topk);
  }
  indexer_choices(layer);  // tests only: replayed / recorded (gpu_decisions.cc)
  mark_part(layer, 1);
}

// Plain path: fp32 window ring and dense compressed entries (the oracle of the paged path).
void GpuModel::Impl::plain_attention(int64_t layer, int64_t ratio) {
  cudaStream_t stream = ctx.stream();
  const GpuLayerW& w = layers[layer];
  GpuLayerState& st = states[layer];
  const LayerPlan& lp = cfg.plan[layer];
  const int64_t N = n_rows, H = cfg.num_heads, d = cfg.head_dim, W = cfg.sliding_window;
  const int32_t* positions = sec(kPositions);

  SparseAttentionParams ap;
  ap.q = q;
  ap.out = o;
  ap.sinks = w.sink;
  ap.n_rows = N;
  ap.n_heads = H;
  ap.head_dim = d;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(d));
  ap.positions = positions;
  ap.slot = sec(kSlot);
  ap.chunk_start = sec(kChunkStart);
  ap.chunk_row0 = sec(kChunkRow0);
  ap.chunk_kv = kv;
  ap.ring = st.ring;
  ap.window = W;
  if (ratio > 0 && lp.kv_from >= 0) {  // the KV source's entries (itself or an earlier layer)
    const GpuLayerState& src = states[lp.kv_from];
    ap.entries = src.cmp_entries;
    ap.max_entries = src.cmp_max_entries;
    ap.ratio = ratio;
    if (lp.topk_from >= 0) {  // the top-k of the latest index source (itself or earlier)
      ap.selected = states[lp.topk_from].sel;
      ap.n_selected = states[lp.topk_from].n_sel;
      ap.max_selected = cfg.index_topk;
    }
  }
  sparse_attention_cuda(stream, ap);
  ring_store_cuda(stream, kv, N, d, positions, sec(kSlot), sec(kChunkEnd), st.ring, W);
}

// Paged path: the window slots (build_paged_lists) then the compressed entries of the KV
// source (all of them on HCA layers, the top-k of the latest index source otherwise),
// dequantised from the caches; every layer of a ratio shares that ratio's block tables, so a
// consumer reads its source's cache through them.
void GpuModel::Impl::paged_attention(int64_t layer, int64_t ratio) {
  const GpuLayerW& w = layers[layer];
  const GpuLayerState& st = states[layer];
  const LayerPlan& lp = cfg.plan[layer];
  const int64_t H = cfg.num_heads, d = cfg.head_dim;
  PagedAttentionParams pp;
  pp.q = q;
  pp.out = o;
  pp.sinks = w.sink;
  pp.n_rows = n_rows;
  pp.n_heads = H;
  pp.scale = 1.0f / std::sqrt(static_cast<float>(d));
  KvSource& win = pp.sources[0];
  win.cache = st.win_cache;
  win.layout = plan.kv;
  win.n_blocks = plan.window.n_blocks;
  win.indices = win_idx;
  win.max_indices = cfg.sliding_window;
  if (ratio > 0 && lp.kv_from >= 0) {
    KvSource& cmp = pp.sources[1];
    cmp.cache = states[lp.kv_from].cmp_cache;
    cmp.layout = plan.cmp_kv;
    cmp.n_blocks = plan.compressed.at(ratio).n_blocks;
    cmp.max_indices = paged_cmp_max_indices(layer);
    if (lp.topk_from >= 0) {  // the selected entries' slots in the ratio's pool
      const KvBlockPool& pool = cmp_pools.at(ratio);
      PagedIndexParams pi;
      pi.n_rows = n_rows;
      pi.positions = sec(kPositions);
      pi.seq = sec(kSlot);
      pi.cmp_table = pool.device_table();
      pi.cmp_max_blocks = pool.max_blocks();
      pi.cmp_block_size = plan.block_size;
      pi.ratio = ratio;
      pi.selected = states[lp.topk_from].sel;
      pi.n_selected = states[lp.topk_from].n_sel;
      pi.max_selected = cfg.index_topk;
      pi.cmp_indices = sel_idx;
      pi.n_cmp = sel_n;
      pi.max_cmp = cfg.index_topk;
      paged_indices_cuda(ctx.stream(), pi);
      cmp.indices = sel_idx;
      cmp.n_indices = sel_n;
    } else {
      cmp.indices = all_idx.at(ratio);
      cmp.n_indices = all_n.at(ratio);
    }
  }
  pp.workspace = attn_ws;  // split-K at small batches (nullptr with batch_invariant)
  pp.workspace_bytes = attn_ws_bytes;
  // Prefill-size grids: bf16 tensor cores with hi + lo terms (fp32-level results). Decode
  // batches in official numerics: the bf16 tensor-core decode kernel (sm90_paged_decode_cuda,
  // bf16-level results) unless DEEPINFER_ATTN_DECODE=simt; reference numerics, batch_invariant
  // and that switch: the fp32 SIMT kernel (gpu_model.h, "Attention kernels").
  const bool mma = opt.mma_attention && !opt.batch_invariant && paged_attention_mma_preferred(pp);
  if (mma) {
    paged_attention_mma_cuda(ctx.stream(), pp);
  } else if (opt.mma_attention && !opt.batch_invariant && opt.numerics == Numerics::kOfficial &&
             fast_decode_enabled() && sm90_paged_decode_supported(pp)) {
    // Split-K needs the workspace sized for this kernel (gpu_model.cc sizes attn_ws for both
    // kernels); a smaller one runs it unsplit.
    const int64_t max_keys = pp.sources[0].max_indices + pp.sources[1].max_indices;
    if (pp.workspace_bytes < sm90_paged_decode_workspace_bytes(n_rows, H, d, max_keys)) {
      pp.workspace = nullptr;
      pp.workspace_bytes = 0;
    }
    sm90_paged_decode_cuda(ctx.stream(), pp);
  } else {
    paged_attention_cuda(ctx.stream(), pp);
  }
}

int64_t GpuModel::Impl::paged_cmp_max_indices(int64_t layer) const {
  const LayerPlan& lp = cfg.plan[layer];
  if (lp.ratio <= 0 || lp.kv_from < 0) return 0;
  return lp.topk_from >= 0 ? cfg.index_topk : std::max<int64_t>(1, opt.max_context / lp.ratio);
}

void GpuModel::Impl::output_projection(int64_t layer, float* out) {
  cudaStream_t stream = ctx.stream();
  const GpuLayerW& w = layers[layer];
  const int64_t N = n_rows, H = cfg.num_heads, d = cfg.head_dim;

  // Grouped output projection: group g maps its H*d/G slice of o to R_o values. FP8 with
  // block-aligned groups (the activation block: 128 V4, 32 V4.1): o is quantised once; group
  // g's K blocks are a contiguous run of the block-major scales and its codes are copied out
  // to a dense [N, H*d/G] operand (the same per-1 x block quantisation as quantising each
  // group's slice on its own).
  const int64_t G = cfg.o_groups, Ro = cfg.o_lora_rank, gw = H * d / G;
  const bool quant_once = fp8() && gw % a_gen.block == 0;
  if (quant_once) act_quantize(ctx, o, N, H * d, a_gen);
  // One launch for all groups: zz [N, G Ro] is the grouped GEMM's y, group g's activations
  // are columns [g gw, (g + 1) gw) of a_gen.q and its scales the run at g (gw / block) N.
  const bool grouped = quant_once && grouped_wo_a_enabled() && !opt.batch_invariant &&
                       N <= kFp8GemvMaxM && G <= kFp8GemvMaxGroups;
  if (grouped) {
    const void* wq[kFp8GemvMaxGroups];
    const float* sw[kFp8GemvMaxGroups];
    for (int64_t g = 0; g < G; ++g) {
      ICHECK(w.wo_a[g].fp8() && w.wo_a[g].n == Ro && w.wo_a[g].k == gw && w.wo_a[g].block == a_gen.block)
          << "output_projection: wo_a group " << g << " is not an FP8 [" << Ro << ", " << gw << "] weight";
      wq[g] = w.wo_a[g].q;
      sw[g] = w.wo_a[g].s;
      work.gemm_flops += 2.0 * N * Ro * gw;
      work.weight_bytes += w.wo_a[g].bytes();
    }
    gemm_fp8_gemv_grouped_cuda(stream, a_gen.q, a_gen.s, static_cast<int>(G), wq, sw, N, Ro, gw, zz,
                               DType::F32, a_gen.block);
  }
  for (int64_t g = 0; !grouped && g < G; ++g) {
    if (quant_once) {
      CUDA_CHECK(cudaMemcpy2DAsync(og_q, gw, a_gen.q + g * gw, H * d, gw, N,
                                   cudaMemcpyDeviceToDevice, stream));
      lin_in(w.wo_a[g], nullptr, ActScratch{og_q, a_gen.s + g * (gw / a_gen.block) * N, a_gen.block}, N,
             zg);
    } else {
      CUDA_CHECK(cudaMemcpy2DAsync(og, gw * sizeof(float), o + g * gw, H * d * sizeof(float),
                                   gw * sizeof(float), N, cudaMemcpyDeviceToDevice, stream));
      lin(w.wo_a[g], og, N, zg, a_gen);
    }
    CUDA_CHECK(cudaMemcpy2DAsync(zz + g * Ro, G * Ro * sizeof(float), zg, Ro * sizeof(float),
                                 Ro * sizeof(float), N, cudaMemcpyDeviceToDevice, stream));
  }
  lin(w.wo_b, zz, N, out, a_gen);
}

void GpuModel::set_mma_attention(bool on) { impl_->opt.mma_attention = on; }

}  // namespace deepinfer
