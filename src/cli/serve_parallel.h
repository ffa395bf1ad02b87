// `deepinfer serve` with --data-parallel-size / --expert-parallel-size / --context-parallel-size
// (vLLM / SGLang spellings; parallel/dp/launcher.h describes the process model):
//   - not under mpirun and not a launched rank: the launcher (run_launcher) starts the ranks
//     and runs the front on --host / --port;
//   - a launched rank (--dp-rank-offset) or a rank under the user's own mpirun: this process
//     serves rank (offset + world rank) on 127.0.0.1:(internal-port-base + that rank), its
//     engine in lockstep with its expert-parallel group (parallel/dp/dp_lockstep.h) when
//     --expert-parallel-size > 1; under the user's mpirun rank 0 also runs the front.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cli/args.h"
#include "engine/async_engine.h"
#include "parallel/communicator.h"
#include "parallel/dp/dp_front.h"
#include "parallel/launch.h"

namespace deepinfer {

struct EngineArgs;

struct ServeParallel {
  int dp = 1, ep = 1, cp = 1;
  int rank = 0, world = 1;            // global rank, and the world of all replicas
  std::unique_ptr<Communicator> world_comm;
  ParallelGroups groups;
  std::unique_ptr<Communicator> lockstep;  // the EP group's step agreement (ep > 1)
  std::unique_ptr<dp::DpFront> front;      // rank 0 under the user's mpirun
  std::thread front_thread;

  bool parallel() const { return dp > 1 || ep > 1 || cp > 1; }
  ~ServeParallel();
  // "[rank 1] " in a parallel serve, "" otherwise.
  std::string log_prefix() const;
  // The startup summary's parallelism line.
  std::string describe() const;
  // Wraps the engine for lockstep when ep > 1.
  std::unique_ptr<StepEngine> wrap(std::unique_ptr<StepEngine> engine);
};

// Reads the parallelism flags. Returns the launcher's exit code when this process was the
// launcher (the ranks ran as children), else nullopt with `p` set up for this rank and
// host / port changed to the rank's internal address; `engine_args` get collective steps when
// ep > 1 (speculative decoding off unless asked for, which the engine then refuses).
std::optional<int> setup_serve_parallel(const Args& args, int argc, char** argv, std::string& host, int64_t& port,
                                        EngineArgs& engine_args, ServeParallel& p);

// Starts the front of the user's-mpirun mode on rank 0 (after the rank's own server is bound).
void start_rank0_front(const Args& args, ServeParallel& p);

}  // namespace deepinfer
