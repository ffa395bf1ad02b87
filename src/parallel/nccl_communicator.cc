// NcclCommunicator: nonblocking NCCL collectives on the caller's stream, completion polled
// against a deadline (see nccl_communicator.h).
#include "parallel/nccl_communicator.h"

#include <cstring>
#include <vector>

#include "base/error.h"
#include "base/logging.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "parallel/launch.h"
#include "parallel/nccl_check.h"
#include "parallel/poll_wait.h"
#include "parallel/tcp_store.h"

namespace deepinfer {

namespace parallel_detail {

void throw_nccl_error(ncclResult_t result, const char* call, const char* file, int line) {
  std::string msg = std::string(call) + " failed: " + ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') msg += std::string(" (") + last + ")";
  throw Error(ErrorKind::kDevice, msg, std::string(file) + ":" + std::to_string(line));
}

}  // namespace parallel_detail

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    default: break;
  }
  THROW(kInvalidInput) << "all_reduce supports F32, F64, I32 and I64, not " << dtype_name(dtype);
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  THROW(kInternal) << "unknown ReduceOp " << static_cast<int>(op);
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Polls a communicator's state until it leaves ncclInProgress or the deadline passes.
// Returns false on timeout; *state holds the last state.
bool poll_state(ncclComm_t comm, Clock::time_point deadline, ncclResult_t* state) {
  return parallel_detail::poll_until(
      [&] {
        const ncclResult_t r = ncclCommGetAsyncError(comm, state);
        if (r != ncclSuccess) *state = r;
        return *state != ncclInProgress;
      },
      deadline);
}

}  // namespace

NcclCommunicator::NcclCommunicator(ncclComm_t comm, std::unique_ptr<Communicator> host,
                                   cudaStream_t stream, std::chrono::milliseconds timeout)
    : comm_(comm), host_(std::move(host)), stream_(stream), timeout_(timeout) {
  NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
  NCCL_CHECK(ncclCommCount(comm_, &size_));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::init(const ncclUniqueId& id, int rank,
                                                         int size,
                                                         std::unique_ptr<Communicator> host,
                                                         cudaStream_t stream) {
  const auto timeout = host != nullptr ? host->timeout() : comm_timeout_from_env();
  ncclConfig_t config = nonblocking_config();
  ncclComm_t comm = nullptr;
  NCCL_CHECK_ASYNC(ncclCommInitRankConfig(&comm, size, id, rank, &config));
  ncclResult_t state = ncclInProgress;
  if (!poll_state(comm, Clock::now() + timeout, &state)) {
    ncclCommAbort(comm);
    THROW(kDevice) << "nccl communicator setup timed out after "
                   << parallel_detail::format_seconds(timeout) << " on rank " << rank << " of "
                   << size << " (a peer died or hangs)";
  }
  if (state != ncclSuccess) {
    ncclCommAbort(comm);
    THROW(kDevice) << "nccl communicator setup failed on rank " << rank << " of " << size << ": "
                   << ncclGetErrorString(state) << " (" << ncclGetLastError(comm) << ")";
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(comm, std::move(host), stream, timeout));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::bootstrap(std::unique_ptr<Communicator> host,
                                                              cudaStream_t stream) {
  CHECK(host != nullptr && host->memory() == CommMemory::kHost)
      << "NcclCommunicator::bootstrap needs a host-memory communicator";
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (host->rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  host->broadcast(&id, sizeof(id), 0);
  const int rank = host->rank(), size = host->size();
  return init(id, rank, size, std::move(host), stream);
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::bootstrap(TcpStore& store, int rank,
                                                              int size, cudaStream_t stream) {
  CHECK(size >= 1 && rank >= 0 && rank < size)
      << "NcclCommunicator::bootstrap: rank " << rank << " of " << size << " is not a rank";
  // Every rank bootstraps in the same order, so a per-process count names the same id.
  static int generation = 0;
  const std::string key = "deepinfer/nccl_unique_id/" + std::to_string(generation++);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    store.set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    const std::string value = store.get(key);
    CHECK_KIND(kDevice, value.size() == sizeof(id))
        << "tcp store: the NCCL unique id under '" << key << "' has " << value.size()
        << " bytes, not " << sizeof(id);
    std::memcpy(&id, value.data(), sizeof(id));
  }
  return init(id, rank, size, nullptr, stream);
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::single(cudaStream_t stream) {
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  return init(id, 0, 1, nullptr, stream);
}

NcclCommunicator::~NcclCommunicator() {
  if (scratch_ != nullptr) cuda::device_free(scratch_);
  if (comm_ == nullptr) return;
  // Finish queued work first (a clean destroy); a communicator that cannot is aborted.
  ncclResult_t state = ncclInProgress;
  const bool idle = poll_state(comm_, Clock::now() + timeout_, &state) && state == ncclSuccess &&
                    cudaStreamSynchronize(stream_) == cudaSuccess;
  if (idle) {
    ncclCommDestroy(comm_);
  } else {
    LOG(WARNING) << "nccl communicator " << on_rank() << " aborted at destruction";
    ncclCommAbort(comm_);
  }
}

void NcclCommunicator::set_timeout(std::chrono::milliseconds timeout) {
  CHECK(timeout.count() > 0) << "communicator timeout must be positive, got " << timeout.count()
                             << " ms";
  timeout_ = timeout;
}

std::string NcclCommunicator::on_rank() const {
  return "on rank " + std::to_string(rank_) + " of " + std::to_string(size_);
}

void NcclCommunicator::check_usable(const char* op) const {
  if (broken()) {
    THROW(kDevice) << "nccl " << op << " " << on_rank() << ": the communicator is broken ("
                   << broken_reason_ << ")";
  }
}

void NcclCommunicator::fail(const char* op, const std::string& why) {
  const std::string message = "nccl " + std::string(op) + " " + why;
  if (broken_reason_.empty()) broken_reason_ = message;
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  throw Error(ErrorKind::kDevice, message);
}

void NcclCommunicator::wait_enqueued(const char* op) {
  ncclResult_t state = ncclInProgress;
  if (!poll_state(comm_, Clock::now() + timeout_, &state)) {
    fail(op, "timed out after " + parallel_detail::format_seconds(timeout_) + " " + on_rank() +
                 " (a peer died or hangs)");
  }
  if (state != ncclSuccess) {
    fail(op, "failed " + on_rank() + ": " + ncclGetErrorString(state) + " (" +
                 ncclGetLastError(comm_) + ")");
  }
}

void NcclCommunicator::finish(const char* op) {
  wait_enqueued(op);
  if (!wait_) return;
  cudaError_t cuda_state = cudaSuccess;
  ncclResult_t nccl_state = ncclSuccess;
  const bool done = parallel_detail::poll_until(
      [&] {
        cuda_state = cudaStreamQuery(stream_);
        if (cuda_state != cudaErrorNotReady) return true;
        ncclCommGetAsyncError(comm_, &nccl_state);
        return nccl_state != ncclSuccess && nccl_state != ncclInProgress;
      },
      Clock::now() + timeout_);
  if (!done) {
    fail(op, "timed out after " + parallel_detail::format_seconds(timeout_) + " " + on_rank() +
                 " (a peer died or hangs)");
  }
  if (nccl_state != ncclSuccess && nccl_state != ncclInProgress) {
    fail(op, "failed " + on_rank() + ": " + ncclGetErrorString(nccl_state) + " (" +
                 ncclGetLastError(comm_) + ")");
  }
  if (cuda_state != cudaSuccess) {
    fail(op, "failed " + on_rank() + ": CUDA error " + cudaGetErrorName(cuda_state) + " (" +
                 cudaGetErrorString(cuda_state) + ")");
  }
}

void* NcclCommunicator::scratch() {
  if (scratch_ == nullptr) scratch_ = cuda::device_malloc(2 * sizeof(int64_t) * size_);
  return scratch_;
}

void NcclCommunicator::all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                                  ReduceOp op) {
  check_usable("all_reduce");
  const ncclDataType_t type = nccl_dtype(dtype);
  CHECK(count >= 0) << "all_reduce: negative count " << count;
  if (count == 0) return;
  NCCL_CHECK_ASYNC(ncclAllReduce(send, recv, static_cast<size_t>(count), type, nccl_op(op),
                                 comm_, stream_));
  finish("all_reduce");
}

void NcclCommunicator::all_gather(const void* send, void* recv, int64_t bytes_per_rank) {
  check_usable("all_gather");
  CHECK(bytes_per_rank >= 0) << "all_gather: negative byte count " << bytes_per_rank;
  if (bytes_per_rank == 0) return;
  NCCL_CHECK_ASYNC(ncclAllGather(send, recv, static_cast<size_t>(bytes_per_rank), ncclUint8,
                                 comm_, stream_));
  finish("all_gather");
}

void NcclCommunicator::all_to_all_v(const void* send, std::span<const int64_t> send_bytes,
                                    void* recv, std::span<const int64_t> recv_bytes) {
  check_usable("all_to_all_v");
  CHECK(static_cast<int>(send_bytes.size()) == size_ &&
        static_cast<int>(recv_bytes.size()) == size_)
      << "all_to_all_v on " << size_ << " ranks takes " << size_ << " send and recv counts, got "
      << send_bytes.size() << " and " << recv_bytes.size();
  CHECK(send_bytes[rank_] == recv_bytes[rank_])
      << "all_to_all_v: rank " << rank_ << " sends itself " << send_bytes[rank_]
      << " bytes but expects " << recv_bytes[rank_];
  const char* s = static_cast<const char*>(send);
  char* r = static_cast<char*>(recv);
  int64_t send_off = 0, recv_off = 0;
  NCCL_CHECK_ASYNC(ncclGroupStart());
  for (int p = 0; p < size_; ++p) {
    CHECK(send_bytes[p] >= 0 && recv_bytes[p] >= 0)
        << "all_to_all_v: negative byte count for rank " << p;
    // Zero-byte pieces post nothing on either side (both sides agree on the sizes).
    if (send_bytes[p] > 0) {
      NCCL_CHECK_ASYNC(ncclSend(s + send_off, static_cast<size_t>(send_bytes[p]), ncclUint8, p,
                                comm_, stream_));
    }
    if (recv_bytes[p] > 0) {
      NCCL_CHECK_ASYNC(ncclRecv(r + recv_off, static_cast<size_t>(recv_bytes[p]), ncclUint8, p,
                                comm_, stream_));
    }
    send_off += send_bytes[p];
    recv_off += recv_bytes[p];
  }
  NCCL_CHECK_ASYNC(ncclGroupEnd());
  finish("all_to_all_v");
}

void NcclCommunicator::all_to_all_counts(std::span<const int64_t> send_counts,
                                         std::span<int64_t> recv_counts) {
  check_usable("all_to_all_counts");
  CHECK(static_cast<int>(send_counts.size()) == size_ &&
        static_cast<int>(recv_counts.size()) == size_)
      << "all_to_all_counts on " << size_ << " ranks takes " << size_ << " entries each, got "
      << send_counts.size() << " and " << recv_counts.size();
  if (host_ != nullptr) return host_->all_to_all_counts(send_counts, recv_counts);
  // No host transport: 8 bytes to every peer through NCCL, then back to the host.
  int64_t* dev = static_cast<int64_t*>(scratch());
  CUDA_CHECK(cudaMemcpyAsync(dev, send_counts.data(), sizeof(int64_t) * size_,
                             cudaMemcpyHostToDevice, stream_));
  NCCL_CHECK_ASYNC(ncclGroupStart());
  for (int p = 0; p < size_; ++p) {
    NCCL_CHECK_ASYNC(ncclSend(dev + p, sizeof(int64_t), ncclUint8, p, comm_, stream_));
    NCCL_CHECK_ASYNC(ncclRecv(dev + size_ + p, sizeof(int64_t), ncclUint8, p, comm_, stream_));
  }
  NCCL_CHECK_ASYNC(ncclGroupEnd());
  wait_enqueued("all_to_all_counts");
  CUDA_CHECK(cudaMemcpyAsync(recv_counts.data(), dev + size_, sizeof(int64_t) * size_,
                             cudaMemcpyDeviceToHost, stream_));
  const bool saved = wait_;
  wait_ = true;  // the host needs the counts now
  try {
    finish("all_to_all_counts");
  } catch (...) {
    wait_ = saved;
    throw;
  }
  wait_ = saved;
}

void NcclCommunicator::broadcast(void* buffer, int64_t bytes, int root) {
  check_usable("broadcast");
  CHECK(root >= 0 && root < size_) << "broadcast root " << root << " is not a rank of "
                                   << size_;
  CHECK(bytes >= 0) << "broadcast: negative byte count " << bytes;
  if (bytes == 0) return;
  NCCL_CHECK_ASYNC(ncclBroadcast(buffer, buffer, static_cast<size_t>(bytes), ncclUint8, root,
                                 comm_, stream_));
  finish("broadcast");
}

void NcclCommunicator::barrier() {
  check_usable("barrier");
  void* dev = scratch();
  NCCL_CHECK_ASYNC(ncclAllReduce(dev, dev, 1, ncclInt64, ncclSum, comm_, stream_));
  const bool saved = wait_;
  wait_ = true;  // a barrier returns only when every rank got there
  try {
    finish("barrier");
  } catch (...) {
    wait_ = saved;
    throw;
  }
  wait_ = saved;
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  check_usable("split");
  // The host split first: it checks every rank's color and times out on a dead peer.
  std::unique_ptr<Communicator> host_child = host_ != nullptr ? host_->split(color, key) : nullptr;
  CHECK(color >= 0) << "split: color must be >= 0, got " << color;
  ncclConfig_t config = nonblocking_config();
  ncclComm_t child = nullptr;
  NCCL_CHECK_ASYNC(ncclCommSplit(comm_, color, key, &child, &config));
  wait_enqueued("split");
  ncclResult_t state = ncclInProgress;
  if (child == nullptr || !poll_state(child, Clock::now() + timeout_, &state) ||
      state != ncclSuccess) {
    if (child != nullptr) ncclCommAbort(child);
    fail("split", "failed " + on_rank() + " (the child communicator did not come up within " +
                      parallel_detail::format_seconds(timeout_) + ")");
  }
  auto out = std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(child, std::move(host_child), stream_, timeout_));
  out->wait_ = wait_;
  return out;
}

}  // namespace deepinfer
