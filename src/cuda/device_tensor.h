// Device tensors: Tensor (tensor/tensor.h) with Device::kCUDA, owning cudaMalloc'ed memory
// through a shared deleter, and copies between host and device.
//
// The *_async copies are ordered on `stream` and return before the copy finishes: the host
// memory must stay alive (and, for d2h, must not be read) until the stream is synchronised.
// The plain copies synchronise before returning. Pageable host memory is fine (slower than
// pinned). All sizes in bytes; shapes and dtypes must match exactly.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "tensor/tensor.h"

namespace deepinfer::cuda {

// Uninitialised device tensor on the current device.
Tensor device_empty(DType dtype, Shape shape);
// Device tensor with every byte set to `byte` (e.g. 0xff poisons bf16/f32 with NaN).
Tensor device_filled(DType dtype, Shape shape, unsigned char byte, cudaStream_t stream = nullptr);

// Host tensor -> new device tensor (synchronous).
Tensor to_device(const Tensor& host, cudaStream_t stream = nullptr);
// Device tensor -> new host tensor (synchronous).
Tensor to_host(const Tensor& device, cudaStream_t stream = nullptr);

// Copies between existing tensors of equal dtype and shape (synchronous).
void copy_to_device(const Tensor& host, Tensor& device, cudaStream_t stream = nullptr);
void copy_to_host(const Tensor& device, Tensor& host, cudaStream_t stream = nullptr);

// Raw copies.
void copy_h2d_async(void* dst, const void* src, size_t bytes, cudaStream_t stream);
void copy_d2h_async(void* dst, const void* src, size_t bytes, cudaStream_t stream);
void copy_d2d_async(void* dst, const void* src, size_t bytes, cudaStream_t stream);
void copy_h2d(void* dst, const void* src, size_t bytes, cudaStream_t stream = nullptr);
void copy_d2h(void* dst, const void* src, size_t bytes, cudaStream_t stream = nullptr);

}  // namespace deepinfer::cuda
