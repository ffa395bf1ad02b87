// The data-parallel launcher (launcher.h): children per EP group, the front, signals.
#include "parallel/dp/launcher.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>

#include "base/error.h"
#include "base/logging.h"

extern char** environ;

namespace deepinfer::dp {

int step_group_size(int ep, int cp) { return std::lcm(ep, cp); }

std::vector<ReplicaAddress> rank_replicas(int world, int ep, int cp, uint16_t internal_port_base) {
  const int group = step_group_size(ep, cp);
  std::vector<ReplicaAddress> out;
  for (int r = 0; r < world; r += cp) out.push_back({"127.0.0.1", uint16_t(internal_port_base + r), r / group});
  return out;
}

std::vector<std::vector<std::string>> child_commands(const LaunchPlan& p) {
  const int world = p.dp * p.cp;
  CHECK(p.dp >= 1 && p.ep >= 1 && p.cp >= 1 && world % p.ep == 0)
      << "--expert-parallel-size " << p.ep << " must divide the world of " << world
      << " ranks (--data-parallel-size x --context-parallel-size)";
  const int group = step_group_size(p.ep, p.cp);  // divides world: ep and cp do
  CHECK(int(p.internal_port_base) + world <= 65535) << "--internal-port-base " << p.internal_port_base
                                                    << " leaves no room for " << world << " ranks";
  std::vector<std::vector<std::string>> out;
  for (int first = 0; first < world; first += group) {
    std::vector<std::string> argv;
    if (group > 1) {
      argv = {p.mpirun, "--oversubscribe"};
      if (p.as_root) argv.push_back("--allow-run-as-root");
      argv.insert(argv.end(), {"-np", std::to_string(group)});
    }
    argv.insert(argv.end(), {p.self, "serve"});
    argv.insert(argv.end(), p.serve_args.begin(), p.serve_args.end());
    argv.insert(argv.end(), {"--host", "127.0.0.1", "--internal-port-base", std::to_string(p.internal_port_base),
                             "--dp-rank-offset", std::to_string(first)});
    out.push_back(std::move(argv));
  }
  return out;
}

namespace {

pid_t spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);  // the launcher blocks SIGINT / SIGTERM; children do not
  posix_spawnattr_setpgroup(&attr, 0);       // their own process group: signals come from us
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], nullptr, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  CHECK(rc == 0) << "cannot start " << argv[0] << ": " << std::strerror(rc);
  return pid;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

}  // namespace

int run_launcher(LaunchPlan plan) {
  const std::vector<std::vector<std::string>> commands = child_commands(plan);
  plan.front.replicas = rank_replicas(plan.dp * plan.cp, plan.ep, plan.cp, plan.internal_port_base);
  // SIGINT / SIGTERM are taken by a sigwait thread (blocked here before any thread starts).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  DpFront front(plan.front);  // binds --port before the children load their models
  std::vector<pid_t> pids;
  for (size_t g = 0; g < commands.size(); ++g) {
    std::string line;
    for (const std::string& a : commands[g]) line += (line.empty() ? "" : " ") + a;
    LOG(INFO) << "data parallel: starting group " << g << ": " << line;
    pids.push_back(spawn(commands[g]));
  }
  std::mutex mu;
  std::vector<bool> alive(pids.size(), true);
  std::atomic<bool> failed_start{false}, ready{false}, stopping{false};
  auto any_alive = [&] {
    std::lock_guard<std::mutex> lock(mu);
    for (bool a : alive) {
      if (a) return true;
    }
    return false;
  };
  std::thread reaper([&] {
    while (any_alive()) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, 0);
      if (pid < 0) {
        if (errno == EINTR) continue;
        break;
      }
      std::lock_guard<std::mutex> lock(mu);
      for (size_t g = 0; g < pids.size(); ++g) {
        if (pids[g] != pid) continue;
        alive[g] = false;
        if (!stopping.load()) {
          LOG(WARNING) << "data parallel: group " << g << " (pid " << pid << ") " << describe_status(status)
                       << (ready.load() ? "; the front answers 503 for it" : " before it was ready");
          if (!ready.load()) failed_start.store(true);
        }
      }
    }
  });
  auto stop_children = [&](int sig) {
    stopping.store(true);
    std::lock_guard<std::mutex> lock(mu);
    for (size_t g = 0; g < pids.size(); ++g) {
      if (alive[g]) ::kill(pids[g], sig);
    }
  };
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    LOG(INFO) << "data parallel: " << strsignal(sig) << ": stopping the front and the ranks";
    stopping.store(true);
    front.stop();
  });
  std::thread serving([&] { front.run(); });

  // Ready once every replica answers; a child that exits first fails the launch.
  const int n_replicas = int(plan.front.replicas.size());
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(plan.startup_timeout_seconds);
  int rc = 0;
  while (!stopping.load()) {
    if (front.n_up() == n_replicas) {
      ready.store(true);
      LOG(INFO) << "data parallel: all " << n_replicas << " replicas are serving behind http://" << plan.front.host
                << ":" << front.port();
      break;
    }
    if (failed_start.load() || std::chrono::steady_clock::now() > deadline) {
      LOG(ERROR) << "data parallel: " << (failed_start.load() ? "a rank exited during start-up"
                                                               : "the ranks did not come up in time")
                 << "; stopping";
      rc = 1;
      kill(getpid(), SIGTERM);  // the signal thread stops the front
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  serving.join();
  signals.join();
  stop_children(SIGTERM);
  const auto kill_at = std::chrono::steady_clock::now() + std::chrono::duration<double>(plan.drain_seconds + 10);
  while (any_alive() && std::chrono::steady_clock::now() < kill_at) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (any_alive()) {
    LOG(WARNING) << "data parallel: killing the ranks still running";
    stop_children(SIGKILL);
  }
  reaper.join();
  return rc;
}

}  // namespace deepinfer::dp
