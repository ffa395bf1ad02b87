// MpiCommunicator in a build without MPI (a CUDA build on a machine without libopenmpi-dev):
// world() throws Error(kUnsupported) saying how to get MPI; no object can exist, so the other
// members are never reached. See src/parallel/CMakeLists.txt.
#include "base/error.h"
#include "parallel/mpi_communicator.h"

namespace deepinfer {

struct MpiCommunicator::Impl {};

namespace {
[[noreturn]] void no_mpi() {
  THROW(kUnsupported) << "this deepinfer was built without MPI: install openmpi-bin and "
                         "libopenmpi-dev (scripts/setup) and reconfigure, or launch device "
                         "ranks torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)";
}
}  // namespace

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() { no_mpi(); }
MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl, std::chrono::milliseconds timeout)
    : impl_(std::move(impl)), timeout_(timeout) {}
MpiCommunicator::~MpiCommunicator() = default;
void MpiCommunicator::set_timeout(std::chrono::milliseconds) { no_mpi(); }
void MpiCommunicator::set_max_message_bytes(int64_t) { no_mpi(); }
std::string MpiCommunicator::on_rank() const { return ""; }
void MpiCommunicator::check_usable(const char*) const { no_mpi(); }
void MpiCommunicator::fail(ErrorKind, const std::string&) { no_mpi(); }
void MpiCommunicator::gather(const char*, const void*, void*, int64_t) { no_mpi(); }
void MpiCommunicator::all_reduce(const void*, void*, int64_t, DType, ReduceOp) { no_mpi(); }
void MpiCommunicator::all_gather(const void*, void*, int64_t) { no_mpi(); }
void MpiCommunicator::all_to_all_v(const void*, std::span<const int64_t>, void*,
                                   std::span<const int64_t>) {
  no_mpi();
}
void MpiCommunicator::all_to_all_counts(std::span<const int64_t>, std::span<int64_t>) {
  no_mpi();
}
void MpiCommunicator::broadcast(void*, int64_t, int) { no_mpi(); }
void MpiCommunicator::barrier() { no_mpi(); }
std::unique_ptr<Communicator> MpiCommunicator::split(int, int) { no_mpi(); }

}  // namespace deepinfer
