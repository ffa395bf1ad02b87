// MpiCommunicator: nonblocking Open MPI collectives with a deadline (see mpi_communicator.h).
#include "parallel/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "parallel/launch.h"
#include "parallel/poll_wait.h"

namespace deepinfer {

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  // Largest single MPI message in bytes (MPI counts are int); lowered by tests to exercise the
  // chunked paths with small buffers.
  int64_t max_message = int64_t{1} << 30;

  static void wait(MpiCommunicator& c, const char* op, std::vector<MPI_Request>& requests,
                   MPI_Status* statuses);
  static void post_check(MpiCommunicator& c, const char* op, int rc,
                         std::vector<MPI_Request>& posted);
};

namespace {

// Initialises MPI once per process; finalises at exit if we initialised it. (Finalising after
// a timeout, even with a dead peer under mpirun --enable-recovery, returns: tested by
// test_communicator_mpi_dead_rank. Skipping it makes mpirun fail the job.)
class MpiRuntime {
 public:
  static MpiRuntime& get() {
    static MpiRuntime runtime;
    return runtime;
  }
  ~MpiRuntime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (we_initialised_ && !finalized) MPI_Finalize();
  }

 private:
  MpiRuntime() {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
      int provided = 0;
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      if (rc != MPI_SUCCESS) THROW(kDevice) << "MPI_Init_thread failed (error " << rc << ")";
      we_initialised_ = true;
    }
    // Errors on the world (and the duplicates we make of it) return codes instead of aborting.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  bool we_initialised_ = false;
};

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

bool is_float(DType dtype) { return dtype == DType::F32 || dtype == DType::F64; }

MPI_Datatype mpi_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    default: break;
  }
  THROW(kInvalidInput) << "all_reduce supports F32, F64, I32 and I64, not " << dtype_name(dtype);
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  THROW(kInternal) << "unknown ReduceOp " << static_cast<int>(op);
}

// out = out (op) in, elementwise, in a fixed order (rank order across calls).
template <typename T>
void reduce_into(T* out, const T* in, int64_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      for (int64_t i = 0; i < count; ++i) out[i] = out[i] + in[i];
      break;
    case ReduceOp::kMax:
      for (int64_t i = 0; i < count; ++i) out[i] = std::max(out[i], in[i]);
      break;
    case ReduceOp::kMin:
      for (int64_t i = 0; i < count; ++i) out[i] = std::min(out[i], in[i]);
      break;
  }
}

}  // namespace

MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl, std::chrono::milliseconds timeout)
    : impl_(std::move(impl)), timeout_(timeout) {
  MPI_Comm_rank(impl_->comm, &rank_);
  MPI_Comm_size(impl_->comm, &size_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
  MpiRuntime::get();
  const auto timeout = comm_timeout_from_env();
  auto impl = std::make_unique<Impl>();
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, &impl->comm, &request);
  if (rc != MPI_SUCCESS) THROW(kDevice) << "MPI_Comm_idup failed: " << mpi_error_string(rc);
  const bool done = parallel_detail::poll_until(
      [&] {
        int flag = 0;
        const int trc = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
        if (trc != MPI_SUCCESS) THROW(kDevice) << "MPI_Comm_idup failed: " << mpi_error_string(trc);
        return flag != 0;
      },
      std::chrono::steady_clock::now() + timeout);
  if (!done) {
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    THROW(kDevice) << "mpi world communicator setup timed out after "
                   << parallel_detail::format_seconds(timeout) << " on rank " << rank << " of "
                   << size << " (a peer died or hangs)";
  }
  MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(impl), timeout));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A broken communicator may have requests in flight: leave it to process exit.
  if (!finalized && !broken() && impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

void MpiCommunicator::set_timeout(std::chrono::milliseconds timeout) {
  CHECK(timeout.count() > 0) << "communicator timeout must be positive, got " << timeout.count()
                             << " ms";
  timeout_ = timeout;
}

void MpiCommunicator::set_max_message_bytes(int64_t bytes) {
  CHECK(bytes > 0 && bytes <= INT_MAX) << "max message bytes must be in [1, 2^31-1], got "
                                       << bytes;
  impl_->max_message = bytes;
}

std::string MpiCommunicator::on_rank() const {
  return "on rank " + std::to_string(rank_) + " of " + std::to_string(size_);
}

void MpiCommunicator::check_usable(const char* op) const {
  if (broken()) {
    THROW(kDevice) << "mpi " << op << " " << on_rank() << ": the communicator is broken ("
                   << broken_reason_ << ")";
  }
}

void MpiCommunicator::fail(ErrorKind kind, const std::string& message) {
  if (broken_reason_.empty()) broken_reason_ = message;
  throw Error(kind, message);
}

// Waits for every request until the communicator's deadline; fails it on timeout or MPI error.
// statuses, when given, has requests.size() entries.
void MpiCommunicator::Impl::wait(MpiCommunicator& c, const char* op,
                                 std::vector<MPI_Request>& requests, MPI_Status* statuses) {
  if (requests.empty()) return;
  const int n = static_cast<int>(requests.size());
  int rc = MPI_SUCCESS;
  const bool done = parallel_detail::poll_until(
      [&] {
        int flag = 0;
        rc = MPI_Testall(n, requests.data(), &flag,
                         statuses != nullptr ? statuses : MPI_STATUSES_IGNORE);
        return rc != MPI_SUCCESS || flag != 0;
      },
      std::chrono::steady_clock::now() + c.timeout_);
  if (!done) {
    c.fail(ErrorKind::kDevice, "mpi " + std::string(op) + " timed out after " +
                                   parallel_detail::format_seconds(c.timeout_) + " " +
                                   c.on_rank() + " (a peer died or hangs)");
  }
  if (rc != MPI_SUCCESS) {
    std::string why = mpi_error_string(rc);
    if (rc == MPI_ERR_IN_STATUS && statuses != nullptr) {
      for (int i = 0; i < n; ++i) {
        if (statuses[i].MPI_ERROR != MPI_SUCCESS) {
          why = mpi_error_string(statuses[i].MPI_ERROR);
          break;
        }
      }
    }
    c.fail(ErrorKind::kDevice, "mpi " + std::string(op) + " failed " + c.on_rank() + ": " + why +
                                   " (a peer may have died)");
  }
}

void MpiCommunicator::Impl::post_check(MpiCommunicator& c, const char* op, int rc,
                                       std::vector<MPI_Request>& posted) {
  if (rc == MPI_SUCCESS) return;
  (void)posted;  // already-posted requests are abandoned with the broken communicator
  c.fail(ErrorKind::kDevice,
         "mpi " + std::string(op) + " failed " + c.on_rank() + ": " + mpi_error_string(rc));
}

void MpiCommunicator::all_gather(const void* send, void* recv, int64_t bytes_per_rank) {
  gather("all_gather", send, recv, bytes_per_rank);
}

void MpiCommunicator::gather(const char* op, const void* send, void* recv,
                             int64_t bytes_per_rank) {
  check_usable(op);
  CHECK(bytes_per_rank >= 0) << op << ": negative byte count " << bytes_per_rank;
  if (bytes_per_rank == 0) return barrier();
  std::vector<MPI_Request> requests;
  std::vector<MPI_Datatype> types;
  const int64_t chunk = impl_->max_message;
  for (int64_t off = 0; off < bytes_per_rank; off += chunk) {
    const int len = static_cast<int>(std::min(chunk, bytes_per_rank - off));
    // Rank p's piece [off, off + len) lands at recv + p * bytes_per_rank + off: a block of len
    // bytes whose extent is a whole rank's share.
    MPI_Datatype block = MPI_DATATYPE_NULL, strided = MPI_DATATYPE_NULL;
    MPI_Type_contiguous(len, MPI_BYTE, &block);
    MPI_Type_create_resized(block, 0, static_cast<MPI_Aint>(bytes_per_rank), &strided);
    MPI_Type_commit(&strided);
    MPI_Type_free(&block);
    types.push_back(strided);
    requests.emplace_back();
    const int rc = MPI_Iallgather(static_cast<const char*>(send) + off, len, MPI_BYTE,
                                  static_cast<char*>(recv) + off, 1, strided, impl_->comm,
                                  &requests.back());
    Impl::post_check(*this, op, rc, requests);
  }
  Impl::wait(*this, op, requests, nullptr);
  for (MPI_Datatype& t : types) MPI_Type_free(&t);
}

void MpiCommunicator::all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                                 ReduceOp op) {
  check_usable("all_reduce");
  const MPI_Datatype type = mpi_dtype(dtype);
  CHECK(count >= 0) << "all_reduce: negative count " << count;
  if (count == 0) return barrier();
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  if (is_float(dtype)) {
    // Gather everyone's values, then reduce in rank order: identical bits on every rank.
    const int64_t bytes = count * elem;
    std::vector<char> all(static_cast<size_t>(bytes * size_));
    gather("all_reduce", send, all.data(), bytes);
    std::memcpy(recv, all.data(), static_cast<size_t>(bytes));
    for (int p = 1; p < size_; ++p) {
      const char* piece = all.data() + p * bytes;
      if (dtype == DType::F32) {
        reduce_into(static_cast<float*>(recv), reinterpret_cast<const float*>(piece), count, op);
      } else {
        reduce_into(static_cast<double*>(recv), reinterpret_cast<const double*>(piece), count,
                    op);
      }
    }
    return;
  }
  std::vector<MPI_Request> requests;
  const int64_t chunk = std::max<int64_t>(1, impl_->max_message / elem);
  for (int64_t off = 0; off < count; off += chunk) {
    const int len = static_cast<int>(std::min(chunk, count - off));
    char* out = static_cast<char*>(recv) + off * elem;
    const void* in = send == recv ? MPI_IN_PLACE : static_cast<const char*>(send) + off * elem;
    requests.emplace_back();
    const int rc =
        MPI_Iallreduce(in, out, len, type, mpi_op(op), impl_->comm, &requests.back());
    Impl::post_check(*this, "all_reduce", rc, requests);
  }
  Impl::wait(*this, "all_reduce", requests, nullptr);
}

void MpiCommunicator::all_to_all_v(const void* send, std::span<const int64_t> send_bytes,
                                   void* recv, std::span<const int64_t> recv_bytes) {
  check_usable("all_to_all_v");
  CHECK(static_cast<int>(send_bytes.size()) == size_ &&
        static_cast<int>(recv_bytes.size()) == size_)
      << "all_to_all_v on " << size_ << " ranks takes " << size_ << " send and recv counts, got "
      << send_bytes.size() << " and " << recv_bytes.size();
  for (int p = 0; p < size_; ++p) {
    CHECK(send_bytes[p] >= 0 && recv_bytes[p] >= 0)
        << "all_to_all_v: negative byte count for rank " << p;
  }
  CHECK(send_bytes[rank_] == recv_bytes[rank_])
      << "all_to_all_v: rank " << rank_ << " sends itself " << send_bytes[rank_]
      << " bytes but expects " << recv_bytes[rank_];
  constexpr int kTag = 0x2a2a;
  const int64_t chunk = impl_->max_message;
  // Every pair exchanges max(1, ceil(bytes / chunk)) messages, even for 0 bytes, so a size the
  // peers disagree on is detected (truncation or a short count) instead of shifting the next
  // call's matching.
  auto pieces = [&](int64_t bytes) { return std::max<int64_t>(1, (bytes + chunk - 1) / chunk); };
  std::vector<MPI_Request> requests;
  std::vector<int64_t> expected;  // bytes per receive request, -1 for sends
  int64_t send_off = 0, recv_off = 0;
  const char* send_base = static_cast<const char*>(send);
  char* recv_base = static_cast<char*>(recv);
  std::vector<int64_t> send_at(size_), recv_at(size_);
  for (int p = 0; p < size_; ++p) {
    send_at[p] = send_off;
    recv_at[p] = recv_off;
    send_off += send_bytes[p];
    recv_off += recv_bytes[p];
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const int64_t n = recv_bytes[p];
    for (int64_t k = 0, off = 0; k < pieces(n); ++k, off += chunk) {
      const int len = static_cast<int>(std::max<int64_t>(0, std::min(chunk, n - off)));
      requests.emplace_back();
      expected.push_back(len);
      // Exactly len bytes: a longer message fails with MPI_ERR_TRUNCATE, a shorter one is
      // caught by the count check after the wait.
      const int rc = MPI_Irecv(recv_base + recv_at[p] + off, len, MPI_BYTE, p, kTag,
                               impl_->comm, &requests.back());
      Impl::post_check(*this, "all_to_all_v", rc, requests);
    }
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const int64_t n = send_bytes[p];
    for (int64_t k = 0, off = 0; k < pieces(n); ++k, off += chunk) {
      const int len = static_cast<int>(std::max<int64_t>(0, std::min(chunk, n - off)));
      requests.emplace_back();
      expected.push_back(-1);
      const int rc = MPI_Isend(send_base + send_at[p] + off, len, MPI_BYTE, p, kTag, impl_->comm,
                               &requests.back());
      Impl::post_check(*this, "all_to_all_v", rc, requests);
    }
  }
  if (send_bytes[rank_] > 0) {
    std::memcpy(recv_base + recv_at[rank_], send_base + send_at[rank_],
                static_cast<size_t>(send_bytes[rank_]));
  }
  std::vector<MPI_Status> statuses(requests.size());
  Impl::wait(*this, "all_to_all_v", requests, statuses.data());
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] < 0) continue;
    int got = 0;
    MPI_Get_count(&statuses[i], MPI_BYTE, &got);
    if (got != expected[i]) {
      fail(ErrorKind::kInternal,
           "mpi all_to_all_v " + on_rank() + ": rank " + std::to_string(statuses[i].MPI_SOURCE) +
               " sent a " + std::to_string(got) + "-byte piece where " +
               std::to_string(expected[i]) + " bytes were expected (recv_bytes disagree with the "
               "peer's send_bytes)");
    }
  }
}

void MpiCommunicator::all_to_all_counts(std::span<const int64_t> send_counts,
                                        std::span<int64_t> recv_counts) {
  check_usable("all_to_all_counts");
  CHECK(static_cast<int>(send_counts.size()) == size_ &&
        static_cast<int>(recv_counts.size()) == size_)
      << "all_to_all_counts on " << size_ << " ranks takes " << size_ << " entries each, got "
      << send_counts.size() << " and " << recv_counts.size();
  std::vector<MPI_Request> requests(1);
  const int rc = MPI_Ialltoall(send_counts.data(), 1, MPI_INT64_T, recv_counts.data(), 1,
                               MPI_INT64_T, impl_->comm, &requests[0]);
  Impl::post_check(*this, "all_to_all_counts", rc, requests);
  Impl::wait(*this, "all_to_all_counts", requests, nullptr);
}

void MpiCommunicator::broadcast(void* buffer, int64_t bytes, int root) {
  check_usable("broadcast");
  CHECK(root >= 0 && root < size_) << "broadcast root " << root << " is not a rank of "
                                   << size_;
  CHECK(bytes >= 0) << "broadcast: negative byte count " << bytes;
  if (bytes == 0) return barrier();
  std::vector<MPI_Request> requests;
  const int64_t chunk = impl_->max_message;
  for (int64_t off = 0; off < bytes; off += chunk) {
    const int len = static_cast<int>(std::min(chunk, bytes - off));
    requests.emplace_back();
    const int rc = MPI_Ibcast(static_cast<char*>(buffer) + off, len, MPI_BYTE, root, impl_->comm,
                              &requests.back());
    Impl::post_check(*this, "broadcast", rc, requests);
  }
  Impl::wait(*this, "broadcast", requests, nullptr);
}

void MpiCommunicator::barrier() {
  check_usable("barrier");
  std::vector<MPI_Request> requests(1);
  const int rc = MPI_Ibarrier(impl_->comm, &requests[0]);
  Impl::post_check(*this, "barrier", rc, requests);
  Impl::wait(*this, "barrier", requests, nullptr);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  check_usable("split");
  // Everyone learns everyone's (color, key) first: a bad color fails on every rank alike, and a
  // dead peer times out here instead of hanging in the blocking MPI_Comm_split.
  const int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(size_));
  gather("split", mine, all.data(), sizeof(mine));
  for (int p = 0; p < size_; ++p) {
    CHECK(all[2 * p] >= 0) << "split: rank " << p << " asked for color " << all[2 * p]
                           << "; colors must be >= 0";
  }
  auto impl = std::make_unique<Impl>();
  impl->max_message = impl_->max_message;
  const int rc = MPI_Comm_split(impl_->comm, color, key, &impl->comm);
  if (rc != MPI_SUCCESS) {
    fail(ErrorKind::kDevice, "mpi split failed " + on_rank() + ": " + mpi_error_string(rc));
  }
  MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(impl), timeout_));
}

}  // namespace deepinfer
