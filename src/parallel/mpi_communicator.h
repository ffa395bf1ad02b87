// MpiCommunicator: the CPU backend's Communicator over Open MPI (host buffers). One process per
// rank, started by `mpirun`. MPI is initialised on first use (MPI_THREAD_SERIALIZED: one thread
// at a time calls MPI) and finalised at exit if we initialised it.
//
// A rank that dies: by default mpirun then kills the whole job. Launch with
// `mpirun --enable-recovery` so the survivors run on, time out in their next collective and
// throw (test_communicator_mpi_dead_rank).
//
// Every collective is the nonblocking MPI variant (or Isend/Irecv pairs) followed by a
// deadline-polling MPI_Test loop (parallel/poll_wait.h); on timeout the communicator is marked
// broken and Error(kDevice) "mpi all_to_all_v timed out after 30 s on rank 1 of 2 (a peer died or
// hangs)" is thrown; every later call throws at once. The abandoned request is never completed:
// its buffers may still be written by MPI, so after a timeout callers must treat them as lost.
// MPI errors are returned (MPI_ERRORS_RETURN), never aborting, and become Error(kDevice).
//
// Sizes are 64-bit: pieces larger than the largest message (1 GiB; MPI counts are int) go as
// several messages (all_to_all_v, broadcast, all_reduce, all_gather through a strided type).
// all_to_all_v exchanges at least one message per pair, even for 0 bytes, so recv_bytes that
// disagree with the peer's send_bytes fail (kDevice truncation or kInternal short piece) and
// break the communicator instead of shifting later matches.
// Floating-point all_reduce gathers every rank's values and reduces them in rank order, so the
// result is bitwise the same on every rank and for every MPI algorithm choice (what
// --batch-invariant needs); integer all_reduce uses MPI_Iallreduce (exact anyway).
#pragma once

#include <memory>
#include <string>

#include "base/error.h"
#include "parallel/communicator.h"

namespace deepinfer {

class MpiCommunicator final : public Communicator {
 public:
  // A duplicate of MPI_COMM_WORLD (initialises MPI if needed). Collective over the world.
  static std::unique_ptr<MpiCommunicator> world();
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  CommMemory memory() const override { return CommMemory::kHost; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  // Default: DEEPINFER_COMM_TIMEOUT_S (parallel/launch.h). Inherited by split() results.
  void set_timeout(std::chrono::milliseconds timeout);
  bool broken() const { return !broken_reason_.empty(); }
  // Largest single MPI message (default 1 GiB; MPI counts are int). Tests lower it to exercise
  // the chunked paths with small buffers. Every rank must set the same value.
  void set_max_message_bytes(int64_t bytes);

  void all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                  ReduceOp op) override;
  void all_gather(const void* send, void* recv, int64_t bytes_per_rank) override;
  void all_to_all_v(const void* send, std::span<const int64_t> send_bytes, void* recv,
                    std::span<const int64_t> recv_bytes) override;
  void all_to_all_counts(std::span<const int64_t> send_counts,
                         std::span<int64_t> recv_counts) override;
  void broadcast(void* buffer, int64_t bytes, int root) override;
  void barrier() override;
  // Exchanges (color, key) first (with the timeout), then MPI_Comm_split.
  std::unique_ptr<Communicator> split(int color, int key) override;

  struct Impl;  // holds the MPI_Comm (mpi.h stays out of this header)

 private:
  MpiCommunicator(std::unique_ptr<Impl> impl, std::chrono::milliseconds timeout);
  void check_usable(const char* op) const;
  // Marks the communicator broken and throws Error(kind, message).
  [[noreturn]] void fail(ErrorKind kind, const std::string& message);
  std::string on_rank() const;  // "on rank 1 of 2"
  // all_gather, with errors naming `op` (all_reduce and split gather too).
  void gather(const char* op, const void* send, void* recv, int64_t bytes_per_rank);

  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_;
  std::string broken_reason_;
};

}  // namespace deepinfer
