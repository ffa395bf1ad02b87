// FastModel: the DeepSeek-V4 backbone forward on one CUDA device with the weights in the
// formats the fast path needs, for benchmarking at V4-Flash shapes (bench_gpu_forward).
//
// Weights: every projection (attention, compressors, indexer wq_b, shared and routed experts,
// head) is FP8 e4m3 block-scaled (128x128 blocks, fp32 scales in the CUDA layout of
// ops/gemm/gemm.h); the small tensors (norms, mHC mixes, router gate, indexer weights_proj,
// ape, sinks, embedding) stay fp32. Activations stay fp32 between ops (the attention,
// indexer, compressor, mHC and MoE kernels are the fp32 ones of src/ops); each projection
// quantises its input per 1x128 block (act_quant_cuda) and runs gemm_fp8_block_cuda with
// fp32 output. The state pools (window ring, compressor rings and entries, indexer entries)
// are fp32, as GpuModel's.
//
// Routed experts: rows grouped by expert after reading the routing back to the host (one
// sync per MoE layer, as GpuModel), one activation quantisation for all grouped rows, then
// per used expert the w1 / w3 / w2 FP8 GEMMs over M_e rows: M_e = count when count < 4 (our
// SIMT kernel), else count rounded up to 4 (cuBLASLt; padding rows carry weight 0).
//
// Weights come either from host fp32 ModelWeights (quantised to FP8 here; the host tensors
// are replaced by their FP8 round trip so a CPU Model built from them computes with the same
// weights: the correctness check) or from a hash generator on the device (nothing uploaded;
// the benchmark at full size). Numerics: reference (no QAT round trips). Hash-routed layers
// are not supported (tid2eid); configs must have none.
//
// Not thread-safe. All device memory is allocated in the constructor.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "io/model_config.h"
#include "model/weights.h"
#include "tensor/tensor.h"

namespace deepinfer {

struct FastModelOptions {
  int64_t max_sequences = 4;
  int64_t max_context = 4096;      // tokens per sequence (state pool size)
  int64_t max_batch_tokens = 512;  // rows of one forward
  int64_t max_out_rows = 4;        // logits rows of one forward
};

// One chunk of a forward: tokens at positions [start, start + size) of state slot `slot`.
// The caller tracks positions (the benchmark re-runs the same step at a fixed position).
struct FastChunk {
  int64_t slot = 0;
  int64_t start = 0;
  std::span<const int32_t> tokens;
  bool all_logits = false;
};

// Bytes and FLOPs the last forward had to read / compute (the roofline inputs).
struct FastWork {
  double weight_bytes = 0;   // dense projections + fp32 small tensors + routed experts used + head
  double state_bytes = 0;    // window / compressed / indexer entries read
  double gemm_flops = 0;     // 2 * rows * N * K over all projections (experts: real rows only)
  double attn_flops = 0;     // QK + PV of sparse attention, indexer scores
  int64_t experts_used = 0;  // distinct (layer, expert) pairs
};

// Device time of the last profiled forward by part (CUDA events around each block).
struct FastProfile {
  double attention_ms = 0;  // attention blocks (projections, compressors, indexer, attention)
  double moe_ms = 0;        // MoE blocks (router, host routing sync, experts, shared expert)
};

class FastModel {
 public:
  // host_weights != nullptr: quantise them (in place: replaced by the FP8 round trip) and
  // upload; nullptr: generate random weights on the device from `seed`.
  FastModel(const ModelConfig& config, ModelWeights* host_weights, const FastModelOptions& options,
            uint64_t seed);
  ~FastModel();
  FastModel(const FastModel&) = delete;
  FastModel& operator=(const FastModel&) = delete;

  // Fills every state pool (all slots) with random values (std ~1), standing in for a
  // prefilled context of any length up to max_context.
  void randomize_state(uint64_t seed);
  // Zeroes every state pool (a fresh sequence in every slot).
  void clear_state();

  // Enqueues the forward on the model's stream (synchronises once per MoE layer to read the
  // routing). Logits of the output rows stay on the device; logits() copies them.
  void forward(std::span<const FastChunk> chunks);
  Tensor logits();  // [n_out, V] of the last forward
  const FastWork& work() const;
  // When on, forward() records events around every block; profile() reads them (syncs).
  void set_profiling(bool on);
  FastProfile profile();
  void synchronize();
  void* stream();  // cudaStream_t
  double device_weight_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
