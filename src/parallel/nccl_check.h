// NCCL_CHECK: evaluate an NCCL call and, unless it returned ncclSuccess, throw
// deepinfer::Error(kDevice) naming the call, ncclGetErrorString and NCCL's last error text.
// Nonblocking communicators (ncclConfig_t.blocking = 0) may return ncclInProgress: use
// NCCL_CHECK_ASYNC there, which accepts it (the completion is polled separately).
#pragma once

#include <nccl.h>

namespace deepinfer::parallel_detail {

[[noreturn]] void throw_nccl_error(ncclResult_t result, const char* call, const char* file,
                                   int line);

}  // namespace deepinfer::parallel_detail

#define NCCL_CHECK(call)                                                                      \
  do {                                                                                        \
    const ncclResult_t deepinfer_nccl_res_ = (call);                                          \
    if (deepinfer_nccl_res_ != ncclSuccess)                                                   \
      ::deepinfer::parallel_detail::throw_nccl_error(deepinfer_nccl_res_, #call, __FILE__,    \
                                                     __LINE__);                               \
  } while (0)

#define NCCL_CHECK_ASYNC(call)                                                                \
  do {                                                                                        \
    const ncclResult_t deepinfer_nccl_res_ = (call);                                          \
    if (deepinfer_nccl_res_ != ncclSuccess && deepinfer_nccl_res_ != ncclInProgress)          \
      ::deepinfer::parallel_detail::throw_nccl_error(deepinfer_nccl_res_, #call, __FILE__,    \
                                                     __LINE__);                               \
  } while (0)
