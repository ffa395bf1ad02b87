// Routing ids of padding rows -> -1 (contract in moe_rows.h).
#include "runtime/moe_rows.h"

#include "cuda/cuda_check.h"

namespace deepinfer {
namespace {

__global__ void mask_padding_slots_kernel(int32_t* ids, int64_t n_slots, int64_t top_k,
                                          const int32_t* n_real) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n_slots && i / top_k >= *n_real) ids[i] = -1;
}

}  // namespace

void mask_padding_slots_cuda(cudaStream_t stream, int32_t* ids, int64_t n_rows, int64_t top_k,
                             const int32_t* n_real) {
  const int64_t n = n_rows * top_k;
  if (n == 0) return;
  constexpr int kThreads = 256;
  mask_padding_slots_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0,
                              stream>>>(ids, n, top_k, n_real);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
