// Replay kernels of runtime/forced_decisions.h. One thread per row: test instrumentation,
// a few hundred rows at most.
#include <cmath>

#include "cuda/cuda_check.h"
#include "runtime/forced_decisions.h"

namespace deepinfer {
namespace {

__device__ __forceinline__ float softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

__global__ void replay_routes_kernel(const int32_t* table, const int32_t* positions, int64_t n_rows,
                                     const float* logits, int64_t n_experts, int64_t k,
                                     float routed_scale, int32_t* ids, float* weights) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n_rows) return;
  const int32_t* want = table + static_cast<int64_t>(positions[r]) * k;
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    if (want[j] >= 0 && want[j] < n_experts) sum += sqrtf(softplus(logits[r * n_experts + want[j]]));
  }
  for (int64_t j = 0; j < k; ++j) {
    const bool ok = want[j] >= 0 && want[j] < n_experts;
    ids[r * k + j] = ok ? want[j] : -1;
    weights[r * k + j] = ok ? sqrtf(softplus(logits[r * n_experts + want[j]])) / sum * routed_scale
                            : 0.0f;
  }
}

__global__ void replay_picks_kernel(const int32_t* table, const int32_t* positions, int64_t n_rows,
                                    int64_t k, int32_t* selected, int32_t* n_selected) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n_rows) return;
  const int32_t* want = table + static_cast<int64_t>(positions[r]) * k;
  int32_t n = 0;
  for (int64_t j = 0; j < k; ++j) {
    selected[r * k + j] = want[j];
    n += want[j] >= 0 ? 1 : 0;
  }
  n_selected[r] = n;
}

unsigned blocks(int64_t n) { return static_cast<unsigned>((n + 127) / 128); }

}  // namespace

void replay_routes_cuda(cudaStream_t s, const int32_t* table, const int32_t* positions,
                        int64_t n_rows, const float* logits, int64_t n_experts, int64_t k,
                        float routed_scale, int32_t* ids, float* weights) {
  if (n_rows == 0) return;
  replay_routes_kernel<<<blocks(n_rows), 128, 0, s>>>(table, positions, n_rows, logits, n_experts,
                                                      k, routed_scale, ids, weights);
  CUDA_CHECK_LAUNCH();
}

void replay_picks_cuda(cudaStream_t s, const int32_t* table, const int32_t* positions,
                       int64_t n_rows, int64_t k, int32_t* selected, int32_t* n_selected) {
  if (n_rows == 0) return;
  replay_picks_kernel<<<blocks(n_rows), 128, 0, s>>>(table, positions, n_rows, k, selected,
                                                     n_selected);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
