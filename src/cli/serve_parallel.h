// `deepinfer serve` with --data-parallel-size / --expert-parallel-size / --context-parallel-size
// (vLLM / SGLang spellings; parallel/dp/launcher.h describes the process model):
//   - not under mpirun and not a launched rank: the launcher (run_launcher) starts the ranks
//     and runs the front on --host / --port;
//   - a launched rank (--dp-rank-offset) or a rank under the user's own mpirun: this process is
//     global rank (offset + world rank). A CP group of --context-parallel-size ranks is one
//     replica: its CP rank 0 (the leader) serves it on 127.0.0.1:(internal-port-base + rank);
//     the other CP ranks are followers without a server (parallel/dp/cp_serve.h). Engines step
//     in lockstep (parallel/dp/dp_lockstep.h) over their step group, the lcm(ep, cp) contiguous
//     ranks that expert parallelism (MoE exchanges) and context parallelism (followers) tie
//     together, when --expert-parallel-size or --context-parallel-size > 1; under the user's
//     mpirun rank 0 also runs the front.
//   - expert parallelism: each rank's Model keeps only its expert-parallel slots' routed
//     experts (parallel/expert_parallel.h), EPLB re-places them every --eplb-interval steps
//     (off by default); the expert loads are always counted so /metrics shows the imbalance.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cli/args.h"
#include "engine/async_engine.h"
#include "parallel/communicator.h"
#include "parallel/dp/cp_serve.h"
#include "parallel/dp/dp_front.h"
#include "parallel/expert_parallel.h"
#include "parallel/launch.h"

namespace deepinfer {

struct EngineArgs;

struct ServeParallel {
  int dp = 1, ep = 1, cp = 1;
  int rank = 0, world = 1;            // global rank, and the world of all ranks (dp * cp)
  std::unique_ptr<Communicator> world_comm;
  ParallelGroups groups;               // groups.ep / groups.cp move into the objects below
  std::unique_ptr<Communicator> lockstep;  // the step group's agreement (ep > 1 or cp > 1)
  std::shared_ptr<ExpertParallel> expert_parallel;  // ep > 1 (the Model holds it too)
  int64_t model_expert_bytes = 0;      // the model's routed experts, one copy each (fp32)
  std::shared_ptr<dp::CpLeader> cp_leader;  // cp > 1, CP rank 0 (the runner's step driver)
  std::unique_ptr<Communicator> cp_comm;    // cp > 1, a follower's CP group
  std::unique_ptr<dp::DpFront> front;      // rank 0 under the user's mpirun
  std::thread front_thread;

  bool parallel() const { return dp > 1 || ep > 1 || cp > 1; }
  bool cp_follower() const { return cp > 1 && groups.cp_rank != 0; }
  ~ServeParallel();
  // "[rank 1] " in a parallel serve, "" otherwise.
  std::string log_prefix() const;
  // The startup summary's parallelism line.
  std::string describe() const;
  // The memory plan of expert parallelism (this rank's routed experts vs the model's), "" without.
  std::string expert_memory_plan() const;
  // /metrics lines of expert and context parallelism (parallel_metrics.h, cp_serve.h);
  // thread-safe. A single-process CPU serve shows its routed-expert bytes as ep size 1.
  std::string metrics_text() const;
  // Wraps the engine for lockstep when ep > 1 or cp > 1.
  std::unique_ptr<StepEngine> wrap(std::unique_ptr<StepEngine> engine);
};

// Reads the parallelism flags. Returns the launcher's exit code when this process was the
// launcher (the ranks ran as children), else nullopt with `p` set up for this rank and
// host / port changed to the rank's internal address; `engine_args` get collective steps when
// ep > 1 or cp > 1 (speculative decoding off unless asked for, which the engine then refuses),
// the ExpertParallel in model_options when ep > 1, and the CP leader as the CPU runner's step
// driver on a CP group's rank 0.
std::optional<int> setup_serve_parallel(const Args& args, int argc, char** argv, std::string& host, int64_t& port,
                                        EngineArgs& engine_args, ServeParallel& p);

// A CP follower's whole life (p.cp_follower()): loads the model of `engine_args` and runs
// dp::run_cp_follower until the step group ends. Returns the exit code.
int run_serve_cp_follower(const EngineArgs& engine_args, ServeParallel& p);

// Starts the front of the user's-mpirun mode on rank 0 (after the rank's own server is bound).
void start_rank0_front(const Args& args, ServeParallel& p);

}  // namespace deepinfer
