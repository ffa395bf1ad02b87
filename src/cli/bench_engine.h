// The in-process driver of `deepinfer bench`: runs a Traffic against a fresh Engine on this
// thread (one step() at a time; requests are added between steps once their arrival time
// has passed and a slot is free) and records every request from its add_request.
#pragma once

#include <string>
#include <vector>

#include "cli/bench_metrics.h"
#include "cli/bench_traffic.h"

namespace deepinfer {

struct EngineArgs;
struct EngineRequest;

struct EngineRun {
  std::vector<RequestRecord> records;  // one per prompt, in order
  double duration_s = 0;               // first send to last finish
  std::string backend;                 // the runner's name
  std::string spec_summary;            // bench_spec.h's block for this run ("" while off)
};

// Printed once the engine is up, when given: the startup summary's device and tokenizer lines.
struct EngineStartupNotes {
  std::string device_note, tokenizer_note;
};

// One warm-up request (input and output of the traffic's first prompt, not recorded) runs
// first when `warmup`. max_num_seqs is the traffic's max_concurrency when it has one.
// With `startup` the startup summary is printed once the engine is loaded. Speculative
// counters exclude the warm-up.
// A benchmark request: greedy (or sampled at `temperature` with `seed`), max_tokens tokens, EOS
// ignored (every request runs to its length).
EngineRequest bench_request(const std::string& id, std::vector<int32_t> prompt, int64_t max_tokens,
                            double temperature = 0, uint64_t seed = 0);

EngineRun run_engine_traffic(const EngineArgs& base, const Traffic& traffic, bool warmup,
                             const EngineStartupNotes* startup = nullptr);

}  // namespace deepinfer
