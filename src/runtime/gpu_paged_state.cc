// GpuModel's paged state (GpuModelOptions::paged_kv; sizes in gpu_state_plan.h): allocation
// of the pools and per-layer caches, the blocks each chunk needs (host block tables), the
// per-forward slot lists of paged attention, and the synthetic-state fills.
#include <algorithm>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "ops/kv_cache/index_cache_cuda.h"
#include "ops/kv_cache/kv_cache_cuda.h"
#include "runtime/gpu_kernels.h"
#include "runtime/gpu_model_impl.h"

namespace deepinfer {

void GpuModel::Impl::alloc_paged_state() {
  // Table rows: the sequences, plus (cuda_graphs) the scratch slot of graph padding rows,
  // whose row is never given blocks: it stays 0, so a padding row (position 0, nothing
  // stored) reads slot 0 of block 0, a finite entry, and its output is ignored (F1).
  const int64_t S = opt.max_sequences + (opt.cuda_graphs ? 1 : 0);
  const int64_t T = opt.max_batch_tokens, B = plan.block_size, Bw = plan.window_block_size();
  const int64_t W = cfg.sliding_window, d = cfg.head_dim, dI = cfg.index_head_dim;
  int64_t n_ints = S * plan.window.max_blocks;
  for (const auto& [m, pp] : plan.compressed) n_ints += S * pp.max_blocks;
  // Host mirrors in the pools; uploads go through the forward's staging slot (gpu_forward.cc).
  auto* dev = static_cast<int32_t*>(raw_alloc(n_ints * sizeof(int32_t)));
  int64_t at = 0;
  win_pool.init(S, plan.window.max_blocks, plan.window.n_blocks, Bw, dev + at);
  at += S * plan.window.max_blocks;
  for (const auto& [m, pp] : plan.compressed) {
    cmp_pools[m].init(S, pp.max_blocks, pp.n_blocks, B, dev + at);
    at += S * pp.max_blocks;
  }
  // Caches start zeroed (every byte pattern 0 is the value 0 in both formats), so a stray
  // read of a block nobody wrote is finite.
  // block_bytes: the pool's layout (window plan.kv, compressed plan.cmp_kv, keys plan.idx).
  // block_entries: the pool's entries per block (window Bw, the others B).
  auto cache = [&](int64_t n_blocks, bool index, int64_t block_bytes, int64_t block_entries) {
    const int64_t bytes = n_blocks * block_bytes;
    auto* p = static_cast<uint8_t*>(raw_alloc(bytes));
    CUDA_CHECK(cudaMemset(p, 0, bytes));
    cache_pools.push_back({p, bytes, n_blocks * block_entries, index});
    return p;
  };
  bool any_indexer = false;
  std::map<int64_t, bool> all_entries;  // ratios read in full (a compressor without indexer)
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const GpuLayerW& g = layers[l];
    GpuLayerState& st = states[l];
    const LayerPlan& lp = cfg.plan[l];
    const int64_t ratio = lp.ratio;
    st.win_cache = cache(plan.window.n_blocks, false, plan.kv.block_bytes(), Bw);
    // Caches of the layers that write them (sources); readers use their source's.
    if (g.has_compressor) {
      ICHECK(plan.compressed.count(ratio)) << "GpuModel: no compressed pool of ratio " << ratio;
      st.cmp_cache = cache(plan.compressed.at(ratio).n_blocks, false, plan.cmp_kv.block_bytes(), B);
    }
    if (lp.kv_from >= 0 && lp.topk_from < 0) all_entries[ratio] = true;
    if (g.has_indexer) any_indexer = true;
    if (lp.owns_index_keys && cfg.index_n_heads > 0 && plan.idx_paged) {
      st.idx_cache = cache(plan.compressed.at(ratio).n_blocks, true, plan.idx.block_bytes(), B);
    }
  }
  win_idx = reinterpret_cast<int32_t*>(alloc(T * std::max<int64_t>(W, 1)));
  for (const auto& [m, on] : all_entries) {
    all_idx[m] = reinterpret_cast<int32_t*>(alloc(T * std::max<int64_t>(1, opt.max_context / m)));
    all_n[m] = reinterpret_cast<int32_t*>(alloc(T));
  }
  if (any_indexer) {
    sel_idx = reinterpret_cast<int32_t*>(alloc(T * cfg.index_topk));
    sel_n = reinterpret_cast<int32_t*>(alloc(T));
    if (plan.idx_paged) idx_stage = alloc(T * dI);
  }
  ent_stage = alloc(T * d);
}

void GpuModel::Impl::reserve_blocks(int64_t seq, int64_t start, int64_t end) {
  const int64_t B = plan.block_size, Bw = plan.window_block_size(), W = cfg.sliding_window;
  const int64_t first = std::max<int64_t>(0, start - W + 1);  // oldest position a row reads
  if (end > first) win_pool.ensure(seq, first / Bw, (end + Bw - 1) / Bw);
  for (auto& [m, pool] : cmp_pools) pool.ensure(seq, 0, (end / m + B - 1) / B);
}

void GpuModel::Impl::trim_blocks(int64_t seq, int64_t n_tokens) {
  if (n_tokens < 0) {  // freed sequence
    win_pool.release(seq);
    for (auto& [m, pool] : cmp_pools) pool.release(seq);
    return;
  }
  const int64_t B = plan.block_size, Bw = plan.window_block_size(), W = cfg.sliding_window;
  // The next query (position n_tokens) reads positions >= n_tokens - W + 1; a rollback of up
  // to max_rollback positions moves that query back as far.
  const int64_t first = std::max<int64_t>(0, n_tokens - W + 1 - opt.max_rollback);
  win_pool.keep_only(seq, first / Bw, (n_tokens + Bw - 1) / Bw);
  for (auto& [m, pool] : cmp_pools) pool.keep_only(seq, 0, (n_tokens / m + B - 1) / B);
}

void GpuModel::Impl::upload_tables(int32_t* staging) {
  int64_t used = win_pool.upload(ctx.stream(), staging, staging_table_ints);
  for (auto& [m, pool] : cmp_pools) {
    used += pool.upload(ctx.stream(), staging + used, staging_table_ints - used);
  }
}

void GpuModel::Impl::build_paged_lists() {
  cudaStream_t stream = ctx.stream();
  PagedIndexParams p;
  p.n_rows = n_rows;
  p.positions = sec(kPositions);
  p.seq = sec(kSlot);
  p.window_table = win_pool.device_table();
  p.window_max_blocks = win_pool.max_blocks();
  p.window_block_size = plan.window_block_size();
  p.window = cfg.sliding_window;
  p.window_indices = win_idx;
  paged_indices_cuda(stream, p);
  for (auto& [m, idx] : all_idx) {
    const KvBlockPool& pool = cmp_pools.at(m);
    PagedIndexParams c;
    c.n_rows = n_rows;
    c.positions = sec(kPositions);
    c.seq = sec(kSlot);
    c.cmp_table = pool.device_table();
    c.cmp_max_blocks = pool.max_blocks();
    c.cmp_block_size = plan.block_size;
    c.ratio = m;
    c.cmp_indices = idx;
    c.n_cmp = all_n.at(m);
    c.max_cmp = std::max<int64_t>(1, opt.max_context / m);
    paged_indices_cuda(stream, c);
  }
}

void GpuModel::Impl::clear_caches() {
  for (const GpuCachePool& c : cache_pools) {
    CUDA_CHECK(cudaMemsetAsync(c.cache, 0, c.bytes, ctx.stream()));
  }
}

// Every slot of every cache gets a stored random entry (values ~U with std 1), so any block a
// synthetic context maps to holds valid data in the cache's format.
void GpuModel::Impl::randomize_caches(uint64_t seed_in) {
  if (cache_pools.empty()) return;
  cudaStream_t stream = ctx.stream();
  int64_t max_slots = 0;
  for (const GpuCachePool& c : cache_pools) max_slots = std::max(max_slots, c.n_slots);
  std::vector<int32_t> iota(max_slots);
  std::iota(iota.begin(), iota.end(), 0);
  cuda::DeviceBuffer slots(static_cast<size_t>(max_slots) * sizeof(int32_t));
  CUDA_CHECK(cudaMemcpy(slots.data(), iota.data(), iota.size() * sizeof(int32_t),
                        cudaMemcpyHostToDevice));
  const auto* sl = static_cast<const int32_t*>(slots.data());
  const int64_t T = opt.max_batch_tokens;
  uint64_t s = seed_in * 7919 + 17;
  auto compressed = [&](const uint8_t* cache) {
    for (const GpuLayerState& st : states) {
      if (st.cmp_cache == cache) return true;
    }
    return false;
  };
  for (const GpuCachePool& c : cache_pools) {
    const int64_t width = c.index ? plan.idx.head_dim : plan.kv.head_dim;
    const KvCacheLayout& kv = compressed(c.cache) ? plan.cmp_kv : plan.kv;
    float* stage = c.index ? idx_stage : ent_stage;
    for (int64_t at = 0; at < c.n_slots; at += T) {
      const int64_t n = std::min(T, c.n_slots - at);
      fill_uniform_f32(stream, stage, n * width, 0.0f, 1.0f, s++);
      if (c.index) {
        index_store_cuda(stream, plan.idx, stage, n, width, sl + at, c.cache);
      } else {
        kv_store_cuda(stream, kv, stage, n, width, sl + at, c.cache);
      }
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace deepinfer
