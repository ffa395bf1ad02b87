#include "cli/bench_engine.h"

#include <chrono>
#include <thread>

#include "base/error.h"
#include "cli/bench_spec.h"
#include "cli/startup_summary.h"
#include "engine/engine.h"

namespace deepinfer {
namespace {

using Clock = std::chrono::steady_clock;

void warm_up(Engine& engine, const Traffic& traffic) {
  engine.add_request(bench_request("warmup", traffic.prompts.front(), traffic.output_len));
  while (engine.has_unfinished()) engine.step();
}

}  // namespace

EngineRun run_engine_traffic(const EngineArgs& base, const Traffic& traffic, bool warmup,
                             const EngineStartupNotes* startup) {
  const size_t n = traffic.prompts.size();
  ICHECK(n > 0 && traffic.arrival_s.size() == n);
  EngineArgs args = base;
  if (traffic.max_concurrency > 0) args.max_num_seqs = traffic.max_concurrency;
  Engine engine(args);
  if (startup != nullptr) {
    print_startup_summary(engine_startup_summary("bench", args, engine, startup->device_note, startup->tokenizer_note));
  }
  if (warmup) warm_up(engine, traffic);
  const EngineStats before = engine.stats();

  EngineRun run;
  run.backend = engine.runner().name();
  run.records.resize(n);
  std::vector<double> last(n, 0.0);
  std::vector<bool> started(n, false);
  size_t next = 0;
  int64_t in_flight = 0;
  const auto t0 = Clock::now();
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  double end = 0;
  while (next < n || engine.has_unfinished()) {
    const double t = now();
    while (next < n && traffic.arrival_s[next] <= t &&
           (traffic.max_concurrency == 0 || in_flight < traffic.max_concurrency)) {
      RequestRecord& r = run.records[next];
      r.n_prompt_tokens = static_cast<int64_t>(traffic.prompts[next].size());
      r.send_s = now();
      engine.add_request(bench_request(std::to_string(next), traffic.prompts[next], traffic.output_len,
                                       traffic.temperature, static_cast<uint64_t>(next)));
      ++in_flight;
      ++next;
    }
    if (!engine.has_unfinished()) {
      // Idle until the next arrival (open loop only: a closed loop always has one in flight).
      std::this_thread::sleep_for(std::chrono::duration<double>(traffic.arrival_s[next] - now()));
      continue;
    }
    for (const RequestOutput& out : engine.step()) {
      const double at = now();
      const size_t i = static_cast<size_t>(std::stoll(out.id));
      RequestRecord& r = run.records[i];
      if (!out.new_tokens.empty()) {
        if (!started[i]) {
          started[i] = true;
          r.ttft_s = at - r.send_s;
        } else {
          r.itl_s.push_back(at - last[i]);
        }
        last[i] = at;
        r.n_output_tokens += static_cast<int64_t>(out.new_tokens.size());
      }
      if (out.finished) {
        --in_flight;
        end = at;
        r.e2el_s = (started[i] ? last[i] : at) - r.send_s;
        r.ok = out.finish_reason == "stop" || out.finish_reason == "length";
        if (!r.ok) r.error = out.finish_reason + (out.error.empty() ? "" : ": " + out.error);
      }
    }
  }
  run.duration_s = end;
  run.spec_summary = format_spec_summary(spec_delta(engine.stats(), before));
  return run;
}

EngineRequest bench_request(const std::string& id, std::vector<int32_t> prompt, int64_t max_tokens,
                            double temperature, uint64_t seed) {
  EngineRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.params.temperature = static_cast<float>(temperature);
  r.params.seed = seed;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

}  // namespace deepinfer
