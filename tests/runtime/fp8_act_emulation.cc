// Fp8ActivationEmulation (fp8_act_emulation.h): the FP8 projection set and the linear_ref
// wrapper the test executable is linked with (-Wl,--wrap=<linear_ref's mangled name>).
#include "fp8_act_emulation.h"

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "ops/gemm/gemm.h"
#include "ops/linear/linear.h"
#include "ops/quant/qat.h"
#include "runtime/fp8_weight_quant.h"

// linear_ref's symbol, deepinfer::linear_ref(const float*, long, long, const float*, long,
// float*, deepinfer::GemmMode), as the wrap option names it.
#define DEEPINFER_LINEAR_REF_SYMBOL _ZN9deepinfer10linear_refEPKfllS1_lPfNS_8GemmModeE
#define DEEPINFER_CAT2(a, b) a##b
#define DEEPINFER_CAT(a, b) DEEPINFER_CAT2(a, b)

extern "C" void DEEPINFER_CAT(__real_, DEEPINFER_LINEAR_REF_SYMBOL)(const float* x, int64_t m, int64_t k,
                                                                     const float* w, int64_t n, float* y,
                                                                     deepinfer::GemmMode mode);

namespace deepinfer::testing {
namespace {

std::atomic<Fp8ActivationEmulation*> g_active{nullptr};

}  // namespace

Fp8ActivationEmulation::Fp8ActivationEmulation(const ModelConfig& cfg, const ModelWeights& w)
    : block_(fp8_weight_block(cfg)) {
  auto add = [&](const Tensor& t, int64_t k) {
    if (t.defined()) fp8_.emplace(t.f32(), Projection{k, fp8_.size()});
  };
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim, Rq = cfg.q_lora_rank;
  const int64_t I = cfg.moe_intermediate_size, Is = I * cfg.n_shared_experts;
  const int64_t G = cfg.o_groups, Ro = cfg.o_lora_rank, gw = H * d / G;
  auto attention = [&](const AttentionWeights& a) {
    add(a.wq_a, D);
    add(a.wq_b, Rq);
    add(a.wkv, D);
    for (int64_t g = 0; g < G && a.wo_a.defined(); ++g) {
      fp8_.emplace(a.wo_a.f32() + g * Ro * gw, Projection{gw, fp8_.size()});
    }
    add(a.wo_b, G * Ro);
    if (a.has_compressor) {
      add(a.compressor.wkv, D);
      add(a.compressor.wgate, D);
    }
    if (a.has_indexer) {
      add(a.indexer.compressor.wkv, D);
      add(a.indexer.compressor.wgate, D);
      add(a.indexer.wq_b, Rq);
    }
    add(a.indexer.wk, d);  // V4.1: index keys from the latents (GpuModel idx_wk)
  };
  auto moe = [&](const MoeWeights& m) {
    for (const ExpertWeightsT& e : m.experts) {
      add(e.w1, D);
      add(e.w3, D);
      add(e.w2, I);
    }
    add(m.shared.w1, D);
    add(m.shared.w3, D);
    add(m.shared.w2, Is);
  };
  add(w.head, D);
  for (const LayerWeights& l : w.layers) {
    attention(l.attn);
    moe(l.moe);
    if (l.engram.wkv.defined()) add(l.engram.wkv, l.engram.wkv.size(1));  // GpuEngram fp8_wkv
  }
  if (w.has_mtp) {
    add(w.mtp.e_proj, D);
    add(w.mtp.h_proj, D);
    attention(w.mtp.block.attn);
    moe(w.mtp.block.moe);
  }
  used_ = std::vector<std::atomic<uint8_t>>(fp8_.size());
}

int64_t Fp8ActivationEmulation::projections_used() const {
  int64_t n = 0;
  for (const auto& u : used_) n += u.load() != 0;
  return n;
}

Fp8ActivationEmulation::~Fp8ActivationEmulation() {
  Fp8ActivationEmulation* self = this;
  g_active.compare_exchange_strong(self, nullptr);
}

void Fp8ActivationEmulation::set_active(bool on) {
  Fp8ActivationEmulation* expected = on ? nullptr : this;
  const bool ok = g_active.compare_exchange_strong(expected, on ? this : nullptr);
  CHECK(ok) << "Fp8ActivationEmulation: " << (on ? "another emulation is active" : "not active");
}

bool Fp8ActivationEmulation::maybe_quantise(const float* x, int64_t m, int64_t k, const float* w,
                                            std::vector<float>& xq) {
  const auto it = fp8_.find(w);
  if (it == fp8_.end()) {
    ++plain_;
    return false;
  }
  ICHECK(it->second.k == k) << "Fp8ActivationEmulation: an FP8 weight used with K = " << k << ", not "
                            << it->second.k;
  used_[it->second.index] = 1;
  xq.assign(x, x + m * k);
  if (jitter_ != 0) {
    for (int64_t i = 0; i < m * k; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &xq[size_t(i)], sizeof(bits));
      uint64_t z = (uint64_t(jitter_) << 32 ^ bits) + 0x9e3779b97f4a7c15ull * uint64_t(i + 1);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;  // splitmix64's finaliser
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      for (int u = 0; u < jitter_ulps_; ++u) {
        xq[size_t(i)] = std::nextafter(xq[size_t(i)], (z & 1) ? INFINITY : -INFINITY);
      }
    }
  }
  for (int64_t r = 0; r < m; ++r) fp8_roundtrip(xq.data() + r * k, k, block_);
  ++quantised_;
  return true;
}

}  // namespace deepinfer::testing

extern "C" void DEEPINFER_CAT(__wrap_, DEEPINFER_LINEAR_REF_SYMBOL)(const float* x, int64_t m, int64_t k,
                                                                     const float* w, int64_t n, float* y,
                                                                     deepinfer::GemmMode mode) {
  deepinfer::testing::Fp8ActivationEmulation* e = deepinfer::testing::g_active.load();
  std::vector<float> xq;
  if (e != nullptr && e->maybe_quantise(x, m, k, w, xq)) x = xq.data();
  DEEPINFER_CAT(__real_, DEEPINFER_LINEAR_REF_SYMBOL)(x, m, k, w, n, y, mode);
}
