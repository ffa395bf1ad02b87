// fp4_roundtrip_rows_cuda (fp4_rows_cuda.h): one thread per block of values.
#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/quant/fp4_rows_cuda.h"
#include "ops/quant/qat_device.cuh"

namespace deepinfer {
namespace {

using namespace qat_device;

__global__ void fp4_rows_kernel(float* x, int64_t n_vectors, int64_t n, int64_t block) {
  const int64_t n_blocks = (n + block - 1) / block;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_vectors * n_blocks) return;
  const int64_t start = (idx % n_blocks) * block;
  float* v = x + (idx / n_blocks) * n + start;
  const int64_t len = min(block, n - start);
  float amax = 6.0f * ldexpf(1.0f, -126);
  for (int64_t i = 0; i < len; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const float scale = pow2_scale(amax, kE2M1MaxF);
  for (int64_t i = 0; i < len; ++i) {
    const float q = fminf(kE2M1MaxF, fmaxf(-kE2M1MaxF, v[i] / scale));
    v[i] = round_e2m1(q) * scale;
  }
}

}  // namespace

void fp4_roundtrip_rows_cuda(cudaStream_t stream, float* x, int64_t n_vectors, int64_t n,
                             int64_t block) {
  CHECK(block > 0 && n > 0) << "fp4 roundtrip: n " << n << ", block " << block;
  const int64_t total = n_vectors * ((n + block - 1) / block);
  if (total == 0) return;
  CHECK_KIND(kUnsupported, total / 128 < (int64_t{1} << 31)) << "fp4 roundtrip: too many values";
  fp4_rows_kernel<<<static_cast<unsigned>((total + 127) / 128), 128, 0, stream>>>(x, n_vectors, n,
                                                                                 block);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
