// Attention block on the GPU, mirroring Model::attention_block (src/model/attention_block.cc):
// low-rank q with norms, shared K=V with RoPE, compressors (entries emitted before the
// attention reads them), indexer top-k on ratio-4 layers, sparse attention with sinks,
// inverse RoPE, window ring update, grouped output projection. Projections through
// DeviceLinear (fp32 or FP8); in FP8 the block input x_in is quantised once for wq_a, wkv and
// the compressors, and q_r once for wq_b and the indexer's wq_b.
#include <cmath>

#include "cuda/cuda_check.h"
#include "ops/attention/sparse_attention_cuda.h"
#include "ops/compressor/compress_pool_cuda.h"
#include "ops/gemm/gemm.h"
#include "ops/indexer/indexer_cuda.h"
#include "ops/quant/qat_cuda.h"
#include "ops/rms_norm/rms_norm_cuda.h"
#include "ops/rope/rope_cuda.h"
#include "runtime/gpu_model_impl.h"
#include "runtime/ring_store.h"

namespace deepinfer {

void GpuModel::Impl::run_compressor(const GpuCompressorW& w, int64_t ratio, int64_t width,
                                    float* ring_a, float* ring_z, float* entries,
                                    int64_t max_entries, const float* x_in, bool indexer) {
  cudaStream_t stream = ctx.stream();
  const int64_t N = n_rows, D = cfg.hidden_size;
  const bool overlap = ratio == 4;
  const int64_t cw = (overlap ? 2 : 1) * width;
  lin_in(w.wkv, x_in, a_in, N, ca);
  lin_in(w.wgate, x_in, a_in, N, cz);
  compressor_add_ape_cuda(stream, cz, w.ape, sec(kPositions), N, ratio, cw);
  CompressorEmitParams p;
  p.a = ca;
  p.z = cz;
  p.ring_a = ring_a;
  p.ring_z = ring_z;
  p.entries = entries;
  p.max_entries = max_entries;
  p.ratio = ratio;
  p.width = width;
  p.overlap = overlap;
  p.emit_rows = sec(emit_section.at(ratio));
  p.n_emit = emit_counts.at(ratio);
  p.positions = sec(kPositions);
  p.slot = sec(kSlot);
  p.chunk_start = sec(kChunkStart);
  p.chunk_row0 = sec(kChunkRow0);
  p.norm_w = w.norm;
  p.eps = static_cast<float>(cfg.rms_norm_eps);
  p.rope_dim = cfg.rope_dim;
  p.inv_freq = inv_freq_compress;
  if (opt.numerics == Numerics::kOfficial) {
    p.qat = indexer ? CompressorQat::kHadamardFp4 : CompressorQat::kFp8Nope;
  }
  if (p.n_emit > 0) compressor_emit_cuda(stream, p);
  ring_store_cuda(stream, ca, N, cw, sec(kPositions), sec(kSlot), sec(kChunkEnd), ring_a, 2 * ratio);
  ring_store_cuda(stream, cz, N, cw, sec(kPositions), sec(kSlot), sec(kChunkEnd), ring_z, 2 * ratio);
}

void GpuModel::Impl::attention_block(int64_t layer, const float* x_in, float* out) {
  cudaStream_t stream = ctx.stream();
  const GpuLayerW& w = layers[layer];
  GpuLayerState& st = states[layer];
  const int64_t N = n_rows, D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim;
  const int64_t r = cfg.rope_dim, W = cfg.sliding_window, Rq = cfg.q_lora_rank;
  const int64_t ratio = cfg.compress_ratio(layer);
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const float* inv_freq = ratio > 0 ? inv_freq_compress : inv_freq_main;
  const int32_t* positions = sec(kPositions);

  if (fp8()) act_quantize(ctx, x_in, N, D, a_in);  // shared by wq_a, wkv and the compressors
  lin_in(w.wq_a, x_in, a_in, N, q_r);
  rms_norm_cuda(stream, q_r, w.q_norm, N, Rq, Rq, eps, q_r);
  if (fp8()) act_quantize(ctx, q_r, N, Rq, a_r);  // shared by wq_b and the indexer's wq_b
  lin_in(w.wq_b, q_r, a_r, N, q);
  rms_norm_cuda(stream, q, nullptr, N * H, d, d, eps, q);
  lin_in(w.wkv, x_in, a_in, N, kv);
  rms_norm_cuda(stream, kv, w.kv_norm, N, d, d, eps, kv);
  rope_cuda(stream, q, positions, N, H, d, r, inv_freq);
  rope_cuda(stream, kv, positions, N, 1, d, r, inv_freq);
  const bool official = opt.numerics == Numerics::kOfficial;
  if (official) fp8_roundtrip_rows_cuda(stream, kv, N, d, d - r, 64);

  if (w.has_compressor) {
    run_compressor(w.cmp, ratio, d, st.cmp_a, st.cmp_z, st.cmp_entries, st.cmp_max_entries, x_in,
                   false);
  }
  const int64_t HI = cfg.index_n_heads, dI = cfg.index_head_dim;
  if (w.has_indexer) {
    run_compressor(w.idx_cmp, 4, dI, st.idx_a, st.idx_z, st.idx_entries, st.idx_max_entries, x_in,
                   true);
    lin_in(w.idx_wq_b, q_r, a_r, N, qi);
    lin(w.idx_wproj, x_in, N, gi, a_gen);  // fp32
    rope_cuda(stream, qi, positions, N, HI, dI, r, inv_freq_compress);
    if (official) hadamard_fp4_rows_cuda(stream, qi, N * HI, dI, 32);
    IndexerScoresParams ip;
    ip.q = qi;
    ip.g = gi;
    ip.n_rows = N;
    ip.n_heads = HI;
    ip.head_dim = dI;
    ip.head_scale = 1.0f / std::sqrt(static_cast<float>(HI));
    ip.scale = 1.0f / std::sqrt(static_cast<float>(dI));
    ip.positions = positions;
    ip.slot = sec(kSlot);
    ip.ratio = 4;
    ip.keys = st.idx_entries;
    ip.max_entries = st.idx_max_entries;
    ip.scores = scores;
    ip.score_stride = st.idx_max_entries;
    indexer_scores_cuda(stream, ip);
    topk_rows_cuda(stream, scores, N, st.idx_max_entries, positions, 4, nullptr, cfg.index_topk,
                   sel, n_sel);
  }

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
  if (ratio > 0) {
    ap.entries = st.cmp_entries;
    ap.max_entries = st.cmp_max_entries;
    ap.ratio = ratio;
    if (w.has_indexer) {
      ap.selected = sel;
      ap.n_selected = n_sel;
      ap.max_selected = cfg.index_topk;
    }
  }
  sparse_attention_cuda(stream, ap);
  rope_cuda(stream, o, positions, N, H, d, r, inv_freq, /*inverse=*/true);
  ring_store_cuda(stream, kv, N, d, positions, sec(kSlot), sec(kChunkEnd), st.ring, W);

  // Grouped output projection: group g maps its H*d/G slice of o to R_o values. FP8 with
  // 128-aligned groups: o is quantised once; group g's K blocks are a contiguous run of the
  // block-major scales and its codes are copied out to a dense [N, H*d/G] operand (the same
  // per-1x128-block quantisation as quantising each group's slice on its own).
  const int64_t G = cfg.o_groups, Ro = cfg.o_lora_rank, gw = H * d / G;
  const bool quant_once = fp8() && gw % kFp8GemmBlock == 0;
  if (quant_once) act_quantize(ctx, o, N, H * d, a_gen);
  for (int64_t g = 0; g < G; ++g) {
    if (quant_once) {
      CUDA_CHECK(cudaMemcpy2DAsync(og_q, gw, a_gen.q + g * gw, H * d, gw, N,
                                   cudaMemcpyDeviceToDevice, stream));
      lin_in(w.wo_a[g], nullptr, ActScratch{og_q, a_gen.s + g * (gw / kFp8GemmBlock) * N}, N, zg);
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

}  // namespace deepinfer
