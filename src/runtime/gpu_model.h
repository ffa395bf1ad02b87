// GpuModel: the DeepSeek-V4 backbone forward on one CUDA device, mirroring Model::forward
// (src/model/model.cc) over a batch of sequence chunks. The one GPU model: the runtime uses
// it with checkpoint weights, the benchmark (bench/gpu_forward) with device-generated ones.
//
// Weight formats (GpuModelOptions::weight_format):
//  * kF32: every tensor fp32; fp32 GEMMs through cuBLASLt with CUBLAS_COMPUTE_32F (never
//    TF32). fp32 rather than bf16 because the acceptance bar is cosine >= 0.999 per position
//    against fp64 logits, and bf16 activations would spend most of that budget.
//  * kFp8: every projection (attention wq_a / wq_b / wkv / wo_a / wo_b, compressor wkv /
//    wgate, indexer wq_b, routed and shared experts, the head) FP8 e4m3 with 128x128 block
//    scales (scale = block amax / 448, fp32; see device_linear.h), the input of each
//    projection quantised per 1x128 block before its GEMM. The small tensors (embedding,
//    norms, mHC mixes, router gate and bias, indexer weights_proj, ape, sinks) stay fp32 and
//    go through fp32 GEMMs. Host weights are quantised at construction (fp8_round_trip()
//    gives a CPU Model the same weights).
// Activations, softmaxes and state pools are fp32 in both formats.
// Numerics (model.h): `reference` = plain fp32 (what transformers computes); `official` adds
// the CPU backend's QAT round trips at the same places (FP8 round trip of the window KV and of
// the main compressed entries, Hadamard + FP4 round trip of the indexer q and entries), with
// the values still stored in fp32.
//
// batch_invariant: every GEMM goes through a kernel whose per-row result does not depend on
// the number of rows (device_linear.h says why: the rowwise fp32 kernel and the SIMT FP8
// kernel, never cuBLASLt, whose algorithm is chosen per M). The other kernels are per row
// already: RMSNorm (one warp / block per row, choice by width only), RoPE, mHC (kSplitK:
// fixed 256-wide chunks summed in a fixed order; collapse / expand elementwise), sparse
// attention (one block per (head, row), fixed merge order), indexer scores (per row) and
// top-k (one block per row), compressor emission (per emitting row), routing (one warp per
// row), SwiGLU / gather / combine (elementwise; combine sums a row's k experts in selection
// order), act_quant (per row). So a sequence's logits are bitwise the same alone or in any
// batch. Off (default): cuBLASLt wherever it has an algorithm (faster).
//
// Memory: everything is allocated in the constructor: weights, activation buffers for
// max_batch_tokens rows, and per-sequence state pools for max_sequences sequences of up to
// max_context tokens (window ring, compressor rings and compressed entries per layer).
// forward() allocates nothing on the device. It synchronises with the host once per MoE layer
// (to read the routing and launch one GEMM per used expert) and, in forward(), at the end
// (logits to the host); forward_device() leaves the logits on the device.
//
// Thread-safety: one thread at a time (forward mutates the state pools and its buffers).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "io/model_config.h"
#include "model/model.h"
#include "model/weights.h"
#include "tensor/tensor.h"

namespace deepinfer {

enum class WeightFormat { kF32, kFp8 };

struct GpuModelOptions {
  int64_t max_sequences = 4;
  int64_t max_context = 4096;      // tokens per sequence
  int64_t max_batch_tokens = 512;  // rows of one forward
  int64_t max_out_rows = 0;        // logits rows of one forward; 0 = max_batch_tokens
  Numerics numerics = Numerics::kReference;
  WeightFormat weight_format = WeightFormat::kF32;
  bool batch_invariant = false;  // see the header comment
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

  // Loads config.json + weights (any checkpoint form the CPU loader reads) and uploads them.
  static std::unique_ptr<GpuModel> load(const std::string& dir, const GpuModelOptions& options);

  // Replaces every tensor that kFp8 stores as FP8 by its FP8 block round trip (the values
  // kFp8 computes with, up to one fp32 ulp of the scale), so a CPU Model built from the
  // result uses the same weights as a kFp8 GpuModel.
  static void fp8_round_trip(const ModelConfig& config, ModelWeights& weights);

  const ModelConfig& config() const;
  const GpuModelOptions& options() const;

  // A fresh sequence at position 0; throws Error(kResourceExhausted) when all
  // max_sequences slots are in use.
  int64_t new_sequence();
  void free_sequence(int64_t sequence);
  int64_t n_tokens(int64_t sequence) const;
  // Sets a live sequence's length (0 <= n <= max_context) without computing anything: the
  // state pools keep whatever they hold (e.g. randomize_state()'s values), standing in for
  // a context of n tokens. For benchmarks and synthetic contexts.
  void set_sequence_length(int64_t sequence, int64_t n);

  // Runs the chunks (each sequence at most once), advancing each sequence. Returns host fp32
  // logits [n_out, V]: for each chunk in order, all its rows (all_logits) or its last row.
  // Validates ids, sequences, the context limit and the batch size before any device work.
  Tensor forward(std::span<const GpuChunk> chunks);
  // Same, but leaves the logits on the device (device_logits(), n_logits_rows()) and does not
  // wait for the device at the end (it still syncs once per MoE layer).
  void forward_device(std::span<const GpuChunk> chunks);
  const float* device_logits() const;  // [n_logits_rows(), V] of the last forward
  int64_t n_logits_rows() const;
  Tensor copy_logits();  // host copy of the last forward's logits (synchronises)

  void* stream();  // the cudaStream_t every forward is ordered on
  void synchronize();

  // Fills every state pool (all slots) with random values (std ~1), standing in for
  // prefilled contexts of any length up to max_context; clear_state() zeroes them.
  void randomize_state(uint64_t seed);
  void clear_state();

  // Work accounting of the last forward (always on; host arithmetic only).
  const GpuWork& work() const;
  // When on, forward records CUDA events around every block; profile() reads them (syncs).
  void set_profiling(bool on);
  GpuProfile profile();
  // Device bytes of the weights (embedding excluded: only gathered rows are read).
  double device_weight_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
