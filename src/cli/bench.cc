#include "cli/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/args.h"
#include "cli/bench_fairness.h"
#include "engine/engine.h"

namespace deepinfer {
namespace {

using Clock = std::chrono::steady_clock;

struct SweepPoint {
  int64_t concurrency = 0;
  double wall_s = 0, ttft_p50 = 0, ttft_p99 = 0, tpot_mean = 0, out_tok_s = 0, user_tok_s = 0;
  int64_t n_out_tokens = 0;
  std::string device;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      out.push_back(std::stoll(item));
    } catch (const std::logic_error&) {
      THROW(kInvalidInput) << "--concurrency: '" << item << "' is not a number";
    }
    CHECK(out.back() >= 1) << "--concurrency values must be >= 1";
  }
  CHECK(!out.empty()) << "--concurrency is empty";
  return out;
}

// Backend idle time between decode steps, for one overlap setting: `concurrency` requests
// all admitted at once; the window starts once every request has its first token (prefill
// done) and ends when they finish, so it covers decode steps only.
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

SweepPoint run_point(const EngineArgs& base, int64_t concurrency, int64_t n_prompts, int64_t input_len,
                     int64_t output_len, uint64_t seed) {
  EngineArgs args = base;
  args.max_num_seqs = concurrency;
  Engine engine(args);
  const int64_t vocab = engine.model_config().vocab_size;
  std::mt19937_64 gen(seed);
  const auto t0 = Clock::now();
  std::map<std::string, double> first, last;
  std::map<std::string, int64_t> counts;
  for (int64_t i = 0; i < n_prompts; ++i) {
    EngineRequest r;
    r.id = "bench-" + std::to_string(i);
    r.prompt.resize(input_len);
    for (auto& t : r.prompt) t = static_cast<int32_t>(gen() % static_cast<uint64_t>(vocab));
    r.params.temperature = 0.0f;
    r.params.max_tokens = output_len;
    r.params.ignore_eos = true;
    engine.add_request(std::move(r));
  }
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) {
      const double now = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!out.new_tokens.empty()) {
        if (!first.count(out.id)) first[out.id] = now;
        last[out.id] = now;
        counts[out.id] += static_cast<int64_t>(out.new_tokens.size());
      }
    }
  }
  SweepPoint p;
  p.device = engine.runner().name();
  p.concurrency = concurrency;
  p.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> ttft, tpot;
  for (const auto& [id, t] : first) {
    ttft.push_back(t);
    p.n_out_tokens += counts[id];
    if (counts[id] > 1) tpot.push_back((last[id] - t) / static_cast<double>(counts[id] - 1));
  }
  p.ttft_p50 = percentile(ttft, 0.5);
  p.ttft_p99 = percentile(ttft, 0.99);
  for (double v : tpot) p.tpot_mean += v / static_cast<double>(tpot.size());
  p.out_tok_s = static_cast<double>(p.n_out_tokens) / p.wall_s;
  p.user_tok_s = p.tpot_mean > 0 ? 1.0 / p.tpot_mean : 0.0;
  return p;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--fairness") return cmd_bench_fairness(argc, argv);
  }
  std::set<std::string> names = {"model", "input-len", "output-len", "num-prompts", "concurrency", "seed",
                                 "numerics", "out", "max-num-batched-tokens", "max-model-len",
                                 "max-prefill-tokens-with-decodes", "long-prefill-token-threshold"};
  names.insert(kDeviceOptions.begin(), kDeviceOptions.end());
  std::set<std::string> flags = {"dummy-weights", "batch-invariant", "no-overlap", "no-overlap-table"};
  flags.insert(kDeviceFlags.begin(), kDeviceFlags.end());
  Args args(argc, argv, 2, names, flags);
  EngineArgs base;
  base.model_dir = args.get("model");
  base.dummy_weights = args.has("dummy-weights");
  CHECK(!base.dummy_weights || !base.model_dir.empty()) << "--dummy-weights needs --model DIR (its config.json)";
  base.model_options.numerics = parse_numerics(args.get("numerics", "official"));
  base.model_options.batch_invariant = args.has("batch-invariant");
  base.overlap = !args.has("no-overlap");
  base.max_num_batched_tokens = args.get_int("max-num-batched-tokens", 2048);
  base.max_model_len = args.get_int("max-model-len", 0);
  apply_prefill_options(args, base);
  apply_device_options(args, base);
  const int64_t input_len = args.get_int("input-len", 128);
  const int64_t output_len = args.get_int("output-len", 32);
  const int64_t n_prompts = args.get_int("num-prompts", 32);
  CHECK(input_len >= 1 && output_len >= 1 && n_prompts >= 1) << "lengths and --num-prompts must be >= 1";
  const auto sweep = parse_list(args.get("concurrency", "1,4,16"));
  const uint64_t seed = static_cast<uint64_t>(args.get_int("seed", 0));

  std::vector<SweepPoint> points;
  for (int64_t c : sweep) points.push_back(run_point(base, c, n_prompts, input_len, output_len, seed));

  std::ostringstream table;
  table << "Backend: " << points.front().device << (base.overlap ? "" : ", overlap off") << "\n\n";
  table << "| concurrency | requests | in/out tokens | wall s | TTFT p50 ms | TTFT p99 ms | TPOT ms | "
           "out tok/s per device | tok/s per user |\n|---|---|---|---|---|---|---|---|---|\n";
  char line[512];
  for (const SweepPoint& p : points) {
    std::snprintf(line, sizeof(line), "| %lld | %lld | %lld/%lld | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
                  static_cast<long long>(p.concurrency), static_cast<long long>(n_prompts),
                  static_cast<long long>(input_len), static_cast<long long>(output_len), p.wall_s,
                  p.ttft_p50 * 1e3, p.ttft_p99 * 1e3, p.tpot_mean * 1e3, p.out_tok_s, p.user_tok_s);
    table << line;
  }
  if (!args.has("no-overlap-table")) {
    // Overlap on vs off at the sweep's largest concurrency, decode steps only.
    const int64_t c = *std::max_element(sweep.begin(), sweep.end());
    table << "\nBackend idle time between decode steps (" << c << " requests, in/out " << input_len << "/"
          << output_len << "; busy = " << (base.device == "cuda" ? "device time between CUDA events around each forward"
                                                                  : "forward wall time on the CPU worker")
          << ", idle = step-loop wall - busy):\n\n"
          << "| overlap | backend | decode steps | wall ms/step | busy ms/step | idle ms/step | idle % | "
             "decode tok/s |\n|---|---|---|---|---|---|---|---|\n";
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
  }
  std::fputs(table.str().c_str(), stdout);
  if (args.has("out")) {
    const std::string prefix = args.get("out");
    std::ofstream(prefix + ".md") << table.str();
    std::ofstream csv(prefix + ".csv");
    csv << "concurrency,out_tok_s_per_device,tok_s_per_user,ttft_p50_s,tpot_s\n";
    for (const SweepPoint& p : points) {
      csv << p.concurrency << "," << p.out_tok_s << "," << p.user_tok_s << "," << p.ttft_p50 << ","
          << p.tpot_mean << "\n";
    }
    csv.close();
    const std::string cmd = "python3 " + std::string(DEEPINFER_SOURCE_DIR) + "/tools/plot_bench.py '" +
                            prefix + ".csv' '" + prefix + ".png'";
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "deepinfer bench: plotting failed (is matplotlib installed?); table and CSV written\n");
    }
  }
  return 0;
}

}  // namespace deepinfer
