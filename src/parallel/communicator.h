// Communicator: the one collective interface of deepinfer's scale-out (DESIGN.md §1 `parallel`).
// One process per device; every rank of a communicator calls the same collectives in the same
// order with matching sizes (the callers' lockstep guarantees it: engine steps are collective,
// idle ranks run empty steps).
//
// Implementations:
//   SingleCommunicator  world size 1, no transport (parallel/single_communicator.h)
//   MpiCommunicator     CPU backend, host buffers, Open MPI (parallel/mpi_communicator.h)
//   NcclCommunicator    CUDA backend, device buffers on the communicator's stream
//                       (parallel/nccl_communicator.h; built only with DEEPINFER_CUDA)
// make_world_communicator (parallel/launch.h) picks one from the environment.
//
// Buffers are host memory for memory() == kHost and device memory for kDevice. Byte counts are
// per peer; all_to_all_v's send / recv layouts are the peers' pieces packed back to back in rank
// order.
//
// Failure: a collective that does not complete within timeout() (a peer died or hangs) throws
// Error(kDevice) naming the collective, this rank and the timeout; from then on the
// communicator is broken and every call throws at once. Nothing in this interface exits the
// process.
//
// Thread-safety: one thread at a time per communicator.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "base/dtype.h"

namespace deepinfer {

enum class ReduceOp : uint8_t { kSum, kMax, kMin };
enum class CommMemory : uint8_t { kHost, kDevice };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "single", "mpi", "nccl"
  virtual CommMemory memory() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;

  // Elementwise reduction of `count` elements of `dtype` (F32, F64, I32, I64) over all ranks;
  // send == recv is allowed.
  virtual void all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                          ReduceOp op) = 0;
  // recv [size() * bytes_per_rank] = every rank's send [bytes_per_rank], in rank order.
  virtual void all_gather(const void* send, void* recv, int64_t bytes_per_rank) = 0;
  // Personalised exchange: send_bytes[p] bytes go to rank p (packed in rank order in `send`),
  // recv_bytes[p] bytes arrive from rank p (packed in rank order in `recv`). Both spans have
  // size() entries; recv_bytes must match what the peers send (exchange counts first with
  // all_to_all_counts when they are not known).
  virtual void all_to_all_v(const void* send, std::span<const int64_t> send_bytes, void* recv,
                            std::span<const int64_t> recv_bytes) = 0;
  // recv_counts[p] = the send_counts[rank()] of rank p: host int64 arrays of size() entries,
  // whatever memory() is.
  virtual void all_to_all_counts(std::span<const int64_t> send_counts,
                                 std::span<int64_t> recv_counts) = 0;
  virtual void broadcast(void* buffer, int64_t bytes, int root) = 0;
  virtual void barrier() = 0;

  // The ranks with the same color form a new communicator, ordered by (key, rank); collective
  // over this communicator. Used for EP groups and CP groups.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

}  // namespace deepinfer
