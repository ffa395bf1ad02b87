// The request mix and arrival pattern of one `deepinfer bench` run, shared by the in-process
// engine driver and the HTTP driver.
//
// Closed loop (--concurrency N): every request is ready at time 0 and at most N are in
// flight: a new one is sent when one finishes. Open loop (--request-rate R): request i
// arrives at a seeded Poisson process's i-th event (exponential gaps of mean 1/R s, the
// first at 0; R = inf sends all at 0), optionally capped by --max-concurrency. Either way a
// request's clock (TTFT, E2EL) starts when it is actually sent, never at its arrival while it
// waits for a slot, so closed-loop TTFT measures the server, not the benchmark's own queue.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace deepinfer {

struct Traffic {
  std::vector<std::vector<int32_t>> prompts;  // token ids
  std::vector<double> arrival_s;              // per prompt, non-decreasing, from 0
  int64_t max_concurrency = 0;                // 0: unbounded
  int64_t output_len = 0;                     // tokens per request (greedy, EOS ignored)
  double request_rate = 0;                    // 0: closed loop
  double temperature = 0;                     // 0: greedy; else request i has seed i (in process)
  std::string label() const;                  // "concurrency 4", "rate 2/s (max 8)"
};

// n random prompts of `input_len` ids below min(vocab, 100000) (ordinary tokens of the real
// tokenizer, no specials), from `seed`.
std::vector<std::vector<int32_t>> random_prompts(int64_t n, int64_t input_len, int64_t vocab, uint64_t seed);
// n random ids below min(vocab, 100000) (ordinary tokens of the real tokenizer, no specials,
// so the detokenizer does the work it does for text), drawn from `gen` (gen() % range each).
std::vector<int32_t> random_token_ids(std::mt19937_64& gen, int64_t n, int64_t vocab);

// Arrival times of n requests at `rate` per second (inf: all at 0), from `seed`.
std::vector<double> poisson_arrivals(int64_t n, double rate, uint64_t seed);

constexpr double kInfiniteRate = std::numeric_limits<double>::infinity();

}  // namespace deepinfer
