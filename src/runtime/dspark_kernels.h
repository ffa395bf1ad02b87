// Device kernels of the DSpark drafter on the GPU (runtime/gpu_dspark.cc). Device pointers;
// each runs on `s`, never allocates or synchronises; graph capturable (launch sizes from the
// row counts and widths only).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

// The target feature of one tap (MODEL_SPEC §D.1): for every row r < n_rows,
//   taps[r * n_taps * dim + tap * dim + i] = (sum_{j < n_hc} X[r, j, i]) / n_hc
// (summed in stream order, as the CPU model), X [n_rows, n_hc, dim].
void dspark_tap_mean_cuda(cudaStream_t s, const float* X, int64_t n_rows, int64_t n_hc, int64_t dim,
                          int64_t n_taps, int64_t tap, float* taps);

// V4's window entry rounding of the rope dims (official numerics, model/kv_rounding.h): the last
// rope_dim values of every row of x [n_rows, d] rounded to bf16 (to nearest even), in place.
void dspark_round_rope_bf16_cuda(cudaStream_t s, float* x, int64_t n_rows, int64_t d, int64_t rope_dim);

// The Markov head's correction of one draft step (MODEL_SPEC §D.4.3): for every row b < n_rows
// and token v < vocab, logits[b, v] += sum_{k < rank} w2[v, k] * e[b, k]; w2 [vocab, rank],
// e [n_rows, rank], fp32.
void dspark_markov_add_cuda(cudaStream_t s, const float* w2, const float* e, int64_t n_rows, int64_t vocab,
                            int64_t rank, float* logits);

// The confidence logits (MODEL_SPEC §D.4.4): out[r] = w[0:dim] . h[r] + w[dim:dim+rank] . e[r]
// for r < n_rows; h [n_rows, dim], e [n_rows, rank], w [dim + rank], fp32.
void dspark_confidence_cuda(cudaStream_t s, const float* h, const float* e, const float* w, int64_t n_rows,
                            int64_t dim, int64_t rank, float* out);

}  // namespace deepinfer
