// Per-row slot lists of paged attention (contract in paged_indices.h): one thread per
// (row, list element).
#include <algorithm>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/kv_cache/kv_cache_cuda.h"

namespace deepinfer {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int32_t slot_of(const int32_t* table, int64_t max_blocks, int64_t block_size,
                                           int64_t seq, int64_t e) {
  if (e < 0) return -1;
  return static_cast<int32_t>(static_cast<int64_t>(table[seq * max_blocks + e / block_size]) * block_size +
                              e % block_size);
}

__global__ void __launch_bounds__(kThreads) paged_indices_kernel(PagedIndexParams p, int64_t width) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t r = idx / width, j = idx % width;
  if (r >= p.n_rows) return;
  const int64_t pos = p.positions[r], seq = p.seq[r];
  if (p.window_indices != nullptr && j < p.window) {
    const int64_t e = pos - p.window + 1 + j;
    p.window_indices[r * p.window + j] =
        slot_of(p.window_table, p.window_max_blocks, p.window_block_size, seq, e);
  }
  if (p.cmp_indices != nullptr && j < p.max_cmp) {
    int64_t n = p.selected != nullptr ? p.n_selected[r] : (pos + 1) / p.ratio;
    n = n < p.max_cmp ? n : p.max_cmp;
    int64_t e = -1;
    if (j < n) e = p.selected != nullptr ? p.selected[r * p.max_selected + j] : j;
    p.cmp_indices[r * p.max_cmp + j] = slot_of(p.cmp_table, p.cmp_max_blocks, p.cmp_block_size, seq, e);
    if (j == 0) p.n_cmp[r] = static_cast<int32_t>(n);
  }
}

}  // namespace

void paged_indices_cuda(cudaStream_t stream, const PagedIndexParams& p) {
  if (p.window_indices != nullptr) {
    CHECK(p.window > 0 && p.window_block_size > 0) << "paged indices: window geometry";
  }
  if (p.cmp_indices != nullptr) {
    CHECK(p.ratio > 0 && p.cmp_block_size > 0 && p.max_cmp > 0 && p.n_cmp != nullptr)
        << "paged indices: compressed geometry";
  }
  const int64_t width = std::max(p.window_indices != nullptr ? p.window : 0,
                                 p.cmp_indices != nullptr ? p.max_cmp : 0);
  if (p.n_rows == 0 || width == 0) return;
  const int64_t blocks = (p.n_rows * width + kThreads - 1) / kThreads;
  CHECK_KIND(kUnsupported, blocks < (int64_t{1} << 31)) << "paged indices: too many rows";
  paged_indices_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, width);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
