// Launching a kernel whose CTAs form thread-block clusters (sm_90): cudaLaunchKernelEx with the
// cluster-dimension attribute, shared by the kernels that reduce over a cluster (the FP8 gemv's
// and tensor-core GEMM's K splits, the W4A8 MoE's kFast split). CUDA code only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cuda/cuda_check.h"

namespace deepinfer::cuda {

// kernel<<<grid, block, smem, stream>>>(args...) with clusters of `cluster` CTAs (each
// dimension of grid a multiple of cluster's; at most 8 CTAs for a portable cluster).
template <typename... KernelArgs, typename... Args>
void launch_clustered(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, dim3 cluster, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster.x;
  attr.val.clusterDim.y = cluster.y;
  attr.val.clusterDim.z = cluster.z;
  config.attrs = &attr;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace deepinfer::cuda
