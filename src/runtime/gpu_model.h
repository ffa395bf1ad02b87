// GpuModel: the DeepSeek-V4 backbone forward on one CUDA device, mirroring Model::forward
// (src/model/model.cc) over a batch of sequence chunks.
//
// Activations and weights are fp32 throughout: fp32 GEMMs through cuBLASLt with
// CUBLAS_COMPUTE_32F (never TF32), fp32 softmaxes. fp32 rather than bf16 because the
// acceptance bar is cosine >= 0.999 per position against fp64 logits, and bf16 activations
// would spend most of that budget before any kernel is wrong; the fast storage formats
// (FP8 weights and KV) are the next step and are not used here yet.
// Numerics (model.h): `reference` = plain fp32 (what transformers computes); `official` adds
// the CPU backend's QAT round trips at the same places (FP8 round trip of the window KV and of
// the main compressed entries, Hadamard + FP4 round trip of the indexer q and entries), with
// the values still stored in fp32.
//
// Memory: everything is allocated in the constructor: weights (uploaded once), activation
// buffers for max_batch_tokens rows, and per-sequence state pools for max_sequences
// sequences of up to max_context tokens (window ring, compressor rings and compressed
// entries per layer). forward() allocates nothing on the device. It synchronises with the
// host once per MoE layer (to read the routing and launch one GEMM per used expert) and at
// the end (logits to the host).
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

struct GpuModelOptions {
  int64_t max_sequences = 4;
  int64_t max_context = 4096;      // tokens per sequence
  int64_t max_batch_tokens = 512;  // rows of one forward
  Numerics numerics = Numerics::kReference;
};

struct GpuChunk {
  int64_t sequence = -1;  // from new_sequence()
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every token of the chunk, else only the last
};

class GpuModel {
 public:
  GpuModel(ModelConfig config, const ModelWeights& weights, const GpuModelOptions& options);
  ~GpuModel();
  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;

  // Loads config.json + weights (any checkpoint form the CPU loader reads) and uploads them.
  static std::unique_ptr<GpuModel> load(const std::string& dir, const GpuModelOptions& options);

  const ModelConfig& config() const;

  // A fresh sequence at position 0; throws Error(kResourceExhausted) when all
  // max_sequences slots are in use.
  int64_t new_sequence();
  void free_sequence(int64_t sequence);
  int64_t n_tokens(int64_t sequence) const;

  // Runs the chunks (each sequence at most once), advancing each sequence. Returns host fp32
  // logits [n_out, V]: for each chunk in order, all its rows (all_logits) or its last row.
  // Validates ids, sequences, the context limit and the batch size before any device work.
  Tensor forward(std::span<const GpuChunk> chunks);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
