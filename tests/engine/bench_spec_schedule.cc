// Benchmark (not a test: it reports, asserts nothing): speculative decoding in the engine on
// the CPU with spec_scheduling fixed vs confidence, plus plain decoding with overlap off and on
// (what chaining steps gains on this machine). Per run: steps, verified tokens per step,
// per-position acceptance, committed tokens per verification, and where the wall time goes
// (forwards = the runner's busy time, drafting, the rest = host: scheduling, verification,
// updates). Greedy requests on random-token prompts.
//
//   bench_spec_schedule [model_dir] [n_requests] [max_tokens] [num_speculative_tokens]
//   default: tests/data/golden_v41/dspark_quant/bf16 64 32 0 (0: the drafter's block)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "engine/engine.h"

namespace deepinfer {
namespace {

struct Run {
  const char* name;
  std::string method, scheduling;
  bool overlap;
};

void bench(const std::string& dir, int n_requests, int max_tokens, int64_t k, const Run& run) {
  EngineArgs a;
  a.overlap = run.overlap;
  a.max_num_seqs = n_requests;
  a.max_num_batched_tokens = 512;
  a.max_model_len = 64 + max_tokens;
  a.speculative_method = run.method;
  a.num_speculative_tokens = k;
  a.spec_scheduling = run.scheduling;
  Engine engine(a, Model::load(dir, {Numerics::kOfficial, false}), nullptr);
  const int64_t V = engine.model_config().vocab_size;
  std::mt19937 rng(17);
  std::vector<EngineRequest> jobs;
  for (int i = 0; i < n_requests; ++i) {
    EngineRequest r;
    r.id = std::to_string(i);
    r.prompt.resize(size_t(8 + i % 24));
    for (int32_t& t : r.prompt) t = int32_t(2 + rng() % uint32_t(V - 2));
    r.params.temperature = 0.0f;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    jobs.push_back(std::move(r));
  }
  const auto t0 = std::chrono::steady_clock::now();
  int64_t n_out = 0;
  for (const RequestOutput& o : engine.generate(std::move(jobs))) n_out += int64_t(o.new_tokens.size());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const EngineStats& s = engine.stats();
  const double host = wall - s.busy_seconds - s.draft_seconds;
  std::printf("%-28s %5lld steps  %7.1f tok/s  wall %6.3f s = forwards %6.3f + drafts %6.3f + host %6.3f "
              "(per step %.2f / %.2f / %.2f ms)",
              run.name, (long long)s.n_steps, double(n_out) / wall, wall, s.busy_seconds, s.draft_seconds, host,
              1e3 * s.busy_seconds / double(s.n_steps), 1e3 * s.draft_seconds / double(s.n_steps),
              1e3 * host / double(s.n_steps));
  if (s.n_verifications > 0) {
    std::printf("\n%-28s verified tokens/step %.2f, committed/verification %.3f, acceptance by position:", "",
                s.verified_tokens_per_step(), s.mean_acceptance_length());
    for (size_t j = 0; j < s.verified_at.size(); ++j) {
      std::printf(" %.3f (%lld)", s.acceptance_at(j), (long long)s.verified_at[j]);
    }
    double predicted = 0;
    for (double p : s.predicted_at) predicted += p;
    if (predicted > 0) {  // the drafter's own estimates (all drafts have them here)
      std::printf("\n%-28s drafter's estimate of P(0..j accepted) by position:", "");
      for (size_t j = 0; j < s.predicted_at.size(); ++j) {
        std::printf(" %.3f", s.verified_at[j] ? s.predicted_at[j] / double(s.verified_at[j]) : 0.0);
      }
    }
  }
  std::printf("\n");
}

}  // namespace
}  // namespace deepinfer

int main(int argc, char** argv) {
  using namespace deepinfer;
  const std::string dir = argc > 1 ? argv[1] : "tests/data/golden_v41/dspark_quant/bf16";
  const int n = argc > 2 ? std::atoi(argv[2]) : 64;
  const int max_tokens = argc > 3 ? std::atoi(argv[3]) : 32;
  const int64_t k = argc > 4 ? std::atoll(argv[4]) : 0;
  std::printf("%s: %d greedy requests x %d tokens, random prompts of 8..31 tokens\n", dir.c_str(), n, max_tokens);
  const Run runs[] = {
      {"plain, overlap off", "none", "fixed", false},
      {"plain, overlap on", "none", "fixed", true},
      {"speculative, fixed", "auto", "fixed", false},
      {"speculative, confidence", "auto", "confidence", false},
  };
  for (const Run& r : runs) bench(dir, n, max_tokens, k, r);
  return 0;
}
