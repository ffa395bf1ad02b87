// SingleCommunicator: the world-size-1 Communicator (no transport). Every collective is a copy
// of send into recv (memcpy for kHost; for kDevice a cudaMemcpy device-to-device, available
// only in CUDA builds), so code written for N ranks runs unchanged on one.
#pragma once

#include "parallel/communicator.h"

namespace deepinfer {

class SingleCommunicator final : public Communicator {
 public:
  explicit SingleCommunicator(CommMemory memory = CommMemory::kHost);

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "single"; }
  CommMemory memory() const override { return memory_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  void all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                  ReduceOp op) override;
  void all_gather(const void* send, void* recv, int64_t bytes_per_rank) override;
  void all_to_all_v(const void* send, std::span<const int64_t> send_bytes, void* recv,
                    std::span<const int64_t> recv_bytes) override;
  void all_to_all_counts(std::span<const int64_t> send_counts,
                         std::span<int64_t> recv_counts) override;
  void broadcast(void* buffer, int64_t bytes, int root) override;
  void barrier() override {}
  // color and key are accepted as given; the result is another single communicator.
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  void copy(void* dst, const void* src, int64_t bytes) const;

  CommMemory memory_;
  std::chrono::milliseconds timeout_;
};

}  // namespace deepinfer
