// FastModel: construction (weights from host fp32 tensors quantised to FP8, or random on the
// device), activation buffers, state pools. The forward is in fast_forward.cc.
#include "model/rope_config.h"
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/dtype.h"
#include "base/error.h"
#include "cuda/cuda_check.h"
#include "fast_model_impl.h"
#include "ops/gemm/gemm.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/rope/rope.h"

namespace deepinfer {
namespace {

constexpr int64_t kExpertRowAlign = 64;

}  // namespace

double QW::bytes() const {
  return static_cast<double>(n) * k + 4.0 * ceil_div64(n, kFp8GemmBlock) * fp8_weight_scale_ld(k);
}

void* FastModel::Impl::raw_alloc(int64_t bytes) {
  owned.emplace_back(static_cast<size_t>(std::max<int64_t>(bytes, 16)));
  return owned.back().data();
}

float* FastModel::Impl::state_alloc(int64_t n_floats) {
  float* p = alloc(n_floats);
  state_pools.emplace_back(p, n_floats);
  return p;
}

const float* FastModel::Impl::f32(const Tensor* t, int64_t n, float mean, float std) {
  float* d = alloc(n);
  if (t != nullptr) {
    ICHECK(t->defined() && t->numel() == n) << "fast model: fp32 tensor of " << n << " values";
    CUDA_CHECK(cudaMemcpy(d, t->raw(), n * 4, cudaMemcpyHostToDevice));
  } else {
    fill_uniform_f32(ctx.stream(), d, n, mean, std, seed * 1000003 + ++fill_counter);
  }
  weight_bytes_total += 4.0 * n;
  return d;
}

// Host quantisation of t [n, k] per 128x128 block: scale = amax / 448 (1 for an all-zero
// block), codes = e4m3(x / scale); t is overwritten with codes * scale.
QW FastModel::Impl::q8(Tensor* t, int64_t n, int64_t k, float std) {
  const int64_t n_nb = ceil_div64(n, kFp8GemmBlock), n_kb = ceil_div64(k, kFp8GemmBlock);
  const int64_t ld = fp8_weight_scale_ld(k);
  auto* q = static_cast<uint8_t*>(raw_alloc(n * k));
  float* s = alloc(n_nb * ld);
  if (t != nullptr) {
    ICHECK(t->defined() && t->numel() == n * k) << "fast model: weight of " << n << "x" << k;
    float* w = t->f32();
    std::vector<float> grid(n_nb * n_kb);
    std::vector<uint8_t> codes(n * k);
    for (int64_t bn = 0; bn < n_nb; ++bn) {
      for (int64_t bk = 0; bk < n_kb; ++bk) {
        const int64_t r1 = std::min(n, (bn + 1) * kFp8GemmBlock), c1 = std::min(k, (bk + 1) * kFp8GemmBlock);
        float amax = 0.0f;
        for (int64_t r = bn * kFp8GemmBlock; r < r1; ++r)
          for (int64_t c = bk * kFp8GemmBlock; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * k + c]));
        const float sc = amax > 0.0f ? amax / 448.0f : 1.0f;
        grid[bn * n_kb + bk] = sc;
        for (int64_t r = bn * kFp8GemmBlock; r < r1; ++r) {
          for (int64_t c = bk * kFp8GemmBlock; c < c1; ++c) {
            const uint8_t code = f32_to_e4m3(w[r * k + c] / sc);
            codes[r * k + c] = code;
            w[r * k + c] = e4m3_to_f32(code) * sc;
          }
        }
      }
    }
    const std::vector<float> sw = expand_weight_scales_f32(grid.data(), n, k);
    CUDA_CHECK(cudaMemcpy(q, codes.data(), n * k, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(s, sw.data(), sw.size() * 4, cudaMemcpyHostToDevice));
  } else {
    fill_random_e4m3(ctx.stream(), q, n * k, seed * 1000003 + ++fill_counter);
    fill_const_f32(ctx.stream(), s, n_nb * ld, std * 1.7320508f / 448.0f);
  }
  QW w{q, s, n, k};
  weight_bytes_total += w.bytes();
  return w;
}

// Rows [row0, row0 + rows) of a quantised weight (row0 a multiple of 128).
static QW rows_of(const QW& w, int64_t row0, int64_t rows) {
  ICHECK(row0 % kFp8GemmBlock == 0) << "rows_of: row0 " << row0;
  return QW{w.q + row0 * w.k, w.s + row0 / kFp8GemmBlock * fp8_weight_scale_ld(w.k), rows, w.k};
}

FastModel::Impl::Impl(const ModelConfig& config, ModelWeights* hw, const FastModelOptions& options,
                      uint64_t seed_)
    : cfg(config), opt(options), seed(seed_) {
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim, T = opt.max_batch_tokens;
  const int64_t S = opt.max_sequences, hc = cfg.hc_mult, L = cfg.num_layers, V = cfg.vocab_size;
  const int64_t HI = cfg.index_n_heads, dI = cfg.index_head_dim, E = cfg.n_routed_experts;
  const int64_t k = cfg.n_experts_per_tok, I = cfg.moe_intermediate_size, Rq = cfg.q_lora_rank;
  const int64_t Is = I * cfg.n_shared_experts, G = cfg.o_groups, Ro = cfg.o_lora_rank;
  const int64_t gw = H * d / G, nmix = (2 + hc) * hc;
  CHECK_KIND(kUnsupported, G > 0 && (H * d) % G == 0 && Ro % 128 == 0 && gw % 128 == 0)
      << "FastModel: o_groups " << G << ", o_lora_rank " << Ro;
  CHECK_KIND(kUnsupported, I % 128 == 0 && D % 128 == 0) << "FastModel: D and I multiples of 128";
  const bool host = hw != nullptr;
  auto proj_std = [](int64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); };

  embed = f32(host ? &hw->embed : nullptr, V * D, 0.0f, 1.0f);
  weight_bytes_total -= 4.0 * V * D;  // only the gathered rows are read; not counted as weights
  head = q8(host ? &hw->head : nullptr, V, D, proj_std(D));
  norm = f32(host ? &hw->norm : nullptr, D, 1.0f, 0.1f);
  hc_head = {f32(host ? &hw->hc_head.fn : nullptr, hc * hc * D, 0.0f, proj_std(hc * D)),
             f32(host ? &hw->hc_head.base : nullptr, hc, 0.0f, 0.1f),
             f32(host ? &hw->hc_head.scale : nullptr, 1, 0.5f, 0.1f)};
  layers.resize(L);
  states.resize(L);
  bool any_indexer = false;
  for (int64_t l = 0; l < L; ++l) {
    CHECK_KIND(kUnsupported, !cfg.is_hash_layer(l)) << "FastModel: hash-routed layer " << l;
    LayerWeights* lw = host ? &hw->layers[l] : nullptr;
    FastLayer& g = layers[l];
    const int64_t ratio = cfg.compress_ratio(l);
    auto hc_w = [&](HcWeightsT* h) {
      return FastHc{f32(host ? &h->fn : nullptr, nmix * hc * D, 0.0f, proj_std(hc * D)),
                    f32(host ? &h->base : nullptr, nmix, 0.0f, 0.1f),
                    f32(host ? &h->scale : nullptr, 3, 0.5f, 0.1f)};
    };
    g.attn_norm = f32(host ? &lw->attn_norm : nullptr, D, 1.0f, 0.1f);
    g.ffn_norm = f32(host ? &lw->ffn_norm : nullptr, D, 1.0f, 0.1f);
    g.hc_attn = hc_w(host ? &lw->hc_attn : nullptr);
    g.hc_ffn = hc_w(host ? &lw->hc_ffn : nullptr);
    AttentionWeights* a = host ? &lw->attn : nullptr;
    g.wq_a = q8(host ? &a->wq_a : nullptr, Rq, D, proj_std(D));
    g.q_norm = f32(host ? &a->q_norm : nullptr, Rq, 1.0f, 0.1f);
    g.wq_b = q8(host ? &a->wq_b : nullptr, H * d, Rq, proj_std(Rq));
    g.wkv = q8(host ? &a->wkv : nullptr, d, D, proj_std(D));
    g.kv_norm = f32(host ? &a->kv_norm : nullptr, d, 1.0f, 0.1f);
    g.wo_a = q8(host ? &a->wo_a : nullptr, G * Ro, gw, proj_std(gw));
    g.wo_b = q8(host ? &a->wo_b : nullptr, D, G * Ro, proj_std(G * Ro));
    g.sink = f32(host ? &a->sink : nullptr, H, 0.0f, 1.0f);
    g.has_cmp = ratio > 0;
    g.has_idx = ratio == 4 && cfg.index_n_heads > 0;
    auto cmp_w = [&](CompressorWeights* c, int64_t m, int64_t width) {
      const int64_t cw = (m == 4 ? 2 : 1) * width;
      FastCmp f;
      f.wkv = q8(host ? &c->wkv : nullptr, cw, D, proj_std(D));
      f.wgate = q8(host ? &c->wgate : nullptr, cw, D, proj_std(D));
      f.ape = f32(host ? &c->ape : nullptr, m * cw, 0.0f, 0.5f);
      f.norm = f32(host ? &c->norm : nullptr, width, 1.0f, 0.1f);
      return f;
    };
    if (g.has_cmp) g.cmp = cmp_w(host ? &a->compressor : nullptr, ratio, d);
    if (g.has_idx) {
      g.idx_cmp = cmp_w(host ? &a->indexer.compressor : nullptr, 4, dI);
      g.idx_wq_b = q8(host ? &a->indexer.wq_b : nullptr, HI * dI, Rq, proj_std(Rq));
      g.idx_wproj = f32(host ? &a->indexer.weights_proj : nullptr, HI * D, 0.0f, proj_std(D));
      any_indexer = true;
    }
    MoeWeights* m = host ? &lw->moe : nullptr;
    g.gate = f32(host ? &m->gate : nullptr, E * D, 0.0f, proj_std(D));
    if (!host || m->bias.defined()) g.bias = f32(host ? &m->bias : nullptr, E, 0.0f, 0.1f);
    if (host) {
      for (int64_t e = 0; e < E; ++e) {
        g.w1.push_back(q8(&m->experts[e].w1, I, D, 0));
        g.w3.push_back(q8(&m->experts[e].w3, I, D, 0));
        g.w2.push_back(q8(&m->experts[e].w2, D, I, 0));
      }
    } else {  // one allocation per matrix kind, experts as row ranges
      const QW a1 = q8(nullptr, E * I, D, proj_std(D)), a3 = q8(nullptr, E * I, D, proj_std(D));
      const QW a2 = q8(nullptr, E * D, I, proj_std(I));
      for (int64_t e = 0; e < E; ++e) {
        g.w1.push_back(rows_of(a1, e * I, I));
        g.w3.push_back(rows_of(a3, e * I, I));
        g.w2.push_back(rows_of(a2, e * D, D));
      }
    }
    g.sw1 = q8(host ? &m->shared.w1 : nullptr, Is, D, proj_std(D));
    g.sw3 = q8(host ? &m->shared.w3 : nullptr, Is, D, proj_std(D));
    g.sw2 = q8(host ? &m->shared.w2 : nullptr, D, Is, proj_std(Is));

    FastState& st = states[l];
    st.ring = state_alloc(S * cfg.sliding_window * d);
    if (g.has_cmp) {
      const int64_t cw = (ratio == 4 ? 2 : 1) * d;
      st.cmp_a = state_alloc(S * 2 * ratio * cw);
      st.cmp_z = state_alloc(S * 2 * ratio * cw);
      st.cmp_max = opt.max_context / ratio;
      st.cmp_entries = state_alloc(S * st.cmp_max * d);
      if (!emit_section.count(ratio)) emit_section[ratio] = 0;
    }
    if (g.has_idx) {
      st.idx_a = state_alloc(S * 2 * 4 * 2 * dI);
      st.idx_z = state_alloc(S * 2 * 4 * 2 * dI);
      st.idx_max = opt.max_context / 4;
      st.idx_entries = state_alloc(S * st.idx_max * dI);
    }
  }
  const RopeTable rope_main(rope_params(cfg, false)), rope_compress(rope_params(cfg, true));
  float* fm = alloc(cfg.rope_dim / 2);
  float* fc = alloc(cfg.rope_dim / 2);
  CUDA_CHECK(cudaMemcpy(fm, rope_main.inv_freq().data(), cfg.rope_dim / 2 * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(fc, rope_compress.inv_freq().data(), cfg.rope_dim / 2 * 4, cudaMemcpyHostToDevice));
  inv_freq_main = fm;
  inv_freq_compress = fc;
  hp = HcMixParams{hc, D, cfg.hc_sinkhorn_iters, static_cast<float>(cfg.hc_eps),
                   static_cast<float>(cfg.rms_norm_eps)};

  X = alloc(T * hc * D);
  X2 = alloc(T * hc * D);
  u = alloc(T * D);
  x = alloc(T * D);
  y = alloc(T * D);
  pre = alloc(T * hc);
  post = alloc(T * hc);
  comb = alloc(T * hc * hc);
  mix_scratch = alloc(hc_mix_scratch_floats(std::max(T, opt.max_out_rows), hp));
  q_r = alloc(T * Rq);
  q = alloc(T * H * d);
  kv = alloc(T * d);
  o = alloc(T * H * d);
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
  moe_cap = T * k + E * kExpertRowAlign;
  xs = alloc(moe_cap * D);
  eg = alloc(moe_cap * I);
  ev = alloc(moe_cap * I);
  ys = alloc(moe_cap * D);
  CUDA_CHECK(cudaMemset(eg, 0, moe_cap * I * 4));
  CUDA_CHECK(cudaMemset(ev, 0, moe_cap * I * 4));
  sg = alloc(T * Is);
  sv = alloc(T * Is);
  ysh = alloc(T * D);
  const int64_t R = opt.max_out_rows;
  Xo = alloc(R * hc * D);
  h = alloc(R * D);
  head_pre = alloc(R * hc);
  logits_d = alloc(R * V);

  const int64_t kmax = std::max({H * d, D, Rq, G * Ro, Is, I});
  xq_in = static_cast<uint8_t*>(raw_alloc(T * D));
  sx_in = alloc(T * ceil_div64(D, 128));
  xq_r = static_cast<uint8_t*>(raw_alloc(T * Rq));
  sx_r = alloc(T * ceil_div64(Rq, 128));
  xq = static_cast<uint8_t*>(raw_alloc(std::max(T, R) * kmax));
  sx = alloc(std::max(T, R) * ceil_div64(kmax, 128));
  xq2 = static_cast<uint8_t*>(raw_alloc(T * gw));
  const int64_t kmoe = std::max(D, I);
  xq_moe = static_cast<uint8_t*>(raw_alloc(moe_cap * kmoe));
  sx_rm = alloc(moe_cap * ceil_div64(kmoe, 128));
  sx_seg = alloc(moe_cap * ceil_div64(kmoe, 128));

  int next = kNumFixed;
  for (auto& [ratio, section] : emit_section) section = next++;
  n_sections = next;
  meta = reinterpret_cast<int32_t*>(alloc(n_sections * T));
  const int64_t moe_meta_n = 4 * moe_cap + T * k;
  moe_meta = reinterpret_cast<int32_t*>(alloc(moe_meta_n));
  CUDA_CHECK(cudaMallocHost(&meta_host, n_sections * T * sizeof(int32_t)));
  CUDA_CHECK(cudaMallocHost(&moe_meta_host, moe_meta_n * sizeof(int32_t)));
  CUDA_CHECK(cudaMallocHost(&route_ids_host, T * k * sizeof(int32_t)));
  CUDA_CHECK(cudaMallocHost(&route_w_host, T * k * sizeof(float)));
  CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
  CUDA_CHECK(cudaDeviceSynchronize());
}

FastModel::Impl::~Impl() {
  cudaFreeHost(meta_host);
  cudaFreeHost(moe_meta_host);
  cudaFreeHost(route_ids_host);
  cudaFreeHost(route_w_host);
}

FastModel::FastModel(const ModelConfig& config, ModelWeights* host_weights,
                     const FastModelOptions& options, uint64_t seed)
    : impl_(std::make_unique<Impl>(config, host_weights, options, seed)) {}

FastModel::~FastModel() = default;

void FastModel::randomize_state(uint64_t seed) {
  for (auto& [p, n] : impl_->state_pools) fill_uniform_f32(impl_->ctx.stream(), p, n, 0.0f, 1.0f, seed++);
  CUDA_CHECK(cudaStreamSynchronize(impl_->ctx.stream()));
}

void FastModel::clear_state() {
  for (auto& [p, n] : impl_->state_pools)
    CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), impl_->ctx.stream()));
  CUDA_CHECK(cudaStreamSynchronize(impl_->ctx.stream()));
}

const FastWork& FastModel::work() const { return impl_->work; }
void FastModel::synchronize() { CUDA_CHECK(cudaStreamSynchronize(impl_->ctx.stream())); }
void* FastModel::stream() { return impl_->ctx.stream(); }
double FastModel::device_weight_bytes() const { return impl_->weight_bytes_total; }

Tensor FastModel::logits() {
  Impl& m = *impl_;
  Tensor out = Tensor::empty(DType::F32, {m.n_out, m.cfg.vocab_size});
  CUDA_CHECK(cudaMemcpyAsync(out.raw(), m.logits_d, out.nbytes(), cudaMemcpyDeviceToHost,
                             m.ctx.stream()));
  CUDA_CHECK(cudaStreamSynchronize(m.ctx.stream()));
  return out;
}

}  // namespace deepinfer
