// Multi-process launch: who am I (WorldInfo from the launcher's environment), the world
// communicator, the parallel configuration and its sub-communicators.
//
// One process per device. Launchers:
//   mpirun -np N ...          Open MPI sets OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK
//   torchrun-style            RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
//                             (device backend only: NCCL's unique id goes through a TcpStore)
//   nothing                   rank 0 of 1
//
// Parallel layout (DeepInfer's, parallel_state.py, without its ep > dp*cp case):
//   world = dp * cp ranks; rank = dp_index * cp + cp_rank (a CP group is cp contiguous ranks,
//   the members of one attention data-parallel replica);
//   ep divides world; EP groups are contiguous blocks of ep ranks (rank / ep).
// DeepInfer also allows world = ep > dp * cp; we do not need it and reject it with a clear error.
// Whether ep divides the expert count is checked by the model (the EP code), not here.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace deepinfer {

// DEEPINFER_COMM_TIMEOUT_S (seconds, may be fractional; default 60): how long a collective may
// take before the communicator gives up and throws. Bad values throw Error(kInvalidInput).
std::chrono::milliseconds comm_timeout_from_env();

struct WorldInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;       // rank within the node (picks the GPU)
  bool under_mpi = false;   // started by mpirun (Open MPI)
  std::string master_addr;  // torchrun-style rendezvous (empty under MPI or alone)
  int master_port = 0;
};

// Reads the launcher's environment; throws Error(kInvalidInput) on malformed or inconsistent
// values (e.g. RANK without WORLD_SIZE, RANK >= WORLD_SIZE).
WorldInfo world_info_from_env();

// The world communicator for this process: SingleCommunicator when the world has one rank,
// MpiCommunicator for kHost under mpirun, NcclCommunicator for kDevice (CUDA builds; bootstrapped
// over MPI under mpirun, else over a TcpStore at MASTER_ADDR:MASTER_PORT). cuda_stream is the
// cudaStream_t the NCCL collectives run on (nullptr: the legacy default stream). A multi-rank
// device communicator first selects GPU local_rank (mod the visible device count).
std::unique_ptr<Communicator> make_world_communicator(CommMemory memory,
                                                      void* cuda_stream = nullptr);

struct ParallelConfig {
  int dp = 1;  // attention data-parallel replicas (--data-parallel-size)
  int ep = 1;  // ranks per MoE expert-parallel group (--expert-parallel-size)
  int cp = 1;  // ranks per context-parallel prefill group (--context-parallel-size)

  // Throws Error(kInvalidInput) unless dp, ep, cp >= 1, dp * cp == world_size and ep divides
  // world_size; the message names the flags and the world size.
  void validate(int world_size) const;
};

// This rank's place in the layout and its sub-communicators (collective over `world`: every
// rank calls it with the same config).
struct ParallelGroups {
  int dp_index = 0;  // which attention replica: world.rank() / cp
  int cp_rank = 0;   // rank within the CP group: world.rank() % cp
  int ep_group = 0;  // which EP group: world.rank() / ep
  std::unique_ptr<Communicator> ep;  // the EP group (size ep)
  std::unique_ptr<Communicator> cp;  // the CP group (size cp)
};
ParallelGroups make_parallel_groups(Communicator& world, const ParallelConfig& config);

}  // namespace deepinfer
