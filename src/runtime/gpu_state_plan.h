// Sizes of GpuModel's per-layer state (plain arithmetic, no CUDA types, header-only: the
// CUDA runner's sizing may call it in a CPU build). GpuModel allocates exactly these pools.
//
// Paged (GpuModelOptions::paged_kv, the default), for each layer:
//  * window pool: K=V entries in the kv_cache_dtype layout (ops/kv_cache/kv_cache.h: fp8 =
//    MODEL1 584 B per entry at V4 shapes, V4.1's e4m3/32 528 B; bf16 = 2 * head_dim B), paged
//    by position in blocks of window_block_size() (GpuModelOptions::kv_window_block_size; the
//    other pools' block_size by default). A sequence keeps the blocks of its last window - 1
//    + max_rollback positions between forwards (window_blocks_per_sequence); a forward adds
//    the blocks its chunk's positions touch, so the pool has
//    n_seqs * (window_blocks_per_sequence + 1) + ceil(max_batch_tokens / Bw) blocks.
//  * compressed pool per compress ratio m: entries [0, max_context / m) of every sequence
//    (ceil(max_context / m / B) blocks each) in the compressed layout (`cmp_kv`: V4 as the
//    window; V4.1 fp8: e2m1 + e4m3/16, 288 B), for each layer that owns a
//    compressor (its LayerPlan, io/layer_plan.h; V4.1 reuse / reindex layers read their
//    source's).
//  * indexer keys (layers owning index keys): kFp8: the paged index cache
//    (ops/kv_cache/index_cache.h; V4 e4m3 head_dim + 4 B per key, V4.1 e2m1 + UE8M0/32 68 B),
//    paged with the block tables of the owner's ratio;
//    kBf16 (reference numerics): dense fp32 [max_context / 4, index_head_dim] per sequence,
//    so the top-k sees the unrounded scores the fp64 reference sees.
//  * compressor partial-window rings (fp32, per sequence, as in the plain path).
// Plain (paged_kv = false): fp32 window ring [W, d], dense fp32 compressed and indexer entries.
//
// For the engine (E1's gpu_runner_sizing): state_bytes_per_sequence() is what one more
// sequence of max_context tokens costs; fixed_state_bytes() is the part that does not scale
// with the number of sequences (the forward's transient window blocks).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>

#include "base/error.h"
#include "io/config_parser.h"
#include "io/model_config.h"
#include "ops/kv_cache/index_cache.h"
#include "ops/kv_cache/kv_cache.h"
#include "runtime/gpu_model.h"

namespace deepinfer {

struct GpuPoolPlan {
  int64_t max_blocks = 0;  // block-table columns per sequence
  int64_t n_blocks = 0;    // physical blocks (shared by all sequences)
};

struct GpuStatePlan {
  bool paged = true;
  KvCacheDtype dtype = KvCacheDtype::kFp8;
  int64_t block_size = 64;  // entries per block: compressed entries, index keys
  KvCacheLayout kv;          // window entries
  KvCacheLayout cmp_kv;      // compressed entries (V4: = kv)
  IndexCacheLayout idx;      // indexer keys (paged fp8 only)
  bool idx_paged = false;    // indexer keys in the FP8 index cache
  int64_t window_blocks_per_sequence = 0;
  GpuPoolPlan window;
  std::map<int64_t, GpuPoolPlan> compressed;  // by compress ratio (layers with a compressor)
  int64_t n_seqs = 0;  // table rows: max_sequences (+ 1 scratch slot with cuda_graphs)
  int64_t per_seq_bytes = 0;  // state one more sequence adds
  int64_t fixed_bytes = 0;    // state that does not scale with sequences

  int64_t state_bytes_per_sequence() const { return per_seq_bytes; }
  // Entries per block of the window pool (GpuModelOptions::kv_window_block_size).
  int64_t window_block_size() const { return kv.block_size; }
  int64_t fixed_state_bytes() const { return fixed_bytes; }
  // What GpuModel allocates for all max_sequences (not counting the scratch slot's rings).
  int64_t total_bytes(int64_t max_sequences) const { return max_sequences * per_seq_bytes + fixed_bytes; }
};

// kv_cache_dtype when set, else kFp8 with official numerics and kBf16 with reference.
inline KvCacheDtype resolved_kv_cache_dtype(const GpuModelOptions& o) {
  if (o.kv_cache_dtype) return *o.kv_cache_dtype;
  return o.numerics == Numerics::kOfficial ? KvCacheDtype::kFp8 : KvCacheDtype::kBf16;
}

inline int64_t gpu_state_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The fp8 setting's entry formats, decided once from the family's traits (the values official
// numerics keeps, model/kv_rounding.h; each format holds them exactly): V4.1 (window FP8 over
// all dims in 32-blocks, FP4 compressed entries) gets DeepInfer's 528-B window, 288-B compressed
// and 68-B index-key entries; V4 the MODEL1 entry for both pools and the 132-B e4m3 keys.
inline void choose_cache_formats(const ModelTraits& t, GpuStatePlan* p) {
  p->cmp_kv = p->kv;
  if (p->dtype != KvCacheDtype::kFp8) return;
  if (t.window_fp8_all_dims) {
    CHECK_KIND(kUnsupported, t.window_fp8_block == 32)
        << "GpuModel: fp8 window entries over all dims need 32-blocks, not " << t.window_fp8_block;
    p->kv.format = KvEntryFormat::kE4m3Block32;
    p->kv.rope_dim = 0;
    p->cmp_kv = p->kv;
  }
  if (t.compressed_fp4) {
    p->cmp_kv.format = KvEntryFormat::kE2m1E4m3Block16;
    p->cmp_kv.rope_dim = 0;
    p->idx.format = IndexKeyFormat::kE2m1Ue8m0Block32;
  }
}

// Bytes one more token of context adds to the paged compressed entries and index keys
// (every owner, ratio m: 1/m of an entry; block rounding aside). V4.1-Flash with fp8 (owners
// 2, 8, 14 at ratio 2, 20 at ratio 1): 3 * 288 / 2 + 288 + 3 * 68 / 2 + 68 = 890 B, DeepInfer's
// figure (research/deepinfer-source.md §1 "Caches"); test_gpu_state_plan checks it.
inline double paged_bytes_per_token(const ModelConfig& c, const GpuStatePlan& p) {
  double b = 0.0;
  for (const LayerPlan& lp : c.plan) {
    if (lp.ratio <= 0) continue;
    if (lp.owns_compressor) b += static_cast<double>(p.cmp_kv.entry_bytes()) / lp.ratio;
    if (lp.owns_index_keys && c.index_n_heads > 0 && p.idx_paged) {
      b += static_cast<double>(p.idx.entry_bytes()) / lp.ratio;
    }
  }
  return b;
}

// Positions of a compressor ring of ratio m (compress_pool_cuda.h): the 2m an emission may
// read plus the positions a rollback may undo (GpuModelOptions::max_rollback).
inline int64_t compressor_ring_len(int64_t m, int64_t max_rollback) { return 2 * m + max_rollback; }

// The state pools GpuModel allocates for `c` and `o` (o.max_sequences sequences).
inline GpuStatePlan plan_gpu_state(const ModelConfig& config, const GpuModelOptions& o) {
  // The layer plan (a config built by hand may not have it yet).
  ModelConfig completed;
  const ModelConfig* cp_cfg = &config;
  if (static_cast<int64_t>(config.plan.size()) != config.num_layers) {
    completed = config;
    complete_model_config(&completed);
    cp_cfg = &completed;
  }
  const ModelConfig& c = *cp_cfg;
  GpuStatePlan p;
  p.paged = o.paged_kv;
  p.dtype = resolved_kv_cache_dtype(o);
  p.block_size = o.kv_block_size;
  p.n_seqs = o.max_sequences + (o.cuda_graphs ? 1 : 0);  // + GpuModel's scratch slot
  const int64_t B = p.block_size, Bw = o.kv_window_block_size > 0 ? o.kv_window_block_size : B;
  const int64_t d = c.head_dim, W = c.sliding_window, dI = c.index_head_dim;
  const int64_t C = o.max_context, T = o.max_batch_tokens;
  p.kv.dtype = p.dtype;
  p.kv.head_dim = d;
  p.kv.rope_dim = c.rope_dim;
  p.kv.block_size = Bw;
  p.idx.head_dim = dI;
  p.idx.block_size = B;
  p.idx_paged = p.paged && p.dtype == KvCacheDtype::kFp8;
  choose_cache_formats(c.traits, &p);
  p.cmp_kv.block_size = B;  // choose_cache_formats starts it from the window layout
  const int64_t R = std::max<int64_t>(o.max_rollback, 0);
  p.window_blocks_per_sequence = gpu_state_ceil_div(std::max<int64_t>(W - 1 + R, 0), Bw) + 1;
  p.window.max_blocks = gpu_state_ceil_div(C, Bw);
  p.window.n_blocks = p.n_seqs * (p.window_blocks_per_sequence + 1) + gpu_state_ceil_div(T, Bw);
  int64_t per_seq = 0, fixed = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerPlan& lp = c.plan[l];
    const int64_t m = lp.ratio;
    // GpuModel checks the weights agree.
    const bool index_keys = lp.owns_index_keys && c.index_n_heads > 0;
    if (lp.owns_compressor) {
      GpuPoolPlan& cp = p.compressed[m];
      cp.max_blocks = std::max<int64_t>(1, gpu_state_ceil_div(C / m, B));
      cp.n_blocks = p.n_seqs * cp.max_blocks;
      const int64_t cw = (m == 4 ? 2 : 1) * d;
      per_seq += 2 * (compressor_ring_len(m, R) * cw) * 4;  // compressor rings a, z
      per_seq += p.paged ? cp.max_blocks * p.cmp_kv.block_bytes() : (C / m) * d * 4;
    }
    if (index_keys && lp.own_index_compressor) {  // V4: the index compressor's rings
      per_seq += 2 * (compressor_ring_len(4, R) * 2 * dI) * 4;
    }
    if (index_keys) {
      per_seq += p.idx_paged ? std::max<int64_t>(1, gpu_state_ceil_div(C / m, B)) * p.idx.block_bytes()
                             : (C / m) * dI * 4;
    }
    if (p.paged) {
      per_seq += (p.window_blocks_per_sequence + 1) * p.kv.block_bytes();
      fixed += gpu_state_ceil_div(T, Bw) * p.kv.block_bytes();
    } else {
      per_seq += W * d * 4;
    }
  }
  p.per_seq_bytes = per_seq;
  p.fixed_bytes = fixed;
  return p;
}

}  // namespace deepinfer
