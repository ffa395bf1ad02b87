// GpuModel's prefix states (issue 18; GpuModel::export_prefix / import_prefix, the device
// side of engine/prefix_cache_state.h): the CPU design (model/state_segment.h) on the
// device, copy on hit.
//
// A piece covering positions [begin, end) of a sequence holds, in one device allocation
// (stream-ordered, cudaMallocAsync on the model's stream):
//   * appended: for every layer that owns them (LayerPlan: V4.1 reuse / reindex layers read
//     their source's, so only sources appear), the compressed entries [begin / m, end / m)
//     and the index keys of the same span, byte for byte in the format they live in (paged
//     FP8 MODEL1 / bf16 entries: their value bytes and scale groups as runs per page block;
//     FP8 index keys likewise; plain / unpaged fp32 rows). A chain of pieces shares them.
//   * boundary: everything kept per position, copied whole at `end`: the window entries
//     positions [end - W + 1 - max_rollback, end) (paged: whole page blocks of the window
//     pool; plain: the sequence's fp32 ring), the compressor rings (raw a / z rows by
//     position, main and V4 index compressor), the MTP drafter's ring and kept streams
//     (GpuModelOptions::mtp), the DSpark context rings (GpuModelOptions::dspark), Engram's
//     token-history ring (V4.1). These are bounded by the window, the ratios and the rollback
//     depth, not by the context.
// Every part is stored by position (slot = position % ring length, entry = position / m,
// page column = entry / block size), so copying the same byte ranges into another sequence
// slot, after giving it the same block columns, reproduces the exporting sequence's state
// exactly: the next forward computes bitwise what the exporter's would have (batch_invariant;
// otherwise what any forward of that state computes).
//
// Both directions enqueue device-to-device copies on stream() and never wait for the
// device: a launched step's writes to the sequence are ordered before an export's reads, and
// an import's writes before the next forward. A piece frees its memory with cudaFreeAsync
// on the model's stream (after every copy enqueued before), or synchronously once the model
// is gone (pieces may outlive it inside an engine's cache).
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "runtime/gpu_model_impl.h"

namespace deepinfer {

struct GpuPrefixArena {
  cudaStream_t stream = nullptr;
};

namespace {

// What a piece's bytes depend on: the state layout of the model that exported it.
struct StateLayoutKey {
  int64_t n_layers = 0, head_dim = 0, window = 0, index_head_dim = 0;
  Numerics numerics = Numerics::kReference;
  WeightFormat weights = WeightFormat::kF32;
  bool paged = false, batch_invariant = false, mtp = false, dspark = false;
  KvCacheDtype kv = KvCacheDtype::kBf16;
  int64_t block_size = 0, window_block_size = 0, max_rollback = 0, engram_ring_len = 0, max_context = 0;
};

StateLayoutKey layout_key(const ModelConfig& cfg, const GpuModelOptions& opt, const GpuStatePlan& plan,
                          bool mtp, int64_t engram_ring_len) {
  StateLayoutKey k;
  k.n_layers = cfg.num_layers;
  k.head_dim = cfg.head_dim;
  k.window = cfg.sliding_window;
  k.index_head_dim = cfg.index_head_dim;
  k.numerics = opt.numerics;
  k.weights = opt.weight_format;
  k.paged = plan.paged;
  k.batch_invariant = opt.batch_invariant;
  k.mtp = mtp;
  k.dspark = opt.dspark;
  k.kv = plan.dtype;
  k.block_size = plan.block_size;
  k.window_block_size = plan.window_block_size();
  k.max_rollback = opt.max_rollback;
  k.engram_ring_len = engram_ring_len;
  k.max_context = opt.max_context;
  return k;
}

const char* weights_name(WeightFormat w) { return w == WeightFormat::kFp8 ? "fp8" : "fp32"; }

// Refuses a piece of another layout, naming the first difference.
void check_same_layout(const StateLayoutKey& piece, const StateLayoutKey& here) {
  const char* what = "GpuModel: the prefix state belongs to another model: ";
  CHECK(piece.n_layers == here.n_layers && piece.head_dim == here.head_dim && piece.window == here.window &&
        piece.index_head_dim == here.index_head_dim && piece.engram_ring_len == here.engram_ring_len)
      << what << piece.n_layers << " layers, head_dim " << piece.head_dim << ", window " << piece.window
      << " (this model: " << here.n_layers << ", " << here.head_dim << ", " << here.window << ")";
  CHECK(piece.numerics == here.numerics && piece.batch_invariant == here.batch_invariant)
      << what << "numerics " << numerics_name(piece.numerics) << (piece.batch_invariant ? " batch-invariant" : "")
      << " (this model: " << numerics_name(here.numerics) << (here.batch_invariant ? " batch-invariant" : "") << ")";
  CHECK(piece.weights == here.weights) << what << weights_name(piece.weights) << " weights (this model: "
                                       << weights_name(here.weights) << ")";
  CHECK(piece.paged == here.paged && piece.kv == here.kv && piece.block_size == here.block_size &&
        piece.window_block_size == here.window_block_size)
      << what << (piece.paged ? std::string("paged ") + kv_cache_dtype_name(piece.kv) : std::string("plain fp32"))
      << " state in blocks of " << piece.block_size << ", window blocks of " << piece.window_block_size
      << " (this model: " << (here.paged ? std::string("paged ") + kv_cache_dtype_name(here.kv) : std::string("plain fp32"))
      << " in blocks of " << here.block_size << ", window blocks of " << here.window_block_size << ")";
  CHECK(piece.dspark == here.dspark) << what << "dspark " << piece.dspark << " (this model: " << here.dspark << ")";
  CHECK(piece.max_rollback == here.max_rollback && piece.mtp == here.mtp && piece.max_context == here.max_context)
      << what << "max_rollback " << piece.max_rollback << ", mtp " << piece.mtp << ", max_context "
      << piece.max_context << " (this model: " << here.max_rollback << ", " << here.mtp << ", " << here.max_context
      << ")";
}

struct GpuPrefixState final : PrefixState {
  StateLayoutKey key;
  uint8_t* mem = nullptr;
  int64_t appended_bytes = 0;  // then the boundary's
  std::weak_ptr<GpuPrefixArena> arena;

  ~GpuPrefixState() override {
    if (mem == nullptr) return;
    if (auto a = arena.lock()) {
      (void)cudaFreeAsync(mem, a->stream);
    } else {
      (void)cudaFree(mem);
    }
  }
};

using Region = GpuStateRange;

void add(std::vector<Region>& out, void* at, int64_t bytes) {
  if (bytes <= 0) return;
  auto* p = static_cast<uint8_t*>(at);
  if (!out.empty() && out.back().at + out.back().bytes == p) {
    out.back().bytes += bytes;  // contiguous with the previous range
  } else {
    out.push_back({p, bytes});
  }
}

// Entries [e0, e1) of `seq` in a paged cache addressed through `pool`: per page column the
// run of value bytes and the run of scale bytes (both contiguous inside a block).
template <typename Layout>
void paged_entries(std::vector<Region>& out, const Layout& layout, int64_t data_bytes, int64_t scale_bytes,
                   const KvBlockPool& pool, int64_t seq, int64_t e0, int64_t e1, uint8_t* cache) {
  const int64_t B = pool.block_size();
  for (int64_t lo = e0; lo < e1;) {
    const int64_t hi = std::min(e1, (lo / B + 1) * B);
    const int64_t slot = pool.slot(seq, lo);
    add(out, cache + layout.data_offset(slot), (hi - lo) * data_bytes);
    if (scale_bytes > 0) add(out, cache + layout.scale_offset(slot), (hi - lo) * scale_bytes);
    lo = hi;
  }
}

}  // namespace

std::vector<GpuStateRange> GpuModel::Impl::appended_ranges(int64_t seq, int64_t begin,
                                                                       int64_t end) const {
  const Impl& m = *this;
  std::vector<Region> out;
  const int64_t d = m.cfg.head_dim, dI = m.cfg.index_head_dim;
  for (int64_t l = 0; l < m.cfg.num_layers; ++l) {
    const GpuLayerState& st = m.states[size_t(l)];
    const int64_t ratio = m.cfg.plan[size_t(l)].ratio;
    if (ratio <= 0) continue;
    const int64_t e0 = begin / ratio, e1 = end / ratio;
    if (e0 >= e1) continue;
    if (m.layers[size_t(l)].has_compressor) {
      if (st.cmp_cache != nullptr) {
        const KvCacheLayout& kv = m.plan.cmp_kv;
        paged_entries(out, kv, kv.data_bytes(), kv.scale_bytes(), m.cmp_pools.at(ratio), seq, e0, e1, st.cmp_cache);
      } else if (st.cmp_entries != nullptr) {
        add(out, st.cmp_entries + (seq * st.cmp_max_entries + e0) * d, (e1 - e0) * d * 4);
      }
    }
    if (st.idx_cache != nullptr) {
      const IndexCacheLayout& ix = m.plan.idx;
      paged_entries(out, ix, ix.data_bytes(), ix.scale_bytes(), m.cmp_pools.at(ratio), seq, e0, e1, st.idx_cache);
    } else if (st.idx_entries != nullptr) {
      add(out, st.idx_entries + (seq * st.idx_max_entries + e0) * dI, (e1 - e0) * dI * 4);
    }
  }
  return out;
}

// First window position a state at n tokens is sure to hold: the next query's window. The
// rollback margin below it (trim_blocks keeps window - 1 + max_rollback positions at a
// forward's end) is gone after a truncation followed by a shorter forward, and an imported
// state is never truncated below n (rollback_floor), so a prefix state carries no margin.
static int64_t first_window_position(int64_t n, int64_t window) {
  return std::max<int64_t>(0, n - window + 1);
}

std::vector<GpuStateRange> GpuModel::Impl::boundary_ranges(int64_t seq, int64_t n) const {
  const Impl& m = *this;
  std::vector<Region> out;
  const int64_t d = m.cfg.head_dim, dI = m.cfg.index_head_dim, W = m.cfg.sliding_window, R = m.opt.max_rollback;
  const int64_t Bw = m.plan.window_block_size();
  for (int64_t l = 0; l < m.cfg.num_layers; ++l) {
    const GpuLayerState& st = m.states[size_t(l)];
    const int64_t ratio = m.cfg.plan[size_t(l)].ratio;
    if (st.win_cache != nullptr) {  // whole page blocks of the window positions kept
      const int64_t block_bytes = m.plan.kv.block_bytes();
      for (int64_t c = first_window_position(n, W) / Bw; c * Bw < n; ++c) {
        add(out, st.win_cache + int64_t(m.win_pool.slot(seq, c * Bw) / Bw) * block_bytes, block_bytes);
      }
    } else if (st.ring != nullptr) {
      add(out, st.ring + seq * W * d, W * d * 4);
    }
    if (st.cmp_a != nullptr) {
      const int64_t per_seq = compressor_ring_len(ratio, R) * (ratio == 4 ? 2 : 1) * d;
      add(out, st.cmp_a + seq * per_seq, per_seq * 4);
      add(out, st.cmp_z + seq * per_seq, per_seq * 4);
    }
    if (st.idx_a != nullptr) {
      const int64_t per_seq = compressor_ring_len(4, R) * 2 * dI;
      add(out, st.idx_a + seq * per_seq, per_seq * 4);
      add(out, st.idx_z + seq * per_seq, per_seq * 4);
    }
  }
  if (m.mtp) {
    const int64_t ring = m.mtp->n_slots * d, streams = m.mtp->n_stream_slots * m.cfg.hc_mult * m.cfg.hidden_size;
    add(out, m.mtp->ring + seq * ring, ring * 4);
    add(out, m.mtp->streams + seq * streams, streams * 4);
  }
  if (m.dspark) {  // each DSpark stage's context ring (gpu_dspark.cc)
    const int64_t ring = m.dspark->n_slots * d;
    for (size_t k = 0; k < m.dspark->stages.size(); ++k) {
      add(out, m.dspark->rings + int64_t(k) * m.dspark->ring_stride + seq * ring, ring * 4);
    }
  }
  if (m.engram_ring != nullptr) {
    add(out, m.engram_ring + seq * m.engram_ring_len, m.engram_ring_len * int64_t(sizeof(int32_t)));
  }
  return out;
}

namespace {

int64_t total_bytes(const std::vector<Region>& regions) {
  int64_t n = 0;
  for (const Region& r : regions) n += r.bytes;
  return n;
}

// Copies the regions to / from consecutive bytes at `piece` on `stream`.
void copy_regions(const std::vector<Region>& regions, uint8_t* piece, bool to_piece, cudaStream_t stream) {
  for (const Region& r : regions) {
    CUDA_CHECK(cudaMemcpyAsync(to_piece ? piece : r.at, to_piece ? r.at : piece, size_t(r.bytes),
                               cudaMemcpyDeviceToDevice, stream));
    piece += r.bytes;
  }
}

}  // namespace

std::shared_ptr<const PrefixState> GpuModel::export_prefix(int64_t sequence, const PrefixState* parent) {
  Impl& m = *impl_;
  CHECK(sequence >= 0 && sequence < int64_t(m.seq_tokens.size()) && m.seq_tokens[size_t(sequence)] >= 0)
      << "export_prefix: " << sequence << " is not a live sequence";
  const StateLayoutKey key = layout_key(m.cfg, m.opt, m.plan, m.mtp != nullptr, m.engram_ring_len);
  const auto* p = dynamic_cast<const GpuPrefixState*>(parent);
  CHECK(parent == nullptr || p != nullptr) << "GpuModel: a prefix state of another runner";
  if (p != nullptr) check_same_layout(p->key, key);
  const int64_t n = m.seq_tokens[size_t(sequence)];
  const int64_t begin = p ? p->end : 0;
  CHECK(n > begin) << "export_prefix: sequence " << sequence << " holds " << n
                   << " tokens, not more than its parent piece's " << begin;
  if (!m.prefix_arena) {
    m.prefix_arena = std::make_shared<GpuPrefixArena>();
    m.prefix_arena->stream = m.ctx.stream();
  }
  const std::vector<Region> appended = m.appended_ranges(sequence, begin, n);
  const std::vector<Region> boundary = m.boundary_ranges(sequence, n);
  auto out = std::make_shared<GpuPrefixState>();
  out->begin = begin;
  out->end = n;
  out->key = key;
  out->arena = m.prefix_arena;
  out->appended_bytes = total_bytes(appended);
  out->bytes = out->appended_bytes + total_bytes(boundary);
  void* mem = nullptr;
  const cudaError_t e = cudaMallocAsync(&mem, size_t(out->bytes), m.ctx.stream());
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    THROW(kResourceExhausted) << "GpuModel: no device memory for a prefix state of " << out->bytes
                              << " bytes: " << cudaGetErrorString(e);
  }
  out->mem = static_cast<uint8_t*>(mem);
  copy_regions(appended, out->mem, true, m.ctx.stream());
  copy_regions(boundary, out->mem + out->appended_bytes, true, m.ctx.stream());
  return out;
}

int64_t GpuModel::import_prefix(std::span<const PrefixState* const> chain) {
  Impl& m = *impl_;
  CHECK(!chain.empty()) << "import_prefix: no prefix states";
  const StateLayoutKey key = layout_key(m.cfg, m.opt, m.plan, m.mtp != nullptr, m.engram_ring_len);
  std::vector<const GpuPrefixState*> pieces;
  for (size_t i = 0; i < chain.size(); ++i) {
    const auto* p = dynamic_cast<const GpuPrefixState*>(chain[i]);
    CHECK(p != nullptr) << "GpuModel: a prefix state of another runner";
    check_same_layout(p->key, key);
    ICHECK(p->begin == (i == 0 ? 0 : pieces.back()->end))
        << "import_prefix: piece " << i << " does not continue the chain";
    pieces.push_back(p);
  }
  const int64_t n = pieces.back()->end;
  CHECK(n <= m.opt.max_context) << "import_prefix: " << n << " tokens exceed max_context " << m.opt.max_context;
  const int64_t seq = new_sequence();
  try {
    if (m.plan.paged) {  // the block columns boundary_ranges exports for a state at n
      const int64_t B = m.plan.block_size, Bw = m.plan.window_block_size();
      m.win_pool.ensure(seq, first_window_position(n, m.cfg.sliding_window) / Bw, (n + Bw - 1) / Bw);
      for (auto& [ratio, pool] : m.cmp_pools) pool.ensure(seq, 0, (n / ratio + B - 1) / B);
    }
    for (const GpuPrefixState* p : pieces) {
      const std::vector<Region> appended = m.appended_ranges(seq, p->begin, p->end);
      ICHECK(total_bytes(appended) == p->appended_bytes) << "import_prefix: piece [" << p->begin << ", " << p->end
                                                         << ") does not fit this model's entries";
      copy_regions(appended, p->mem, false, m.ctx.stream());
    }
    const GpuPrefixState& last = *pieces.back();
    const std::vector<Region> boundary = m.boundary_ranges(seq, n);
    ICHECK(total_bytes(boundary) == last.bytes - last.appended_bytes)
        << "import_prefix: the boundary state at " << n << " does not fit this model's";
    copy_regions(boundary, last.mem + last.appended_bytes, false, m.ctx.stream());
  } catch (...) {
    free_sequence(seq);
    throw;
  }
  m.seq_tokens[size_t(seq)] = n;
  m.rollback_floor[size_t(seq)] = n;
  return seq;
}

}  // namespace deepinfer
