// V4.1 candidate blocks on the GPU (candidates_cuda.h): block maxima one thread per
// (row, block), the selection by topk_rows_cuda (exact, ties to the lower block as
// topk_indices), the mask one block per row, the restriction one thread per (row, entry),
// the pick compaction one thread per row (k is at most a few thousand).
#include <cmath>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/indexer/candidates_cuda.h"
#include "ops/indexer/indexer_cuda.h"

namespace deepinfer {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t total) {
  const int64_t b = (total + kThreads - 1) / kThreads;
  CHECK_KIND(kUnsupported, b < (int64_t{1} << 31)) << "candidates: problem too large";
  return static_cast<unsigned>(b);
}

__global__ void block_max_kernel(CandidateBlocksParams p) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= p.n_rows * p.max_blocks) return;
  const int64_t r = idx / p.max_blocks, b = idx % p.max_blocks;
  const int64_t n = (p.positions[r] + 1) / p.ratio;
  const int64_t nb = (n + p.block - 1) / p.block;
  if (b == 0) p.n_blocks[r] = static_cast<int32_t>(nb);
  if (b >= nb) return;
  float mx = -INFINITY;
  if (b == nb - 1) {
    mx = INFINITY;  // the newest block is always a candidate
  } else {
    const float* s = p.scores + r * p.score_stride + b * p.block;
    for (int64_t i = 0; i < p.block; ++i) mx = fmaxf(mx, s[i]);
  }
  p.block_max[r * p.max_blocks + b] = mx;
}

__global__ void mask_kernel(CandidateBlocksParams p) {
  const int64_t r = blockIdx.x;
  uint8_t* m = p.mask + r * p.max_blocks;
  for (int64_t b = threadIdx.x; b < p.max_blocks; b += blockDim.x) m[b] = 0;
  __syncthreads();
  const int64_t n = p.n_picked[r];
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const int32_t b = p.picked[r * p.n_pick + j];
    if (p.block_max[r * p.max_blocks + b] != -INFINITY) m[b] = 1;
  }
}

__global__ void restrict_kernel(float* scores, int64_t stride, int64_t n_rows,
                                const int32_t* positions, int64_t ratio, const uint8_t* mask,
                                int64_t max_blocks, int64_t block) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * stride) return;
  const int64_t r = idx / stride, s = idx % stride;
  if (s >= (positions[r] + 1) / ratio) return;
  const int64_t b = s / block;  // past the mask (a caller's max_blocks too small): no candidate
  if (b >= max_blocks || !mask[r * max_blocks + b]) scores[idx] = -INFINITY;
}

__global__ void drop_kernel(const float* scores, int64_t stride, int64_t n_rows, int32_t* selected,
                            int32_t* n_selected, int64_t k) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n_rows) return;
  int32_t* sel = selected + r * k;
  const int64_t n = n_selected[r];
  int64_t kept = 0;
  for (int64_t j = 0; j < n; ++j) {
    const int32_t e = sel[j];
    if (scores[r * stride + e] != -INFINITY) sel[kept++] = e;
  }
  n_selected[r] = static_cast<int32_t>(kept);
}

}  // namespace

void candidate_blocks_cuda(cudaStream_t stream, const CandidateBlocksParams& p) {
  CHECK(p.block > 0 && p.n_pick > 0 && p.ratio > 0 && p.max_blocks > 0)
      << "candidate blocks: block " << p.block << ", n_pick " << p.n_pick << ", ratio "
      << p.ratio << ", max_blocks " << p.max_blocks;
  if (p.n_rows == 0) return;
  block_max_kernel<<<grid_for(p.n_rows * p.max_blocks), kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
  topk_rows_cuda(stream, p.block_max, p.n_rows, p.max_blocks, nullptr, 1, p.n_blocks, p.n_pick,
                 p.picked, p.n_picked);
  mask_kernel<<<static_cast<unsigned>(p.n_rows), kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void candidate_restrict_cuda(cudaStream_t stream, float* scores, int64_t score_stride,
                             int64_t n_rows, const int32_t* positions, int64_t ratio,
                             const uint8_t* mask, int64_t max_blocks, int64_t block) {
  CHECK(block > 0 && ratio > 0 && max_blocks > 0)
      << "candidate restrict: block " << block << ", ratio " << ratio << ", max_blocks "
      << max_blocks;
  if (n_rows * score_stride == 0) return;
  restrict_kernel<<<grid_for(n_rows * score_stride), kThreads, 0, stream>>>(
      scores, score_stride, n_rows, positions, ratio, mask, max_blocks, block);
  CUDA_CHECK_LAUNCH();
}

void drop_unscored_picks_cuda(cudaStream_t stream, const float* scores, int64_t score_stride,
                              int64_t n_rows, int32_t* selected, int32_t* n_selected, int64_t k) {
  CHECK(k > 0) << "drop picks: k " << k;
  if (n_rows == 0) return;
  drop_kernel<<<grid_for(n_rows), kThreads, 0, stream>>>(scores, score_stride, n_rows, selected,
                                                        n_selected, k);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
