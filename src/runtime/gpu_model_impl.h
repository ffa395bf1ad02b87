// GpuModel::Impl: device weights (DeviceLinear projections in fp32 or FP8, fp32 small
// tensors), activation buffers, state pools and the per-forward row metadata. Internal to
// src/runtime. Files: gpu_model.cc (construction), gpu_forward.cc (sequences, forward, work
// accounting), gpu_attention.cc, gpu_moe.cc.
//
// Seams for the ops being built next: moe_block() is the whole routed + shared expert
// computation (a device-side grouped FP8 MoE replaces its body); GpuLayerState holds the
// per-layer state pools (a paged FP8 KV cache replaces ring / cmp_entries / idx_entries and
// the chunk metadata addressing them).
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/device_context.h"
#include "cuda/event.h"
#include "ops/mhc/mhc.h"
#include "runtime/device_linear.h"
#include "runtime/gpu_model.h"

namespace deepinfer {

struct GpuCompressorW {
  DeviceLinear wkv, wgate;
  const float *ape = nullptr, *norm = nullptr;
};

struct GpuHcW {
  const float *fn = nullptr, *base = nullptr, *scale = nullptr;
};

struct GpuLayerW {
  const float *attn_norm = nullptr, *ffn_norm = nullptr;
  GpuHcW hc_attn, hc_ffn;
  DeviceLinear wq_a, wq_b, wkv, wo_b;
  std::vector<DeviceLinear> wo_a;  // per output group [R_o, H*d/G]
  const float *q_norm = nullptr, *kv_norm = nullptr, *sink = nullptr;
  bool has_compressor = false, has_indexer = false;
  GpuCompressorW cmp, idx_cmp;
  DeviceLinear idx_wq_b;
  DeviceLinear idx_wproj, gate;  // always fp32
  const float* bias = nullptr;
  const int32_t* tid2eid = nullptr;
  std::vector<DeviceLinear> w1, w3, w2;  // per routed expert
  DeviceLinear sw1, sw3, sw2;
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
  // host == nullptr: dummy weights from seed.
  Impl(ModelConfig config, const ModelWeights* host, uint64_t seed, const GpuModelOptions& options);
  ~Impl();

  ModelConfig cfg;
  GpuModelOptions opt;
  cuda::DeviceContext ctx;
  std::vector<cuda::DeviceBuffer> owned;
  std::vector<std::pair<float*, int64_t>> state_pools;  // (pointer, floats)
  uint64_t seed = 0, fill_counter = 0;
  double weight_bytes_total = 0;

  const float *embed = nullptr, *norm = nullptr;
  DeviceLinear head;
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
  // FP8 activation scratch (kFp8 only): the block input (shared by its projections), q_r
  // (shared by wq_b and the indexer's wq_b), a general one, and the grouped MoE rows
  // (row-major scales, then per-expert block-major segments).
  ActScratch a_in, a_r, a_gen;
  uint8_t* og_q = nullptr;  // one output group's FP8 codes [T, H*d/G]
  uint8_t* moe_q = nullptr;
  float *moe_s_rm = nullptr, *moe_s_seg = nullptr;
  // Metadata: int32 sections on the device and a pinned host staging copy.
  int32_t* meta = nullptr;
  int32_t* meta_host = nullptr;
  std::map<int64_t, int> emit_section;  // compress ratio -> section index
  std::map<int64_t, int64_t> emit_counts;  // this forward: emitting rows per ratio
  int n_sections = 0;
  // MoE metadata: perm_rows [cap], slot_of [T*k] int32, perm_w [cap] fp32, seg_row0 [cap],
  // seg_m [cap] int32.
  int32_t* moe_meta = nullptr;
  int32_t* moe_meta_host = nullptr;
  int32_t* route_ids_host = nullptr;
  float* route_w_host = nullptr;

  // Per forward.
  int64_t n_rows = 0, n_out = 0;
  std::vector<std::pair<int64_t, int64_t>> chunk_spans;  // (start position, length)
  std::vector<int32_t> tokens_host;
  GpuWork work;
  bool profiling = false;
  std::vector<cuda::Event> prof;  // 4 per layer: attention start/end, MoE start/end

  bool fp8() const { return opt.weight_format == WeightFormat::kFp8; }
  const int32_t* sec(int s) const { return meta + static_cast<int64_t>(s) * opt.max_batch_tokens; }
  void* raw_alloc(int64_t bytes);
  float* alloc(int64_t n_floats) { return static_cast<float*>(raw_alloc(n_floats * 4)); }
  float* state_alloc(int64_t n_floats);
  // fp32 tensor of n values: uploaded from host (t) or random (mean, std).
  const float* f32(const float* host, int64_t n, float mean, float std);
  const float* f32(const Tensor* t, int64_t n, float mean, float std);
  // A projection [n, k] in the model's format (or fp32 when force_f32): from host rows (not
  // modified) or random with std.
  DeviceLinear linear(const float* host, int64_t n, int64_t k, float std, bool force_f32 = false);
  DeviceLinear linear(const Tensor* t, int64_t n, int64_t k, float std, bool force_f32 = false);

  // y = x · W^T with the work accounting; lin_q reuses an already quantised input (kFp8) or
  // reads x_f32 (kF32).
  void lin(const DeviceLinear& w, const float* x_in, int64_t m, float* y_out,
           ActScratch scratch);
  void lin_in(const DeviceLinear& w, const float* x_in, ActScratch quantised, int64_t m,
              float* y_out);

  void attention_block(int64_t layer, const float* x_in, float* out);
  void run_compressor(const GpuCompressorW& w, int64_t ratio, int64_t width, float* ring_a,
                      float* ring_z, float* entries, int64_t max_entries, const float* x_in,
                      bool indexer);
  void moe_block(int64_t layer, const float* x_in, float* out);
  void count_attention_work();
  void forward_device(std::span<const GpuChunk> chunks);
};

}  // namespace deepinfer
