// The compressors a layer owns (MODEL_SPEC §A.5, §C.5, §C.7 step 1): every token of the
// chunk is fed in order, so an entry exists exactly when a query may see it (w < (t+1)/m).
//  * main compressor: entry = RoPE_{m w}(norm(pool)), QAT-rounded, into compressor.entries;
//  * V4 ratio 4: the index keys' own compressor, then Hadamard + FP4 (official);
//  * V4.1 index-key owners: key = RoPE_{m w}(k_norm(wk . norm(pool))) from the pre-RoPE
//    latent, FP4 (official).
// Index keys go to the layer's index_keys. The per-row compressor inputs (the a / z
// projections of x) are computed apart from the in-order stepping, so the context-parallel
// forward can gather every rank's rows and step the full sequence on each rank.
#include <cmath>
#include <cstring>

#include "model/kv_rounding.h"
#include "model/model_batch.h"
#include "ops/compressor/compress_pool.h"
#include "ops/rms_norm/rms_norm.h"

namespace deepinfer {

Model::CompressorInputs Model::compressor_inputs(int64_t layer, const float* x, int64_t N) const {
  const ModelConfig& cfg = config_;
  const LayerPlan& plan = cfg.plan[layer];
  const AttentionWeights& w = weights_.layers[layer].attn;
  const int64_t D = cfg.hidden_size, d = cfg.head_dim, dI = cfg.index_head_dim;
  CompressorInputs in;
  in.main_width = (plan.ratio == 4 ? 2 : 1) * d;
  in.index_width = plan.own_index_compressor ? 2 * dI : 0;
  in.a.resize(N * in.main_width);
  in.z.assign(N * in.main_width, 0.0f);
  linear_ref(x, N, D, w.compressor.wkv.f32(), in.main_width, in.a.data(), gemm_mode_);
  // Ratio 1 has no gate: the single slot's softmax weight is exactly 1.
  if (w.compressor.wgate.defined()) {
    linear_ref(x, N, D, w.compressor.wgate.f32(), in.main_width, in.z.data(), gemm_mode_);
  }
  if (plan.own_index_compressor) {
    in.ai.resize(N * in.index_width);
    in.zi.resize(N * in.index_width);
    linear_ref(x, N, D, w.indexer.compressor.wkv.f32(), in.index_width, in.ai.data(), gemm_mode_);
    linear_ref(x, N, D, w.indexer.compressor.wgate.f32(), in.index_width, in.zi.data(), gemm_mode_);
  }
  return in;
}

void Model::feed_compressors(int64_t layer, Batch& batch, const float* x) const {
  step_compressors(layer, batch, compressor_inputs(layer, x, batch.n_rows()));
}

void Model::step_compressors(int64_t layer, Batch& batch, const CompressorInputs& in) const {
  const ModelConfig& cfg = config_;
  const LayerPlan& plan = cfg.plan[layer];
  const AttentionWeights& w = weights_.layers[layer].attn;
  const int64_t d = cfg.head_dim, r = cfg.rope_dim, dI = cfg.index_head_dim, m = plan.ratio;
  const int64_t cw = in.main_width, iw = in.index_width;
  const bool official = options_.numerics == Numerics::kOfficial;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  ICHECK(static_cast<int64_t>(in.a.size()) == batch.n_rows() * cw);
  std::vector<float> latent(d), key(dI);
  for (const Batch::Segment& seg : batch.segments) {
    SequenceLayerState& ls = seg.state->layers[layer];
    for (int64_t row = seg.begin; row < seg.end; ++row) {
      const int64_t pos = batch.positions[row], entry = pos / m;
      if (compressor_step(w.compressor, ls.compressor, &in.a[row * cw], &in.z[row * cw], pos,
                          latent.data())) {
        if (plan.owns_index_keys && !plan.own_index_compressor) {
          linear_ref(latent.data(), 1, d, w.indexer.wk.f32(), dI, key.data(), gemm_mode_);
          rms_norm_ref(key.data(), w.indexer.k_norm.f32(), 1, dI, dI, eps, key.data());
          rope_compress_.apply(&key[dI - r], m * entry);
          if (official) fp4_roundtrip(key.data(), dI, 32);
          ls.index_keys.insert(ls.index_keys.end(), key.begin(), key.end());
        }
        rope_compress_.apply(&latent[d - r], m * entry);
        if (official) round_compressed_entry(cfg.traits, latent.data(), d, r);
        ls.compressor.entries.insert(ls.compressor.entries.end(), latent.begin(), latent.end());
        ls.compressor.n_entries = entry + 1;
      }
      if (plan.own_index_compressor &&
          compressor_step(w.indexer.compressor, ls.index_compressor, &in.ai[row * iw],
                          &in.zi[row * iw], pos, key.data())) {
        rope_compress_.apply(&key[dI - r], m * entry);
        if (official) {
          hadamard_transform(key.data(), dI);
          fp4_roundtrip(key.data(), dI, 32);
        }
        ls.index_keys.insert(ls.index_keys.end(), key.begin(), key.end());
        ls.index_compressor.n_entries = entry + 1;
      }
    }
  }
}

bool Model::compressor_step(const CompressorWeights& w, CompressorState& st, const float* a,
                            const float* z, int64_t pos, float* pooled) const {
  const int64_t m = st.ratio, width = st.width, c = st.overlap ? 2 : 1, cw = c * width;
  const int64_t slot = pos % st.n_slots;
  std::memcpy(&st.rows_a[slot * cw], a, cw * sizeof(float));
  if (w.ape.defined()) {
    const float* ape = w.ape.f32() + (pos % m) * cw;
    for (int64_t i = 0; i < cw; ++i) st.rows_z[slot * cw + i] = z[i] + ape[i];
  } else {
    std::memcpy(&st.rows_z[slot * cw], z, cw * sizeof(float));
  }
  if ((pos + 1) % m != 0) return false;

  // Entry w pools the rows of its window's positions m*w .. m*w + m - 1 (with overlap: their B
  // halves, after the A halves of window w - 1, weight 0 before the first window).
  const int64_t first = pos + 1 - m;
  std::vector<const float*> pa, pz;
  std::vector<float> zeros, neg_inf;
  if (st.overlap) {
    if (first == 0) {
      zeros.assign(width, 0.0f);
      neg_inf.assign(width, -INFINITY);
    }
    for (int64_t s = 0; s < m; ++s) {
      const int64_t prev = ((first - m + s) % st.n_slots + st.n_slots) % st.n_slots;
      pa.push_back(first == 0 ? zeros.data() : &st.rows_a[prev * cw]);
      pz.push_back(first == 0 ? neg_inf.data() : &st.rows_z[prev * cw]);
    }
    for (int64_t s = 0; s < m; ++s) {
      const int64_t cur = (first + s) % st.n_slots;
      pa.push_back(&st.rows_a[cur * cw + width]);
      pz.push_back(&st.rows_z[cur * cw + width]);
    }
  } else {
    for (int64_t s = 0; s < m; ++s) {
      const int64_t cur = (first + s) % st.n_slots;
      pa.push_back(&st.rows_a[cur * cw]);
      pz.push_back(&st.rows_z[cur * cw]);
    }
  }
  compress_pool_ref(pa.data(), pz.data(), static_cast<int64_t>(pa.size()), width, pooled);
  rms_norm_ref(pooled, w.norm.f32(), 1, width, width, static_cast<float>(config_.rms_norm_eps),
               pooled);
  return true;
}

}  // namespace deepinfer
