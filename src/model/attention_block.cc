// Attention of one layer for a batch (MODEL_SPEC §A.3-A.7): low-rank q with per-head
// RMS norm, shared K=V with RoPE, sliding window, compressed entries (all of them for
// ratio 128, the indexer's top-k for ratio 4), one softmax with the sink, inverse RoPE,
// grouped output projection.
#include <cmath>
#include <cstring>

#include "base/dtype.h"
#include "base/parallel.h"
#include "model/model_batch.h"
#include "ops/attention/sparse_attention.h"
#include "ops/compressor/compress_pool.h"
#include "ops/indexer/indexer.h"
#include "ops/quant/qat.h"
#include "ops/rms_norm/rms_norm.h"

namespace deepinfer {
namespace {

// Official numerics stores a K=V entry (window key or main compressed entry) as the FP8 KV
// cache does (ops/kv_cache/kv_cache.h, kFp8): the NoPE dims FP8 round-tripped in 64-blocks
// with power-of-two scales, the trailing RoPE dims rounded to bf16 (as DeepSeek's reference
// keeps them). The GPU's paged fp8 cache then holds exactly these values.
void round_kv_entry_official(float* entry, int64_t d, int64_t rope_dim) {
  fp8_roundtrip(entry, d - rope_dim, 64);
  for (int64_t i = d - rope_dim; i < d; ++i) entry[i] = round_bf16(entry[i]);
}

}  // namespace

void Model::attention_block(int64_t layer, Batch& batch, const float* x, float* out) const {
  const ModelConfig& cfg = config_;
  const AttentionWeights& w = weights_.layers[layer].attn;
  const int64_t N = batch.n_rows(), D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim;
  const int64_t r = cfg.rope_dim, W = cfg.sliding_window, Rq = cfg.q_lora_rank;
  const int64_t ratio = cfg.compress_ratio(layer);
  const bool official = options_.numerics == Numerics::kOfficial;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const RopeTable& rope = ratio > 0 ? rope_compress_ : rope_main_;

  // Queries.
  std::vector<float> q_r(N * Rq), q(N * H * d), kv(N * d);
  linear_ref(x, N, D, w.wq_a.f32(), Rq, q_r.data(), gemm_mode_);
  rms_norm_ref(q_r.data(), w.q_norm.f32(), N, Rq, Rq, eps, q_r.data());
  linear_ref(q_r.data(), N, Rq, w.wq_b.f32(), H * d, q.data(), gemm_mode_);
  rms_norm_ref(q.data(), nullptr, N * H, d, d, eps, q.data());
  // Shared K = V.
  linear_ref(x, N, D, w.wkv.f32(), d, kv.data(), gemm_mode_);
  rms_norm_ref(kv.data(), w.kv_norm.f32(), N, d, d, eps, kv.data());
  for (int64_t row = 0; row < N; ++row) {
    rope.apply_heads(&q[row * H * d], H, d, batch.positions[row]);
    rope.apply(&kv[row * d + d - r], batch.positions[row]);
    if (official) round_kv_entry_official(&kv[row * d], d, r);
  }

  // Compressors: feed every token of the chunk in order (entries become visible to a
  // query exactly when it may see them: w < (t+1)/m).
  std::vector<float> qi, gi;
  const int64_t HI = cfg.index_n_heads, dI = cfg.index_head_dim;
  if (w.has_compressor) {
    const int64_t c = ratio == 4 ? 2 : 1;
    std::vector<float> a(N * c * d), z(N * c * d);
    linear_ref(x, N, D, w.compressor.wkv.f32(), c * d, a.data(), gemm_mode_);
    linear_ref(x, N, D, w.compressor.wgate.f32(), c * d, z.data(), gemm_mode_);
    for (const Batch::Segment& seg : batch.segments) {
      CompressorState& st = seg.state->layers[layer].compressor;
      for (int64_t row = seg.begin; row < seg.end; ++row) {
        compressor_step(w.compressor, st, &a[row * c * d], &z[row * c * d], batch.positions[row], false);
      }
    }
  }
  if (w.has_indexer) {
    std::vector<float> a(N * 2 * dI), z(N * 2 * dI);
    linear_ref(x, N, D, w.indexer.compressor.wkv.f32(), 2 * dI, a.data(), gemm_mode_);
    linear_ref(x, N, D, w.indexer.compressor.wgate.f32(), 2 * dI, z.data(), gemm_mode_);
    for (const Batch::Segment& seg : batch.segments) {
      CompressorState& st = seg.state->layers[layer].index_compressor;
      for (int64_t row = seg.begin; row < seg.end; ++row) {
        compressor_step(w.indexer.compressor, st, &a[row * 2 * dI], &z[row * 2 * dI],
                        batch.positions[row], true);
      }
    }
    qi.resize(N * HI * dI);
    gi.resize(N * HI);
    linear_ref(q_r.data(), N, Rq, w.indexer.wq_b.f32(), HI * dI, qi.data(), gemm_mode_);
    linear_ref(x, N, D, w.indexer.weights_proj.f32(), HI, gi.data(), gemm_mode_);
    const float head_scale = 1.0f / std::sqrt(static_cast<float>(HI));
    for (int64_t row = 0; row < N; ++row) {
      rope_compress_.apply_heads(&qi[row * HI * dI], HI, dI, batch.positions[row]);
      for (int64_t h = 0; h < HI; ++h) {
        if (official) {
          hadamard_transform(&qi[(row * HI + h) * dI], dI);
          fp4_roundtrip(&qi[(row * HI + h) * dI], dI, 32);
        }
        gi[row * HI + h] *= head_scale;
      }
    }
  }

  // Attention, one query row at a time.
  std::vector<float> o(N * H * d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float index_scale = 1.0f / std::sqrt(static_cast<float>(dI));
  parallel_for(N, [&](int64_t begin, int64_t end) {
    std::vector<const float*> keys;
    std::vector<float> scores;
    for (int64_t row = begin; row < end; ++row) {
      const Batch::Segment& seg = batch.segments[batch.segment_of_row[row]];
      const SequenceLayerState& ls = seg.state->layers[layer];
      const int64_t pos = batch.positions[row];
      keys.clear();
      for (int64_t p = std::max<int64_t>(0, pos - W + 1); p <= pos; ++p) {
        keys.push_back(p >= seg.start_pos ? &kv[(seg.begin + p - seg.start_pos) * d]
                                          : &ls.ring[(p % W) * d]);
      }
      if (ratio > 0) {
        const int64_t n_visible = (pos + 1) / ratio;
        const float* entries = ls.compressor.entries.data();
        if (ratio == 4) {
          scores.resize(n_visible);
          indexer_scores_ref(&qi[row * HI * dI], &gi[row * HI], HI, dI,
                             ls.index_compressor.entries.data(), n_visible, index_scale,
                             scores.data());
          const std::vector<int64_t> top = topk_indices(scores.data(), n_visible, cfg.index_topk);
          for (int64_t e : top) keys.push_back(entries + e * d);
          if (trace_ != nullptr) {  // one sequence: each row writes its own position
            int32_t* rec = trace_->picks_at(layer, pos);
            for (size_t j = 0; j < top.size(); ++j) rec[j] = static_cast<int32_t>(top[j]);
          }
        } else {
          for (int64_t e = 0; e < n_visible; ++e) keys.push_back(entries + e * d);
        }
      }
      float* orow = &o[row * H * d];
      sparse_attention_row_ref(&q[row * H * d], H, d, keys.data(), static_cast<int64_t>(keys.size()),
                               w.sink.f32(), scale, orow);
      rope.apply_heads(orow, H, d, pos, /*inverse=*/true);
    }
  });

  // The chunk's keys enter the window ring (only the last W positions survive).
  for (const Batch::Segment& seg : batch.segments) {
    std::vector<float>& ring = seg.state->layers[layer].ring;
    for (int64_t row = std::max(seg.begin, seg.end - W); row < seg.end; ++row) {
      std::memcpy(&ring[(batch.positions[row] % W) * d], &kv[row * d], d * sizeof(float));
    }
  }

  // Grouped output projection: group g maps its H*d/G slice of o to R_o values.
  const int64_t G = cfg.o_groups, Ro = cfg.o_lora_rank, gw = H * d / G;
  std::vector<float> og(N * gw), zg(N * Ro), z(N * G * Ro);
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t row = 0; row < N; ++row) {
      std::memcpy(&og[row * gw], &o[row * H * d + g * gw], gw * sizeof(float));
    }
    linear_ref(og.data(), N, gw, w.wo_a.f32() + g * Ro * gw, Ro, zg.data(), gemm_mode_);
    for (int64_t row = 0; row < N; ++row) {
      std::memcpy(&z[row * G * Ro + g * Ro], &zg[row * Ro], Ro * sizeof(float));
    }
  }
  linear_ref(z.data(), N, G * Ro, w.wo_b.f32(), D, out, gemm_mode_);
}

void Model::compressor_step(const CompressorWeights& w, CompressorState& st, const float* a,
                            const float* z, int64_t pos, bool indexer) const {
  const int64_t m = st.ratio, width = st.width, c = st.overlap ? 2 : 1, cw = c * width;
  const int64_t slot = pos % m;
  const float* ape = w.ape.f32() + slot * cw;
  std::memcpy(&st.cur_a[slot * cw], a, cw * sizeof(float));
  for (int64_t i = 0; i < cw; ++i) st.cur_z[slot * cw + i] = z[i] + ape[i];
  if ((pos + 1) % m != 0) return;

  const int64_t entry = pos / m;
  std::vector<const float*> pa, pz;
  static const std::vector<float> kZeros(4096, 0.0f);
  std::vector<float> neg_inf;
  if (st.overlap) {
    // Slots 0..m-1: A halves of the previous window (weight 0 before the first window);
    // slots m..2m-1: B halves of this window.
    if (!st.has_prev) neg_inf.assign(width, -INFINITY);
    ICHECK(width <= static_cast<int64_t>(kZeros.size()));
    for (int64_t s = 0; s < m; ++s) {
      pa.push_back(st.has_prev ? &st.prev_a[s * width] : kZeros.data());
      pz.push_back(st.has_prev ? &st.prev_z[s * width] : neg_inf.data());
    }
    for (int64_t s = 0; s < m; ++s) {
      pa.push_back(&st.cur_a[s * cw + width]);
      pz.push_back(&st.cur_z[s * cw + width]);
    }
  } else {
    for (int64_t s = 0; s < m; ++s) {
      pa.push_back(&st.cur_a[s * cw]);
      pz.push_back(&st.cur_z[s * cw]);
    }
  }
  std::vector<float> pooled(width);
  compress_pool_ref(pa.data(), pz.data(), static_cast<int64_t>(pa.size()), width, pooled.data());
  if (st.overlap) {
    for (int64_t s = 0; s < m; ++s) {
      std::memcpy(&st.prev_a[s * width], &st.cur_a[s * cw], width * sizeof(float));
      std::memcpy(&st.prev_z[s * width], &st.cur_z[s * cw], width * sizeof(float));
    }
    st.has_prev = true;
  }
  rms_norm_ref(pooled.data(), w.norm.f32(), 1, width, width, static_cast<float>(config_.rms_norm_eps),
               pooled.data());
  const int64_t r = config_.rope_dim;
  rope_compress_.apply(&pooled[width - r], m * entry);
  if (options_.numerics == Numerics::kOfficial) {
    if (indexer) {
      hadamard_transform(pooled.data(), width);
      fp4_roundtrip(pooled.data(), width, 32);
    } else {
      round_kv_entry_official(pooled.data(), width, r);
    }
  }
  st.entries.insert(st.entries.end(), pooled.begin(), pooled.end());
  st.n_entries = entry + 1;
}

}  // namespace deepinfer
