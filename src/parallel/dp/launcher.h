// The data-parallel launcher of `deepinfer serve --data-parallel-size D [--expert-parallel-size
// E]` started outside mpirun (issue 19 deliverable 7). One process per rank (device); each
// rank runs its own `deepinfer serve` on an internal port (base + rank, 127.0.0.1) and this
// process runs the front (dp_front.h) on the user's --host / --port.
//
// Failure domains: every step group (G = lcm(E, C) contiguous ranks: an expert-parallel group
// steps together, a context-parallel group of C ranks is one replica, cli/serve_parallel.h) is
// started as its own job, so that a rank that dies takes down only its group (mpirun ends a job
// when one of its processes dies):
//   G == 1  each replica is a plain child process `deepinfer serve ... --internal-port-base P
//           --dp-rank-offset r` (no MPI at all: the replicas share nothing);
//   G > 1   each group g is `mpirun --oversubscribe [--allow-run-as-root] -np G deepinfer serve
//           ... --internal-port-base P --dp-rank-offset g*G` (its MPI world is the step group).
// Only CP rank 0 of each CP group serves HTTP (the replica); the front routes to those.
// --allow-run-as-root is added only when running as uid 0. $DEEPINFER_MPIRUN names another
// mpirun. Children get their own process group; SIGINT / SIGTERM to the launcher stop the
// front and are passed on (mpirun forwards them to its ranks); children still alive after
// drain_seconds + 10 s are killed. A child that exits while the front runs is logged (its
// group's requests were already answered 503 by the front); one that exits before every
// replica answered makes the launch fail.
//
// Started under mpirun instead (OMPI_COMM_WORLD_SIZE set: `mpirun -np D*C deepinfer serve
// --data-parallel-size D ...`), there is no launcher: every rank serves its internal port and
// rank 0 also runs the front (cli/serve.cc). That mode cannot survive a rank's death: mpirun
// then ends the whole job, front included.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/dp/dp_front.h"

namespace deepinfer::dp {

struct LaunchPlan {
  int dp = 1, ep = 1, cp = 1;
  std::string self;                     // this executable (/proc/self/exe)
  std::vector<std::string> serve_args;  // the user's serve options, less --host / --port
  uint16_t internal_port_base = 0;      // rank r serves 127.0.0.1:(base + r)
  std::string mpirun = "mpirun";
  bool as_root = false;                 // add --allow-run-as-root
  double startup_timeout_seconds = 900;
  double drain_seconds = 30;
  FrontOptions front;                   // host, port, timeouts (replicas filled in here)
};

// lcm(ep, cp): the ranks that step together (one job of the launcher).
int step_group_size(int ep, int cp);
// The argv of every child process (one per step group; per replica when that is one rank).
std::vector<std::vector<std::string>> child_commands(const LaunchPlan& plan);
// The front's replicas: the CP leaders r = 0, cp, 2cp, ... of the world's ranks, on
// 127.0.0.1:(base + r), failure group r / step_group_size(ep, cp).
std::vector<ReplicaAddress> rank_replicas(int world, int ep, int cp, uint16_t internal_port_base);

// Starts the children, serves the front until a signal, stops the children. Returns the
// process exit code.
int run_launcher(LaunchPlan plan);

}  // namespace deepinfer::dp
