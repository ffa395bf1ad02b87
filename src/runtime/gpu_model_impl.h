// GpuModel::Impl: device weights (DeviceLinear projections in fp32 or FP8, fp32 small
// tensors), activation buffers, state pools and the per-forward row metadata. Internal to
// src/runtime. Files: gpu_model.cc (construction), gpu_forward.cc (sequences, forward, work
// accounting), gpu_attention.cc, gpu_moe.cc (grouped device MoE or the per-expert plain
// path), gpu_graphs.cc (decode / verification CUDA graphs), gpu_paged_state.cc.
//
// Graph rule for everything enqueued by enqueue_forward(): launch sizes may depend only on
// n_rows / n_out (the bucket in a graph step) and on construction-time sizes; per-step
// values (counts, slots, positions) are read from device memory (meta, counts()).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/device_context.h"
#include "cuda/event.h"
#include "cuda/graph.h"
#include "ops/mhc/mhc.h"
#include "ops/moe/moe.h"
#include "ops/moe/moe_grouped_cuda.h"
#include "ops/moe/moe_grouped_f32_cuda.h"
#include "ops/moe/moe_w4a8_cuda.h"
#include "runtime/device_linear.h"
#include "runtime/expert_loader.h"
#include "runtime/gpu_engram.h"
#include "runtime/gpu_model.h"
#include "runtime/gpu_state_plan.h"
#include "runtime/kv_block_pool.h"

namespace deepinfer {

// wgate absent (n == 0): V4.1 ratio 1, one latent per token; ape null: V4.1 (no position
// bias).
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
  // has_compressor: plan.owns_compressor; has_indexer: plan.scores() (io/layer_plan.h).
  bool has_compressor = false, has_indexer = false;
  GpuCompressorW cmp, idx_cmp;  // idx_cmp: V4's own index compressor (plan.own_index_compressor)
  DeviceLinear idx_wq_b;
  // V4.1 index-key owners (plan.owns_index_keys without its own compressor): keys =
  // k_norm(wk . latent) from the main compressor's pre-RoPE latents (MODEL_SPEC §C.7).
  DeviceLinear idx_wk;
  const float* idx_k_norm = nullptr;
  DeviceLinear idx_wproj, gate;  // always fp32
  const float* bias = nullptr;
  const int32_t* tid2eid = nullptr;
  // Per routed expert (views into the stacks below; empty under expert_format kW4a8).
  std::vector<DeviceLinear> w1, w3, w2;
  MoeExpertsFp8Weights experts;          // kFp8: the stacked [E, n, k] codes and scales
  MoeExpertsF32Weights experts_f32;      // kF32: the stacked [E, n, k] fp32 matrices
  MoeW4a8Weights experts_w4a8;           // expert_format kW4a8: moe_w4a8.h's stacks
  double expert_bytes_each = 0;          // device bytes of one routed expert (w1 + w3 + w2)
  DeviceLinear sw1, sw3, sw2;
};

// Per-layer state pools (all sequences): see compress_pool_cuda.h for the ring layouts.
struct GpuLayerState {
  float* ring = nullptr;  // [S, W, d]
  float *cmp_a = nullptr, *cmp_z = nullptr, *cmp_entries = nullptr;
  int64_t cmp_max_entries = 0;
  // Index keys of a key owner (plan.owns_index_keys): V4 from the rings idx_a / idx_z of its
  // own compressor, V4.1 from the main compressor's latents (no rings). Consumer layers read
  // their source's (plan.index_keys_from / kv_from) entries, never a copy.
  float *idx_a = nullptr, *idx_z = nullptr, *idx_entries = nullptr;
  int64_t idx_max_entries = 0;
  // Top-k of a scoring layer (plan.scores()) for this forward's rows [T, index_topk], [T]:
  // read by the layers whose plan.topk_from is this layer.
  int32_t *sel = nullptr, *n_sel = nullptr;
  // Paged (GpuModelOptions::paged_kv): this layer's caches of the window pool, of its
  // ratio's compressed pool (plan.kv layout) and of the indexer keys (plan.idx, kFp8); ring
  // and cmp_entries are then unused, idx_entries is used when the indexer keys stay fp32.
  uint8_t *win_cache = nullptr, *cmp_cache = nullptr, *idx_cache = nullptr;
};

// A paged cache of one layer, for clear_state / randomize_state.
struct GpuCachePool {
  uint8_t* cache = nullptr;
  int64_t bytes = 0, n_slots = 0;
  bool index = false;  // IndexCacheLayout (else the KvCacheLayout)
};

// Row metadata sections of the int32 metadata buffer (each max_batch_tokens long).
// kWinSlot: the physical window-pool slot of the row's position (paged).
enum MetaSection : int { kTokens, kPositions, kSlot, kChunkStart, kChunkRow0, kChunkEnd, kOutRows,
                         kWinSlot, kNumFixedSections };
// Device counts after the row sections (counts() = meta + n_sections * max_batch_tokens):
// [kRealRows] the forward's real rows (rows past it are the padding of a graph bucket), then
// [kEmitCounts + i] the emitting rows of emit section kNumFixedSections + i. Uploaded with the
// sections; kernels whose work depends on them read them on the device.
enum MetaCount : int { kRealRows, kEmitCounts };

// One stacked expert matrix [E, n, k]: kFp8 codes q and scales s [E, ceil(n/128), ld(k)];
// kF32 values f (q and s null).
struct MoeStack {
  const uint8_t* q = nullptr;
  const float* s = nullptr;
  const float* f = nullptr;
};

// MTP-1 drafter on the device (gpu_mtp.cc; GpuModelOptions::mtp): mtp.0's weights in the
// model's format, its per-sequence state and its scratch. `ring` [S, n_slots, d]: the MTP
// block's window K=V of position t in slot t % n_slots (n_slots = W + max_rollback + 1),
// written for every position the main forward pairs with its next token (mtp_write_context);
// `chain` [S, n_chain, d] (right after the ring, one allocation): a draft's own keys, step j
// in slot j; `streams` [S, n_stream_slots, n_hc*D]: X^L of the last max_rollback + 1
// positions of every sequence (slot t % n_stream_slots).
struct GpuMtp {
  DeviceLinear e_proj, h_proj;
  const float *enorm = nullptr, *hnorm = nullptr, *norm = nullptr;
  GpuHcW hc_head;
  GpuLayerW block;  // ratio 0, score-routed MoE (attention fields and the routed experts)
  float* ring = nullptr;
  int64_t n_slots = 0;
  float* chain = nullptr;
  int64_t n_chain = 0;
  float* streams = nullptr;
  int64_t n_stream_slots = 0;
  int64_t rows = 0;  // scratch rows: max(max_batch_tokens, max_sequences)
  float *H = nullptr, *hn = nullptr, *hp = nullptr, *e = nullptr, *ep = nullptr, *Z = nullptr,
        *Z2 = nullptr;  // [rows * n_hc, D] (e, ep: [rows, D])
  float *keys = nullptr;  // draft: the window keys of each row [max_sequences * W, d]
  float *logits = nullptr, *h = nullptr, *hnorm_out = nullptr, *head_pre = nullptr;  // draft rows
  int32_t* meta = nullptr;       // draft metadata (device), see gpu_mtp.cc
  int32_t* meta_host = nullptr;  // pinned
  int64_t meta_ints = 0;
  int32_t* tokens = nullptr;     // [max_sequences] the current draft step's input tokens
  float* prob = nullptr;         // [max_sequences] the step's softmax probability of its draft
  int32_t* key_pos = nullptr;    // [rows] mtp_write_context: the RoPE position of each row's key
  ActScratch a;                  // kFp8: activation scratch for rows * n_hc rows of width max
  void* moe_ws = nullptr;        // grouped MoE workspace for max_sequences rows
  // CUDA graphs of the chained draft steps (cuda_graphs): key (bucket of sequences, step j,
  // with the device probabilities), captured on first use (gpu_mtp.cc).
  std::map<std::tuple<int64_t, int64_t, bool>, cuda::Graph> graphs;
};

// DSpark drafter on the device (gpu_dspark.cc; GpuModelOptions::dspark), V4.1 and V4-0731
// (MODEL_SPEC §D):
// its weights, per-sequence context rings and draft scratch. `rings`: per stage k one region
// of [S * n_slots + max_sequences * block, d] rows at rings + k * ring_stride: first the stage's
// context K=V of position t of state slot s in row s * n_slots + t % n_slots (n_slots =
// W + max_rollback + 1; written for every row of every forward by dspark_write_context), then
// the block keys of the current draft (row i * B + b: block position i of the call's b-th
// sequence). `taps` [T, n_taps * D]: the forward's target features (dspark_tap).
struct GpuDspark {
  DeviceLinear main_proj;  // [D, n_taps * D], the model's format (as the stages' projections)
  const float *main_norm = nullptr, *norm = nullptr;
  // ratio 0, score-routed MoE of n_experts experts (routed experts FP8 under kFp8, also when
  // the backbone's are W4A8; gpu_dspark.cc init_dspark)
  std::vector<GpuLayerW> stages;
  const float *markov_embed = nullptr, *markov_head = nullptr;  // [V, R] fp32
  const float* confidence = nullptr;                            // [D + R] fp32
  int64_t block = 0, rank = 0, noise = 0, n_taps = 0, n_experts = 0, top_k = 0;
  GpuHcW hc_head;                     // V4 (ModelTraits::dspark_hc_head): the last stage's hc_head
  // Backbone layer -> tap index, or -1 (its entering streams, V4.1; its output streams, V4:
  // ModelTraits::dspark_taps_block_output).
  std::vector<int64_t> tap_of_layer;
  float* rings = nullptr;
  int64_t n_slots = 0, ring_stride = 0;  // ring_stride: floats per stage region
  float* taps = nullptr;
  float *m = nullptr;  // [T, D] the forward's main_norm(main_proj(taps))
  // Draft scratch, rows = max_sequences * block (row i * B + b).
  int64_t rows = 0;
  float *Z = nullptr, *Z2 = nullptr;            // [rows, n_hc, D]
  float *keys = nullptr;                        // [max_sequences * (W + block), d]
  float *h = nullptr, *hn = nullptr, *logits = nullptr, *e = nullptr;  // [rows, D] / [rows, V] / [rows, R]
  float* head_pre = nullptr;                    // [rows, n_hc] hc_head's pre (V4)
  float* router = nullptr;                      // [rows, n_experts]
  int32_t* route_ids = nullptr;                 // [rows, top_k]
  float* route_w = nullptr;                     // [rows, top_k]
  int32_t* tokens = nullptr;                    // [rows] the Markov chain's drafts (row i * B + b)
  float *conf = nullptr, *prob = nullptr;       // [rows]
  int32_t* meta = nullptr;                      // draft metadata (device), see gpu_dspark.cc
  int32_t* meta_host = nullptr;                 // pinned
  int64_t meta_ints = 0;
  float* out_host = nullptr;                    // pinned: tokens, confidences, probabilities [3 * rows]
  // kFp8: activation scratch for max(max_batch_tokens, rows) rows of the widest projection
  // input (main_proj's n_taps * D and the stages'), per 1 x fp8_weight_block.
  ActScratch a;
  void* moe_ws = nullptr;                       // grouped MoE workspace (fp8 or f32) for `rows` rows
  // CUDA graphs of a draft's device work (cuda_graphs): key (bucket of sequences, with the
  // device probabilities), captured on first use (gpu_dspark.cc).
  std::map<std::pair<int64_t, bool>, cuda::Graph> graphs;
};

// Prefix pieces' link to the model's stream (gpu_prefix_state.cc): pieces hold it weakly
// and free their memory on it while the model lives, synchronously after.
struct GpuPrefixArena;
// A byte range of one sequence's state in the model's pools (gpu_prefix_state.cc).
struct GpuStateRange {
  uint8_t* at = nullptr;
  int64_t bytes = 0;
};

struct GpuModel::Impl {
  // host == nullptr: dummy weights from seed.
  Impl(ModelConfig config, const ModelWeights* host, uint64_t seed, const GpuModelOptions& options);
  ~Impl();

  ModelConfig cfg;
  GpuModelOptions opt;
  cuda::DeviceContext ctx;
  std::vector<cuda::DeviceBuffer> owned;
  std::vector<std::pair<float*, int64_t>> state_pools;  // (pointer, floats)
  // Paged state (runtime/gpu_state_plan.h): pools with their host block tables, each layer's
  // caches, the per-forward slot lists of paged attention and the entry staging rows.
  GpuStatePlan plan;
  KvBlockPool win_pool;
  std::map<int64_t, KvBlockPool> cmp_pools;  // by compress ratio
  std::vector<GpuCachePool> cache_pools;
  int32_t* win_idx = nullptr;               // [T, W] window slots per row
  std::map<int64_t, int32_t*> all_idx;      // ratio -> [T, max_context / ratio] (HCA lists)
  std::map<int64_t, int32_t*> all_n;        // ratio -> [T]
  int32_t *sel_idx = nullptr, *sel_n = nullptr;  // [T, index_topk], [T] (CSA lists)
  float *ent_stage = nullptr, *idx_stage = nullptr;  // [T, d], [T, d_I] emitted entries by row
  // paged_attention_cuda's split-K workspace (small batches), sized at construction for
  // max_batch_tokens rows and every layer's key lists; nullptr with batch_invariant (split-K
  // is not batch invariant) or when no call can split.
  void* attn_ws = nullptr;
  int64_t attn_ws_bytes = 0;
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
  // The shortest length truncate may give each sequence: max over its forwards of (length at
  // the forward's end - max_rollback); new_sequence / set_sequence_length / import_prefix set
  // it to the length. trim_blocks keeps the window from (length - W + 1 - max_rollback) at
  // each forward's end, so after a forward, a truncation and a shorter forward the window
  // below the older bound is gone: a per-call "at most max_rollback back" is not enough.
  std::vector<int64_t> rollback_floor;
  // Activations [T, ...].
  float *X = nullptr, *X2 = nullptr, *u = nullptr, *x = nullptr, *y = nullptr;
  float *pre = nullptr, *post = nullptr, *comb = nullptr, *mix_scratch = nullptr;
  float *q_r = nullptr, *q = nullptr, *kv = nullptr, *o = nullptr, *og = nullptr, *zg = nullptr,
        *zz = nullptr;
  float *ca = nullptr, *cz = nullptr;  // [T, 2 * max(d, d_I)]
  float *qi = nullptr, *gi = nullptr, *scores = nullptr;
  int64_t score_stride = 0;  // max_context / the smallest ratio of a scoring layer
  // The top-k of the layer being scored (states[l].sel / n_sel while its indexer runs; read by
  // indexer_choices).
  int32_t *sel = nullptr, *n_sel = nullptr;
  // Single-pass mHC (cfg.traits.single_pass_mhc, MODEL_SPEC §C.3): the attention site's
  // `pre` of this layer (pre), the FFN site's (pre_ffn), the one the next attention site
  // collapses with (pre_mix: starts as e_0 = pre_e0, copied in each forward; then the
  // previous layer's FFN pre) [T, n_hc].
  float *pre_ffn = nullptr, *pre_mix = nullptr;
  const float* pre_e0 = nullptr;
  // V4.1 index keys: the compressor's pre-RoPE latents by row [T, d] and their keys [T, d_I].
  float *latent_stage = nullptr, *key_stage = nullptr;
  // V4.1 candidate blocks (plan.candidate_source): the source's mask [T, cand_max_blocks]
  // (read by plan.candidates_from layers in the same forward) and its scratch.
  int64_t cand_max_blocks = 0;
  uint8_t* cand_mask = nullptr;
  float* cand_block_max = nullptr;
  int32_t *cand_n_blocks = nullptr, *cand_picked = nullptr, *cand_n_picked = nullptr;
  // Engram (V4.1, MODEL_SPEC §C.8; plan.engram): one GpuEngram per engram layer (null
  // elsewhere), applied to the streams before that layer; the n-gram history of the forward's
  // rows [T, engram_ngram] built on the device from the tokens and a per-sequence ring of
  // recent token ids [S, engram_ring_len] (runtime/engram_history.h).
  std::vector<std::unique_ptr<GpuEngram>> engram;
  int64_t engram_ngram = 0, engram_ring_len = 0;
  int32_t *engram_ring = nullptr, *engram_hist = nullptr;
  float *router = nullptr, *route_w = nullptr;
  int32_t* route_ids = nullptr;
  // force_decisions (test instrumentation, gpu_decisions.cc): per layer, device tables
  // [max_context, top_k] / [max_context, index_topk] (null for a layer without that choice)
  // in one allocation made on the first call; `forcing` while a trace is replayed.
  std::vector<int32_t*> forced_experts, forced_picks;
  int32_t* forced_mem = nullptr;
  bool forcing = false;
  DecisionTrace* recording = nullptr;  // record_decisions
  // The routing of MoE layer `layer` into route_ids / route_w: route_cuda, or the trace's
  // experts when replaying that layer; recorded when recording (score-routed layers).
  void route(int64_t layer);
  // After the indexer top-k of `layer` (sel / n_sel): replaces it from the trace when
  // replaying, records it when recording.
  void indexer_choices(int64_t layer);
  void record_rows(int64_t layer, const int32_t* rows_dev, int64_t width, bool experts);
  float *xs = nullptr, *eg = nullptr, *ev = nullptr, *ys = nullptr, *sg = nullptr, *sv = nullptr,
        *ysh = nullptr;
  int64_t moe_rows_cap = 0;  // rows of xs / eg / ev / ys (routed slots + per-expert padding)
  // kGrouped: moe_experts_fp8_cuda's (kFp8) or moe_experts_f32_cuda's (kF32) workspace
  // (sized for max_batch_tokens), or moe_experts_w4a8_cuda's (expert_format kW4a8, sized for
  // w4a8_rows: forwards of more rows run it over pieces of w4a8_rows), and the rows routed to
  // each expert per layer and piece [L, expert_count_pieces, E] (copied from the workspace
  // after each call, read by work() on demand). xs / eg / ev / ys / moe_* are only allocated
  // for kPerExpert.
  bool grouped_moe = false;
  void* moe_ws = nullptr;
  int64_t w4a8_rows = 0, w4a8_act_block = 0;  // kW4a8: rows per kernel call; 128 V4, 32 V4.1
  int64_t expert_count_pieces = 1;
  GpuExpertBytes expert_bytes;  // the backbone's routed experts on the device
  int32_t* expert_counts = nullptr;
  int32_t* expert_counts_host = nullptr;
  bool expert_work_pending = false;
  float *Xo = nullptr, *h = nullptr, *head_pre = nullptr, *logits = nullptr;
  // FP8 activation scratch (kFp8 only): the block input (shared by its projections), q_r
  // (shared by wq_b and the indexer's wq_b), a general one, and the grouped MoE rows
  // (row-major scales, then per-expert block-major segments).
  ActScratch a_in, a_r, a_gen;
  uint8_t* og_q = nullptr;  // one output group's FP8 codes [T, H*d/G]
  uint8_t* moe_q = nullptr;
  float *moe_s_rm = nullptr, *moe_s_seg = nullptr;
  // Metadata: int32 sections on the device (one buffer at a fixed address: graphs read it),
  // filled each forward by async copies from a ring of pinned host staging slots. A slot
  // holds the row metadata (meta_ints()) and then the block-table columns the forward
  // uploads (KvBlockPool::upload packs them there; staging_table_ints = all pools'
  // table_ints(), the most one upload can need). The event of a slot is recorded after the
  // copies of the forward that filled it; a forward takes the next slot and waits (host)
  // only if that slot's event has not completed, counting such waits in host_waits.
  //
  // Why kStagingSlots = 3 never blocks the engine: CudaRunner::launch enqueues forward n only
  // once step n-2 has been collected (at most two launched steps are uncollected), and
  // collect() waited for step n-2's end event, recorded after forward n-2's uploads. Slot
  // n % R was last filled by forward n - R <= n - 2 for any R >= 2, so its copies have run:
  // cudaEventQuery finds the event complete. forward() reads its logits (syncs the stream),
  // so it never blocks the next one either. The third slot is slack for callers that keep
  // two forwards in flight while building a third (forward_device without reading between,
  // e.g. a benchmark loop that syncs every other step). A host that runs further ahead
  // blocks on the oldest slot: correct, and counted.
  static constexpr int kStagingSlots = 3;
  struct StagingSlot {
    int32_t* host = nullptr;  // pinned: meta_ints() + staging_table_ints int32
    cuda::Event uploaded;     // after the copies from `host` of the forward that filled it
    bool pending = false;     // recorded and not yet seen complete
  };
  int32_t* meta = nullptr;
  StagingSlot staging[kStagingSlots];
  int64_t staging_table_ints = 0;
  int64_t n_staged = 0;    // forwards that took a slot (the next takes n_staged % R)
  int64_t host_waits = 0;  // slots taken while their last upload was still running
  std::map<int64_t, int> emit_section;  // compress ratio -> section index
  // Paged: per ratio, the section holding each row's compressed-pool slot of the entry it
  // emits (-1 when it emits none).
  std::map<int64_t, int> cmp_slot_section;
  std::map<int64_t, int64_t> emit_counts;  // this forward: emitting rows per ratio
  int n_sections = 0;
  // MoE metadata: perm_rows [cap], slot_of [T*k] int32, perm_w [cap] fp32, seg_row0 [cap],
  // seg_m [cap] int32.
  int32_t* moe_meta = nullptr;
  int32_t* moe_meta_host = nullptr;
  int32_t* route_ids_host = nullptr;
  float* route_w_host = nullptr;

  // CUDA graphs (gpu_graphs.cc): decode and verification steps padded to a key (L, b): b a
  // bucket of opt.graph_buckets (chunks), L the tokens per chunk (1: decode), b * L rows;
  // padding rows live in the state slot scratch_slot (= max_sequences; the pools have one
  // extra slot when cuda_graphs is on).
  struct GraphKey {
    int64_t length = 0;  // L: tokens of the longest chunk (1: a decode step)
    int64_t chunks = 0;  // b: the bucket of chunks; 0: the forward runs eagerly
    int64_t rows() const { return length * chunks; }
    bool operator<(const GraphKey& o) const {
      return length != o.length ? length < o.length : chunks < o.chunks;
    }
  };
  int64_t scratch_slot = -1;
  std::map<GraphKey, cuda::Graph> graphs;  // key -> captured forward
  std::map<GraphKey, GpuWork> graph_work;  // key -> work of the captured body
  GpuGraphStats graph_stats;
  bool graphs_on = false;  // opt.cuda_graphs, switched by set_cuda_graphs

  // Per forward.
  int64_t n_rows = 0, n_out = 0;
  std::vector<std::pair<int64_t, int64_t>> chunk_spans;  // (start position, length)
  std::vector<int32_t> tokens_host;
  GpuWork work;
  bool profiling = false;
  std::vector<cuda::Event> prof;  // 4 per layer: attention start/end, MoE start/end
  // 4 per layer: indexer start/end, core attention start/end (recorded when profiling).
  std::vector<cuda::Event> prof_parts;
  void mark_part(int64_t layer, int i) {
    if (profiling) prof_parts[4 * layer + i].record(ctx.stream());
  }

  bool fp8() const { return opt.weight_format == WeightFormat::kFp8; }
  bool w4a8() const { return opt.expert_format == ExpertFormat::kW4a8; }
  const int32_t* sec(int s) const { return meta + static_cast<int64_t>(s) * opt.max_batch_tokens; }
  const int32_t* counts() const { return sec(n_sections); }
  int64_t meta_ints() const {
    return n_sections * opt.max_batch_tokens + kEmitCounts + (n_sections - kNumFixedSections);
  }
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
  void upload_fp8(const float* host, int64_t n, int64_t k, uint8_t* q, float* s);
  void fill_fp8(uint8_t* q, float* s, int64_t count, int64_t n, int64_t k, float std);
  // The routed experts' matrix [n, k] of every expert in one allocation (host: one tensor per
  // expert, or empty for random values with std); returns per-expert views, and the stack
  // in *stack (kFp8: q, s; kF32: f).
  // ckpt (kFp8, may be null): experts it holds quantised are uploaded from there
  // (layer, matrix name w) instead of from host.
  std::vector<DeviceLinear> expert_stack(const std::vector<const Tensor*>& host, int64_t n_experts,
                                         int64_t n, int64_t k, float std, MoeStack* stack,
                                         CheckpointExperts* ckpt = nullptr, int64_t layer = 0,
                                         const char* w = "");
  // expert_format kW4a8 (gpu_model.cc): the matrix [n, k] (checkpoint name w) of every
  // routed expert of `layer` in moe_w4a8.h's device layout, codes [E, n, kp/2] to *codes and
  // scales [E, n, kp/32] to *scales: the checkpoint's FP4 codes and UE8M0 scales as stored
  // (host[e] a streamed placeholder: GpuWeightStream::upload_w4a8, a row range at a time
  // through its staging; else ckpt->fp4, packed per expert), or, for dummy weights (host
  // empty), random codes with one power-of-two scale per matrix for a value spread of about
  // std.
  void expert_stack_w4a8(const std::vector<const Tensor*>& host, int64_t n_experts, int64_t n,
                         int64_t k, float std, CheckpointExperts* ckpt, int64_t layer,
                         const char* w, const uint8_t** codes, const uint8_t** scales);
  // Resolves opt.expert_format (kAuto; the requirements of kW4a8, refused by name) from the
  // weights' source: host weights streamed (`streamed`), with a checkpoint (`ckpt`) or neither;
  // null hw: dummy weights.
  void resolve_expert_format(const ModelWeights* hw, GpuWeightStream* streamed,
                             CheckpointExperts* ckpt);

  // y = x · W^T with the work accounting; lin_q reuses an already quantised input (kFp8) or
  // reads x_f32 (kF32).
  void lin(const DeviceLinear& w, const float* x_in, int64_t m, float* y_out,
           ActScratch scratch);
  void lin_in(const DeviceLinear& w, const float* x_in, ActScratch quantised, int64_t m,
              float* y_out);

  void attention_block(int64_t layer, const float* x_in, float* out);
  void plain_attention(int64_t layer, int64_t ratio);  // q, kv -> o (fp32 per-sequence state)
  void paged_attention(int64_t layer, int64_t ratio);  // q -> o (paged caches)
  // Row stride of the compressed-pool slot list paged attention reads on `layer` (0: none).
  int64_t paged_cmp_max_indices(int64_t layer) const;
  void output_projection(int64_t layer, float* out);   // o -> out
  // Index queries, scores over the key owner's entries (restricted to the candidate
  // source's blocks when plan.candidates_from), candidate blocks (plan.candidate_source) and
  // the top-k into states[layer].sel; paged: the selection's slots.
  void run_indexer(int64_t layer, const float* x_in);
  // V4.1 index keys of a key owner from the latents its compressor just emitted.
  void emit_index_keys(int64_t layer);
  // entries == nullptr: the emitted entries go to the staging rows (ent_stage / idx_stage)
  // and from there into the paged cache (paged path). latent_out: the pre-RoPE latents by
  // row (V4.1 index-key owners).
  void run_compressor(const GpuCompressorW& w, int64_t ratio, int64_t width, float* ring_a,
                      float* ring_z, float* entries, int64_t max_entries, const float* x_in,
                      bool indexer, float* latent_out = nullptr);
  // Paged state: allocation at construction; the blocks positions [max(0, start - W + 1),
  // end) and compressed entries [0, end / m) of a sequence need (host tables); freeing what a
  // sequence of n_tokens no longer needs (n_tokens < 0: everything); the table upload (before a forward, outside any
  // graph); the window / HCA slot lists of a forward (device only: inside the graph).
  void alloc_paged_state();
  void reserve_blocks(int64_t seq, int64_t start, int64_t end);
  void trim_blocks(int64_t seq, int64_t n_tokens);
  // Packs the changed block-table columns into `staging` (staging_table_ints) and enqueues
  // their copies.
  void upload_tables(int32_t* staging);
  void build_paged_lists();
  void clear_caches();
  void randomize_caches(uint64_t seed);
  void moe_block(int64_t layer, const float* x_in, float* out);
  // kPerExpert (the oracle of kGrouped, for tests): reads the routing back to the host, so
  // it synchronises once per MoE layer and cannot run inside a CUDA graph.
  void moe_experts_per_expert(int64_t layer, const float* x_in);
  // kGrouped, either format: moe_experts_fp8_cuda / moe_experts_f32_cuda, or
  // moe_experts_w4a8_cuda under expert_format kW4a8; no host sync.
  void moe_experts_grouped(int64_t layer, const float* x_in, float* out);
  MoeExpertsShape moe_shape(int64_t n_tokens) const;
  // The router of the backbone's score-routed layers (MODEL_SPEC §A.8, §C.9: gate
  // temperature, the normalisation's epsilon and when it normalises), as moe_shape() in
  // model/block_parts.cc.
  RouterParams router_params() const;
  // Adds the routed experts' weight bytes and experts_used from expert_counts (kGrouped;
  // synchronises once after a forward).
  void finish_expert_work();
  void count_attention_work();
  // The next staging slot for a forward, after its previous upload has run (waits only if
  // it has not, counting host_waits); the caller records slot.uploaded after its copies.
  StagingSlot& take_staging_slot();
  void forward_device(std::span<const GpuChunk> chunks, const int32_t* samples, void* start_event);
  // The graph key a forward runs as (chunks 0: eager): graphs on, not profiling, every chunk
  // one token (L = 1, a decode step) or every chunk of 2+ tokens with all its logits and the
  // longest L <= max_rollback + 1 (a verification step), and a bucket b >= the chunks with
  // b * L <= max_batch_tokens and max_out_rows.
  GraphKey graph_key(std::span<const GpuChunk> chunks) const;
  void enqueue_forward();
  void run_graph(GraphKey key);
  // The bucket a graph call of n items (chunks, draft sequences) of rows_each rows runs as:
  // the smallest of opt.graph_buckets >= n, when it fits max_rows rows; 0 (eager) otherwise.
  int64_t graph_bucket(int64_t n, int64_t rows_each, int64_t max_rows) const;
  // One graph call (forwards and DSpark drafts, gpu_graphs.cc): `found` (the key's graph, or
  // null) is replayed; else `enqueue` runs eagerly, then the same sequence is captured into
  // *captured (logged as `what`, timed into graph_stats.capture_ms, counted in
  // graph_stats.captured). A failed capture is logged and turns graphs off (kEager: the eager
  // run stands). The caller keeps a captured graph under its key.
  enum class GraphRun { kReplayed, kCaptured, kEager };
  GraphRun replay_or_capture(const cuda::Graph* found, cuda::Graph* captured, const std::string& what,
                             const std::function<void()>& enqueue);

  // Prefix caching (gpu_prefix_state.cc): the arena is made on the first export. The byte
  // ranges of sequence `seq`'s state that positions [begin, end) appended (compressed
  // entries and index keys of the layers owning them) and that it keeps per position at n
  // tokens (window entries, compressor rings, MTP ring and streams, Engram token ring); the
  // paged ones through the sequence's block tables (its columns must hold blocks).
  std::shared_ptr<GpuPrefixArena> prefix_arena;
  std::vector<GpuStateRange> appended_ranges(int64_t seq, int64_t begin, int64_t end) const;
  std::vector<GpuStateRange> boundary_ranges(int64_t seq, int64_t n) const;

  // MTP-1 (gpu_mtp.cc; null when GpuModelOptions::mtp is off). init_mtp: weights (host mtp.0,
  // or random for dummy weights), state and scratch, at construction. mtp_write_context: inside
  // enqueue_forward after the last layer (X = the final streams), graph-safe: every row at
  // position pos >= 1 writes the MTP key of pos - 1 (its streams and its token), then the
  // chunks' last streams are kept. mtp_draft_step: one chained draft step over b rows.
  std::unique_ptr<GpuMtp> mtp;

  // DSpark (gpu_dspark.cc; null when GpuModelOptions::dspark is off). init_dspark: weights
  // (host DSpark tensors, or random for dummy weights), rings and scratch. dspark_tap: inside
  // enqueue_forward before layer l's mixes (after Engram; after_block false) and after its FFN
  // site (after_block true), the tap's stream mean of every row when l is a target layer and
  // after_block is the family's tap point (ModelTraits::dspark_taps_block_output: V4 after the
  // block, V4.1 entering it). dspark_write_context: after the last layer, every row's context
  // K=V per stage into its ring slot (graph-safe). dspark_draft: GpuModel::draft.
  std::unique_ptr<GpuDspark> dspark;
  void init_dspark(const ModelWeights* host);
  void dspark_tap(int64_t layer, bool after_block, const float* X);
  void dspark_write_context();
  // The device work of a draft of b sequences (rows i * b + j, metadata uploaded), through the
  // Markov head and the confidences (and the probabilities when `prob`): graph-safe.
  void dspark_draft_enqueue(int64_t b, bool prob);
  std::vector<DraftBlock> dspark_draft(std::span<const int64_t> sequences, std::span<const int32_t> next,
                                       int64_t n_drafts, std::vector<std::vector<float>>* probabilities);
  // A drafter block's weights (the MTP block, a DSpark stage): ratio-0 attention and a
  // score-routed MoE of n_experts experts with a bias (host b, or random when null).
  GpuLayerW drafter_block(const DsparkStageWeights* b, int64_t n_experts);
  void init_mtp(const ModelWeights* host);
  void mtp_write_context();
  void mtp_input(int64_t n, const int32_t* tokens_dev, const float* streams_in, float* Z);
  void mtp_draft_step(int64_t b, const int32_t* step_meta);
  // One chained step's device work (graph-safe): mtp_draft_step, the draft's probability when
  // `prob`, and the step's output streams copied to the next step's input.
  void mtp_draft_enqueue(int64_t b, const int32_t* step_meta, bool prob);
};

}  // namespace deepinfer
