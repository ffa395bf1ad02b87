// Attention of one layer for a batch (MODEL_SPEC §A.3-A.7, §C.4-C.7): low-rank q (with
// the per-head RMS norm of V4), shared K=V with RoPE, sliding window, compressed entries
// of the layer's KV source (all visible ones, or a top-k selection: index_selection.cc),
// one softmax with the sink, inverse RoPE, grouped output projection. What the layer owns
// and reads comes from its LayerPlan. Under SWA bounded replay (swa_replay.h) the decoder
// layers' windows start no earlier than the sequence's decoder_window_floor.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/parallel.h"
#include "model/block_parts.h"
#include "model/kv_rounding.h"
#include "model/model_batch.h"
#include "ops/attention/sparse_attention.h"
#include "ops/rms_norm/rms_norm.h"

namespace deepinfer {

void Model::attention_block(int64_t layer, Batch& batch, const float* x, float* out) const {
  const ModelConfig& cfg = config_;
  const LayerPlan& plan = cfg.plan[layer];
  const AttentionWeights& w = weights_.layers[layer].attn;
  const int64_t N = batch.n_rows(), H = cfg.num_heads, d = cfg.head_dim;
  const int64_t r = cfg.rope_dim, W = cfg.sliding_window;
  const bool official = options_.numerics == Numerics::kOfficial;
  const RopeTable& rope = plan.ratio > 0 ? rope_compress_ : rope_main_;

  // Queries and the shared K = V.
  std::vector<float> q_r, q, kv;
  attention_projections(cfg, w, x, N, gemm_mode_, q_r, q, kv);
  for (int64_t row = 0; row < N; ++row) {
    rope.apply_heads(&q[row * H * d], H, d, batch.positions[row]);
    rope.apply(&kv[row * d + d - r], batch.positions[row]);
    if (official) round_window_entry(cfg.traits, &kv[row * d], d, r);
  }

  // Compressed entries and index keys this layer owns, then which entries each row reads.
  if (plan.owns_compressor && batch.compressors_fed != layer) feed_compressors(layer, batch, x);
  if (plan.scores()) select_entries(layer, batch, x, q_r.data());
  const std::vector<std::vector<int64_t>>* picks =
      plan.topk_from >= 0 ? &batch.selections[plan.topk_from].picks : nullptr;

  // Attention, one query row at a time.
  std::vector<float> o(N * H * d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // SWA bounded replay: the decoder windows see no position the decoder skipped.
  const bool floored = replay_boundary_ >= 0 && layer >= replay_boundary_;
  parallel_for(N, [&](int64_t begin, int64_t end) {
    std::vector<const float*> keys;
    for (int64_t row = begin; row < end; ++row) {
      const Batch::Segment& seg = batch.segments[batch.segment_of_row[row]];
      const SequenceLayerState& ls = seg.state->layers[layer];
      const int64_t pos = batch.positions[row];
      keys.clear();
      const int64_t first = std::max<int64_t>(
          {0, pos - W + 1, floored ? seg.state->decoder_window_floor : 0});
      for (int64_t p = first; p <= pos; ++p) {
        keys.push_back(p >= seg.start_pos ? &kv[(seg.begin + p - seg.start_pos) * d]
                                          : &ls.ring[(p % seg.state->n_ring_slots) * d]);
      }
      if (plan.kv_from >= 0) {
        const float* entries = seg.state->layers[plan.kv_from].compressor.entries.data();
        if (picks != nullptr) {
          for (int64_t e : (*picks)[row]) keys.push_back(entries + e * d);
        } else {
          const int64_t n_visible = (pos + 1) / plan.ratio;
          for (int64_t e = 0; e < n_visible; ++e) keys.push_back(entries + e * d);
        }
      }
      float* orow = &o[row * H * d];
      sparse_attention_row_ref(&q[row * H * d], H, d, keys.data(), static_cast<int64_t>(keys.size()),
                               w.sink.f32(), scale, orow);
      rope.apply_heads(orow, H, d, pos, /*inverse=*/true);
    }
  });

  // The chunk's keys enter the window ring (slot = position mod n_ring_slots).
  for (const Batch::Segment& seg : batch.segments) {
    std::vector<float>& ring = seg.state->layers[layer].ring;
    for (int64_t row = std::max(seg.begin, seg.end - W); row < seg.end; ++row) {
      std::memcpy(&ring[(batch.positions[row] % seg.state->n_ring_slots) * d], &kv[row * d],
                  d * sizeof(float));
    }
  }

  attention_output(cfg, w, o.data(), N, gemm_mode_, out);
}

}  // namespace deepinfer
