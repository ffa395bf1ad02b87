#include "base/error.h"
#include "cuda/cuda_check.h"
#include "runtime/ring_store.h"

namespace deepinfer {
namespace {

__global__ void ring_store_kernel(const float* src, int64_t n_rows, int64_t width,
                                  const int32_t* positions, const int32_t* slot,
                                  const int32_t* chunk_end, float* ring, int64_t ring_len) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * width) return;
  const int64_t r = idx / width, c = idx % width;
  const int64_t p = positions[r];
  if (p < static_cast<int64_t>(chunk_end[r]) - ring_len) return;
  ring[(static_cast<int64_t>(slot[r]) * ring_len + p % ring_len) * width + c] = src[idx];
}

}  // namespace

void ring_store_cuda(cudaStream_t stream, const float* src, int64_t n_rows, int64_t width,
                     const int32_t* positions, const int32_t* slot, const int32_t* chunk_end,
                     float* ring, int64_t ring_len) {
  const int64_t total = n_rows * width;
  if (total == 0) return;
  const int64_t blocks = (total + 255) / 256;
  CHECK_KIND(kUnsupported, blocks < (int64_t{1} << 31)) << "ring_store: problem too large";
  ring_store_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      src, n_rows, width, positions, slot, chunk_end, ring, ring_len);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
