#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/embedding/embedding_cuda.h"

namespace deepinfer {
namespace {

__global__ void embedding_kernel(const float* table, const int32_t* tokens, int64_t n_rows,
                                 int64_t dim, int64_t n_copies, float* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * n_copies * dim) return;
  const int64_t c = idx % dim, r = idx / (n_copies * dim);
  out[idx] = table[static_cast<int64_t>(tokens[r]) * dim + c];
}

}  // namespace

void embedding_cuda(cudaStream_t stream, const float* table, const int32_t* tokens, int64_t n_rows,
                    int64_t dim, int64_t n_copies, float* out) {
  const int64_t total = n_rows * n_copies * dim;
  if (total == 0) return;
  const int64_t blocks = (total + 255) / 256;
  CHECK_KIND(kUnsupported, blocks < (int64_t{1} << 31)) << "embedding: problem too large";
  embedding_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(table, tokens, n_rows, dim,
                                                                     n_copies, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
