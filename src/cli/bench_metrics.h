// Per-request records of a serving benchmark and their summary in the terms of
// `vllm bench serve`: request throughput, output and total token throughput, TTFT / TPOT /
// ITL / E2E latency (mean, median, p99) and goodput under an SLO.
//
// Definitions (as vLLM's): TTFT = first token's arrival - the request's send; E2EL = the last
// arrival (or the end of the response) - send; TPOT = (E2EL - TTFT) / (output tokens - 1), per
// request with more than one output token; ITL = the gaps between successive arrivals of a
// request (an arrival may carry several tokens). Percentiles interpolate linearly (numpy's
// default). A request is good when every SLO given holds for it (TTFT, TPOT, E2EL in ms);
// goodput = good requests / duration. Failed requests count in no latency and no token total.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer {

struct RequestRecord {
  bool ok = false;
  std::string error;           // why it failed (ok false)
  int64_t n_prompt_tokens = 0;
  int64_t n_output_tokens = 0;
  double send_s = 0;           // seconds since the benchmark's start
  double ttft_s = 0;           // first arrival - send
  double e2el_s = 0;           // last arrival - send
  std::vector<double> itl_s;   // gaps between successive arrivals
};

// SLOs in milliseconds; unset ones are not checked.
struct Slo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool any() const { return ttft_ms || tpot_ms || e2el_ms; }
};

// Parses items like "ttft:500", "tpot:50", "e2el:2000" (also comma-separated in one item).
// Throws kInvalidInput naming a malformed item or an unknown metric.
Slo parse_slo(const std::vector<std::string>& items);

// numpy.percentile(values, q) with linear interpolation, q in [0, 100]; 0 for no values.
double percentile(std::vector<double> values, double q);

struct Stat {
  double mean = 0, median = 0, p99 = 0;  // seconds
};
Stat stat_of(const std::vector<double>& values);

struct BenchSummary {
  std::string label;             // "concurrency 4", "rate 2/s"
  int64_t max_concurrency = 0;   // 0: unbounded
  double request_rate = 0;       // 0: closed loop (all requests ready at once)
  int64_t n_completed = 0, n_failed = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0;
  double duration_s = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  std::optional<double> goodput;  // requests/s meeting the SLO; unset without an SLO
  Stat ttft, tpot, itl, e2el;
  std::string first_error;        // of the first failed request, if any
};

BenchSummary summarize(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo);

// The result block `vllm bench serve` prints, for one run.
std::string format_summary(const BenchSummary& s, const std::string& backend);

// A markdown table of a sweep (one row per run) and the CSV of the same runs. The CSV keeps
// the columns tools/plot_bench.py reads (concurrency, out_tok_s_per_device, tok_s_per_user,
// ttft_p50_s, tpot_s) and adds the others.
std::string markdown_table(const std::vector<BenchSummary>& runs);

// One run as a JSON object with vLLM's --save-result keys: the summary (duration, completed,
// failed, total_input_tokens, total_output_tokens, request_throughput, request_goodput,
// output_throughput, total_token_throughput, {mean,median,p99}_{ttft,tpot,itl,e2el}_ms) and
// the per-request lists of the successful requests in order (input_lens, output_lens, ttfts,
// e2els in seconds, itls: a list per request), plus "errors" of the failed ones.
std::string summary_json(const BenchSummary& s, const std::vector<RequestRecord>& records);
std::string csv_table(const std::vector<BenchSummary>& runs);

}  // namespace deepinfer
