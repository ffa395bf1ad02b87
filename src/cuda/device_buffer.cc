#include "cuda/device_buffer.h"

#include <cuda_runtime.h>

#include <utility>

#include "base/error.h"
#include "base/logging.h"
#include "cuda/cuda_check.h"

namespace deepinfer::cuda {

void* device_malloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error state
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    THROW(kResourceExhausted) << "cudaMalloc of " << bytes << " bytes failed: out of device memory ("
                              << free_bytes << " of " << total_bytes << " bytes free)";
  }
  CUDA_CHECK(err);
  return ptr;
}

void device_free(void* ptr) noexcept {
  if (ptr == nullptr) return;
  const cudaError_t err = cudaFree(ptr);
  if (err != cudaSuccess && err != cudaErrorCudartUnloading) {
    LOG(ERROR) << "cudaFree failed: " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err)
               << ")";
  }
}

DeviceBuffer::DeviceBuffer(size_t bytes) : data_(device_malloc(bytes)), bytes_(bytes) {}

DeviceBuffer::~DeviceBuffer() { device_free(data_); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    device_free(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void* DeviceBuffer::release() {
  bytes_ = 0;
  return std::exchange(data_, nullptr);
}

}  // namespace deepinfer::cuda
