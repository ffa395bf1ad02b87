#include "cuda/cublaslt_handle.h"

#include <utility>

#include "cuda/cuda_check.h"

namespace deepinfer::cuda {

CublasLtHandle CublasLtHandle::create() {
  CublasLtHandle h;
  CUBLAS_CHECK(cublasLtCreate(&h.handle_));
  return h;
}

CublasLtHandle::~CublasLtHandle() {
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

CublasLtHandle::CublasLtHandle(CublasLtHandle&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)) {}

CublasLtHandle& CublasLtHandle::operator=(CublasLtHandle&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cublasLtDestroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

}  // namespace deepinfer::cuda
