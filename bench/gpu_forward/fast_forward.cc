// FastModel forward: GpuModel's structure (src/runtime) with every projection through
// act_quant + the FP8 block-scaled GEMM, the per-expert GEMMs over one shared quantisation of
// the grouped rows, and the work accounting (bytes / FLOPs) of each forward.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "fast_model_impl.h"
#include "ops/attention/sparse_attention_cuda.h"
#include "ops/compressor/compress_pool_cuda.h"
#include "ops/embedding/embedding_cuda.h"
#include "ops/gemm/gemm.h"
#include "ops/indexer/indexer_cuda.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/moe/moe_cuda.h"
#include "ops/quant/act_quant.h"
#include "ops/rms_norm/rms_norm_cuda.h"
#include "ops/rope/rope_cuda.h"
#include "runtime/ring_store.h"

namespace deepinfer {

void FastModel::Impl::quant(const float* x_in, int64_t m, int64_t k, uint8_t* q_out, float* s_out) {
  act_quant_cuda(ctx.stream(), x_in, DType::F32, m, k, kFp8GemmBlock, q_out, s_out,
                 ScaleLayout::kBlockMajor);
}

void FastModel::Impl::lin_q(const uint8_t* xq_, const float* sx_, int64_t m, const QW& w, float* y_out) {
  gemm_fp8_block_cuda(ctx, xq_, sx_, w.q, w.s, m, w.n, w.k, y_out, DType::F32);
  work.gemm_flops += 2.0 * m * w.n * w.k;
  work.weight_bytes += w.bytes();
}

void FastModel::Impl::lin(const float* x_in, int64_t m, const QW& w, float* y_out) {
  quant(x_in, m, w.k, xq, sx);
  lin_q(xq, sx, m, w, y_out);
}

void FastModel::Impl::run_compressor(const FastCmp& w, int64_t ratio, int64_t width, float* ring_a,
                                     float* ring_z, float* entries, int64_t max_entries) {
  cudaStream_t stream = ctx.stream();
  const int64_t N = n_rows;
  const bool overlap = ratio == 4;
  const int64_t cw = (overlap ? 2 : 1) * width;
  lin_q(xq_in, sx_in, N, w.wkv, ca);
  lin_q(xq_in, sx_in, N, w.wgate, cz);
  compressor_add_ape_cuda(stream, cz, w.ape, sec(kPos), N, ratio, cw);
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
  p.positions = sec(kPos);
  p.slot = sec(kSlot);
  p.chunk_start = sec(kCStart);
  p.chunk_row0 = sec(kCRow0);
  p.norm_w = w.norm;
  p.eps = static_cast<float>(cfg.rms_norm_eps);
  p.rope_dim = cfg.rope_dim;
  p.inv_freq = inv_freq_compress;
  if (p.n_emit > 0) compressor_emit_cuda(stream, p);
  ring_store_cuda(stream, ca, N, cw, sec(kPos), sec(kSlot), sec(kCEnd), ring_a, 2 * ratio);
  ring_store_cuda(stream, cz, N, cw, sec(kPos), sec(kSlot), sec(kCEnd), ring_z, 2 * ratio);
}

void FastModel::Impl::attention_block(int64_t layer, const float* x_in, float* out) {
  cudaStream_t stream = ctx.stream();
  const FastLayer& w = layers[layer];
  FastState& st = states[layer];
  const int64_t N = n_rows, D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim;
  const int64_t r = cfg.rope_dim, W = cfg.sliding_window, Rq = cfg.q_lora_rank;
  const int64_t ratio = cfg.compress_ratio(layer);
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const float* inv_freq = ratio > 0 ? inv_freq_compress : inv_freq_main;
  const int32_t* positions = sec(kPos);

  quant(x_in, N, D, xq_in, sx_in);  // shared by wq_a, wkv and the compressors
  lin_q(xq_in, sx_in, N, w.wq_a, q_r);
  rms_norm_cuda(stream, q_r, w.q_norm, N, Rq, Rq, eps, q_r);
  quant(q_r, N, Rq, xq_r, sx_r);  // shared by wq_b and the indexer's wq_b
  lin_q(xq_r, sx_r, N, w.wq_b, q);
  rms_norm_cuda(stream, q, nullptr, N * H, d, d, eps, q);
  lin_q(xq_in, sx_in, N, w.wkv, kv);
  rms_norm_cuda(stream, kv, w.kv_norm, N, d, d, eps, kv);
  rope_cuda(stream, q, positions, N, H, d, r, inv_freq);
  rope_cuda(stream, kv, positions, N, 1, d, r, inv_freq);

  if (w.has_cmp) run_compressor(w.cmp, ratio, d, st.cmp_a, st.cmp_z, st.cmp_entries, st.cmp_max);
  const int64_t HI = cfg.index_n_heads, dI = cfg.index_head_dim;
  if (w.has_idx) {
    run_compressor(w.idx_cmp, 4, dI, st.idx_a, st.idx_z, st.idx_entries, st.idx_max);
    lin_q(xq_r, sx_r, N, w.idx_wq_b, qi);
    gemm_f32_cuda(ctx, x_in, w.idx_wproj, N, HI, D, gi);
    work.gemm_flops += 2.0 * N * HI * D;
    work.weight_bytes += 4.0 * HI * D;
    rope_cuda(stream, qi, positions, N, HI, dI, r, inv_freq_compress);
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
    ip.max_entries = st.idx_max;
    ip.scores = scores;
    ip.score_stride = st.idx_max;
    indexer_scores_cuda(stream, ip);
    topk_rows_cuda(stream, scores, N, st.idx_max, positions, 4, nullptr, cfg.index_topk, sel, n_sel);
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
  ap.chunk_start = sec(kCStart);
  ap.chunk_row0 = sec(kCRow0);
  ap.chunk_kv = kv;
  ap.ring = st.ring;
  ap.window = W;
  if (ratio > 0) {
    ap.entries = st.cmp_entries;
    ap.max_entries = st.cmp_max;
    ap.ratio = ratio;
    if (w.has_idx) {
      ap.selected = sel;
      ap.n_selected = n_sel;
      ap.max_selected = cfg.index_topk;
    }
  }
  sparse_attention_cuda(stream, ap);
  rope_cuda(stream, o, positions, N, H, d, r, inv_freq, /*inverse=*/true);
  ring_store_cuda(stream, kv, N, d, positions, sec(kSlot), sec(kCEnd), st.ring, W);

  // Grouped output projection: o quantised once; group g's K blocks are a contiguous run of
  // the block-major scales, its codes are copied out to a dense [N, H*d/G] operand.
  const int64_t G = cfg.o_groups, Ro = cfg.o_lora_rank, gw = H * d / G;
  quant(o, N, H * d, xq, sx);
  for (int64_t g = 0; g < G; ++g) {
    CUDA_CHECK(cudaMemcpy2DAsync(xq2, gw, xq + g * gw, H * d, gw, N, cudaMemcpyDeviceToDevice, stream));
    const QW wg{w.wo_a.q + g * Ro * gw, w.wo_a.s + g * (Ro / kFp8GemmBlock) * fp8_weight_scale_ld(gw),
                Ro, gw};
    lin_q(xq2, sx + g * (gw / kFp8GemmBlock) * N, N, wg, zg);
    CUDA_CHECK(cudaMemcpy2DAsync(zz + g * Ro, G * Ro * sizeof(float), zg, Ro * sizeof(float),
                                 Ro * sizeof(float), N, cudaMemcpyDeviceToDevice, stream));
  }
  lin(zz, N, w.wo_b, out);
}

void FastModel::Impl::moe_block(int64_t layer, const float* x_in, float* out) {
  cudaStream_t stream = ctx.stream();
  const FastLayer& w = layers[layer];
  const int64_t N = n_rows, D = cfg.hidden_size, E = cfg.n_routed_experts;
  const int64_t k = cfg.n_experts_per_tok, I = cfg.moe_intermediate_size;
  const float limit = static_cast<float>(cfg.swiglu_limit);
  constexpr int64_t kAlign = 64;

  gemm_f32_cuda(ctx, x_in, w.gate, N, E, D, router);
  work.gemm_flops += 2.0 * N * E * D;
  work.weight_bytes += 4.0 * E * D;
  const RouterParams rp{E, k, static_cast<float>(cfg.routed_scaling_factor)};
  route_cuda(stream, router, N, w.bias, nullptr, sec(kTok), rp, route_ids, route_w);
  CUDA_CHECK(cudaMemcpyAsync(route_ids_host, route_ids, N * k * sizeof(int32_t),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(route_w_host, route_w, N * k * sizeof(float), cudaMemcpyDeviceToHost,
                             stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));

  std::vector<int64_t> count(E, 0), offset(E + 1, 0), m_e(E, 0);
  for (int64_t i = 0; i < N * k; ++i) {
    const int32_t e = route_ids_host[i];
    ICHECK(e >= 0 && e < E) << "routing produced expert " << e;
    ++count[e];
  }
  for (int64_t e = 0; e < E; ++e) {
    offset[e + 1] = offset[e] + (count[e] + kAlign - 1) / kAlign * kAlign;
    // SIMT kernel below 4 rows (cuBLASLt has no algorithm there), cuBLASLt on a multiple of 4.
    m_e[e] = count[e] < 4 ? count[e] : (count[e] + 3) / 4 * 4;
  }
  const int64_t total = offset[E];
  ICHECK(total <= moe_cap) << "moe: " << total << " rows exceed " << moe_cap;
  int32_t* perm_rows = moe_meta_host;
  int32_t* slot_of = perm_rows + moe_cap;
  float* perm_w = reinterpret_cast<float*>(slot_of + N * k);
  int32_t* seg_row0 = reinterpret_cast<int32_t*>(perm_w + moe_cap);
  int32_t* seg_m = seg_row0 + moe_cap;
  std::fill(perm_rows, perm_rows + total, 0);
  std::fill(perm_w, perm_w + total, 0.0f);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = offset[e]; r < offset[e + 1]; ++r) {
      seg_row0[r] = static_cast<int32_t>(offset[e]);
      seg_m[r] = r - offset[e] < m_e[e] ? static_cast<int32_t>(m_e[e]) : 0;
    }
  }
  std::vector<int64_t> fill(offset.begin(), offset.end() - 1);
  for (int64_t row = 0; row < N; ++row) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = route_ids_host[row * k + j], at = fill[e]++;
      perm_rows[at] = static_cast<int32_t>(row);
      perm_w[at] = route_w_host[row * k + j];
      slot_of[row * k + j] = static_cast<int32_t>(at);
    }
  }
  const int64_t meta_n = 4 * moe_cap + N * k;
  CUDA_CHECK(cudaMemcpyAsync(moe_meta, moe_meta_host, meta_n * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream));
  const int32_t* d_perm_rows = moe_meta;
  const int32_t* d_slot_of = moe_meta + moe_cap;
  const float* d_perm_w = reinterpret_cast<const float*>(d_slot_of + N * k);
  const int32_t* d_row0 = reinterpret_cast<const int32_t*>(d_perm_w + moe_cap);
  const int32_t* d_m = d_row0 + moe_cap;

  gather_rows_cuda(stream, x_in, d_perm_rows, total, D, xs);
  const int64_t kb_d = D / kFp8GemmBlock, kb_i = I / kFp8GemmBlock;
  act_quant_cuda(stream, xs, DType::F32, total, D, kFp8GemmBlock, xq_moe, sx_rm, ScaleLayout::kRowMajor);
  segment_scales(stream, sx_rm, total, kb_d, d_row0, d_m, sx_seg);
  for (int64_t e = 0; e < E; ++e) {
    if (count[e] == 0) continue;
    ++work.experts_used;
    const uint8_t* xe = xq_moe + offset[e] * D;
    const float* se = sx_seg + offset[e] * kb_d;
    gemm_fp8_block_cuda(ctx, xe, se, w.w1[e].q, w.w1[e].s, m_e[e], I, D, eg + offset[e] * I, DType::F32);
    gemm_fp8_block_cuda(ctx, xe, se, w.w3[e].q, w.w3[e].s, m_e[e], I, D, ev + offset[e] * I, DType::F32);
    work.weight_bytes += w.w1[e].bytes() + w.w3[e].bytes() + w.w2[e].bytes();
    work.gemm_flops += 2.0 * count[e] * 3.0 * I * D;
  }
  swiglu_cuda(stream, eg, ev, d_perm_w, total, I, limit);
  act_quant_cuda(stream, eg, DType::F32, total, I, kFp8GemmBlock, xq_moe, sx_rm, ScaleLayout::kRowMajor);
  segment_scales(stream, sx_rm, total, kb_i, d_row0, d_m, sx_seg);
  for (int64_t e = 0; e < E; ++e) {
    if (count[e] == 0) continue;
    gemm_fp8_block_cuda(ctx, xq_moe + offset[e] * I, sx_seg + offset[e] * kb_i, w.w2[e].q, w.w2[e].s,
                        m_e[e], D, I, ys + offset[e] * D, DType::F32);
  }
  quant(x_in, N, D, xq_in, sx_in);
  lin_q(xq_in, sx_in, N, w.sw1, sg);
  lin_q(xq_in, sx_in, N, w.sw3, sv);
  swiglu_cuda(stream, sg, sv, nullptr, N, w.sw1.n, limit);
  lin(sg, N, w.sw2, ysh);
  moe_combine_cuda(stream, ys, d_slot_of, ysh, N, k, D, out);
}

// Attention FLOPs (QK + PV per head over every key a row sees; indexer scores) and the state
// a chunk must read from before it (window keys, compressed entries: the top-k on CSA layers,
// all on HCA; every indexer entry is scored).
void FastModel::Impl::count_attention_work() {
  const double d = cfg.head_dim, H = cfg.num_heads, W = cfg.sliding_window;
  const double HI = cfg.index_n_heads, dI = cfg.index_head_dim, topk = cfg.index_topk;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const int64_t ratio = cfg.compress_ratio(l);
    const bool idx = layers[l].has_idx;
    for (const FastChunk& c : chunks) {
      const int64_t len = static_cast<int64_t>(c.tokens.size());
      for (int64_t i = 0; i < len; ++i) {
        const int64_t pos = c.start + i;
        double keys = std::min<double>(W, pos + 1);
        if (ratio > 0) {
          const double n_ent = static_cast<double>((pos + 1) / ratio);
          keys += idx ? std::min(topk, n_ent) : n_ent;
          if (idx) work.attn_flops += 2.0 * n_ent * HI * dI;
        }
        work.attn_flops += 4.0 * H * d * keys;
      }
      const double old_ent = ratio > 0 ? static_cast<double>(c.start / ratio) : 0.0;
      double st = std::min<double>(W, c.start) * d * 4;
      if (ratio > 0) st += (idx ? std::min(topk, old_ent) : old_ent) * d * 4;
      if (idx) st += old_ent * dI * 4;
      work.state_bytes += st;
    }
  }
}

void FastModel::forward(std::span<const FastChunk> chunks) {
  Impl& m = *impl_;
  const ModelConfig& cfg = m.cfg;
  const int64_t T = m.opt.max_batch_tokens;
  int64_t N = 0, n_out = 0;
  for (const FastChunk& c : chunks) {
    CHECK(c.slot >= 0 && c.slot < m.opt.max_sequences) << "forward: slot " << c.slot;
    CHECK(!c.tokens.empty()) << "forward: empty chunk";
    CHECK(c.start + static_cast<int64_t>(c.tokens.size()) <= m.opt.max_context)
        << "forward: chunk past max_context";
    for (int32_t t : c.tokens) CHECK(t >= 0 && t < cfg.vocab_size) << "token id " << t;
    N += static_cast<int64_t>(c.tokens.size());
    n_out += c.all_logits ? static_cast<int64_t>(c.tokens.size()) : 1;
  }
  CHECK(N > 0 && N <= T) << "forward: " << N << " rows (max " << T << ")";
  CHECK(n_out <= m.opt.max_out_rows) << "forward: " << n_out << " output rows (max "
                                     << m.opt.max_out_rows << ")";
  m.chunks.assign(chunks.begin(), chunks.end());
  if (m.profiling && m.prof.size() != static_cast<size_t>(4 * cfg.num_layers)) {
    m.prof.clear();
    for (int64_t i = 0; i < 4 * cfg.num_layers; ++i) m.prof.emplace_back();
  }
  m.work = FastWork{};
  int32_t* mh = m.meta_host;
  auto sec = [&](int s) { return mh + static_cast<int64_t>(s) * T; };
  std::map<int64_t, int64_t> n_emit;
  for (auto& [ratio, s] : m.emit_section) n_emit[ratio] = 0;
  int64_t row = 0, out_i = 0;
  for (const FastChunk& c : chunks) {
    const int64_t len = static_cast<int64_t>(c.tokens.size());
    for (int64_t i = 0; i < len; ++i, ++row) {
      const int64_t pos = c.start + i;
      sec(kTok)[row] = c.tokens[i];
      sec(kPos)[row] = static_cast<int32_t>(pos);
      sec(kSlot)[row] = static_cast<int32_t>(c.slot);
      sec(kCStart)[row] = static_cast<int32_t>(c.start);
      sec(kCRow0)[row] = static_cast<int32_t>(row - i);
      sec(kCEnd)[row] = static_cast<int32_t>(c.start + len);
      if (c.all_logits || i == len - 1) sec(kOut)[out_i++] = static_cast<int32_t>(row);
      for (auto& [ratio, s] : m.emit_section) {
        if ((pos + 1) % ratio == 0) sec(s)[n_emit[ratio]++] = static_cast<int32_t>(row);
      }
    }
  }
  m.n_rows = N;
  m.n_out = n_out;
  cudaStream_t stream = m.ctx.stream();
  CUDA_CHECK(cudaMemcpyAsync(m.meta, m.meta_host, m.n_sections * T * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream));
  m.emit_counts = n_emit;

  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const double mix_bytes = 4.0 * (2 + hc) * hc * hc * D;
  embedding_cuda(stream, m.embed, m.sec(kTok), N, D, hc, m.X);
  m.work.weight_bytes += 4.0 * N * D;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const FastLayer& lw = m.layers[l];
    auto mark = [&](int i) {
      if (m.profiling) m.prof[4 * l + i].record(stream);
    };
    hc_mix_cuda(m.ctx, m.X, N, lw.hc_attn.fn, lw.hc_attn.base, lw.hc_attn.scale, m.hp,
                m.mix_scratch, m.pre, m.post, m.comb);
    hc_collapse_cuda(stream, m.X, m.pre, N, hc, D, m.u);
    rms_norm_cuda(stream, m.u, lw.attn_norm, N, D, D, eps, m.x);
    mark(0);
    m.attention_block(l, m.x, m.y);
    mark(1);
    hc_expand_cuda(stream, m.X, m.y, m.post, m.comb, N, hc, D, m.X2);
    std::swap(m.X, m.X2);
    hc_mix_cuda(m.ctx, m.X, N, lw.hc_ffn.fn, lw.hc_ffn.base, lw.hc_ffn.scale, m.hp, m.mix_scratch,
                m.pre, m.post, m.comb);
    hc_collapse_cuda(stream, m.X, m.pre, N, hc, D, m.u);
    rms_norm_cuda(stream, m.u, lw.ffn_norm, N, D, D, eps, m.x);
    mark(2);
    m.moe_block(l, m.x, m.y);
    mark(3);
    hc_expand_cuda(stream, m.X, m.y, m.post, m.comb, N, hc, D, m.X2);
    std::swap(m.X, m.X2);
    m.work.weight_bytes += 2 * mix_bytes;
    m.work.gemm_flops += 2.0 * 2.0 * N * (2 + hc) * hc * hc * D;
  }
  gather_rows_cuda(stream, m.X, m.sec(kOut), n_out, hc * D, m.Xo);
  hc_head_cuda(m.ctx, m.Xo, n_out, m.hc_head.fn, m.hc_head.base, m.hc_head.scale, m.hp,
               m.mix_scratch, m.head_pre, m.h);
  rms_norm_cuda(stream, m.h, m.norm, n_out, D, D, eps, m.h);
  m.lin(m.h, n_out, m.head, m.logits_d);
  m.count_attention_work();
}

void FastModel::set_profiling(bool on) { impl_->profiling = on; }

FastProfile FastModel::profile() {
  Impl& m = *impl_;
  FastProfile p;
  if (m.prof.empty()) return p;
  CUDA_CHECK(cudaStreamSynchronize(m.ctx.stream()));
  for (int64_t l = 0; l < m.cfg.num_layers; ++l) {
    p.attention_ms += cuda::Event::elapsed_ms(m.prof[4 * l], m.prof[4 * l + 1]);
    p.moe_ms += cuda::Event::elapsed_ms(m.prof[4 * l + 2], m.prof[4 * l + 3]);
  }
  return p;
}

}  // namespace deepinfer
