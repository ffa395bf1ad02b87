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
#include "runtime/gpu_kernels.h"
#include "runtime/gpu_model.h"
#include "runtime/gpu_model_impl.h"

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
// all on HCA; every indexer entry is scored), all fp32.
void GpuModel::Impl::count_attention_work() {
  const double d = cfg.head_dim, H = cfg.num_heads, W = cfg.sliding_window;
  const double HI = cfg.index_n_heads, dI = cfg.index_head_dim, topk = cfg.index_topk;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const int64_t ratio = layers[l].has_compressor ? cfg.compress_ratio(l) : 0;
    const bool idx = layers[l].has_indexer;
    for (const auto& [start, len] : chunk_spans) {
      for (int64_t i = 0; i < len; ++i) {
        const int64_t pos = start + i;
        double keys = std::min<double>(W, pos + 1);
        if (ratio > 0) {
          const double n_ent = static_cast<double>((pos + 1) / ratio);
          keys += idx ? std::min(topk, n_ent) : n_ent;
          if (idx) work.attn_flops += 2.0 * n_ent * HI * dI;
        }
        work.attn_flops += 4.0 * H * d * keys;
      }
      const double old_ent = ratio > 0 ? static_cast<double>(start / ratio) : 0.0;
      double st = std::min<double>(W, start) * d * 4;
      if (ratio > 0) st += (idx ? std::min(topk, old_ent) : old_ent) * d * 4;
      if (idx) st += old_ent * dI * 4;
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
}

void GpuModel::Impl::forward_device(std::span<const GpuChunk> chunks) {
  const int64_t T = opt.max_batch_tokens;
  int64_t N = 0, n_o = 0;
  std::vector<bool> seen(seq_tokens.size(), false);
  for (const GpuChunk& c : chunks) {
    CHECK(c.sequence >= 0 && c.sequence < static_cast<int64_t>(seq_tokens.size()) &&
          seq_tokens[c.sequence] >= 0)
        << "forward: " << c.sequence << " is not a live sequence";
    CHECK(!seen[c.sequence]) << "forward: sequence " << c.sequence << " appears twice in one batch";
    seen[c.sequence] = true;
    CHECK(!c.tokens.empty()) << "forward: empty chunk";
    for (int32_t t : c.tokens) {
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
  n_rows = N;
  n_out = n_o;
  chunk_spans.clear();
  if (N == 0) return;
  if (profiling && prof.size() != static_cast<size_t>(4 * cfg.num_layers)) {
    prof.clear();
    for (int64_t i = 0; i < 4 * cfg.num_layers; ++i) prof.emplace_back();
  }

  // Row metadata.
  int32_t* mh = meta_host;
  auto hsec = [&](int s) { return mh + static_cast<int64_t>(s) * T; };
  std::map<int64_t, int64_t> n_emit;
  for (auto& [ratio, s] : emit_section) n_emit[ratio] = 0;
  int64_t row = 0, out_i = 0;
  tokens_host.assign(N, 0);
  for (const GpuChunk& c : chunks) {
    const int64_t start = seq_tokens[c.sequence], len = static_cast<int64_t>(c.tokens.size());
    chunk_spans.emplace_back(start, len);
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
    }
  }
  cudaStream_t stream = ctx.stream();
  CUDA_CHECK(cudaMemcpyAsync(meta, meta_host, n_sections * T * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream));
  emit_counts = n_emit;

  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const double mix_bytes = 4.0 * (2 + hc) * hc * hc * D;
  embedding_cuda(stream, embed, sec(kTokens), N, D, hc, X);
  work.weight_bytes += 4.0 * N * D;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const GpuLayerW& lw = layers[l];
    auto mark = [&](int i) {
      if (profiling) prof[4 * l + i].record(stream);
    };
    hc_mix_cuda(ctx, X, N, lw.hc_attn.fn, lw.hc_attn.base, lw.hc_attn.scale, hp, mix_scratch, pre,
                post, comb);
    hc_collapse_cuda(stream, X, pre, N, hc, D, u);
    rms_norm_cuda(stream, u, lw.attn_norm, N, D, D, eps, x);
    mark(0);
    attention_block(l, x, y);
    mark(1);
    hc_expand_cuda(stream, X, y, post, comb, N, hc, D, X2);
    std::swap(X, X2);

    hc_mix_cuda(ctx, X, N, lw.hc_ffn.fn, lw.hc_ffn.base, lw.hc_ffn.scale, hp, mix_scratch, pre,
                post, comb);
    hc_collapse_cuda(stream, X, pre, N, hc, D, u);
    rms_norm_cuda(stream, u, lw.ffn_norm, N, D, D, eps, x);
    mark(2);
    moe_block(l, x, y);
    mark(3);
    hc_expand_cuda(stream, X, y, post, comb, N, hc, D, X2);
    std::swap(X, X2);
    work.weight_bytes += 2 * mix_bytes;
    work.gemm_flops += 2.0 * 2.0 * N * (2 + hc) * hc * hc * D;
  }
  for (const GpuChunk& c : chunks) seq_tokens[c.sequence] += static_cast<int64_t>(c.tokens.size());

  gather_rows_cuda(stream, X, sec(kOutRows), n_out, hc * D, Xo);
  hc_head_cuda(ctx, Xo, n_out, hc_head.fn, hc_head.base, hc_head.scale, hp, mix_scratch, head_pre,
               h);
  rms_norm_cuda(stream, h, norm, n_out, D, D, eps, h);
  lin(head, h, n_out, logits, a_gen);
  count_attention_work();
}

void GpuModel::forward_device(std::span<const GpuChunk> chunks) { impl_->forward_device(chunks); }

Tensor GpuModel::forward(std::span<const GpuChunk> chunks) {
  impl_->forward_device(chunks);
  return copy_logits();
}

const float* GpuModel::device_logits() const { return impl_->logits; }
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
  synchronize();
}

void GpuModel::clear_state() {
  for (auto& [p, n] : impl_->state_pools)
    CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), impl_->ctx.stream()));
  synchronize();
}

const GpuWork& GpuModel::work() const { return impl_->work; }
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
  }
  return p;
}

}  // namespace deepinfer
