#include "cuda/cuda_check.h"

#include <sstream>

#include "base/error.h"

namespace deepinfer::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  std::ostringstream msg;
  msg << file << ":" << line << ": " << call << " failed: " << cudaGetErrorName(err) << " ("
      << cudaGetErrorString(err) << ")";
  throw Error(ErrorKind::kDevice, msg.str());
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  std::ostringstream msg;
  msg << file << ":" << line << ": " << call << " failed: " << cublasLtGetStatusName(status)
      << " (" << cublasLtGetStatusString(status) << ")";
  throw Error(ErrorKind::kDevice, msg.str());
}

}  // namespace deepinfer::cuda
