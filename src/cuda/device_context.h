// DeviceContext: what a CUDA op needs to run on one device: the stream it is ordered on,
// the cuBLASLt handle, and a cuBLASLt workspace carved once from a DeviceArena.
// Created once per device (per worker thread) at start; ops never allocate.
// Not thread-safe: one context per host thread.
#pragma once

#include <cstddef>

#include "cuda/cublaslt_handle.h"
#include "cuda/device_arena.h"
#include "cuda/stream.h"

namespace deepinfer::cuda {

class DeviceContext {
 public:
  // 32 MiB is what cuBLASLt recommends on Hopper for its fastest kernels.
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  // Uses the current device; creates its own non-blocking stream.
  explicit DeviceContext(size_t workspace_bytes = kDefaultWorkspaceBytes);

  cudaStream_t stream() const { return stream_.get(); }
  cublasLtHandle_t cublaslt() const { return cublaslt_.get(); }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  int device() const { return device_; }
  void synchronize() const { stream_.synchronize(); }

 private:
  int device_ = 0;
  Stream stream_;
  CublasLtHandle cublaslt_;
  DeviceArena arena_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace deepinfer::cuda
