#include "cli/bench_fairness.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/args.h"
#include "cli/bench_engine.h"
#include "cli/bench_traffic.h"
#include "engine/engine.h"
#include "model/tiny_model.h"

namespace deepinfer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The nearest-rank p-quantile (p in [0, 1]) of this table (bench_metrics.h percentile() is
// numpy's interpolated one, in percent).
double nearest_rank(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * double(v.size() - 1) + 0.5));
  return v[i];
}

struct FairnessResult {
  std::string device;
  double long_alone_s = 0;     // long prompt's TTFT on an idle engine
  double stream_itl_idle_p50 = 0;  // streams' ITL before the long prompt arrives
  std::vector<double> itl;     // streams' gaps while the long prompt is prefilled
  double short_ttft = 0;       // short request arriving during the long prefill
  double long_ttft = 0;        // long prompt's TTFT with streams running
  double step_max = 0;         // longest step (step() return to return) in the window
  int64_t n_steps = 0;         // steps in the window
};

struct Options {
  int64_t streams = 4, stream_prompt = 64, long_len = 20000, short_len = 16, warmup_steps = 8;
  int64_t short_after_steps = 2;  // steps into the long prefill when the short request arrives
  uint64_t seed = 0;
};

// A long prompt alone on an idle engine: its time to first token, and the steps' durations
// (step() return to return: the cost of a chunk grows with the context before it).
struct AloneResult {
  double ttft = 0;
  std::vector<double> steps;
};

AloneResult run_alone(const EngineArgs& args, const Options& o) {
  Engine engine(args);
  std::mt19937_64 gen(o.seed);
  const int64_t vocab = engine.model_config().vocab_size;
  AloneResult res;
  const auto t0 = Clock::now();
  engine.add_request(bench_request("long", random_token_ids(gen, o.long_len, vocab), 1));
  double prev = 0;
  while (engine.has_unfinished()) {
    engine.step();
    const double now = seconds_since(t0);
    res.steps.push_back(now - prev);
    prev = now;
  }
  res.ttft = prev;
  return res;
}

// `streams` decoding streams; after warmup_steps the long prompt arrives, short_after_steps
// steps later a short one. The window is from the long prompt's arrival to its first token.
FairnessResult run_mix(const EngineArgs& args, const Options& o) {
  Engine engine(args);
  FairnessResult res;
  res.device = engine.runner().name();
  std::mt19937_64 gen(o.seed + 1);
  const int64_t vocab = engine.model_config().vocab_size;
  const int64_t stream_tokens = engine.max_model_len() - o.stream_prompt;
  for (int64_t i = 0; i < o.streams; ++i) {
    engine.add_request(bench_request("stream-" + std::to_string(i), random_token_ids(gen, o.stream_prompt, vocab),
                                    stream_tokens));
  }
  std::map<std::string, double> last;  // stream id -> time of its last token
  std::vector<double> idle_itl;
  const auto t0 = Clock::now();
  int64_t step = 0, window_step = -1;
  double long_arrival = -1, short_arrival = -1, prev_step_end = 0;
  bool long_done = false, short_done = false;
  while (!(long_done && short_done)) {
    ICHECK(engine.has_unfinished());
    const std::vector<RequestOutput> outs = engine.step();
    const double now = seconds_since(t0);
    if (window_step >= 0 && !long_done) {
      res.step_max = std::max(res.step_max, now - prev_step_end);
      ++res.n_steps;
    }
    prev_step_end = now;
    for (const RequestOutput& out : outs) {
      if (out.new_tokens.empty()) continue;
      if (out.id == "long") {
        res.long_ttft = now - long_arrival;
        long_done = true;
      } else if (out.id == "short") {
        res.short_ttft = now - short_arrival;
        short_done = true;
      } else {
        auto it = last.find(out.id);
        if (it != last.end()) {
          if (window_step < 0) {
            if (step > 2) idle_itl.push_back(now - it->second);
          } else if (!long_done) {
            res.itl.push_back(now - it->second);
          }
        }
        last[out.id] = now;
      }
    }
    ++step;
    if (step == o.warmup_steps) {
      engine.add_request(bench_request("long", random_token_ids(gen, o.long_len, vocab), 1));
      long_arrival = seconds_since(t0);
      window_step = step;
    }
    if (window_step >= 0 && step == window_step + o.short_after_steps) {
      engine.add_request(bench_request("short", random_token_ids(gen, o.short_len, vocab), 1));
      short_arrival = seconds_since(t0);
    }
  }
  res.stream_itl_idle_p50 = nearest_rank(idle_itl, 0.5);
  for (int64_t i = 0; i < o.streams; ++i) engine.abort("stream-" + std::to_string(i));
  while (engine.has_unfinished()) engine.step();
  return res;
}

}  // namespace

int cmd_bench_fairness(int argc, char** argv) {
  std::set<std::string> names = {"model", "numerics", "out", "max-num-batched-tokens", "max-model-len",
                                 "streams", "stream-prompt-len", "long-len", "short-len", "warmup-steps",
                                 "short-after-steps", "seed", "repeat", "max-prefill-tokens-with-decodes",
                                 "long-prefill-token-threshold"};
  names.insert(kDeviceOptions.begin(), kDeviceOptions.end());
  std::set<std::string> flags = {"fairness", "dummy-weights", "no-overlap", "no-alone"};
  flags.insert(kDeviceFlags.begin(), kDeviceFlags.end());
  Args args(argc, argv, 2, names, flags);
  EngineArgs base;
  base.model_dir = args.get("model");
  base.dummy_weights = args.has("dummy-weights");
  CHECK(!base.dummy_weights || !base.model_dir.empty()) << "--dummy-weights needs --model DIR (its config.json)";
  base.model_dir = model_or_default(base.model_dir);
  base.model_options.numerics = parse_numerics(args.get("numerics", "official"));
  base.overlap = !args.has("no-overlap");
  base.max_num_batched_tokens = args.get_int("max-num-batched-tokens", base.max_num_batched_tokens);
  base.max_model_len = args.get_int("max-model-len", 0);
  apply_prefill_options(args, base);
  apply_device_options(args, base);
  Options o;
  o.streams = args.get_int("streams", o.streams);
  o.stream_prompt = args.get_int("stream-prompt-len", o.stream_prompt);
  o.long_len = args.get_int("long-len", o.long_len);
  o.short_len = args.get_int("short-len", o.short_len);
  o.warmup_steps = args.get_int("warmup-steps", o.warmup_steps);
  o.short_after_steps = args.get_int("short-after-steps", o.short_after_steps);
  o.seed = static_cast<uint64_t>(args.get_int("seed", 0));
  const int64_t repeat = args.get_int("repeat", 1);
  CHECK(o.streams >= 1 && o.stream_prompt >= 1 && o.long_len >= 1 && o.short_len >= 1 && o.warmup_steps >= 3 &&
        o.short_after_steps >= 0 && repeat >= 1)
      << "bench --fairness: counts must be positive (--warmup-steps >= 3)";

  std::ostringstream table;
  char line[2048];
  table << "| run | backend | batched tokens | prefill with decodes | long threshold | streams | long prompt | long alone TTFT s | alone steps ms | stream ITL idle p50 ms | "
           "ITL p50 ms | ITL p99 ms | ITL max ms | short TTFT ms | long TTFT s | steps | step max ms |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (int64_t rep = 0; rep < repeat; ++rep) {
    const AloneResult alone = args.has("no-alone") ? AloneResult{} : run_alone(base, o);
    std::string alone_steps;
    for (double t : alone.steps) alone_steps += (alone_steps.empty() ? "" : " ") + std::to_string(int64_t(t * 1e3));
    const FairnessResult r = run_mix(base, o);
    std::snprintf(line, sizeof(line),
                  "| %lld | %s | %lld | %lld | %lld | %lld | %lld | %.2f | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %lld | %.1f |\n",
                  static_cast<long long>(rep), r.device.c_str(),
                  static_cast<long long>(base.max_num_batched_tokens),
                  static_cast<long long>(base.max_prefill_tokens_with_decodes),
                  static_cast<long long>(base.long_prefill_token_threshold), static_cast<long long>(o.streams),
                  static_cast<long long>(o.long_len), alone.ttft, alone_steps.c_str(), r.stream_itl_idle_p50 * 1e3,
                  nearest_rank(r.itl, 0.5) * 1e3, nearest_rank(r.itl, 0.99) * 1e3, nearest_rank(r.itl, 1.0) * 1e3,
                  r.short_ttft * 1e3, r.long_ttft, static_cast<long long>(r.n_steps), r.step_max * 1e3);
    table << line;
    std::fputs(line, stdout);
    std::fflush(stdout);
  }
  if (args.has("out")) std::ofstream(args.get("out")) << table.str();
  return 0;
}

}  // namespace deepinfer
