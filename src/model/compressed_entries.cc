// The compressors a layer owns (MODEL_SPEC §A.5, §C.5, §C.7 step 1): every token of the
// chunk is fed in order, so an entry exists exactly when a query may see it (w < (t+1)/m).
//  * main compressor: entry = RoPE_{m w}(norm(pool)), QAT-rounded, into compressor.entries;
//  * V4 ratio 4: the index keys' own compressor, then Hadamard + FP4 (official);
//  * V4.1 index-key owners: key = RoPE_{m w}(k_norm(wk . norm(pool))) from the pre-RoPE
//    latent, FP4 (official).
// Index keys go to the layer's index_keys.
#include <cmath>
#include <cstring>

#include "model/kv_rounding.h"
#include "model/model_batch.h"
#include "ops/compressor/compress_pool.h"
#include "ops/rms_norm/rms_norm.h"

namespace deepinfer {

void Model::feed_compressors(int64_t layer, Batch& batch, const float* x) const {
  const ModelConfig& cfg = config_;
  const LayerPlan& plan = cfg.plan[layer];
  const AttentionWeights& w = weights_.layers[layer].attn;
  const int64_t N = batch.n_rows(), D = cfg.hidden_size, d = cfg.head_dim, r = cfg.rope_dim;
  const int64_t dI = cfg.index_head_dim, m = plan.ratio;
  const bool official = options_.numerics == Numerics::kOfficial;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const int64_t c = m == 4 ? 2 : 1;

  std::vector<float> a(N * c * d), z(N * c * d, 0.0f);
  linear_ref(x, N, D, w.compressor.wkv.f32(), c * d, a.data(), gemm_mode_);
  // Ratio 1 has no gate: the single slot's softmax weight is exactly 1.
  if (w.compressor.wgate.defined()) {
    linear_ref(x, N, D, w.compressor.wgate.f32(), c * d, z.data(), gemm_mode_);
  }
  std::vector<float> ai, zi;
  if (plan.own_index_compressor) {
    ai.resize(N * 2 * dI);
    zi.resize(N * 2 * dI);
    linear_ref(x, N, D, w.indexer.compressor.wkv.f32(), 2 * dI, ai.data(), gemm_mode_);
    linear_ref(x, N, D, w.indexer.compressor.wgate.f32(), 2 * dI, zi.data(), gemm_mode_);
  }
  std::vector<float> latent(d), key(dI);
  for (const Batch::Segment& seg : batch.segments) {
    SequenceLayerState& ls = seg.state->layers[layer];
    for (int64_t row = seg.begin; row < seg.end; ++row) {
      const int64_t pos = batch.positions[row], entry = pos / m;
      if (compressor_step(w.compressor, ls.compressor, &a[row * c * d], &z[row * c * d], pos,
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
          compressor_step(w.indexer.compressor, ls.index_compressor, &ai[row * 2 * dI],
                          &zi[row * 2 * dI], pos, key.data())) {
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
