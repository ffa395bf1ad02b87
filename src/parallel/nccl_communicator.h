// NcclCommunicator: the CUDA backend's Communicator over NCCL (device buffers, one GPU per
// process). Collectives run on the caller's stream (stream(), settable); all_to_all_v is grouped
// ncclSend / ncclRecv; all_to_all_counts goes over the host communicator it was bootstrapped
// from when there is one (counts are host arrays), else through NCCL with a small device
// scratch; split is ncclCommSplit (and the host communicator's split).
//
// The NCCL communicator is nonblocking (ncclConfig_t.blocking = 0), so no NCCL call can hang
// the host. By default each collective waits for its completion: it polls ncclCommGetAsyncError
// and cudaStreamQuery until timeout(); on timeout or an NCCL error it calls ncclCommAbort, marks
// the communicator broken and throws Error(kDevice) "nccl all_to_all_v timed out after 30 s on
// rank 1 of 2 (a peer died or hangs)"; later calls throw at once. set_wait(false) makes the
// collectives only enqueue (for overlap and CUDA graph capture): the caller synchronises the
// stream, and a hang is then caught only by the next waiting call.
//
// Bootstrap: rank 0 creates the unique id and hands it over a host Communicator (under mpirun)
// or a TcpStore (torchrun-style); world size 1 needs neither (single()). The current CUDA device
// when the communicator is created is the one it uses.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace deepinfer {

class TcpStore;

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `host` (any backend): the NCCL world has host's ranks; host is kept for
  // all_to_all_counts and split.
  static std::unique_ptr<NcclCommunicator> bootstrap(std::unique_ptr<Communicator> host,
                                                     cudaStream_t stream);
  // Rendezvous through a TcpStore (rank 0 is the store's server). No host communicator.
  static std::unique_ptr<NcclCommunicator> bootstrap(TcpStore& store, int rank, int size,
                                                     cudaStream_t stream);
  // A world of one rank on the current device (no launcher, no host transport).
  static std::unique_ptr<NcclCommunicator> single(cudaStream_t stream);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  CommMemory memory() const override { return CommMemory::kDevice; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout);
  cudaStream_t stream() const { return stream_; }
  void set_stream(cudaStream_t stream) { stream_ = stream; }
  // true (default): every collective waits for completion with the timeout; false: enqueue only.
  void set_wait(bool wait) { wait_ = wait; }
  bool broken() const { return !broken_reason_.empty(); }
  ncclComm_t handle() const { return comm_; }

  void all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                  ReduceOp op) override;
  void all_gather(const void* send, void* recv, int64_t bytes_per_rank) override;
  void all_to_all_v(const void* send, std::span<const int64_t> send_bytes, void* recv,
                    std::span<const int64_t> recv_bytes) override;
  void all_to_all_counts(std::span<const int64_t> send_counts,
                         std::span<int64_t> recv_counts) override;
  void broadcast(void* buffer, int64_t bytes, int root) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  NcclCommunicator(ncclComm_t comm, std::unique_ptr<Communicator> host, cudaStream_t stream,
                   std::chrono::milliseconds timeout);
  static std::unique_ptr<NcclCommunicator> init(const ncclUniqueId& id, int rank, int size,
                                                std::unique_ptr<Communicator> host,
                                                cudaStream_t stream);
  void check_usable(const char* op) const;
  // Waits until NCCL has enqueued the last call (nonblocking comms return ncclInProgress).
  void wait_enqueued(const char* op);
  // wait_enqueued, then (when wait_) the stream's completion, with the timeout.
  void finish(const char* op);
  [[noreturn]] void fail(const char* op, const std::string& why);
  std::string on_rank() const;
  void* scratch();  // 2 * size() int64 of device memory, allocated on first use

  ncclComm_t comm_ = nullptr;
  std::unique_ptr<Communicator> host_;
  cudaStream_t stream_ = nullptr;
  std::chrono::milliseconds timeout_;
  bool wait_ = true;
  int rank_ = 0;
  int size_ = 1;
  void* scratch_ = nullptr;
  std::string broken_reason_;
};

}  // namespace deepinfer
