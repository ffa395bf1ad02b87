// CublasLtHandle: an owned cuBLASLt handle (move-only). cuBLASLt handles are cheap to
// share: one per device per process is enough; calls with one handle from several host
// threads are allowed by cuBLASLt as long as each call has its own workspace.
#pragma once

#include <cublasLt.h>

namespace deepinfer::cuda {

class CublasLtHandle {
 public:
  CublasLtHandle() = default;
  static CublasLtHandle create();
  ~CublasLtHandle();
  CublasLtHandle(CublasLtHandle&& other) noexcept;
  CublasLtHandle& operator=(CublasLtHandle&& other) noexcept;
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;

  cublasLtHandle_t get() const { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

}  // namespace deepinfer::cuda
