// `deepinfer serve` under data / expert parallelism (serve_parallel.h).
#include "cli/serve_parallel.h"

#include <unistd.h>

#include <filesystem>

#include "base/error.h"
#include "base/logging.h"
#include "engine/engine.h"
#include "parallel/dp/dp_lockstep.h"
#include "parallel/dp/launcher.h"

namespace deepinfer {
namespace {

dp::FrontOptions front_options(const Args& args, const std::string& host, int64_t port) {
  dp::FrontOptions f;
  f.host = host;
  f.port = uint16_t(port);
  f.poll_interval_seconds = args.get_double("dp-poll-interval", f.poll_interval_seconds);
  f.health_timeout_seconds = args.get_double("dp-health-timeout", f.health_timeout_seconds);
  f.request_timeout_seconds = args.get_double("dp-request-timeout", f.request_timeout_seconds);
  CHECK(f.poll_interval_seconds > 0 && f.health_timeout_seconds > 0 && f.request_timeout_seconds >= 0)
      << "--dp-poll-interval and --dp-health-timeout must be > 0, --dp-request-timeout >= 0";
  return f;
}

// The user's serve options for a rank: argv[2..] less --host / --port (the launcher gives the
// rank its internal address).
std::vector<std::string> rank_args(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--host" || a == "--port") {
      ++i;
      continue;
    }
    if (a.rfind("--host=", 0) == 0 || a.rfind("--port=", 0) == 0) continue;
    out.push_back(a);
  }
  return out;
}

}  // namespace

ServeParallel::~ServeParallel() {
  if (front) front->stop();
  if (front_thread.joinable()) front_thread.join();
}

std::string ServeParallel::log_prefix() const {
  return parallel() ? "[rank " + std::to_string(rank) + "] " : std::string();
}

std::string ServeParallel::describe() const {
  if (!parallel()) return "single device (no tensor / expert / data parallelism)";
  std::string s = "rank " + std::to_string(rank) + " of " + std::to_string(world) + ": data-parallel replica " +
                  std::to_string(rank) + " of " + std::to_string(dp);
  if (ep > 1) {
    const int first = rank / ep * ep;
    s += ", expert-parallel group " + std::to_string(rank / ep) + " (ranks " + std::to_string(first) + ".." +
         std::to_string(first + ep - 1) + ", " + std::to_string(ep) + " ranks; steps in lockstep over " +
         (world_comm ? world_comm->backend() : "?") + ")";
  } else {
    s += ", an independent replica (no collectives)";
  }
  return s;
}

std::unique_ptr<StepEngine> ServeParallel::wrap(std::unique_ptr<StepEngine> engine) {
  if (!lockstep) return engine;
  return std::make_unique<dp::LockstepEngine>(std::move(engine), std::move(lockstep));
}

std::optional<int> setup_serve_parallel(const Args& args, int argc, char** argv, std::string& host, int64_t& port,
                                        EngineArgs& engine_args, ServeParallel& p) {
  p.dp = int(args.get_int("data-parallel-size", 1));
  p.ep = int(args.get_int("expert-parallel-size", 1));
  p.cp = int(args.get_int("context-parallel-size", 1));
  CHECK(p.dp >= 1 && p.ep >= 1 && p.cp >= 1)
      << "--data-parallel-size, --expert-parallel-size and --context-parallel-size must be >= 1";
  if (!p.parallel()) {
    CHECK(!args.has("dp-rank-offset") && !args.has("internal-port-base"))
        << "--internal-port-base and --dp-rank-offset need --data-parallel-size or --expert-parallel-size > 1";
    return std::nullopt;
  }
  CHECK_KIND(kUnsupported, p.cp == 1)
      << "--context-parallel-size " << p.cp << " is not served yet: context-parallel prefill exists as "
         "Model::forward_context_parallel but serve does not drive its follower ranks; use "
         "--context-parallel-size 1";
  const WorldInfo info = world_info_from_env();
  const bool launched = args.has("dp-rank-offset");
  const int64_t base = args.get_int("internal-port-base", port > 0 ? port + 1 : 0);
  CHECK(base > 0 && base < 65536) << "--internal-port-base must be given (1..65535) when --port is 0";
  if (!launched && !info.under_mpi) {  // the launcher
    dp::LaunchPlan plan;
    plan.dp = p.dp;
    plan.ep = p.ep;
    plan.cp = p.cp;
    plan.self = std::filesystem::read_symlink("/proc/self/exe").string();
    plan.serve_args = rank_args(argc, argv);
    plan.internal_port_base = uint16_t(base);
    if (const char* m = std::getenv("DEEPINFER_MPIRUN")) plan.mpirun = m;
    plan.as_root = ::geteuid() == 0;
    plan.drain_seconds = args.get_double("drain-seconds", plan.drain_seconds);
    plan.front = front_options(args, host, port);
    // child_commands gives every rank its --internal-port-base: drop the user's copy
    std::vector<std::string> cleaned;
    for (size_t i = 0; i < plan.serve_args.size(); ++i) {
      const std::string& a = plan.serve_args[i];
      if (a == "--internal-port-base") {
        ++i;
        continue;
      }
      if (a.rfind("--internal-port-base=", 0) == 0) continue;
      cleaned.push_back(a);
    }
    plan.serve_args = std::move(cleaned);
    return dp::run_launcher(std::move(plan));
  }
  // A rank.
  p.world_comm = make_world_communicator(CommMemory::kHost);
  const int offset = int(args.get_int("dp-rank-offset", 0));
  ParallelConfig config;
  config.ep = p.ep;
  config.cp = p.cp;
  // A launched rank's MPI world is its EP group (or itself); under the user's mpirun, all ranks.
  config.dp = launched ? p.world_comm->size() / p.cp : p.dp;
  config.validate(p.world_comm->size());
  p.groups = make_parallel_groups(*p.world_comm, config);
  p.rank = offset + p.world_comm->rank();
  p.world = launched ? p.dp * p.cp : p.world_comm->size();
  CHECK(base + p.world <= 65536) << "--internal-port-base " << base << " leaves no room for " << p.world << " ranks";
  host = "127.0.0.1";
  port = base + p.rank;
  if (p.ep > 1) {
    engine_args.collective_steps = true;
    // Drafting runs forwards of its own: off unless asked for (then the engine refuses it).
    if (!args.has("speculative-method")) engine_args.speculative_method = "none";
    p.lockstep = p.groups.ep->split(0, p.groups.ep->rank());
  }
  return std::nullopt;
}

void start_rank0_front(const Args& args, ServeParallel& p) {
  if (args.has("dp-rank-offset") || !p.parallel() || p.world_comm == nullptr || p.world_comm->rank() != 0) return;
  // The user's mpirun: rank 0 runs the front on the user's address.
  const int64_t user_port = args.get_int("port", 8000);
  const int64_t base = args.get_int("internal-port-base", user_port + 1);
  dp::FrontOptions f = front_options(args, args.get("host", "127.0.0.1"), user_port);
  f.replicas = dp::rank_replicas(p.world, p.ep, uint16_t(base));
  p.front = std::make_unique<dp::DpFront>(f);
  p.front_thread = std::thread([&p] { p.front->run(); });
  LOG(INFO) << p.log_prefix() << "front on http://" << f.host << ":" << p.front->port()
            << " (under mpirun: a rank's death ends the whole job, front included)";
}

}  // namespace deepinfer
