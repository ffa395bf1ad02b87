// Launch: environment parsing, world communicator choice, parallel layout (see launch.h).
#include "parallel/launch.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "parallel/mpi_communicator.h"
#include "parallel/single_communicator.h"

#ifdef DEEPINFER_NCCL
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "parallel/nccl_communicator.h"
#include "parallel/tcp_store.h"
#endif

namespace deepinfer {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

int env_int(const char* name, int min_value) {
  const char* text = env(name);
  ICHECK(text != nullptr) << name << " unset";
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  CHECK(errno == 0 && end != text && *end == '\0' && v >= min_value && v <= (1L << 30))
      << "environment variable " << name << "='" << text << "' is not an integer >= "
      << min_value;
  return static_cast<int>(v);
}

}  // namespace

std::chrono::milliseconds comm_timeout_from_env() {
  const char* text = env("DEEPINFER_COMM_TIMEOUT_S");
  if (text == nullptr) return std::chrono::milliseconds(60'000);
  char* end = nullptr;
  errno = 0;
  const double s = std::strtod(text, &end);
  CHECK(errno == 0 && end != text && *end == '\0' && std::isfinite(s) && s > 0 && s < 1e7)
      << "DEEPINFER_COMM_TIMEOUT_S='" << text << "' is not a positive number of seconds";
  return std::chrono::milliseconds(std::max<long long>(1, std::llround(s * 1000)));
}

WorldInfo world_info_from_env() {
  WorldInfo info;
  if (env("OMPI_COMM_WORLD_SIZE") != nullptr) {
    info.under_mpi = true;
    info.size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    CHECK(env("OMPI_COMM_WORLD_RANK") != nullptr)
        << "OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not";
    info.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    info.local_rank =
        env("OMPI_COMM_WORLD_LOCAL_RANK") != nullptr ? env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0) : 0;
  } else if (env("WORLD_SIZE") != nullptr || env("RANK") != nullptr) {
    CHECK(env("WORLD_SIZE") != nullptr && env("RANK") != nullptr)
        << "torchrun-style launch needs both RANK and WORLD_SIZE (got "
        << (env("RANK") != nullptr ? "RANK only" : "WORLD_SIZE only") << ")";
    info.size = env_int("WORLD_SIZE", 1);
    info.rank = env_int("RANK", 0);
    info.local_rank = env("LOCAL_RANK") != nullptr ? env_int("LOCAL_RANK", 0) : info.rank;
    if (info.size > 1) {
      CHECK(env("MASTER_ADDR") != nullptr && env("MASTER_PORT") != nullptr)
          << "WORLD_SIZE=" << info.size << " without mpirun needs MASTER_ADDR and MASTER_PORT "
          << "(the rendezvous address of rank 0)";
      info.master_addr = env("MASTER_ADDR");
      info.master_port = env_int("MASTER_PORT", 1);
      CHECK(info.master_port <= 65535) << "MASTER_PORT=" << info.master_port << " is not a port";
    }
  }
  CHECK(info.rank < info.size) << "rank " << info.rank << " is not below the world size "
                               << info.size;
  return info;
}

std::unique_ptr<Communicator> make_world_communicator(CommMemory memory, void* cuda_stream) {
  const WorldInfo info = world_info_from_env();
#ifndef DEEPINFER_CUDA
  CHECK_KIND(kUnsupported, memory == CommMemory::kHost)
      << "a device-memory communicator needs a CUDA build (-DDEEPINFER_CUDA=ON)";
#endif
  if (info.size == 1) return std::make_unique<SingleCommunicator>(memory);
  if (memory == CommMemory::kHost) {
    CHECK_KIND(kUnsupported, info.under_mpi)
        << "the CPU backend runs " << info.size << " ranks over MPI only: launch with "
        << "`mpirun -np " << info.size << " ...` instead of RANK/WORLD_SIZE";
    return MpiCommunicator::world();
  }
#ifdef DEEPINFER_NCCL
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  CHECK_KIND(kDevice, devices > 0) << "rank " << info.rank << " sees no CUDA device";
  CUDA_CHECK(cudaSetDevice(info.local_rank % devices));  // one GPU per local rank
  if (info.under_mpi) return NcclCommunicator::bootstrap(MpiCommunicator::world(), stream);
  TcpStore store(info.master_addr, info.master_port, info.rank == 0, comm_timeout_from_env());
  return NcclCommunicator::bootstrap(store, info.rank, info.size, stream);
#else
  THROW(kUnsupported) << "a multi-rank device communicator needs NCCL (a CUDA build)";
#endif
}

void ParallelConfig::validate(int world_size) const {
  CHECK(dp >= 1 && ep >= 1 && cp >= 1)
      << "--data-parallel-size " << dp << ", --expert-parallel-size " << ep
      << " and --context-parallel-size " << cp << " must all be >= 1";
  CHECK(static_cast<int64_t>(dp) * cp == world_size)
      << "--data-parallel-size " << dp << " x --context-parallel-size " << cp << " = "
      << static_cast<int64_t>(dp) * cp << " must equal the number of ranks (" << world_size
      << ")";
  CHECK(world_size % ep == 0) << "--expert-parallel-size " << ep
                              << " does not divide the number of ranks (" << world_size << ")";
}

ParallelGroups make_parallel_groups(Communicator& world, const ParallelConfig& config) {
  config.validate(world.size());
  ParallelGroups groups;
  const int r = world.rank();
  groups.dp_index = r / config.cp;
  groups.cp_rank = r % config.cp;
  groups.ep_group = r / config.ep;
  groups.ep = world.split(groups.ep_group, r);
  groups.cp = world.split(groups.dp_index, r);
  return groups;
}

}  // namespace deepinfer
