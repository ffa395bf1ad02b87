// CUDA entries of V4.1's candidate blocks (math in candidates.h; MODEL_SPEC §C.7) over a
// batch of query rows whose n(r) = (positions[r] + 1) / ratio visible scores are
// scores[r * score_stride + s]:
//  * candidate_blocks_cuda: the candidate source's blocks per row into
//    mask[r * max_blocks + b] (1 taken, 0 not; every b < max_blocks written): block maxima
//    into block_max [n_rows, max_blocks] (the newest block +inf), the top n_pick of them by
//    topk_rows_cuda into picked [n_rows, n_pick] / n_picked [n_rows], then the mask (blocks
//    whose max is -inf left out). block_max, n_blocks, picked, n_picked are scratch.
//  * candidate_restrict_cuda: a consumer's scores outside the mask become -inf
//    (scores[r, s] for s < n(r) with mask[r, s / block] == 0; blocks past max_blocks count
//    as not taken).
//  * drop_unscored_picks_cuda: removes from each row's top-k list (selected [n_rows, k],
//    ascending, n_selected [n_rows]) the entries whose score is -inf, keeping the order, so
//    a consumer attends only candidate entries (the CPU drops them the same way).
// fp32 scores; device pointers; run on `stream`; no allocation or sync; graph capturable
// (every launch is sized by n_rows and the construction-time strides).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

struct CandidateBlocksParams {
  const float* scores = nullptr;
  int64_t score_stride = 0, n_rows = 0;
  const int32_t* positions = nullptr;
  int64_t ratio = 1;
  int64_t block = 0;   // candidate_block_size
  int64_t n_pick = 0;  // candidate_topk_blocks
  int64_t max_blocks = 0;  // row stride of block_max and mask: >= ceil(max n(r) / block)
  float* block_max = nullptr;
  int32_t* n_blocks = nullptr;
  int32_t* picked = nullptr;
  int32_t* n_picked = nullptr;
  uint8_t* mask = nullptr;
};

void candidate_blocks_cuda(cudaStream_t stream, const CandidateBlocksParams& p);

void candidate_restrict_cuda(cudaStream_t stream, float* scores, int64_t score_stride,
                             int64_t n_rows, const int32_t* positions, int64_t ratio,
                             const uint8_t* mask, int64_t max_blocks, int64_t block);

void drop_unscored_picks_cuda(cudaStream_t stream, const float* scores, int64_t score_stride,
                              int64_t n_rows, int32_t* selected, int32_t* n_selected, int64_t k);

}  // namespace deepinfer
