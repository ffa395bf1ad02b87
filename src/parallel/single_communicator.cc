// SingleCommunicator: world size 1; collectives are copies (see single_communicator.h).
#include "parallel/single_communicator.h"

#include <cstring>

#include "base/error.h"
#include "parallel/launch.h"

#ifdef DEEPINFER_CUDA
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#endif

namespace deepinfer {

namespace {
void check_reduce_dtype(DType dtype) {
  CHECK(dtype == DType::F32 || dtype == DType::F64 || dtype == DType::I32 ||
        dtype == DType::I64)
      << "all_reduce supports F32, F64, I32 and I64, not " << dtype_name(dtype);
}
}  // namespace

SingleCommunicator::SingleCommunicator(CommMemory memory)
    : memory_(memory), timeout_(comm_timeout_from_env()) {
#ifndef DEEPINFER_CUDA
  CHECK_KIND(kUnsupported, memory != CommMemory::kDevice)
      << "a device-memory communicator needs a CUDA build (-DDEEPINFER_CUDA=ON)";
#endif
}

void SingleCommunicator::copy(void* dst, const void* src, int64_t bytes) const {
  CHECK(bytes >= 0) << "negative byte count " << bytes;
  if (bytes == 0 || dst == src) return;
  if (memory_ == CommMemory::kHost) {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return;
  }
#ifdef DEEPINFER_CUDA
  CUDA_CHECK(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice));
#endif
}

void SingleCommunicator::all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                                    ReduceOp op) {
  check_reduce_dtype(dtype);
  CHECK(count >= 0) << "all_reduce: negative count " << count;
  copy(recv, send, count * static_cast<int64_t>(dtype_size(dtype)));
}

void SingleCommunicator::all_gather(const void* send, void* recv, int64_t bytes_per_rank) {
  copy(recv, send, bytes_per_rank);
}

void SingleCommunicator::all_to_all_v(const void* send, std::span<const int64_t> send_bytes,
                                      void* recv, std::span<const int64_t> recv_bytes) {
  CHECK(send_bytes.size() == 1 && recv_bytes.size() == 1)
      << "all_to_all_v on a world of 1 takes 1 send and 1 recv count, got "
      << send_bytes.size() << " and " << recv_bytes.size();
  CHECK(send_bytes[0] == recv_bytes[0])
      << "all_to_all_v: rank 0 sends itself " << send_bytes[0] << " bytes but expects "
      << recv_bytes[0];
  copy(recv, send, send_bytes[0]);
}

void SingleCommunicator::all_to_all_counts(std::span<const int64_t> send_counts,
                                           std::span<int64_t> recv_counts) {
  CHECK(send_counts.size() == 1 && recv_counts.size() == 1)
      << "all_to_all_counts on a world of 1 takes 1 entry each, got " << send_counts.size()
      << " and " << recv_counts.size();
  recv_counts[0] = send_counts[0];
}

void SingleCommunicator::broadcast(void* buffer, int64_t bytes, int root) {
  CHECK(root == 0) << "broadcast root " << root << " is not a rank of a world of 1";
  CHECK(bytes >= 0) << "broadcast: negative byte count " << bytes;
}

std::unique_ptr<Communicator> SingleCommunicator::split(int color, int key) {
  CHECK(color >= 0) << "split: color must be >= 0, got " << color;
  auto out = std::make_unique<SingleCommunicator>(memory_);
  out->timeout_ = timeout_;
  return out;
}

}  // namespace deepinfer
