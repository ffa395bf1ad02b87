// `deepinfer bench`: offline serving benchmark of the Engine. For each concurrency in a
// sweep, submits a fixed request mix (random prompt ids of --input-len tokens, --output-len
// greedy outputs with EOS ignored) and reports TTFT, TPOT, output tokens/s per device and
// per user. Writes a markdown table and CSV, and a PNG plot of throughput per device vs
// tokens/s per user (through tools/plot_bench.py, matplotlib) when --out is given.
#pragma once

namespace deepinfer {

int cmd_bench(int argc, char** argv);

}  // namespace deepinfer
