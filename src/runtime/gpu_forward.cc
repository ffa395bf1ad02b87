// GpuModel: sequences, the forward's outer loop (embedding, mHC around each block, head),
// logits, state helpers, profiling and the work accounting. Blocks: gpu_attention.cc,
// gpu_moe.cc.
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/embedding/embedding_cuda.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/moe/moe_cuda.h"
#include "ops/rms_norm/rms_norm_cuda.h"
#include "runtime/engram_history.h"
#include "runtime/gpu_kernels.h"
#include "runtime/gpu_model.h"
#include "runtime/gpu_model_impl.h"
#include "runtime/runner_kernels.h"

namespace deepinfer {

void GpuModel::Impl::lin(const DeviceLinear& w, const float* x_in, int64_t m, float* y_out,
                         ActScratch scratch) {
  linear_run(ctx, w, x_in, m, y_out, scratch, opt.batch_invariant);
  work.gemm_flops += 2.0 * m * w.n * w.k;
  work.weight_bytes += w.bytes();
}

void GpuModel::Impl::lin_in(const DeviceLinear& w, const float* x_in, ActScratch quantised,
                            int64_t m, float* y_out) {
  if (w.fp8()) {
    linear_run_quantized(ctx, w, quantised, m, y_out, opt.batch_invariant);
  } else {
    linear_run(ctx, w, x_in, m, y_out, ActScratch{}, opt.batch_invariant);
  }
  work.gemm_flops += 2.0 * m * w.n * w.k;
  work.weight_bytes += w.bytes();
}

// Attention FLOPs (QK + PV per head over every key a row sees; indexer scores) and the state
// a chunk must read from before it (window keys, compressed entries: the top-k on CSA layers,
// all on HCA; every indexer entry is scored), at the bytes per entry of the state's format.
void GpuModel::Impl::count_attention_work() {
  const double d = cfg.head_dim, H = cfg.num_heads, W = cfg.sliding_window;
  const double HI = cfg.index_n_heads, dI = cfg.index_head_dim, topk = cfg.index_topk;
  const double kv_bytes = plan.paged ? static_cast<double>(plan.kv.entry_bytes()) : d * 4;
  const double idx_bytes = plan.idx_paged ? static_cast<double>(plan.idx.entry_bytes()) : dI * 4;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const LayerPlan& lp = cfg.plan[l];
    const int64_t ratio = lp.kv_from >= 0 ? lp.ratio : 0;  // the entries it attends
    const bool idx = lp.topk_from >= 0;                    // a top-k of them
    const bool scored = layers[l].has_indexer;             // it scores every visible key
    for (const auto& [start, len] : chunk_spans) {
      for (int64_t i = 0; i < len; ++i) {
        const int64_t pos = start + i;
        double keys = std::min<double>(W, pos + 1);
        if (ratio > 0) {
          const double n_ent = static_cast<double>((pos + 1) / ratio);
          keys += idx ? std::min(topk, n_ent) : n_ent;
          if (scored) work.attn_flops += 2.0 * n_ent * HI * dI;
        }
        work.attn_flops += 4.0 * H * d * keys;
      }
      const double old_ent = ratio > 0 ? static_cast<double>(start / ratio) : 0.0;
      double st = std::min<double>(W, start) * kv_bytes;
      if (ratio > 0) st += (idx ? std::min(topk, old_ent) : old_ent) * kv_bytes;
      if (scored) st += old_ent * idx_bytes;
      work.state_bytes += st;
    }
  }
}

const ModelConfig& GpuModel::config() const { return impl_->cfg; }
const GpuModelOptions& GpuModel::options() const { return impl_->opt; }

int64_t GpuModel::new_sequence() {
  auto& s = impl_->seq_tokens;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] < 0) {
      s[i] = 0;
      impl_->rollback_floor[i] = 0;
      return static_cast<int64_t>(i);
    }
  }
  THROW(kResourceExhausted) << "GpuModel: all " << s.size() << " sequence slots are in use";
}

void GpuModel::free_sequence(int64_t sequence) {
  CHECK(sequence >= 0 && sequence < static_cast<int64_t>(impl_->seq_tokens.size()) &&
        impl_->seq_tokens[sequence] >= 0)
      << "free_sequence: " << sequence << " is not a live sequence";
  impl_->seq_tokens[sequence] = -1;
  if (impl_->plan.paged) impl_->trim_blocks(sequence, -1);
}

int64_t GpuModel::n_tokens(int64_t sequence) const {
  CHECK(sequence >= 0 && sequence < static_cast<int64_t>(impl_->seq_tokens.size()) &&
        impl_->seq_tokens[sequence] >= 0)
      << "n_tokens: " << sequence << " is not a live sequence";
  return impl_->seq_tokens[sequence];
}

void GpuModel::set_sequence_length(int64_t sequence, int64_t n) {
  CHECK(sequence >= 0 && sequence < static_cast<int64_t>(impl_->seq_tokens.size()) &&
        impl_->seq_tokens[sequence] >= 0)
      << "set_sequence_length: " << sequence << " is not a live sequence";
  CHECK(n >= 0 && n <= impl_->opt.max_context)
      << "set_sequence_length: " << n << " is outside [0, " << impl_->opt.max_context << "]";
  impl_->seq_tokens[sequence] = n;
  impl_->rollback_floor[sequence] = n;
  if (impl_->plan.paged) {  // keep the blocks still in range, give the context all it needs
    impl_->trim_blocks(sequence, n);
    impl_->reserve_blocks(sequence, n, n);
  }
}

void GpuModel::truncate(int64_t sequence, int64_t n) {
  CHECK(sequence >= 0 && sequence < static_cast<int64_t>(impl_->seq_tokens.size()) &&
        impl_->seq_tokens[sequence] >= 0)
      << "truncate: " << sequence << " is not a live sequence";
  const int64_t have = impl_->seq_tokens[sequence];
  CHECK(n >= 0 && n <= have) << "truncate: " << n << " tokens, but sequence " << sequence << " has " << have;
  CHECK(have - n <= impl_->opt.max_rollback)
      << "truncate: " << have - n << " positions back, but max_rollback is " << impl_->opt.max_rollback;
  CHECK(n >= impl_->rollback_floor[sequence])
      << "truncate: sequence " << sequence << " to " << n << " tokens, below "
      << impl_->rollback_floor[sequence] << " (max_rollback " << impl_->opt.max_rollback
      << " behind its longest forward since the last reset; the window state below is gone)";
  if (n == have) return;
  impl_->seq_tokens[sequence] = n;
  // n >= rollback_floor, so the window blocks the next query (and a further rollback within
  // the floor) reads are still held; blocks past n are freed and taken again by the next
  // forward that reaches them.
  impl_->trim_blocks(sequence, n);
}

GpuModel::Impl::StagingSlot& GpuModel::Impl::take_staging_slot() {
  StagingSlot& slot = staging[n_staged % kStagingSlots];
  ++n_staged;
  if (slot.pending) {
    const cudaError_t q = cudaEventQuery(slot.uploaded.get());
    if (q == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not ready" is no error: keep it out of later launch checks
      ++host_waits;
      slot.uploaded.synchronize();
    } else {
      CUDA_CHECK(q);
    }
    slot.pending = false;
  }
  return slot;
}

void GpuModel::Impl::forward_device(std::span<const GpuChunk> chunks, const int32_t* samples,
                                     void* start_event) {
  const int64_t T = opt.max_batch_tokens;
  int64_t N = 0, n_o = 0;
  bool has_refs = false;  // some tokens are sample references
  std::vector<bool> seen(seq_tokens.size(), false);
  for (const GpuChunk& c : chunks) {
    CHECK(c.sequence >= 0 && c.sequence < static_cast<int64_t>(seq_tokens.size()) &&
          seq_tokens[c.sequence] >= 0)
        << "forward: " << c.sequence << " is not a live sequence";
    CHECK(!seen[c.sequence]) << "forward: sequence " << c.sequence << " appears twice in one batch";
    seen[c.sequence] = true;
    CHECK(!c.tokens.empty()) << "forward: empty chunk";
    for (int32_t t : c.tokens) {
      if (t < 0 && samples != nullptr) {
        has_refs = true;
        continue;
      }
      CHECK(t >= 0 && t < cfg.vocab_size) << "token id " << t << " is outside the vocabulary [0, "
                                          << cfg.vocab_size << ")";
    }
    const int64_t end = seq_tokens[c.sequence] + static_cast<int64_t>(c.tokens.size());
    CHECK(end <= opt.max_context) << "sequence of " << end << " tokens exceeds the GPU context of "
                                  << opt.max_context;
    CHECK(cfg.max_position_embeddings <= 0 || end <= cfg.max_position_embeddings)
        << "sequence of " << end << " tokens exceeds the context limit of "
        << cfg.max_position_embeddings;
    N += static_cast<int64_t>(c.tokens.size());
    n_o += c.all_logits ? static_cast<int64_t>(c.tokens.size()) : 1;
  }
  CHECK_KIND(kResourceExhausted, N <= T)
      << "forward: " << N << " rows exceed max_batch_tokens " << T;
  CHECK_KIND(kResourceExhausted, n_o <= opt.max_out_rows)
      << "forward: " << n_o << " logits rows exceed max_out_rows " << opt.max_out_rows;
  work = GpuWork{};
  expert_work_pending = false;
  n_rows = N;
  n_out = n_o;
  chunk_spans.clear();
  graph_stats.last_bucket = 0;
  graph_stats.last_length = 0;
  if (N == 0) return;
  if (profiling && prof.size() != static_cast<size_t>(4 * cfg.num_layers)) {
    prof.clear();
    for (int64_t i = 0; i < 4 * cfg.num_layers; ++i) prof.emplace_back();
    prof_parts.clear();
    for (int64_t i = 0; i < 4 * cfg.num_layers; ++i) prof_parts.emplace_back();
  }
  const GraphKey key = graph_key(chunks);
  const int64_t rows = key.chunks > 0 ? key.rows() : N;

  // Row metadata and block-table columns go into the next pinned staging slot (gpu_model_impl.h
  // says why the ring does not block the engine's overlapped loop).
  StagingSlot& slot = take_staging_slot();
  int32_t* mh = slot.host;
  auto hsec = [&](int s) { return mh + static_cast<int64_t>(s) * T; };
  std::map<int64_t, int64_t> n_emit;
  for (auto& [ratio, s] : emit_section) n_emit[ratio] = 0;
  int64_t row = 0, out_i = 0;
  tokens_host.assign(N, 0);
  for (const GpuChunk& c : chunks) {
    const int64_t start = seq_tokens[c.sequence], len = static_cast<int64_t>(c.tokens.size());
    chunk_spans.emplace_back(start, len);
    if (plan.paged) reserve_blocks(c.sequence, start, start + len);
    for (int64_t i = 0; i < len; ++i, ++row) {
      const int64_t pos = start + i;
      hsec(kTokens)[row] = c.tokens[i];
      tokens_host[row] = c.tokens[i];
      hsec(kPositions)[row] = static_cast<int32_t>(pos);
      hsec(kSlot)[row] = static_cast<int32_t>(c.sequence);
      hsec(kChunkStart)[row] = static_cast<int32_t>(start);
      hsec(kChunkRow0)[row] = static_cast<int32_t>(row - i);
      hsec(kChunkEnd)[row] = static_cast<int32_t>(start + len);
      if (c.all_logits || i == len - 1) hsec(kOutRows)[out_i++] = static_cast<int32_t>(row);
      for (auto& [ratio, s] : emit_section) {
        if ((pos + 1) % ratio == 0) hsec(s)[n_emit[ratio]++] = static_cast<int32_t>(row);
      }
      if (plan.paged) {  // where this row's key and its emitted entries are stored
        hsec(kWinSlot)[row] = win_pool.slot(c.sequence, pos);
        for (auto& [ratio, s] : cmp_slot_section) {
          hsec(s)[row] =
              (pos + 1) % ratio == 0 ? cmp_pools.at(ratio).slot(c.sequence, pos / ratio) : -1;
        }
      }
    }
  }
  // Padding rows of a graph key (L, b), the rows N .. b * L - 1 (a verification step's too:
  // the real chunks of up to L rows come first, whatever their lengths): token 0 at position
  // 0 of the scratch slot, each a chunk of its own (so a padding row sees only itself, emits
  // nothing, routes to no expert; no padding row reads what another writes) and a logits row
  // past the real ones. Paged state (note for F2): the scratch slot needs a block-table row
  // in every pool (tables of max_sequences + 1 rows when cuda_graphs) with position 0's
  // window block reserved once (one more window block in the plan), and the paged sections
  // of padding rows (kWinSlot, compressed-slot sections) set like any row at position 0 of
  // that slot (compressed: -1, nothing emitted).
  for (; row < rows; ++row) {
    hsec(kTokens)[row] = 0;
    hsec(kPositions)[row] = 0;
    hsec(kSlot)[row] = static_cast<int32_t>(scratch_slot);
    hsec(kChunkStart)[row] = 0;
    hsec(kChunkRow0)[row] = static_cast<int32_t>(row);
    hsec(kChunkEnd)[row] = 1;
    hsec(kOutRows)[out_i++] = static_cast<int32_t>(row);
    hsec(kWinSlot)[row] = -1;  // padding rows store nothing (and read block 0's entries)
    for (auto& [ratio, s] : cmp_slot_section) hsec(s)[row] = -1;
  }
  int32_t* cnt = hsec(n_sections);
  cnt[kRealRows] = static_cast<int32_t>(N);
  for (auto& [ratio, s] : emit_section) {
    cnt[kEmitCounts + s - kNumFixedSections] = static_cast<int32_t>(n_emit[ratio]);
  }
  cudaStream_t stream = ctx.stream();
  if (start_event != nullptr) CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(start_event), stream));
  CUDA_CHECK(cudaMemcpyAsync(meta, mh, meta_ints() * sizeof(int32_t), cudaMemcpyHostToDevice,
                             stream));
  if (has_refs) resolve_sample_refs_cuda(stream, meta + static_cast<int64_t>(kTokens) * T, N, samples);
  emit_counts = n_emit;
  // Block tables: the columns changed since the last upload, staged after the metadata (async
  // copies outside any graph).
  if (plan.paged) upload_tables(mh + meta_ints());
  slot.uploaded.record(stream);
  slot.pending = true;

  n_rows = rows;
  if (key.chunks > 0) {
    n_out = rows;  // every real row is a logits row (graph_key), then the padding rows
    run_graph(key);  // sets work to the captured body's
    // Every GEMM of a graph step has m = rows: count the real rows only.
    work.gemm_flops *= static_cast<double>(N) / static_cast<double>(rows);
  } else {
    enqueue_forward();
  }
  n_out = n_o;
  for (const GpuChunk& c : chunks) {
    seq_tokens[c.sequence] += static_cast<int64_t>(c.tokens.size());
    rollback_floor[c.sequence] =
        std::max(rollback_floor[c.sequence], seq_tokens[c.sequence] - opt.max_rollback);
    if (plan.paged) trim_blocks(c.sequence, seq_tokens[c.sequence]);  // window blocks slid out
  }

  const int64_t D = cfg.hidden_size;
  work.weight_bytes += 4.0 * N * D;  // the embedding rows gathered
  if (grouped_moe) {  // the routed experts' FLOPs of the real rows; bytes in finish_expert_work
    work.gemm_flops += 2.0 * N * cfg.n_experts_per_tok * 3.0 * cfg.moe_intermediate_size * D *
                       cfg.num_layers;
    expert_work_pending = true;
  }
  count_attention_work();
}

GpuModel::Impl::GraphKey GpuModel::Impl::graph_key(std::span<const GpuChunk> chunks) const {
  if (!graphs_on || profiling) return {};
  // Every launch of enqueue_forward is sized by n_rows = n_out = b * L alone and reads the
  // rows' metadata (positions, slots, chunk bounds) from the device, so one graph serves any
  // chunks of up to L tokens whose every row is a logits row; causal attention inside a chunk
  // comes from those per-row positions (the paged slot lists, the compressors' chunk rows),
  // as in the eager forward.
  int64_t L = 1;
  for (const GpuChunk& c : chunks) {
    const auto len = static_cast<int64_t>(c.tokens.size());
    if (len > 1 && !c.all_logits) return {};  // a prefill chunk (one logits row of many)
    L = std::max(L, len);
  }
  if (L > 1 && L > opt.max_rollback + 1) return {};  // not a verification of <= max_rollback drafts
  const int64_t b = graph_bucket(static_cast<int64_t>(chunks.size()), L,
                                 std::min(opt.max_batch_tokens, opt.max_out_rows));
  return b > 0 ? GraphKey{L, b} : GraphKey{};
}

// The forward's device work over n_rows rows (metadata already uploaded) with n_out logits
// rows: the same kernels whether run eagerly or captured (gpu_graphs.cc).
void GpuModel::Impl::enqueue_forward() {
  cudaStream_t stream = ctx.stream();
  const int64_t N = n_rows, D = cfg.hidden_size, hc = cfg.hc_mult;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const double mix_bytes = 4.0 * (2 + hc) * hc * hc * D;
  // The layers swap X and X2 twice each; restore them whatever happens, so every forward (and
  // every graph) starts from the same buffers.
  struct Restore {
    float*& a;
    float*& b;
    float* a0;
    float* b0;
    ~Restore() {
      a = a0;
      b = b0;
    }
  } restore{X, X2, X, X2};
  embedding_cuda(stream, embed, sec(kTokens), N, D, hc, X);
  if (plan.paged) build_paged_lists();  // window / HCA slot lists, shared by all layers
  // Single-pass mHC (V4.1, MODEL_SPEC §C.3): each site collapses with the previous site's
  // `pre` (layer 0's attention with e_0, stream 0 alone) and the head collapses with the last
  // FFN site's; V4: each site with its own, then hc_head.
  const bool single_pass = cfg.traits.single_pass_mhc;
  if (single_pass) {
    CUDA_CHECK(cudaMemcpyAsync(pre_mix, pre_e0, N * hc * sizeof(float), cudaMemcpyDeviceToDevice,
                               stream));
  }
  float* ffn_pre = single_pass ? pre_ffn : pre;
  if (!engram.empty()) {  // the rows' n-grams, then this chunk's tokens into the ring
    EngramHistoryParams ep;
    ep.n_rows = N;
    ep.max_ngram = engram_ngram;
    ep.ring_len = engram_ring_len;
    ep.tokens = sec(kTokens);
    ep.positions = sec(kPositions);
    ep.slot = sec(kSlot);
    ep.chunk_start = sec(kChunkStart);
    ep.chunk_row0 = sec(kChunkRow0);
    ep.chunk_end = sec(kChunkEnd);
    ep.ring = engram_ring;
    ep.history = engram_hist;
    engram_history_cuda(stream, ep);
    engram_ring_store_cuda(stream, ep);
  }
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const GpuLayerW& lw = layers[l];
    auto mark = [&](int i) {
      if (profiling) prof[4 * l + i].record(stream);
    };
    // Engram updates the streams before the layer (MODEL_SPEC §C.8; plan.engram).
    if (!engram.empty() && engram[l]) engram[l]->apply(ctx, engram_hist, N, X);
    if (dspark) dspark_tap(l, false, X);  // DSpark taps (V4.1): the streams entering the layer
    hc_mix_cuda(ctx, X, N, lw.hc_attn.fn, lw.hc_attn.base, lw.hc_attn.scale, hp, mix_scratch, pre,
                post, comb);
    hc_collapse_cuda(stream, X, single_pass ? pre_mix : pre, N, hc, D, u);
    rms_norm_cuda(stream, u, lw.attn_norm, N, D, D, eps, x);
    mark(0);
    attention_block(l, x, y);
    mark(1);
    hc_expand_cuda(stream, X, y, post, comb, N, hc, D, X2);
    std::swap(X, X2);

    hc_mix_cuda(ctx, X, N, lw.hc_ffn.fn, lw.hc_ffn.base, lw.hc_ffn.scale, hp, mix_scratch,
                ffn_pre, post, comb);
    hc_collapse_cuda(stream, X, single_pass ? pre : ffn_pre, N, hc, D, u);
    rms_norm_cuda(stream, u, lw.ffn_norm, N, D, D, eps, x);
    mark(2);
    moe_block(l, x, y);
    mark(3);
    hc_expand_cuda(stream, X, y, post, comb, N, hc, D, X2);
    std::swap(X, X2);
    if (single_pass) {  // the next attention site collapses with this FFN site's pre
      CUDA_CHECK(cudaMemcpyAsync(pre_mix, pre_ffn, N * hc * sizeof(float),
                                 cudaMemcpyDeviceToDevice, stream));
    }
    if (dspark) dspark_tap(l, true, X);  // DSpark taps (V4): the block's output streams
    work.weight_bytes += 2 * mix_bytes;
    work.gemm_flops += 2.0 * 2.0 * N * (2 + hc) * hc * hc * D;
  }
  if (mtp) mtp_write_context();  // MTP-1 keys from the final streams (gpu_mtp.cc)
  if (dspark) dspark_write_context();  // DSpark context keys from the taps (gpu_dspark.cc)
  gather_rows_cuda(stream, X, sec(kOutRows), n_out, hc * D, Xo);
  if (single_pass) {  // no hc_head: the last FFN site's pre collapses the streams
    gather_rows_cuda(stream, pre_mix, sec(kOutRows), n_out, hc, head_pre);
    hc_collapse_cuda(stream, Xo, head_pre, n_out, hc, D, h);
  } else {
    hc_head_cuda(ctx, Xo, n_out, hc_head.fn, hc_head.base, hc_head.scale, hp, mix_scratch,
                 head_pre, h);
  }
  rms_norm_cuda(stream, h, norm, n_out, D, D, eps, h);
  lin(head, h, n_out, logits, a_gen);
}

void GpuModel::forward_device(std::span<const GpuChunk> chunks, const int32_t* samples,
                              void* start_event) {
  impl_->forward_device(chunks, samples, start_event);
}

Tensor GpuModel::forward(std::span<const GpuChunk> chunks) {
  impl_->forward_device(chunks, nullptr, nullptr);
  return copy_logits();
}

int64_t GpuModel::host_waits() const { return impl_->host_waits; }

const float* GpuModel::device_logits() const { return impl_->logits; }
float* GpuModel::device_logits() { return impl_->logits; }
int64_t GpuModel::n_logits_rows() const { return impl_->n_out; }

Tensor GpuModel::copy_logits() {
  Impl& m = *impl_;
  Tensor out = Tensor::empty(DType::F32, {m.n_out, m.cfg.vocab_size});
  if (m.n_out > 0) {
    CUDA_CHECK(cudaMemcpyAsync(out.raw(), m.logits, out.nbytes(), cudaMemcpyDeviceToHost,
                               m.ctx.stream()));
  }
  CUDA_CHECK(cudaStreamSynchronize(m.ctx.stream()));
  return out;
}

void* GpuModel::stream() { return impl_->ctx.stream(); }
void GpuModel::synchronize() { CUDA_CHECK(cudaStreamSynchronize(impl_->ctx.stream())); }

void GpuModel::randomize_state(uint64_t seed) {
  for (auto& [p, n] : impl_->state_pools) fill_uniform_f32(impl_->ctx.stream(), p, n, 0.0f, 1.0f, seed++);
  impl_->randomize_caches(seed);
  synchronize();
}

void GpuModel::clear_state() {
  for (auto& [p, n] : impl_->state_pools)
    CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), impl_->ctx.stream()));
  impl_->clear_caches();
  synchronize();
}

const GpuWork& GpuModel::work() const {
  impl_->finish_expert_work();
  return impl_->work;
}
void GpuModel::set_profiling(bool on) { impl_->profiling = on; }
double GpuModel::device_weight_bytes() const { return impl_->weight_bytes_total; }

GpuProfile GpuModel::profile() {
  Impl& m = *impl_;
  GpuProfile p;
  if (m.prof.empty()) return p;
  synchronize();
  for (int64_t l = 0; l < m.cfg.num_layers; ++l) {
    p.attention_ms += cuda::Event::elapsed_ms(m.prof[4 * l], m.prof[4 * l + 1]);
    p.moe_ms += cuda::Event::elapsed_ms(m.prof[4 * l + 2], m.prof[4 * l + 3]);
    if (m.layers[l].has_indexer) {
      p.indexer_ms += cuda::Event::elapsed_ms(m.prof_parts[4 * l], m.prof_parts[4 * l + 1]);
    }
    p.core_attention_ms += cuda::Event::elapsed_ms(m.prof_parts[4 * l + 2], m.prof_parts[4 * l + 3]);
  }
  return p;
}

}  // namespace deepinfer
