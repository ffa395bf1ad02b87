// GpuModel: the DeepSeek-V4 / V4.1 backbone forward on one CUDA device, mirroring
// Model::forward (src/model/model.cc) over a batch of sequence chunks. The one GPU model: the
// runtime uses it with checkpoint weights, the benchmark (bench/gpu_forward) with
// device-generated ones. What each layer owns and reads is its LayerPlan (io/layer_plan.h),
// what differs per family the config's traits, as on the CPU.
//
// DeepSeek-V4.1: single-pass mHC, KV / index sources with reuse and reindex layers reading the
// source's compressed entries and index keys in place, ratio-2 / ratio-1 compressors, index keys
// from the pre-RoPE latents, candidate blocks, Engram (runtime/gpu_engram.h, before the plan's
// engram layers), routing with gate_temp; kF32 or kFp8 weights (32x32 blocks, 1x32 activation
// blocks: fp8_weight_block; routed experts in expert_format w4a8, FP4 as stored), reference and
// official numerics, paged_kv = false or kv_cache_dtype kBf16 / kFp8 (the 528-B window,
// 288-B compressed and 68-B index-key formats, gpu_state_plan.h choose_cache_formats). FP8
// routed experts, V4.1's DSpark with kFp8 weights and Engram with dummy weights are refused at
// construction (kUnsupported, naming the option). force_decisions replays V4's routing
// weights only (no gate_temp / eps).
//
// Weight formats (GpuModelOptions::weight_format):
//  * kF32: every tensor fp32; fp32 GEMMs through cuBLASLt with CUBLAS_COMPUTE_32F (never
//    TF32). fp32 rather than bf16 because the acceptance bar is cosine >= 0.999 per position
//    against fp64 logits, and bf16 activations would spend most of that budget.
//  * kFp8: every projection (attention wq_a / wq_b / wkv / wo_a / wo_b, compressor wkv /
//    wgate, indexer wq_b, routed and shared experts, the head) FP8 e4m3 with 128x128 block
//    scales, UE8M0 / power-of-two (2^ceil(log2(block amax / 448)) held in fp32; see
//    device_linear.h, fp8_weight_quant.h), the input of each projection quantised per 1x128
//    block before its GEMM. The small tensors (embedding, norms, mHC mixes, router gate and
//    bias, indexer weights_proj, ape, sinks) stay fp32 and go through fp32 GEMMs. Host
//    weights are quantised at construction (fp8_round_trip() gives a CPU Model the same
//    weights; values that a checkpoint stores as block FP8 with UE8M0 scales, which io
//    dequantises, come back bit-exactly), except routed experts that the checkpoint named by
//    expert_checkpoint stores quantised: their FP4 codes are converted exactly to block FP8
//    (power-of-two scales), block-FP8 ones taken as stored (runtime/expert_loader.h), so the
//    device holds exactly the checkpoint's values (fp8_round_trip(..., false) for the CPU).
//    That is expert_format kFp8; kW4a8 (below) keeps FP4 experts as FP4.
// Routed experts of the backbone (GpuModelOptions::expert_format; the MTP / DSpark drafters'
// experts always follow weight_format):
//  * kFp8: weight_format's own form (the FP8 blocks above, fp32 under kF32), through
//    moe_experts_fp8_cuda / moe_experts_f32_cuda: the plain path kW4a8 is compared with;
//  * kW4a8: the checkpoint's FP4 codes and UE8M0 per-32 scales as stored, repacked into
//    ops/moe/moe_w4a8.h's layout on the host one expert (streamed: one row range) at a time,
//    and moe_experts_w4a8_cuda (dequantised to e4m3 on chip; the per-32 weight scale times the
//    activation scale applied per 32-wide K step). Activations e4m3 per 1 x 128 block (V4) or
//    1 x 32 (V4.1), the family's official recipe (MODEL_SPEC §B.4). Device bytes per weight
//    0.5 + 1/32 (K padded to 128), half of kFp8's 1 + 4/128^2. Forwards of more rows than
//    kW4a8MaxTokens run the kernel over consecutive pieces of that many rows (each token's
//    output is independent of the others', so this is exact). Needs sm_90, kGrouped, hidden
//    and intermediate sizes multiples of 32 and FP4 routed experts in the checkpoint (dummy
//    weights: random FP4 codes).
// Activations and softmaxes are fp32 in both formats. State: the window and compressed K=V
// entries live in paged caches in kv_cache_dtype (FP8 584-byte MODEL1 entries or bf16),
// indexer keys in the FP8 index cache (kFp8) or fp32 (kBf16); compressor rings fp32. With
// paged_kv = false everything is fp32 per sequence (the oracle path).
// Numerics (model.h): `reference` = plain fp32 (what transformers computes); `official` adds
// the CPU backend's QAT round trips at the same places (FP8 round trip of the window KV and of
// the main compressed entries, Hadamard + FP4 round trip of the indexer q and entries), with
// the values still stored in fp32.
//
// Attention kernels (paged): forwards with n_rows * ceil(heads / 64) >= 264 (prefill) run on
// bf16 tensor cores (paged_attention_mma_cuda: q and the softmax weights as hi + lo bf16
// terms, fp32 accumulation, so fp32-level results); smaller ones (decode) and batch_invariant
// use the fp32 SIMT kernel (with split-K at small grids). The FP8-cache indexer scores of
// forwards of 32+ rows likewise (indexer_paged_scores_mma_cuda). mma_attention = false: the
// SIMT kernels always.
//
// batch_invariant: every GEMM goes through a kernel whose per-row result does not depend on
// the number of rows (device_linear.h says why: the rowwise fp32 kernel and the SIMT FP8
// kernel, never cuBLASLt, whose algorithm is chosen per M). The other kernels are per row
// already: RMSNorm (one warp / block per row, choice by width only), RoPE, mHC (kSplitK:
// fixed 256-wide chunks summed in a fixed order; collapse / expand elementwise), sparse
// attention (one block per (head, row), fixed merge order), paged attention (one warp per
// (row, head) over the row's own slot list in a fixed tile order; the key cache store and
// slot lists are per row, and which physical blocks hold a sequence changes no value), indexer
// scores (per row, dense or paged) and
// top-k (one block per row), compressor emission (per emitting row), routing (one warp per
// row), SwiGLU / gather / combine (elementwise; combine sums a row's k experts in selection
// order), act_quant (per row). So a sequence's logits are bitwise the same alone or in any
// batch. Off (default): cuBLASLt wherever it has an algorithm (faster), and paged attention
// splits the key lists of small batches over more blocks (split-K with a fixed-order combine;
// the split count depends on the row count, kv_cache_cuda.h), so rows are not batch invariant.
//
// Memory: everything is allocated in the constructor: weights, activation buffers for
// max_batch_tokens rows, and state pools for max_sequences sequences of up to max_context
// tokens (sizes: plan_gpu_state in runtime/gpu_state_plan.h). Paged blocks are taken from the
// shared free lists as sequences grow, window blocks that slid out of every future query's
// window are returned after each forward, and free_sequence returns the rest. Block tables
// are uploaded (async, from pinned memory, changed columns only) before each forward's first
// kernel; the per-layer launches read them and per-row slot metadata from device memory only.
// forward() allocates nothing on the device. With moe_impl kGrouped (the default in both
// formats) it does not synchronise with the device except, in forward(), at the end (logits
// to the host); forward_device() leaves the logits on the device. kPerExpert synchronises
// once per MoE layer (to read the routing and launch one GEMM per used expert). A forward's
// host-to-device inputs (row metadata, changed block-table columns) are staged in one of three
// pinned slots used in turn; a forward waits (host) only when its slot's previous upload,
// three forwards back, has not run yet, which the engine's overlapped step loop never meets
// (gpu_model_impl.h says why); host_waits() counts the waits that blocked.
//
// CUDA graphs (cuda_graphs; needs kGrouped, either format): a forward, not profiled, of n
// chunks that are all one token (a decode step, L = 1; all_logits of one token is that row)
// or that are a verification step (every chunk of 2+ tokens all_logits, the longest L <=
// max_rollback + 1; shorter chunks, one-token ones included, may be mixed in), with a bucket
// b >= n in graph_buckets and b * L <= max_batch_tokens, max_out_rows, runs as the graph of
// key (L, b): b * L rows, the N real ones first, rows N.. b*L-1 padding (token 0 at
// position 0 of a state slot of its own, scratch_slot = max_sequences, so the state pools
// have max_sequences + 1 slots; each padding row is a chunk of its own: it sees only
// itself, emits no compressed entry, routes to no expert, and its logits row is past the
// real ones). Inside a real chunk attention is causal by the rows' positions (slot lists and
// compressor rows from the metadata), exactly as in the eager forward. The key's graph is
// captured on its first use (that forward runs eagerly, then the capture; the capture time
// is logged and in graph_stats()) and replayed afterwards. What changes per step lives in
// device buffers at fixed addresses: the row metadata and the counts after it (real rows,
// emitting rows per compress ratio), uploaded by one cudaMemcpyAsync before the launch.
// Launches whose size depended on per-step host values and how each is made graph-safe:
//  * row count n_rows: every launch of the step uses the key's rows b * L (GEMMs and their
//    activation quantisation, norms, RoPE, mHC, ring stores, compressor ape, indexer scores
//    (grid max_entries x b, per-row key counts from the positions) and top-k (b blocks),
//    paged slot lists / stores (rows with slot -1 store nothing), attention (heads x b;
//    paged: head groups x b x splits, splits a function of b and the shapes),
//    output-projection copies, head): padding rows are computed and ignored;
//  * compressor emission (gpu_attention.cc): grid = b, the kernel reads the emitting-row
//    count of its ratio from the device (CompressorEmitParams::n_emit_device);
//  * MoE: kGrouped sizes every launch from b * L (moe_grouped_cuda.h); padding rows get expert
//    id -1 from the device count of real rows (runtime/moe_rows.h);
//  * logits rows n_out: b * L (the real rows are the first N; n_logits_rows() returns N);
//  * the work accounting is host arithmetic outside the graph (experts used: work()).
// Batch invariance carries over: with batch_invariant every kernel is per row, so a graph
// (or verification) step's real rows are bitwise those of the eager unpadded forward, and so
// is the state it leaves; without it, cuBLASLt
// (chosen per M) may differ between n and b rows, as between any two batch sizes.
//
// Thread-safety: one thread at a time (forward mutates the state pools and its buffers).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "model/decision_trace.h"
#include "model/model.h"
#include "model/weights.h"
#include "ops/kv_cache/kv_cache.h"
#include "runtime/model_runner.h"
#include "tensor/tensor.h"

namespace deepinfer {

enum class WeightFormat { kF32, kFp8 };

class GpuWeightStream;  // runtime/gpu_weight_stream.h

// Routed-expert implementation of the MoE block.
//  * kGrouped: kFp8: moe_experts_fp8_cuda (src/ops/moe/moe_grouped_cuda.h): alignment,
//    grouped FP8 GEMMs over all experts, SwiGLU + quantisation and the combine on the device;
//    kF32: moe_experts_f32_cuda (src/ops/moe/moe_grouped_f32_cuda.h): the same with grouped
//    fp32 GEMMs (CUDA-core FMA chains in ascending K, never TF32). No host synchronisation
//    (graph capturable); batch invariant (a token's output does not depend on the others).
//  * kPerExpert: the plain path, kept as the oracle of kGrouped for tests: the routing is
//    read back to the host (one stream synchronisation per MoE layer, so no CUDA graphs) and
//    one GEMM runs per used expert. Any format.
//  * kAuto: kGrouped (both formats).
enum class MoeImpl { kAuto, kGrouped, kPerExpert };

// Device format of the backbone's routed experts (see "Routed experts" above).
//  * kAuto: kW4a8 when weight_format is kFp8, every routed expert matrix of the checkpoint is
//    stored FP4 (streamed weights, or host weights with expert_checkpoint) and the device is
//    sm_90; otherwise kFp8. options() reports the resolved value.
//  * kFp8: weight_format's own (128x128 block FP8 under kFp8, FP4 converted exactly; fp32
//    under kF32).
//  * kW4a8: FP4 as stored (kUnsupported when a requirement is missing, naming it).
enum class ExpertFormat { kAuto, kFp8, kW4a8 };
const char* expert_format_name(ExpertFormat format);  // "auto", "fp8", "w4a8"
// Throws Error(kInvalidInput) naming the accepted values.
ExpertFormat parse_expert_format(const std::string& name);

// Device bytes of the backbone's routed experts (GpuModel::expert_bytes).
struct GpuExpertBytes {
  int64_t codes = 0;   // FP8 e4m3 codes, FP4 packed codes (kW4a8) or fp32 values (kF32)
  int64_t scales = 0;  // fp32 128x128 block scales (kFp8) or UE8M0 per-32 bytes (kW4a8)
  int64_t total() const { return codes + scales; }
};

struct GpuModelOptions {
  int64_t max_sequences = 4;
  int64_t max_context = 4096;      // tokens per sequence
  int64_t max_batch_tokens = 512;  // rows of one forward
  int64_t max_out_rows = 0;        // logits rows of one forward; 0 = max_batch_tokens
  Numerics numerics = Numerics::kReference;
  WeightFormat weight_format = WeightFormat::kF32;
  bool batch_invariant = false;  // see the header comment
  MoeImpl moe_impl = MoeImpl::kAuto;
  ExpertFormat expert_format = ExpertFormat::kAuto;  // the backbone's routed experts, above
  // CUDA graphs for decode and verification steps (see "CUDA graphs" above); needs kGrouped (kPerExpert
  // reads the routing back to the host inside the forward).
  bool cuda_graphs = false;
  // Buckets of chunks (decode batch sizes); empty = 1, 2, 4, ..., 256. Sorted, deduplicated, capped at
  // min(max_batch_tokens, max_out_rows, max_sequences) at construction.
  std::vector<int64_t> graph_buckets;
  // Format of the window and compressed K=V entries (ops/kv_cache/kv_cache.h; the
  // `--kv-cache-dtype` setting). Unset: kFp8 with official numerics, kBf16 with reference;
  // options() reports the resolved value. kFp8 also puts the indexer keys in the FP8 index
  // cache; kBf16 keeps them fp32 (runtime/gpu_state_plan.h).
  std::optional<KvCacheDtype> kv_cache_dtype;
  // true: paged pools shared by all sequences, addressed through per-sequence block tables
  // (runtime/gpu_state_plan.h, kv_block_pool.h). false: the plain fp32 per-sequence pools
  // (window ring, dense compressed / indexer entries) read by sparse_attention_cuda, kept as
  // the oracle path; kv_cache_dtype is then unused.
  bool paged_kv = true;
  // The paged attention of prefill-size forwards on tensor cores (see "Attention kernels"
  // above). false: always the fp32 SIMT kernel (the benchmark's before/after).
  // set_mma_attention changes it between forwards.
  bool mma_attention = true;
  int64_t kv_block_size = 64;  // entries per page block: a positive multiple of 8
  // Entries per block of the window pool (0: kv_block_size), a multiple of 8; default 8
  // (measured on the H200 2026-12-03: decode steps at V4.1 shapes equal those with 64 within
  // noise, bench/results/gpu-v41-decode-sm90-h200-2026-12-03-1222257.md). A
  // sequence holds the blocks of its last window - 1 + max_rollback positions plus one: at
  // V4.1-Flash (window 128, 40 layers, 528-B entries) blocks of 64 hold 320 slots per layer
  // (6.76 MB per sequence), blocks of 8 hold 152 (3.21 MB; DeepInfer's rings: 134).
  int64_t kv_window_block_size = 8;
  // kFp8 with host weights: a checkpoint (directory or file) whose quantised routed experts
  // are uploaded from their stored codes (runtime/expert_loader.h: FP4 converted exactly to
  // 128x128 block FP8, an inexact one fails the construction naming the tensor; block FP8 as
  // stored) instead of being re-quantised from the host fp32 experts (which are then not
  // read). Experts stored otherwise still come from the host. GpuModel::load sets it to its
  // directory; empty: none. The count of converted experts is logged. Unused with streamed
  // weights (GpuWeightStream converts the stored experts itself, the same way). Under
  // expert_format kW4a8 (any weight_format) the FP4 codes and scales are taken from it as
  // stored (every routed expert must be FP4 there).
  std::string expert_checkpoint;
  // How many positions truncate() may roll a sequence back (speculative verification of up
  // to this many drafts). 0 (default): no rollback, and the state is sized exactly as
  // before. > 0 (paged_kv only): every sequence keeps its last window - 1 + max_rollback
  // window positions between forwards, and the compressor rings hold 2m + max_rollback
  // positions (raw a / z rows by position, so rolled-back positions never overwrite one a
  // later emission still reads); the plan (gpu_state_plan.h) counts both.
  int64_t max_rollback = 0;
  // V4's MTP-1 drafter (MODEL_SPEC §A.9; gpu_mtp.cc): mtp.0 uploaded in weight_format (host
  // weights must have it, ModelWeights::has_mtp; dummy weights: random), its window K=V kept
  // per sequence in W + max_rollback + 1 fp32 slots by position and written for every
  // position inside each forward (from the final streams the forward has; graph-safe), so
  // draft() works after any forward or truncate(). Costs each forward the MTP input
  // projections and the block's K=V projection over its rows.
  bool mtp = false;
  // The DSpark drafter of a V4.1 or V4-Flash-DSpark / 0731 checkpoint (MODEL_SPEC §D;
  // gpu_dspark.cc; kF32 weights, or kFp8 for V4's 128x128 grid: FP8 projections and FP8
  // routed experts, also beside a W4A8 backbone): main_proj / main_norm, the three stages, Markov and
  // confidence heads (V4: and the last stage's hc_head) uploaded (host weights must have them,
  // ModelWeights::has_dspark; dummy weights: random); each stage's context K=V kept per
  // sequence in W + max_rollback + 1 fp32 slots by position and written for every row inside
  // each forward (from the taps: the streams entering the config's target layers, V4.1, or
  // after their blocks, V4; graph-safe), so draft() works after any forward or truncate().
  // Costs each forward the taps, main_proj and one wkv per stage over its rows. At most one of
  // mtp and dspark.
  bool dspark = false;
};

struct GpuChunk {
  int64_t sequence = -1;  // from new_sequence()
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every token of the chunk, else only the last
};

// Bytes and FLOPs the last forward had to read / compute (the roofline inputs).
struct GpuWork {
  double weight_bytes = 0;   // projections + fp32 small tensors + routed experts used + head
  double state_bytes = 0;    // window / compressed / indexer entries read from before the chunk
  double gemm_flops = 0;     // 2 * rows * N * K over all projections (experts: real rows only)
  double attn_flops = 0;     // QK + PV of sparse attention, indexer scores
  int64_t experts_used = 0;  // distinct (layer, expert) pairs
};

// Device time of the last profiled forward by part (CUDA events around each block).
struct GpuProfile {
  double attention_ms = 0;  // attention blocks (projections, compressors, indexer, attention)
  double moe_ms = 0;        // MoE blocks (router, host routing sync, experts, shared expert)
  // Parts of attention_ms: the lightning indexer (q projection, scores, top-k, slot lists;
  // its compressor not included) and the attention proper (sparse / paged attention + sink).
  double indexer_ms = 0;
  double core_attention_ms = 0;
};

// CUDA graph use (GpuModelOptions::cuda_graphs).
struct GpuGraphStats {
  int64_t captured = 0;     // graphs captured so far, forwards' and drafts' (kept for the model's life)
  int64_t replays = 0;      // forwards that replayed a captured graph
  double capture_ms = 0;    // host time spent capturing + instantiating, all graphs
  int64_t last_bucket = 0;  // rows the last forward ran as (0: eager, unpadded)
  int64_t last_length = 0;  // L of the last forward's key (1: decode; 0: eager)
  int64_t verify_captured = 0, verify_replays = 0;  // the same for keys of L >= 2
  // Draft graphs (GpuModel::draft): DSpark one per draft call, MTP one per chained step.
  int64_t draft_captured = 0, draft_replays = 0;
};

class GpuModel {
 public:
  // Uploads host weights (kFp8: quantised on the way; `weights` is not modified).
  GpuModel(ModelConfig config, const ModelWeights& weights, const GpuModelOptions& options);
  // Dummy weights generated on the device from `seed` (nothing uploaded): uniform values with
  // std 1/sqrt(fan_in) for projections, norms ~1, random FP8 codes with a constant block
  // scale for kFp8. Hash-routed layers are not supported here (kUnsupported).
  GpuModel(ModelConfig config, uint64_t seed, const GpuModelOptions& options);
  ~GpuModel();
  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;

  // Streams a checkpoint's tensors to the device as they are taken (runtime/gpu_weight_stream.h:
  // no host fp32 model; routed experts as stored / FP4 converted exactly, whatever
  // expert_checkpoint says). `stream` must outlive the construction only.
  GpuModel(ModelConfig config, const GpuWeightStream& stream, const GpuModelOptions& options);

  // Loads config.json + weights (any checkpoint form the CPU loader reads) and uploads them:
  // DeepSeek-V4 through GpuWeightStream (tensor by tensor), V4.1 through host fp32 weights.
  static std::unique_ptr<GpuModel> load(const std::string& dir, const GpuModelOptions& options);

  // Replaces every tensor that kFp8 stores as FP8 by its FP8 block round trip
  // (quantize_fp8_blocks: exactly the values kFp8 computes with, code * power-of-two scale;
  // values already block FP8 with UE8M0 scales are unchanged), so a CPU Model built from the
  // result uses the same weights as a kFp8 GpuModel. routed_experts = false leaves the routed
  // experts as they are: what a kFp8 model holds when it took them from a checkpoint that
  // stores them quantised (GpuModelOptions::expert_checkpoint: exactly the host values).
  // An MTP block and a DSpark drafter (weights.dspark) are rounded as GpuModelOptions::mtp /
  // dspark upload them (their routed experts always: they are re-quantised from host values).
  static void fp8_round_trip(const ModelConfig& config, ModelWeights& weights,
                             bool routed_experts = true);

  // Host copy of one routed expert matrix as stored on the device (kFp8; synchronises):
  // codes e4m3 [n, k] and the fp32 scales [ceil(n/128), fp8_weight_scale_ld(k)] the FP8
  // GEMMs read (ops/gemm/gemm.h). `w` is "w1", "w3" ([I, D]) or "w2" ([D, I]). For tests.
  struct ExpertFp8Copy {
    Tensor codes;   // F8_E4M3 [n, k]
    Tensor scales;  // F32 [ceil(n/128), ld]
  };
  ExpertFp8Copy download_expert_fp8(int64_t layer, int64_t expert, const std::string& w) const;
  // The same under expert_format kW4a8 (moe_w4a8.h's device layout): codes U8 [n, kp/2] and
  // UE8M0 scales U8 [n, kp/32] (byte counts; the bytes are row-group tiled), kp = k rounded up to 128. For tests.
  struct ExpertW4a8Copy {
    Tensor codes;
    Tensor scales;
  };
  ExpertW4a8Copy download_expert_w4a8(int64_t layer, int64_t expert, const std::string& w) const;
  // Device bytes of the backbone's routed experts (all layers; logged at construction).
  GpuExpertBytes expert_bytes() const;

  const ModelConfig& config() const;
  const GpuModelOptions& options() const;

  // A fresh sequence at position 0; throws Error(kResourceExhausted) when all
  // max_sequences slots are in use.
  int64_t new_sequence();
  void free_sequence(int64_t sequence);
  int64_t n_tokens(int64_t sequence) const;
  // Sets a live sequence's length (0 <= n <= max_context) without computing anything: the
  // state pools keep whatever they hold (e.g. randomize_state()'s values), standing in for
  // a context of n tokens. For benchmarks and synthetic contexts. Paged: the sequence keeps
  // the blocks it holds inside the new context (contents unchanged), frees the others and
  // takes any block the context needs from the free lists (holding whatever it holds; window
  // positions that already slid out are not recovered).
  void set_sequence_length(int64_t sequence, int64_t n);
  // Rolls a live sequence back to its first n_tokens positions (speculative drafts that
  // were rejected), at most options().max_rollback positions back. Exact: every piece of
  // state is kept by position (window pool entries, compressed / indexer entries by entry
  // index, compressor rings of 2m + max_rollback raw rows), so the next forward from
  // n_tokens sees exactly what a sequence that never went past n_tokens sees. Host only (no
  // device work): the freed blocks are reused only by work enqueued later on stream().
  void truncate(int64_t sequence, int64_t n_tokens);

  // MTP-1 drafting (GpuModelOptions::mtp; throws Error(kUnsupported) without it): for each
  // live sequence (committed positions 0..p, p >= 0) and the token next[i] the target chose
  // for p + 1, n_drafts greedy chained drafts as Model::draft (model/mtp.cc): step j at MTP
  // position p + j from (X^L[p], next) for j = 0, else from the MTP block's own output
  // streams and argmax of step j - 1, attending to the committed MTP keys and the chain's.
  // Batched: one small forward of sequences.size() rows per step (eager, synchronises at the
  // end). Returns per sequence tokens [n], logits [n, V] and hidden [n, D] (hc_head output);
  // 1 <= n_drafts <= max(max_rollback + 1, 4). Changes no state a forward or a later draft
  // reads (the chain's keys go to per-sequence chain slots, not the ring).
  // `probabilities` (optional): per sequence, the drafter's softmax probability of each draft
  // token, computed on the device; the logits are then not copied to the host (logits and
  // hidden stay empty: at V4's vocabulary they are most of a draft's cost).
  //
  // DSpark (GpuModelOptions::dspark), as Model::draft (model/dspark.cc): one block
  // [next, noise x (block - 1)] per sequence at positions p + 1.., all sequences' blocks in one
  // pass of sequences.size() * block rows through the three stages (each block position
  // attends to its stage's context keys of positions max(0, p - W + 1)..p and to all block keys,
  // bidirectionally, with the sink), the head, then the Markov head step by step on the device
  // and the confidences. Returns per sequence the first n_drafts (1 <= n_drafts <= block) of
  // tokens, Markov-corrected logits [n, V], hidden [n, D] (the last-site collapse) and
  // confidence [n] (raw c_i, always, also with `probabilities`). One host synchronisation per
  // call (the results' copy); the draft's own keys go to scratch rows, never the rings. With
  // cuda_graphs the pass runs as a bucket b >= sequences.size() of graph_buckets (padding
  // sequences see only their own block), replayed from the graph of (b, probabilities or not).
  std::vector<DraftBlock> draft(std::span<const int64_t> sequences, std::span<const int32_t> next,
                                int64_t n_drafts, std::vector<std::vector<float>>* probabilities = nullptr);
  bool has_mtp() const;
  bool has_dspark() const;
  int64_t dspark_block_size() const;  // 0 without the DSpark drafter
  // Test instrumentation: host copy of stage `stage`'s context key [head_dim] of `position`
  // that a draft of the live sequence would read (synchronises).
  std::vector<float> dspark_key(int64_t sequence, int64_t stage, int64_t position) const;
  // Test instrumentation: host copy of the MTP key [head_dim] of `position` that a draft of
  // the live sequence would read (slot position % (W + max_rollback + 1); synchronises).
  std::vector<float> mtp_key(int64_t sequence, int64_t position) const;

  // Prefix caching (gpu_prefix_state.cc; CudaRunner's ModelRunner::export_prefix /
  // import_prefix). export_prefix: the live sequence's state at its n_tokens as a piece
  // after `parent` (null: from 0; else a piece of this model's layout ending at or before
  // n_tokens, exported from a prefix of the same tokens), copied on stream() into device
  // memory the piece owns (freed, stream-ordered, when the last reference goes): per layer
  // that owns them the compressed entries and index keys positions [begin, end) appended,
  // in the cache format they live in, and whole the state per position at `end` (the window
  // entries a later query or rollback reads, compressor rings, MTP ring and streams, Engram
  // token ring). import_prefix: a new sequence (blocks taken from the pools) holding the end
  // of `chain` (pieces oldest first, each the parent of the next), so its next forward
  // computes what the exporting sequence's would have. Both enqueue device-to-device copies
  // only (no host synchronisation); a piece of another layout (layers, numerics, formats,
  // paging, rollback depth, drafter) is refused naming the difference.
  std::shared_ptr<const PrefixState> export_prefix(int64_t sequence, const PrefixState* parent);
  int64_t import_prefix(std::span<const PrefixState* const> chain);

  // Runs the chunks (each sequence at most once), advancing each sequence. Returns host fp32
  // logits [n_out, V]: for each chunk in order, all its rows (all_logits) or its last row.
  // Validates ids, sequences, the context limit and the batch size before any device work.
  Tensor forward(std::span<const GpuChunk> chunks);
  // Same, but leaves the logits on the device (device_logits(), n_logits_rows()) and does not
  // wait for the device at the end (kPerExpert still syncs once per MoE layer).
  // `samples`: a device int32 array; a chunk token t < 0 (runtime/model_runner.h sample_ref)
  // then stands for samples[-1 - t], read on the device, in stream order, before the first
  // kernel (so the array may be written by work enqueued earlier on stream()). Null: every
  // token must be a vocabulary id.
  // `start_event` (a cudaEvent_t, or null) is recorded on stream() just before the forward's
  // first device operation (after the host built its metadata), for timing device work only.
  void forward_device(std::span<const GpuChunk> chunks, const int32_t* samples = nullptr,
                      void* start_event = nullptr);
  const float* device_logits() const;  // [n_logits_rows(), V] of the last forward
  float* device_logits();  // the same, writable (rewritten by the next forward)
  int64_t n_logits_rows() const;
  Tensor copy_logits();  // host copy of the last forward's logits (synchronises)
  // Forwards so far whose pinned staging slot was still being read by an earlier forward's
  // upload, so that the host waited for the device before building the metadata (see the
  // header comment; 0 in a loop that keeps at most two forwards in flight).
  int64_t host_waits() const;

  // Test instrumentation (model/decision_trace.h): while set, every forward replaces its
  // discrete choices by the trace's, by position: the routed experts of the layers the trace
  // holds (weights recomputed from this forward's router scores, as routing would for those
  // experts) and the indexer picks of ratio-4 layers. Positions the trace does not cover get
  // no expert / no pick. The trace is copied to the device here (synchronises); nullptr stops
  // replaying. Lets a test compare the continuous math of two forwards with the choices of
  // one of them (a near-tied top-k member can otherwise swap under storage rounding noise).
  void force_decisions(const DecisionTrace* trace);
  // Test instrumentation: while set, every forward writes the discrete choices it made (the
  // experts of score-routed layers, the indexer picks) into `trace` at its rows' positions
  // (synchronising after each choice). Eager forwards only. nullptr stops recording.
  void record_decisions(DecisionTrace* trace);

  void* stream();  // the cudaStream_t every forward is ordered on
  void synchronize();

  // Fills every state pool (all slots) with random values (std ~1), standing in for
  // prefilled contexts of any length up to max_context; clear_state() zeroes them.
  void randomize_state(uint64_t seed);
  void clear_state();

  // Work accounting of the last forward (always on; host arithmetic, except that with
  // kGrouped the experts used are read back from the device on the first call after a
  // forward, which synchronises).
  const GpuWork& work() const;
  // When on, forward records CUDA events around every block; profile() reads them (syncs).
  void set_profiling(bool on);
  GpuProfile profile();
  // Device bytes of the weights (embedding excluded: only gathered rows are read).
  double device_weight_bytes() const;
  const GpuGraphStats& graph_stats() const;
  // Turns graph replay off / on again for the following forwards (a model built with
  // cuda_graphs; throws Error otherwise). Off: every forward runs eagerly, unpadded.
  void set_cuda_graphs(bool on);
  void set_mma_attention(bool on);  // GpuModelOptions::mma_attention for the next forwards

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
