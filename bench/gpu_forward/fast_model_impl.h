// FastModel::Impl: device weights (FP8 block-scaled projections, fp32 small tensors),
// activation buffers, state pools and per-forward metadata. Internal to bench/gpu_forward.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/device_context.h"
#include "cuda/event.h"
#include "fast_model.h"
#include "ops/mhc/mhc.h"

namespace deepinfer {

// An FP8 e4m3 weight [n, k] with its fp32 scales [ceil(n/128), fp8_weight_scale_ld(k)].
struct QW {
  const uint8_t* q = nullptr;
  const float* s = nullptr;
  int64_t n = 0, k = 0;
  double bytes() const;  // codes + scales
};

struct FastHc {
  const float *fn = nullptr, *base = nullptr, *scale = nullptr;
};

struct FastCmp {
  QW wkv, wgate;
  const float *ape = nullptr, *norm = nullptr;
};

struct FastLayer {
  const float *attn_norm = nullptr, *ffn_norm = nullptr;
  FastHc hc_attn, hc_ffn;
  QW wq_a, wq_b, wkv, wo_a, wo_b;  // wo_a [G*R_o, H*d/G]: group g = rows [g*R_o, (g+1)*R_o)
  const float *q_norm = nullptr, *kv_norm = nullptr, *sink = nullptr;
  bool has_cmp = false, has_idx = false;
  FastCmp cmp, idx_cmp;
  QW idx_wq_b;
  const float* idx_wproj = nullptr;  // fp32 [H_I, D]
  const float *gate = nullptr, *bias = nullptr;  // fp32 [E, D], [E]
  std::vector<QW> w1, w3, w2;
  QW sw1, sw3, sw2;
};

struct FastState {
  float* ring = nullptr;  // [S, W, d]
  float *cmp_a = nullptr, *cmp_z = nullptr, *cmp_entries = nullptr;
  int64_t cmp_max = 0;
  float *idx_a = nullptr, *idx_z = nullptr, *idx_entries = nullptr;
  int64_t idx_max = 0;
};

enum FastMeta : int { kTok, kPos, kSlot, kCStart, kCRow0, kCEnd, kOut, kNumFixed };

struct FastModel::Impl {
  Impl(const ModelConfig& config, ModelWeights* host, const FastModelOptions& options,
       uint64_t seed);
  ~Impl();

  ModelConfig cfg;
  FastModelOptions opt;
  cuda::DeviceContext ctx;
  std::vector<cuda::DeviceBuffer> owned;
  std::vector<std::pair<float*, int64_t>> state_pools;  // (pointer, floats)
  uint64_t seed = 0, fill_counter = 0;
  double weight_bytes_total = 0;

  const float* embed = nullptr;
  QW head;
  const float* norm = nullptr;
  FastHc hc_head;
  std::vector<FastLayer> layers;
  std::vector<FastState> states;
  const float *inv_freq_main = nullptr, *inv_freq_compress = nullptr;
  HcMixParams hp;

  // Activations (fp32) [T, ...].
  float *X = nullptr, *X2 = nullptr, *u = nullptr, *x = nullptr, *y = nullptr;
  float *pre = nullptr, *post = nullptr, *comb = nullptr, *mix_scratch = nullptr;
  float *q_r = nullptr, *q = nullptr, *kv = nullptr, *o = nullptr, *zg = nullptr, *zz = nullptr;
  float *ca = nullptr, *cz = nullptr;
  float *qi = nullptr, *gi = nullptr, *scores = nullptr;
  int32_t *sel = nullptr, *n_sel = nullptr;
  float *router = nullptr, *route_w = nullptr;
  int32_t* route_ids = nullptr;
  float *xs = nullptr, *eg = nullptr, *ev = nullptr, *ys = nullptr, *sg = nullptr, *sv = nullptr,
        *ysh = nullptr;
  int64_t moe_cap = 0;
  float *Xo = nullptr, *h = nullptr, *head_pre = nullptr, *logits_d = nullptr;
  // FP8 activation scratch: the layer input (shared by its projections), q_r, a general one,
  // the grouped-output copy, and the MoE rows (row-major scales, then per-expert segments).
  uint8_t *xq_in = nullptr, *xq_r = nullptr, *xq = nullptr, *xq2 = nullptr, *xq_moe = nullptr;
  float *sx_in = nullptr, *sx_r = nullptr, *sx = nullptr, *sx_rm = nullptr, *sx_seg = nullptr;

  int32_t *meta = nullptr, *meta_host = nullptr;
  std::map<int64_t, int> emit_section;
  std::map<int64_t, int64_t> emit_counts;
  int n_sections = 0;
  // MoE metadata: perm_rows [cap], slot_of [T*k], perm_w [cap] (f32), seg_row0 [cap], seg_m [cap].
  int32_t *moe_meta = nullptr, *moe_meta_host = nullptr;
  int32_t* route_ids_host = nullptr;
  float* route_w_host = nullptr;

  int64_t n_rows = 0, n_out = 0;
  std::vector<FastChunk> chunks;  // of the current forward
  FastWork work;
  bool profiling = false;
  std::vector<cuda::Event> prof;  // 4 per layer: attention start/end, MoE start/end

  const int32_t* sec(int s) const { return meta + static_cast<int64_t>(s) * opt.max_batch_tokens; }
  void* raw_alloc(int64_t bytes);
  float* alloc(int64_t n_floats) { return static_cast<float*>(raw_alloc(n_floats * 4)); }
  float* state_alloc(int64_t n_floats);
  // fp32 tensor: uploaded from t (host) or random (mean, std).
  const float* f32(const Tensor* t, int64_t n, float mean, float std);
  // FP8 weight [n, k]: t quantised (and replaced by its round trip) or random with std.
  QW q8(Tensor* t, int64_t n, int64_t k, float std);

  // y[m, w.n] = x · w^T through act_quant + the FP8 GEMM (xq/sx scratch); lin_q reuses an
  // already quantised input.
  void lin(const float* x_in, int64_t m, const QW& w, float* y_out);
  void quant(const float* x_in, int64_t m, int64_t k, uint8_t* q_out, float* s_out);
  void lin_q(const uint8_t* xq_in_, const float* sx_in_, int64_t m, const QW& w, float* y_out);

  void attention_block(int64_t layer, const float* x_in, float* out);
  void run_compressor(const FastCmp& w, int64_t ratio, int64_t width, float* ring_a, float* ring_z,
                      float* entries, int64_t max_entries);
  void moe_block(int64_t layer, const float* x_in, float* out);
  void count_attention_work();
};

// Kernels (fast_kernels.cu).
void fill_uniform_f32(cudaStream_t s, float* p, int64_t n, float mean, float std, uint64_t seed);
void fill_random_e4m3(cudaStream_t s, uint8_t* p, int64_t n, uint64_t seed);
void fill_const_f32(cudaStream_t s, float* p, int64_t n, float value);
// out[row0[r] * n_kb + kb * m[r] + (r - row0[r])] = in[r * n_kb + kb] for rows with m[r] > 0.
void segment_scales(cudaStream_t s, const float* in, int64_t n_rows, int64_t n_kb,
                    const int32_t* row0, const int32_t* m, float* out);

}  // namespace deepinfer
