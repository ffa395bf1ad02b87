// Device kernels of the MTP-1 drafter on the GPU (runtime/gpu_mtp.cc). Device pointers, int32
// row metadata as GpuModel's (gpu_model_impl.h); each runs on `s`, never allocates or
// synchronises; graph capturable (launch sizes from n_rows and widths only).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

// The streams X^L[pos - 1] each row pairs with its own token (MTP position pos - 1):
//   out[r] = X[chunk_row0[r] + pos - 1 - chunk_start[r]]              if pos - 1 >= chunk_start[r]
//          = ring[(slot[r] * ring_len + (pos - 1) % ring_len)]        if 0 <= pos - 1 < chunk_start[r]
//          = 0                                                        if pos == 0
// with pos = positions[r]; rows of `width` floats (n_hc * D).
void mtp_prev_streams_cuda(cudaStream_t s, const float* X, const float* ring, int64_t ring_len,
                           int64_t width, const int32_t* positions, const int32_t* slot,
                           const int32_t* chunk_start, const int32_t* chunk_row0, int64_t n_rows,
                           float* out);

// Z[r, j, :] = e[r, :] + h[r, j, :] for j < n_hc (the MTP block input, MODEL_SPEC §A.9).
void mtp_input_add_cuda(cudaStream_t s, const float* e, const float* h, int64_t n_rows, int64_t n_hc,
                        int64_t dim, float* Z);

// Stores row r of kv [n_rows, d] as the MTP key of position t = positions[r] - shift at
//   ring + (slot[r] * ring_len + t % ring_len) * d
// when t >= 0 and t > chunk_end[r] - 1 - shift - ring_len (only the last ring_len key positions
// of a chunk, so that no two rows of one chunk write one slot). round_rope_bf16: the last
// rope_dim values are rounded to bf16 on the way (official numerics: the window entry's rope
// dims, model/kv_rounding.h; the NoPE dims are rounded by the caller).
void mtp_key_store_cuda(cudaStream_t s, const float* kv, int64_t n_rows, int64_t d, int64_t rope_dim,
                        const int32_t* positions, const int32_t* slot, const int32_t* chunk_end,
                        int64_t shift, bool round_rope_bf16, float* ring, int64_t ring_len);

// out[r] = 1 / sum_t exp(logits[r, t] - max_t logits[r, t]): the softmax probability of the row's
// arg-max token (a greedy draft's own probability), fp32, one block per row.
void mtp_top_probability_cuda(cudaStream_t s, const float* logits, int64_t n_rows, int64_t vocab, float* out);

// out[r] = max(positions[r] - shift, 0) (the RoPE positions of the keys mtp_key_store_cuda
// stores with that shift; rows with no key get position 0 and are not stored).
void mtp_shift_positions_cuda(cudaStream_t s, const int32_t* positions, int64_t n_rows, int32_t shift,
                              int32_t* out);

}  // namespace deepinfer
