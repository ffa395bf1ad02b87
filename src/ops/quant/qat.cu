// QAT round trips on the GPU: one thread per block of values (fp8 rows), one thread block
// per vector (Hadamard butterflies in shared memory, then the fp4 blocks).
#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/quant/qat_cuda.h"
#include "ops/quant/qat_device.cuh"

namespace deepinfer {
namespace {

using namespace qat_device;

__global__ void fp8_rows_kernel(float* x, int64_t n_rows, int64_t row_stride, int64_t n,
                                int64_t block) {
  const int64_t n_blocks = (n + block - 1) / block;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * n_blocks) return;
  float* v = x + (idx / n_blocks) * row_stride + (idx % n_blocks) * block;
  const int64_t len = min(block, n - (idx % n_blocks) * block);
  float amax = 1e-4f;
  for (int64_t i = 0; i < len; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const float scale = pow2_scale(amax, kE4M3MaxF);
  for (int64_t i = 0; i < len; ++i) {
    const float q = fminf(kE4M3MaxF, fmaxf(-kE4M3MaxF, v[i] / scale));
    v[i] = round_e4m3(q) * scale;
  }
}

constexpr int kThreads = 256;
constexpr int kMaxN = 4096;

__global__ void __launch_bounds__(kThreads) hadamard_fp4_kernel(float* x, int64_t n, int64_t block) {
  __shared__ float s[kMaxN];
  float* v = x + static_cast<int64_t>(blockIdx.x) * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s[i] = v[i];
  __syncthreads();
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t t = threadIdx.x; t < n / 2; t += blockDim.x) {
      const int64_t j = (t / h) * 2 * h + t % h;
      const float a = s[j], b = s[j + h];
      s[j] = a + b;
      s[j + h] = a - b;
    }
    __syncthreads();
  }
  const float hscale = 1.0f / sqrtf(static_cast<float>(n));
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s[i] = s[i] * hscale;
  __syncthreads();
  const float floor_amax = 6.0f * ldexpf(1.0f, -126);
  for (int64_t b = threadIdx.x; b * block < n; b += blockDim.x) {
    const int64_t start = b * block, len = min(block, n - start);
    float amax = floor_amax;
    for (int64_t i = 0; i < len; ++i) amax = fmaxf(amax, fabsf(s[start + i]));
    const float scale = pow2_scale(amax, kE2M1MaxF);
    for (int64_t i = 0; i < len; ++i) {
      const float q = fminf(kE2M1MaxF, fmaxf(-kE2M1MaxF, s[start + i] / scale));
      v[start + i] = round_e2m1(q) * scale;
    }
  }
}

}  // namespace

void fp8_roundtrip_rows_cuda(cudaStream_t stream, float* x, int64_t n_rows, int64_t row_stride,
                             int64_t n, int64_t block) {
  CHECK(block > 0 && n >= 0 && n <= row_stride) << "fp8 roundtrip: n " << n << ", block " << block;
  const int64_t total = n_rows * ((n + block - 1) / block);
  if (total == 0) return;
  fp8_rows_kernel<<<static_cast<unsigned>((total + 127) / 128), 128, 0, stream>>>(x, n_rows, row_stride,
                                                                                 n, block);
  CUDA_CHECK_LAUNCH();
}

void hadamard_fp4_rows_cuda(cudaStream_t stream, float* x, int64_t n_vectors, int64_t n,
                            int64_t block) {
  CHECK(n > 0 && (n & (n - 1)) == 0 && block > 0) << "Hadamard size must be a power of two, got " << n;
  CHECK_KIND(kUnsupported, n <= kMaxN) << "hadamard: n " << n << " (at most " << kMaxN << ")";
  if (n_vectors == 0) return;
  CHECK_KIND(kUnsupported, n_vectors < (int64_t{1} << 31)) << "hadamard: too many vectors";
  hadamard_fp4_kernel<<<static_cast<unsigned>(n_vectors), kThreads, 0, stream>>>(x, n, block);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
