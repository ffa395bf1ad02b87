// apply_token_bitmask: a 2-D grid (logit blocks x mask rows), one thread per logit.
#include <algorithm>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/sampling/token_bitmask.h"
#include "ops/sampling/token_bitmask_cuda.h"

namespace deepinfer {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

__global__ void __launch_bounds__(kThreads)
    apply_token_bitmask_kernel(float* logits, const uint32_t* mask, const int32_t* rows,
                               int64_t row0, int64_t vocab, int64_t n_words) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= vocab) return;
  const int64_t r = row0 + blockIdx.y;
  const uint32_t word = mask[r * n_words + (t >> 5)];
  if ((word >> (t & 31)) & 1u) return;
  const int64_t dst = rows != nullptr ? static_cast<int64_t>(rows[r]) : r;
  logits[dst * vocab + t] = -INFINITY;
}

}  // namespace

void apply_token_bitmask_cuda(cudaStream_t stream, float* logits, const uint32_t* mask,
                              const int32_t* rows, int64_t n_rows, int64_t vocab) {
  CHECK(n_rows >= 0 && vocab >= 0) << "apply_token_bitmask: " << n_rows << " rows of " << vocab;
  if (n_rows == 0 || vocab == 0) return;
  const int64_t n_words = token_bitmask_words(vocab);
  const unsigned blocks_x = static_cast<unsigned>((vocab + kThreads - 1) / kThreads);
  for (int64_t row0 = 0; row0 < n_rows; row0 += kMaxGridY) {
    const unsigned blocks_y = static_cast<unsigned>(std::min(kMaxGridY, n_rows - row0));
    apply_token_bitmask_kernel<<<dim3(blocks_x, blocks_y), kThreads, 0, stream>>>(
        logits, mask, rows, row0, vocab, n_words);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace deepinfer
