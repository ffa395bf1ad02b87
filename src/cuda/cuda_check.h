// CUDA_CHECK / CUBLAS_CHECK: evaluate a CUDA runtime or cuBLAS(Lt) call and, on failure,
// throw deepinfer::Error(kDevice) naming the call, the error name and string, and the
// source location. CUDA_CHECK_LAUNCH() checks the last error after a kernel launch.
// Library code never exits: callers catch Error (DESIGN.md §4).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace deepinfer::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);

}  // namespace deepinfer::cuda

#define CUDA_CHECK(call)                                                          \
  do {                                                                            \
    const cudaError_t deepinfer_cuda_err_ = (call);                               \
    if (deepinfer_cuda_err_ != cudaSuccess)                                       \
      ::deepinfer::cuda::throw_cuda_error(deepinfer_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                              \
  do {                                                                                  \
    const cublasStatus_t deepinfer_cublas_st_ = (call);                                 \
    if (deepinfer_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                  \
      ::deepinfer::cuda::throw_cublas_error(deepinfer_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: reports bad launch configurations at once (asynchronous
// faults surface at the next synchronising call).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
