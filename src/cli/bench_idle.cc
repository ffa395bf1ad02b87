#include "cli/bench_idle.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>

#include "engine/engine.h"

namespace deepinfer {
namespace {

using Clock = std::chrono::steady_clock;

struct IdlePoint {
  bool overlap = false;
  std::string device;
  int64_t concurrency = 0, n_steps = 0, n_tokens = 0;
  double wall_s = 0, busy_s = 0;
};

IdlePoint run_idle(const EngineArgs& base, bool overlap, int64_t concurrency, int64_t input_len,
                   int64_t output_len, uint64_t seed) {
  EngineArgs args = base;
  args.overlap = overlap;
  args.max_num_seqs = concurrency;
  Engine engine(args);
  const int64_t vocab = engine.model_config().vocab_size;
  std::mt19937_64 gen(seed);
  for (int64_t i = 0; i < concurrency; ++i) {
    EngineRequest r;
    r.id = "idle-" + std::to_string(i);
    r.prompt.resize(static_cast<size_t>(input_len));
    for (auto& t : r.prompt) t = static_cast<int32_t>(gen() % static_cast<uint64_t>(vocab));
    r.params.temperature = 0.0f;
    r.params.max_tokens = output_len;
    r.params.ignore_eos = true;
    engine.add_request(std::move(r));
  }
  std::map<std::string, bool> started;
  IdlePoint p;
  p.overlap = overlap;
  p.device = engine.runner().name();
  p.concurrency = concurrency;
  // With overlap a step is in flight when step() returns: the window starts after the
  // steps already done (stats.n_steps_done, stats.busy_seconds); the step in flight started
  // a little before the window, so its busy time makes the idle time slightly smaller.
  bool in_window = false;
  Clock::time_point w0;
  double busy0 = 0;
  int64_t steps0 = 0, tokens = 0;
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) {
      if (!out.new_tokens.empty()) started[out.id] = true;
      if (in_window) tokens += static_cast<int64_t>(out.new_tokens.size());
    }
    if (!in_window && static_cast<int64_t>(started.size()) == concurrency) {
      in_window = true;
      w0 = Clock::now();
      busy0 = engine.stats().busy_seconds;
      steps0 = engine.stats().n_steps_done;
    }
  }
  if (!in_window) return p;  // some request produced no token
  p.wall_s = std::chrono::duration<double>(Clock::now() - w0).count();
  p.busy_s = engine.stats().busy_seconds - busy0;
  p.n_steps = engine.stats().n_steps_done - steps0;
  p.n_tokens = tokens;
  return p;
}

}  // namespace

std::string idle_table(const EngineArgs& base, int64_t c, int64_t input_len, int64_t output_len, uint64_t seed) {
  std::ostringstream table;
  table << "\nBackend idle time between decode steps (" << c << " requests, in/out " << input_len << "/"
        << output_len << "; busy = "
        << (base.device == "cuda" ? "device time between CUDA events around each forward"
                                  : "forward wall time on the CPU worker")
        << ", idle = step-loop wall - busy):\n\n"
        << "| overlap | backend | decode steps | wall ms/step | busy ms/step | idle ms/step | idle % | "
           "decode tok/s |\n|---|---|---|---|---|---|---|---|\n";
  char line[512];
  for (bool overlap : {true, false}) {
    const IdlePoint p = run_idle(base, overlap, c, input_len, output_len, seed);
    const double n = static_cast<double>(std::max<int64_t>(p.n_steps, 1));
    std::snprintf(line, sizeof(line), "| %s | %s | %lld | %.3f | %.3f | %.3f | %.1f | %.1f |\n",
                  overlap ? "on" : "off", p.device.c_str(), static_cast<long long>(p.n_steps),
                  p.wall_s * 1e3 / n, p.busy_s * 1e3 / n, (p.wall_s - p.busy_s) * 1e3 / n,
                  p.wall_s > 0 ? 100.0 * (p.wall_s - p.busy_s) / p.wall_s : 0.0,
                  p.wall_s > 0 ? static_cast<double>(p.n_tokens) / p.wall_s : 0.0);
    table << line;
  }
  return table.str();
}

}  // namespace deepinfer
