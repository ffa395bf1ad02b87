// GpuModel: construction (uploads, buffers, pools), sequences, and the forward's outer loop
// (embedding, mHC around each block, head). Blocks: gpu_attention.cc, gpu_moe.cc.
#include "runtime/gpu_model.h"
#include "model/rope_config.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "io/config_parser.h"
#include "model/weight_source.h"
#include "ops/embedding/embedding_cuda.h"
#include "ops/gemm/gemm.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/moe/moe_cuda.h"
#include "ops/rms_norm/rms_norm_cuda.h"
#include "ops/rope/rope.h"
#include "runtime/gpu_model_impl.h"

namespace deepinfer {
namespace {

constexpr int64_t kExpertRowAlign = 64;  // keeps every per-expert GEMM operand 256-byte aligned

}  // namespace

float* GpuModel::Impl::alloc(int64_t n_floats) {
  owned.emplace_back(static_cast<size_t>(std::max<int64_t>(n_floats, 1)) * sizeof(float));
  return static_cast<float*>(owned.back().data());
}

const float* GpuModel::Impl::upload_raw(const float* p, int64_t n) {
  float* d = alloc(n);
  CUDA_CHECK(cudaMemcpy(d, p, n * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

const float* GpuModel::Impl::upload(const Tensor& t) {
  ICHECK(t.defined()) << "upload of an undefined tensor";
  ICHECK(t.dtype() == DType::F32 || t.dtype() == DType::I32) << "upload: " << t.str();
  return upload_raw(static_cast<const float*>(t.raw()), t.numel());
}

GpuModel::Impl::Impl(ModelConfig config, const ModelWeights& w, const GpuModelOptions& options)
    : cfg(std::move(config)), opt(options) {
  CHECK(opt.max_sequences > 0 && opt.max_context > 0 && opt.max_batch_tokens > 0)
      << "GpuModel: max_sequences, max_context and max_batch_tokens must be positive";
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim, T = opt.max_batch_tokens;
  const int64_t S = opt.max_sequences, hc = cfg.hc_mult, L = cfg.num_layers;
  const int64_t HI = cfg.index_n_heads, dI = cfg.index_head_dim, E = cfg.n_routed_experts;
  const int64_t k = cfg.n_experts_per_tok, I = cfg.moe_intermediate_size;
  const int64_t Is = I * cfg.n_shared_experts, G = cfg.o_groups, Ro = cfg.o_lora_rank;
  CHECK_KIND(kUnsupported, G > 0 && (H * d) % G == 0) << "GpuModel: o_groups " << G;

  embed = upload(w.embed);
  head = upload(w.head);
  norm = upload(w.norm);
  hc_head = {upload(w.hc_head.fn), upload(w.hc_head.base), upload(w.hc_head.scale)};
  const int64_t gw = H * d / G;
  auto up_cmp = [&](const CompressorWeights& c) {
    return GpuCompressorW{upload(c.wkv), upload(c.wgate), upload(c.ape), upload(c.norm)};
  };
  layers.resize(L);
  states.resize(L);
  bool any_indexer = false;
  for (int64_t l = 0; l < L; ++l) {
    const LayerWeights& lw = w.layers[l];
    GpuLayerW& g = layers[l];
    g.attn_norm = upload(lw.attn_norm);
    g.ffn_norm = upload(lw.ffn_norm);
    g.hc_attn = {upload(lw.hc_attn.fn), upload(lw.hc_attn.base), upload(lw.hc_attn.scale)};
    g.hc_ffn = {upload(lw.hc_ffn.fn), upload(lw.hc_ffn.base), upload(lw.hc_ffn.scale)};
    const AttentionWeights& a = lw.attn;
    g.wq_a = upload(a.wq_a);
    g.q_norm = upload(a.q_norm);
    g.wq_b = upload(a.wq_b);
    g.wkv = upload(a.wkv);
    g.kv_norm = upload(a.kv_norm);
    g.wo_b = upload(a.wo_b);
    g.sink = upload(a.sink);
    for (int64_t grp = 0; grp < G; ++grp) g.wo_a.push_back(upload_raw(a.wo_a.f32() + grp * Ro * gw, Ro * gw));
    g.has_compressor = a.has_compressor;
    g.has_indexer = a.has_indexer;
    if (a.has_compressor) g.cmp = up_cmp(a.compressor);
    if (a.has_indexer) {
      g.idx_cmp = up_cmp(a.indexer.compressor);
      g.idx_wq_b = upload(a.indexer.wq_b);
      g.idx_wproj = upload(a.indexer.weights_proj);
      any_indexer = true;
    }
    const MoeWeights& m = lw.moe;
    g.gate = upload(m.gate);
    if (cfg.is_hash_layer(l)) {
      g.tid2eid = reinterpret_cast<const int32_t*>(upload(m.tid2eid));
    } else if (m.bias.defined()) {
      g.bias = upload(m.bias);
    }
    for (int64_t e = 0; e < E; ++e) {
      g.w1.push_back(upload(m.experts[e].w1));
      g.w3.push_back(upload(m.experts[e].w3));
      g.w2.push_back(upload(m.experts[e].w2));
    }
    g.sw1 = upload(m.shared.w1);
    g.sw3 = upload(m.shared.w3);
    g.sw2 = upload(m.shared.w2);

    // State pools.
    GpuLayerState& st = states[l];
    st.ring = alloc(S * cfg.sliding_window * d);
    const int64_t ratio = cfg.compress_ratio(l);
    if (a.has_compressor) {
      const int64_t cw = (ratio == 4 ? 2 : 1) * d;
      st.cmp_a = alloc(S * 2 * ratio * cw);
      st.cmp_z = alloc(S * 2 * ratio * cw);
      st.cmp_max_entries = opt.max_context / ratio;
      st.cmp_entries = alloc(S * st.cmp_max_entries * d);
      if (!emit_section.count(ratio)) emit_section[ratio] = 0;
    }
    if (a.has_indexer) {
      CHECK_KIND(kUnsupported, ratio == 4) << "GpuModel: indexer on a ratio-" << ratio << " layer";
      st.idx_a = alloc(S * 2 * 4 * 2 * dI);
      st.idx_z = alloc(S * 2 * 4 * 2 * dI);
      st.idx_max_entries = opt.max_context / 4;
      st.idx_entries = alloc(S * st.idx_max_entries * dI);
    }
  }
  const RopeTable rope_main(rope_params(cfg, false)), rope_compress(rope_params(cfg, true));
  inv_freq_main = upload_raw(rope_main.inv_freq().data(), cfg.rope_dim / 2);
  inv_freq_compress = upload_raw(rope_compress.inv_freq().data(), cfg.rope_dim / 2);
  hp = HcMixParams{hc, D, cfg.hc_sinkhorn_iters, static_cast<float>(cfg.hc_eps),
                   static_cast<float>(cfg.rms_norm_eps)};

  // Activations.
  X = alloc(T * hc * D);
  X2 = alloc(T * hc * D);
  u = alloc(T * D);
  x = alloc(T * D);
  y = alloc(T * D);
  pre = alloc(T * hc);
  post = alloc(T * hc);
  comb = alloc(T * hc * hc);
  mix_scratch = alloc(hc_mix_scratch_floats(T, hp));
  q_r = alloc(T * cfg.q_lora_rank);
  q = alloc(T * H * d);
  kv = alloc(T * d);
  o = alloc(T * H * d);
  og = alloc(T * gw);
  zg = alloc(T * Ro);
  zz = alloc(T * G * Ro);
  ca = alloc(T * 2 * std::max(d, dI));
  cz = alloc(T * 2 * std::max(d, dI));
  if (any_indexer) {
    qi = alloc(T * HI * dI);
    gi = alloc(T * HI);
    scores = alloc(T * (opt.max_context / 4));
    sel = reinterpret_cast<int32_t*>(alloc(T * cfg.index_topk));
    n_sel = reinterpret_cast<int32_t*>(alloc(T));
  }
  router = alloc(T * E);
  route_w = alloc(T * k);
  route_ids = reinterpret_cast<int32_t*>(alloc(T * k));
  moe_rows_cap = T * k + E * kExpertRowAlign;
  xs = alloc(moe_rows_cap * D);
  eg = alloc(moe_rows_cap * I);
  ev = alloc(moe_rows_cap * I);
  ys = alloc(moe_rows_cap * D);
  sg = alloc(T * Is);
  sv = alloc(T * Is);
  ysh = alloc(T * D);
  Xo = alloc(T * hc * D);
  h = alloc(T * D);
  head_pre = alloc(T * hc);
  logits = alloc(T * cfg.vocab_size);

  int next = kNumFixedSections;
  for (auto& [ratio, section] : emit_section) section = next++;
  n_sections = next;
  meta = reinterpret_cast<int32_t*>(alloc(n_sections * T));
  const int64_t moe_meta_n = 2 * moe_rows_cap + T * k;
  moe_meta = reinterpret_cast<int32_t*>(alloc(moe_meta_n));
  CUDA_CHECK(cudaMallocHost(&meta_host, n_sections * T * sizeof(int32_t)));
  CUDA_CHECK(cudaMallocHost(&moe_meta_host, moe_meta_n * sizeof(int32_t)));
  CUDA_CHECK(cudaMallocHost(&route_ids_host, T * k * sizeof(int32_t)));
  CUDA_CHECK(cudaMallocHost(&route_w_host, T * k * sizeof(float)));
  seq_tokens.assign(S, -1);
}

GpuModel::Impl::~Impl() {
  cudaFreeHost(meta_host);
  cudaFreeHost(moe_meta_host);
  cudaFreeHost(route_ids_host);
  cudaFreeHost(route_w_host);
}

GpuModel::GpuModel(ModelConfig config, const ModelWeights& weights, const GpuModelOptions& options)
    : impl_(std::make_unique<Impl>(std::move(config), weights, options)) {}

GpuModel::~GpuModel() = default;

std::unique_ptr<GpuModel> GpuModel::load(const std::string& dir, const GpuModelOptions& options) {
  const ModelConfig config = load_model_config(dir);
  auto source = open_checkpoint_weights(dir, config);
  const ModelWeights weights = load_model_weights(config, *source);
  return std::make_unique<GpuModel>(config, weights, options);
}

const ModelConfig& GpuModel::config() const { return impl_->cfg; }

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

Tensor GpuModel::forward(std::span<const GpuChunk> chunks) {
  Impl& m = *impl_;
  const ModelConfig& cfg = m.cfg;
  const int64_t T = m.opt.max_batch_tokens;
  int64_t N = 0, n_out = 0;
  std::vector<bool> seen(m.seq_tokens.size(), false);
  for (const GpuChunk& c : chunks) {
    CHECK(c.sequence >= 0 && c.sequence < static_cast<int64_t>(m.seq_tokens.size()) &&
          m.seq_tokens[c.sequence] >= 0)
        << "forward: " << c.sequence << " is not a live sequence";
    CHECK(!seen[c.sequence]) << "forward: sequence " << c.sequence << " appears twice in one batch";
    seen[c.sequence] = true;
    CHECK(!c.tokens.empty()) << "forward: empty chunk";
    for (int32_t t : c.tokens) {
      CHECK(t >= 0 && t < cfg.vocab_size) << "token id " << t << " is outside the vocabulary [0, "
                                          << cfg.vocab_size << ")";
    }
    const int64_t end = m.seq_tokens[c.sequence] + static_cast<int64_t>(c.tokens.size());
    CHECK(end <= m.opt.max_context) << "sequence of " << end << " tokens exceeds the GPU context of "
                                    << m.opt.max_context;
    CHECK(cfg.max_position_embeddings <= 0 || end <= cfg.max_position_embeddings)
        << "sequence of " << end << " tokens exceeds the context limit of "
        << cfg.max_position_embeddings;
    N += static_cast<int64_t>(c.tokens.size());
    n_out += c.all_logits ? static_cast<int64_t>(c.tokens.size()) : 1;
  }
  CHECK_KIND(kResourceExhausted, N <= T)
      << "forward: " << N << " rows exceed max_batch_tokens " << T;
  if (N == 0) return Tensor::empty(DType::F32, {0, cfg.vocab_size});

  // Row metadata.
  int32_t* mh = m.meta_host;
  auto sec = [&](int s) { return mh + static_cast<int64_t>(s) * T; };
  std::map<int64_t, int64_t> n_emit;
  for (auto& [ratio, s] : m.emit_section) n_emit[ratio] = 0;
  int64_t row = 0, out_i = 0;
  m.tokens_host.assign(N, 0);
  for (const GpuChunk& c : chunks) {
    const int64_t start = m.seq_tokens[c.sequence], len = static_cast<int64_t>(c.tokens.size());
    for (int64_t i = 0; i < len; ++i, ++row) {
      const int64_t pos = start + i;
      sec(kTokens)[row] = c.tokens[i];
      m.tokens_host[row] = c.tokens[i];
      sec(kPositions)[row] = static_cast<int32_t>(pos);
      sec(kSlot)[row] = static_cast<int32_t>(c.sequence);
      sec(kChunkStart)[row] = static_cast<int32_t>(start);
      sec(kChunkRow0)[row] = static_cast<int32_t>(row - i);
      sec(kChunkEnd)[row] = static_cast<int32_t>(start + len);
      if (c.all_logits || i == len - 1) sec(kOutRows)[out_i++] = static_cast<int32_t>(row);
      for (auto& [ratio, s] : m.emit_section) {
        if ((pos + 1) % ratio == 0) sec(s)[n_emit[ratio]++] = static_cast<int32_t>(row);
      }
    }
  }
  m.n_rows = N;
  cudaStream_t stream = m.ctx.stream();
  CUDA_CHECK(cudaMemcpyAsync(m.meta, m.meta_host, m.n_sections * T * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream));
  m.emit_counts.clear();
  for (auto& [ratio, cnt] : n_emit) m.emit_counts[ratio] = cnt;

  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  embedding_cuda(stream, m.embed, m.sec(kTokens), N, D, hc, m.X);
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const GpuLayerW& lw = m.layers[l];
    hc_mix_cuda(m.ctx, m.X, N, lw.hc_attn.fn, lw.hc_attn.base, lw.hc_attn.scale, m.hp,
                m.mix_scratch, m.pre, m.post, m.comb);
    hc_collapse_cuda(stream, m.X, m.pre, N, hc, D, m.u);
    rms_norm_cuda(stream, m.u, lw.attn_norm, N, D, D, eps, m.x);
    m.attention_block(l, m.x, m.y);
    hc_expand_cuda(stream, m.X, m.y, m.post, m.comb, N, hc, D, m.X2);
    std::swap(m.X, m.X2);

    hc_mix_cuda(m.ctx, m.X, N, lw.hc_ffn.fn, lw.hc_ffn.base, lw.hc_ffn.scale, m.hp, m.mix_scratch,
                m.pre, m.post, m.comb);
    hc_collapse_cuda(stream, m.X, m.pre, N, hc, D, m.u);
    rms_norm_cuda(stream, m.u, lw.ffn_norm, N, D, D, eps, m.x);
    m.moe_block(l, m.x, m.y);
    hc_expand_cuda(stream, m.X, m.y, m.post, m.comb, N, hc, D, m.X2);
    std::swap(m.X, m.X2);
  }
  for (const GpuChunk& c : chunks) m.seq_tokens[c.sequence] += static_cast<int64_t>(c.tokens.size());

  gather_rows_cuda(stream, m.X, m.sec(kOutRows), n_out, hc * D, m.Xo);
  hc_head_cuda(m.ctx, m.Xo, n_out, m.hc_head.fn, m.hc_head.base, m.hc_head.scale, m.hp,
               m.mix_scratch, m.head_pre, m.h);
  rms_norm_cuda(stream, m.h, m.norm, n_out, D, D, eps, m.h);
  gemm_f32_cuda(m.ctx, m.h, m.head, n_out, cfg.vocab_size, D, m.logits);
  Tensor out = Tensor::empty(DType::F32, {n_out, cfg.vocab_size});
  CUDA_CHECK(cudaMemcpyAsync(out.raw(), m.logits, out.nbytes(), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

}  // namespace deepinfer
