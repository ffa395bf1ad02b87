// `deepinfer bench`: a serving benchmark in the terms of `vllm bench serve`, of the Engine in
// this process or of a running OpenAI-compatible server (--base-url). Random prompts of
// --input-len tokens, --output-len greedy outputs with EOS ignored, --num-prompts requests per
// run; closed loop (--concurrency 1,4,16: a sweep, N in flight) or open loop (--request-rate
// 1,4,inf: Poisson arrivals, seeded; --max-concurrency caps them). Each run prints vLLM's
// result block (request / output / total throughput, TTFT, TPOT, ITL, E2EL mean, median, p99,
// goodput under --goodput ttft:MS tpot:MS e2el:MS); then a markdown table of the sweep, and
// with --out PREFIX: PREFIX.md, PREFIX.csv and PREFIX.png (tools/plot_bench.py, matplotlib);
// with --save-result FILE: every run's summary and per-request records as JSON lines. Exits 1
// when any request failed (the block then counts them and shows the first failure).
// Definitions: cli/bench_metrics.h; traffic: cli/bench_traffic.h; HTTP: cli/bench_http.h.
// `--fairness` runs cli/bench_fairness.h instead.
#pragma once

#include <string>

namespace deepinfer {

// The help text of `deepinfer bench` (every form), for `deepinfer bench --help`.
std::string bench_usage();

int cmd_bench(int argc, char** argv);

}  // namespace deepinfer
