#include "cuda/device_context.h"

#include "cuda/cuda_check.h"

namespace deepinfer::cuda {

DeviceContext::DeviceContext(size_t workspace_bytes)
    : stream_(Stream::create()),
      cublaslt_(CublasLtHandle::create()),
      arena_(workspace_bytes),
      workspace_bytes_(workspace_bytes) {
  CUDA_CHECK(cudaGetDevice(&device_));
  workspace_ = workspace_bytes_ > 0 ? arena_.allocate(workspace_bytes_) : nullptr;
}

}  // namespace deepinfer::cuda
