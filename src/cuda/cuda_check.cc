#include "cuda/cuda_check.h"

#include <sstream>

#include "base/error.h"

namespace deepinfer::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  std::ostringstream msg;
  msg << call << " failed: " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err) << ")";
  throw Error(ErrorKind::kDevice, msg.str(), std::string(file) + ":" + std::to_string(line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  std::ostringstream msg;
  msg << call << " failed: " << cublasLtGetStatusName(status) << " (" << cublasLtGetStatusString(status) << ")";
  throw Error(ErrorKind::kDevice, msg.str(), std::string(file) + ":" + std::to_string(line));
}

}  // namespace deepinfer::cuda
