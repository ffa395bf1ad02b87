// `deepinfer bench --fairness`: how running streams and a short request fare while a long
// prompt is prefilled (engine level, one thread driving step(), no HTTP). `--streams`
// requests decode (greedy, EOS ignored); after `--warmup-steps` steps a `--long-len` prompt
// arrives, `--short-after-steps` steps later a `--short-len` one (both ask for one token).
// Reports the streams' inter-token latency (p50/p99/max) from the long prompt's arrival to its
// first token, the short request's TTFT, the long prompt's TTFT with the streams running and
// alone on an idle engine (the prefill throughput the per-step budget costs), and the longest
// step. `--repeat N` repeats the measurement; `--out FILE` writes the markdown table.
#pragma once

namespace deepinfer {

int cmd_bench_fairness(int argc, char** argv);

}  // namespace deepinfer
