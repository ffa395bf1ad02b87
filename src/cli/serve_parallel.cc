// `deepinfer serve` under data / expert parallelism (serve_parallel.h).
#include "cli/serve_parallel.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "base/logging.h"
#include "engine/engine.h"
#include "io/config_parser.h"
#include "model/tiny_model.h"
#include "parallel/dp/dp_lockstep.h"
#include "parallel/dp/launcher.h"
#include "parallel/parallel_metrics.h"
#include "runtime/cpu_runner.h"
#include "runtime/runner_factory.h"

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

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", double(bytes) / double(1 << 20));
  return text;
}

ModelConfig serve_model_config(const EngineArgs& a) {
  return selects_builtin_model(a.model_dir) ? builtin_model_config(a.model_dir)
                                            : load_model_config(a.model_dir + "/config.json");
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
                  std::to_string(rank / cp) + " of " + std::to_string(dp);
  if (cp > 1) {
    s += cp_follower() ? ", context-parallel follower (CP rank " + std::to_string(groups.cp_rank) + " of " +
                             std::to_string(cp) + "; no server: its leader, rank " + std::to_string(rank / cp * cp) +
                             ", serves the replica)"
                       : ", context-parallel leader of " + std::to_string(cp) + " ranks (prefill chunks of at least " +
                             std::to_string(cp_leader ? cp_leader->min_tokens() : 0) + " tokens run on all of them)";
  }
  if (ep > 1) {
    const int first = rank / ep * ep;
    s += ", expert-parallel group " + std::to_string(rank / ep) + " (ranks " + std::to_string(first) + ".." +
         std::to_string(first + ep - 1) + ", " + std::to_string(ep) + " ranks)";
  }
  if (ep > 1 || cp > 1) {
    const int g = dp::step_group_size(ep, cp), first = rank / g * g;
    s += "; steps in lockstep with ranks " + std::to_string(first) + ".." + std::to_string(first + g - 1) +
         " over " + (world_comm ? world_comm->backend() : "?");
  } else {
    s += ", an independent replica (no collectives)";
  }
  return s;
}

std::string ServeParallel::expert_memory_plan() const {
  if (!expert_parallel) return "";
  const ExpertParallelMetrics m = expert_parallel->published_metrics();
  int64_t held = 0;
  for (int64_t l = 0; l < expert_parallel->n_layers(); ++l) {
    held += int64_t(expert_parallel->placement(l).experts_of(expert_parallel->rank()).size());
  }
  const int64_t per_layer = expert_parallel->n_layers() > 0 ? held / expert_parallel->n_layers() : 0;
  return "routed experts " + mib(m.expert_bytes) + " on this rank (" + std::to_string(per_layer) + " of " +
         std::to_string(expert_parallel->n_experts()) + " per layer, " + std::to_string(m.slots_per_rank) +
         " slots) of " + mib(model_expert_bytes) + " for the whole model; every other weight replicated";
}

std::string ServeParallel::metrics_text() const {
  std::string s;
  if (expert_parallel) {
    s += expert_parallel_metrics_text(expert_parallel->published_metrics(), model_expert_bytes);
  } else if (model_expert_bytes > 0) {
    s += routed_expert_metrics_text(1, model_expert_bytes, model_expert_bytes);
  }
  if (cp_leader) s += dp::cp_metrics_text(cp_leader->stats());
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
  CHECK(p.ep > 1 || (!args.has("eplb-interval") && !args.has("eplb-window") && !args.has("eplb-extra-slots")))
      << "--eplb-interval, --eplb-window and --eplb-extra-slots need --expert-parallel-size > 1";
  CHECK(p.cp > 1 || !args.has("cp-min-tokens")) << "--cp-min-tokens needs --context-parallel-size > 1";
  ExpertParallelOptions ep_options;
  ep_options.track_load = true;  // /metrics shows the imbalance with EPLB off too
  ep_options.eplb.interval = args.get_int("eplb-interval", 0);
  ep_options.eplb.window = args.get_int("eplb-window", ep_options.eplb.window);
  ep_options.eplb.extra_slots_per_rank = args.get_int("eplb-extra-slots", 0);
  CHECK(ep_options.eplb.interval >= 0 && ep_options.eplb.window >= 1 && ep_options.eplb.extra_slots_per_rank >= 0)
      << "--eplb-interval must be >= 0 (0: off), --eplb-window >= 1 and --eplb-extra-slots >= 0";
  const int64_t cp_min_tokens = args.get_int("cp-min-tokens", 256);
  CHECK(cp_min_tokens >= 1) << "--cp-min-tokens must be >= 1 (got " << cp_min_tokens << ")";
  if (!p.parallel()) {
    CHECK(!args.has("dp-rank-offset") && !args.has("internal-port-base"))
        << "--internal-port-base and --dp-rank-offset need --data-parallel-size, --expert-parallel-size or "
           "--context-parallel-size > 1";
    return std::nullopt;
  }
  CHECK_KIND(kUnsupported, engine_args.device == "cpu" || (p.ep == 1 && p.cp == 1))
      << "--expert-parallel-size and --context-parallel-size > 1 are served on device cpu only for now (the "
         "CUDA model has no expert-parallel dispatch or context-parallel forward wired in yet)";
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
  if (p.ep > 1 || p.cp > 1) {
    engine_args.collective_steps = true;
    // Drafting runs forwards of its own: off unless asked for (then the engine refuses it).
    if (!args.has("speculative-method")) engine_args.speculative_method = "none";
    const int me = p.world_comm->rank(), group = dp::step_group_size(p.ep, p.cp);
    p.lockstep = p.world_comm->split(me / group, me);
  }
  if (p.ep > 1) {
    const ModelConfig config = serve_model_config(engine_args);
    p.model_expert_bytes = model_routed_expert_bytes(config);
    // The Model and metrics share the EP group's communicator from here on.
    p.expert_parallel = ExpertParallel::create(std::shared_ptr<Communicator>(std::move(p.groups.ep)), config,
                                               ep_options);
    engine_args.model_options.expert_parallel = p.expert_parallel;
  }
  if (p.cp > 1) {
    if (p.groups.cp_rank == 0) {
      p.cp_leader = std::make_shared<dp::CpLeader>(std::move(p.groups.cp), cp_min_tokens);
      engine_args.cpu_step_driver = p.cp_leader;
    } else {
      p.cp_comm = std::move(p.groups.cp);
    }
  }
  return std::nullopt;
}

int run_serve_cp_follower(const EngineArgs& engine_args, ServeParallel& p) {
  ICHECK(p.cp_follower() && p.lockstep != nullptr && p.cp_comm != nullptr);
  // The leader's shutdown ends this rank (its last agreement says so); the launcher kills what
  // is left after the drain.
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  RunnerArgs r;
  r.device = "cpu";
  r.model_dir = engine_args.model_dir;
  r.dummy_weights = engine_args.dummy_weights;
  r.dummy_seed = engine_args.dummy_seed;
  r.model_options = engine_args.model_options;
  r.max_sequences = 1;
  std::unique_ptr<ModelRunner> runner = make_model_runner(r);
  const auto* cpu = dynamic_cast<const CpuRunner*>(runner.get());
  ICHECK(cpu != nullptr) << "a context-parallel follower runs the CPU model";
  LOG(INFO) << p.log_prefix() << "parallelism: " << p.describe();
  if (p.expert_parallel) {
    LOG(INFO) << p.log_prefix() << "memory plan: " << p.expert_memory_plan();
  }
  try {
    dp::run_cp_follower(cpu->model(), *p.lockstep, *p.cp_comm);
  } catch (const std::exception& e) {
    LOG(ERROR) << p.log_prefix() << "context-parallel follower stops: " << e.what();
    return 1;
  }
  return 0;
}

void start_rank0_front(const Args& args, ServeParallel& p) {
  if (args.has("dp-rank-offset") || !p.parallel() || p.world_comm == nullptr || p.world_comm->rank() != 0) return;
  // The user's mpirun: rank 0 runs the front on the user's address.
  const int64_t user_port = args.get_int("port", 8000);
  const int64_t base = args.get_int("internal-port-base", user_port + 1);
  dp::FrontOptions f = front_options(args, args.get("host", "127.0.0.1"), user_port);
  f.replicas = dp::rank_replicas(p.world, p.ep, p.cp, uint16_t(base));
  p.front = std::make_unique<dp::DpFront>(f);
  p.front_thread = std::thread([&p] { p.front->run(); });
  LOG(INFO) << p.log_prefix() << "front on http://" << f.host << ":" << p.front->port()
            << " (under mpirun: a rank's death ends the whole job, front included)";
}

}  // namespace deepinfer
