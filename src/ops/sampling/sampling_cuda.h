// Token sampling on the GPU, the same rule as the engine's CPU sampler
// (src/engine/sampler.cc, sample_token): greedy (lowest id among equal maxima) when
// temperature == 0 or top_k == 1; otherwise candidates ordered by (logit desc, id asc),
// the first k kept (top_k, 0 = all), probabilities exp((l - max) / T) in double normalised
// over those k, min-p cut (p < min_p * p_max), top-p cut (smallest prefix with cumulative
// p >= top_p), and inverse-CDF sampling with u = uniform(seed, position) * kept mass, u from
// the same counter-based generator (splitmix64 of seed and position).
//
// First version, exact rather than fast: every non-greedy row is fully sorted (CUB
// segmented radix sort, stable, so equal logits stay in id order) and one thread per row
// walks the candidates in double, as the CPU does. Penalties are not applied here (the
// caller applies them to the logits first, as the CPU engine does).
//
// Thread-safety: a SamplingWorkspace belongs to one stream at a time.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_buffer.h"

namespace deepinfer {

struct SampleRowParams {
  float temperature = 1.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  uint64_t seed = 0;
  int64_t position = 0;      // the output position the random number is drawn for
};

// Device scratch for up to max_rows rows of `vocab` logits, allocated once.
class SamplingWorkspace {
 public:
  SamplingWorkspace(int64_t max_rows, int64_t vocab);
  int64_t max_rows() const { return max_rows_; }
  int64_t vocab() const { return vocab_; }

 private:
  friend void sample_cuda(cudaStream_t, const float*, int64_t, int64_t, const SampleRowParams*,
                          SamplingWorkspace&, int32_t*);
  int64_t max_rows_ = 0, vocab_ = 0;
  size_t cub_bytes_ = 0;
  cuda::DeviceBuffer keys_in_, keys_, ids_in_, ids_out_, probs_, offsets_, cub_temp_;
};

// logits [n_rows, vocab] fp32, params [n_rows] (device), tokens [n_rows] int32 (device).
// Runs on `stream`; never allocates or synchronises.
void sample_cuda(cudaStream_t stream, const float* logits, int64_t n_rows, int64_t vocab,
                 const SampleRowParams* params, SamplingWorkspace& ws, int32_t* tokens);

// tokens[r] = the lowest id among the maxima of logits row r ([n_rows, vocab] fp32, device):
// the greedy rule of sample_token (engine/sampler.h) and of sample_cuda's greedy rows (the
// same block reduction), without the workspace. Runs on `s`; never allocates or synchronises;
// graph capturable.
void argmax_rows_cuda(cudaStream_t s, const float* logits, int64_t n_rows, int64_t vocab,
                      int32_t* tokens);

}  // namespace deepinfer
