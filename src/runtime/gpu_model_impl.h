// GpuModel::Impl: device weights, activation buffers, state pools and the per-forward row
// metadata. Internal to src/runtime.
#pragma once

#include <map>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/device_context.h"
#include "ops/mhc/mhc.h"
#include "runtime/gpu_model.h"

namespace deepinfer {

struct GpuCompressorW {
  const float *wkv = nullptr, *wgate = nullptr, *ape = nullptr, *norm = nullptr;
};

struct GpuHcW {
  const float *fn = nullptr, *base = nullptr, *scale = nullptr;
};

struct GpuLayerW {
  const float *attn_norm = nullptr, *ffn_norm = nullptr;
  GpuHcW hc_attn, hc_ffn;
  const float *wq_a = nullptr, *q_norm = nullptr, *wq_b = nullptr, *wkv = nullptr,
              *kv_norm = nullptr, *wo_b = nullptr, *sink = nullptr;
  std::vector<const float*> wo_a;  // per output group [R_o, H*d/G]
  bool has_compressor = false, has_indexer = false;
  GpuCompressorW cmp, idx_cmp;
  const float *idx_wq_b = nullptr, *idx_wproj = nullptr;
  const float *gate = nullptr, *bias = nullptr;
  const int32_t* tid2eid = nullptr;
  std::vector<const float*> w1, w3, w2;  // per routed expert
  const float *sw1 = nullptr, *sw3 = nullptr, *sw2 = nullptr;
};

// Per-layer state pools (all sequences): see compress_pool_cuda.h for the ring layouts.
struct GpuLayerState {
  float* ring = nullptr;  // [S, W, d]
  float *cmp_a = nullptr, *cmp_z = nullptr, *cmp_entries = nullptr;
  int64_t cmp_max_entries = 0;
  float *idx_a = nullptr, *idx_z = nullptr, *idx_entries = nullptr;
  int64_t idx_max_entries = 0;
};

// Row metadata sections of the int32 metadata buffer (each max_batch_tokens long).
enum MetaSection : int { kTokens, kPositions, kSlot, kChunkStart, kChunkRow0, kChunkEnd, kOutRows,
                         kNumFixedSections };

struct GpuModel::Impl {
  Impl(ModelConfig config, const ModelWeights& weights, const GpuModelOptions& options);
  ~Impl();

  ModelConfig cfg;
  GpuModelOptions opt;
  cuda::DeviceContext ctx;
  std::vector<cuda::DeviceBuffer> owned;
  const float *embed = nullptr, *head = nullptr, *norm = nullptr;
  GpuHcW hc_head;
  std::vector<GpuLayerW> layers;
  std::vector<GpuLayerState> states;
  const float *inv_freq_main = nullptr, *inv_freq_compress = nullptr;
  HcMixParams hp;

  // Sequences.
  std::vector<int64_t> seq_tokens;  // -1 = free slot
  // Activations [T, ...].
  float *X = nullptr, *X2 = nullptr, *u = nullptr, *x = nullptr, *y = nullptr;
  float *pre = nullptr, *post = nullptr, *comb = nullptr, *mix_scratch = nullptr;
  float *q_r = nullptr, *q = nullptr, *kv = nullptr, *o = nullptr, *og = nullptr, *zg = nullptr,
        *zz = nullptr;
  float *ca = nullptr, *cz = nullptr;  // [T, 2 * max(d, d_I)]
  float *qi = nullptr, *gi = nullptr, *scores = nullptr;
  int32_t *sel = nullptr, *n_sel = nullptr;
  float *router = nullptr, *route_w = nullptr;
  int32_t* route_ids = nullptr;
  float *xs = nullptr, *eg = nullptr, *ev = nullptr, *ys = nullptr, *sg = nullptr, *sv = nullptr,
        *ysh = nullptr;
  int64_t moe_rows_cap = 0;  // rows of xs / eg / ev / ys (routed slots + per-expert padding)
  float *Xo = nullptr, *h = nullptr, *head_pre = nullptr, *logits = nullptr;
  // Metadata: int32 sections on the device and a pinned host staging copy.
  int32_t* meta = nullptr;
  int32_t* meta_host = nullptr;
  std::map<int64_t, int> emit_section;  // compress ratio -> section index
  std::map<int64_t, int64_t> emit_counts;  // this forward: emitting rows per ratio
  int n_sections = 0;
  // MoE permutation: perm_rows [cap], slot_of [T*k] int32 then perm_w [cap] fp32.
  int32_t* moe_meta = nullptr;
  int32_t* moe_meta_host = nullptr;
  int32_t* route_ids_host = nullptr;
  float* route_w_host = nullptr;

  // Per forward.
  int64_t n_rows = 0;
  std::vector<int32_t> tokens_host;

  const int32_t* sec(int s) const { return meta + static_cast<int64_t>(s) * opt.max_batch_tokens; }
  float* alloc(int64_t n_floats);
  const float* upload(const Tensor& t);
  const float* upload_raw(const float* p, int64_t n);

  void attention_block(int64_t layer, const float* x_in, float* out);
  void run_compressor(const GpuCompressorW& w, int64_t ratio, int64_t width, float* ring_a,
                      float* ring_z, float* entries, int64_t max_entries, const float* x_in,
                      bool indexer);
  void moe_block(int64_t layer, const float* x_in, float* out);
};

}  // namespace deepinfer
