#include "cuda/device_tensor.h"

#include <memory>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"

namespace deepinfer::cuda {
namespace {

void check_same(const Tensor& a, const Tensor& b, const char* what) {
  ICHECK(a.dtype() == b.dtype() && a.shape() == b.shape())
      << what << ": " << a.str() << " vs " << b.str();
}

}  // namespace

Tensor device_empty(DType dtype, Shape shape) {
  for (int64_t d : shape) CHECK(d >= 0) << "negative dimension in shape " << shape_str(shape);
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  // One byte minimum so that an empty tensor still has a distinct non-null pointer.
  void* ptr = device_malloc(bytes == 0 ? 1 : bytes);
  std::shared_ptr<void> owner(ptr, [](void* p) { device_free(p); });
  return Tensor::wrap(ptr, dtype, std::move(shape), std::move(owner), Device::kCUDA);
}

Tensor device_filled(DType dtype, Shape shape, unsigned char byte, cudaStream_t stream) {
  Tensor t = device_empty(dtype, std::move(shape));
  if (t.nbytes() > 0) {
    CUDA_CHECK(cudaMemsetAsync(t.raw(), byte, t.nbytes(), stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return t;
}

void copy_h2d_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

void copy_d2h_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
}

void copy_d2d_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void copy_h2d(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  copy_h2d_async(dst, src, bytes, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_d2h(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  copy_d2h_async(dst, src, bytes, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_to_device(const Tensor& host, Tensor& device, cudaStream_t stream) {
  ICHECK(host.device() == Device::kCPU && device.device() == Device::kCUDA)
      << "copy_to_device: wrong devices";
  check_same(host, device, "copy_to_device");
  copy_h2d(device.raw(), host.raw(), host.nbytes(), stream);
}

void copy_to_host(const Tensor& device, Tensor& host, cudaStream_t stream) {
  ICHECK(host.device() == Device::kCPU && device.device() == Device::kCUDA)
      << "copy_to_host: wrong devices";
  check_same(host, device, "copy_to_host");
  copy_d2h(host.raw(), device.raw(), device.nbytes(), stream);
}

Tensor to_device(const Tensor& host, cudaStream_t stream) {
  Tensor device = device_empty(host.dtype(), host.shape());
  copy_to_device(host, device, stream);
  return device;
}

Tensor to_host(const Tensor& device, cudaStream_t stream) {
  Tensor host = Tensor::empty(device.dtype(), device.shape());
  copy_to_host(device, host, stream);
  return host;
}

}  // namespace deepinfer::cuda
