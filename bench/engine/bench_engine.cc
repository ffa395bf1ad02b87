// Offline engine throughput on the CPU backend: N requests (random prompts of --prompt-len
// tokens, --max-tokens greedy outputs each) run to completion with Engine::generate, for
// overlap on/off and batch-invariant mode on/off, in one process. Prints a table; it never
// asserts. Model: the built-in tiny model, or a config.json directory with dummy weights.
//   bench_engine [--requests 32] [--prompt-len 64] [--max-tokens 32] [--model DIR] [--repeat 2]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"

using namespace deepinfer;

int main(int argc, char** argv) {
  int64_t n_requests = 32, prompt_len = 64, max_tokens = 32, repeat = 2;
  std::string model_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--requests") n_requests = std::stoll(argv[i + 1]);
    else if (k == "--prompt-len") prompt_len = std::stoll(argv[i + 1]);
    else if (k == "--max-tokens") max_tokens = std::stoll(argv[i + 1]);
    else if (k == "--repeat") repeat = std::stoll(argv[i + 1]);
    else if (k == "--model") model_dir = argv[i + 1];
    else { std::fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
  }
  std::printf("requests %lld, prompt %lld tokens, %lld outputs each, model %s\n",
              (long long)n_requests, (long long)prompt_len, (long long)max_tokens,
              model_dir.empty() ? "tiny (built-in)" : model_dir.c_str());
  std::printf("%-8s %-16s %10s %12s %12s %8s\n", "overlap", "batch_invariant", "seconds",
              "out tok/s", "all tok/s", "steps");
  for (bool batch_invariant : {false, true}) {
    EngineArgs args;
    args.model_dir = model_dir;
    args.dummy_weights = !model_dir.empty();
    args.model_options.batch_invariant = batch_invariant;
    args.max_num_seqs = n_requests;
    args.max_model_len = prompt_len + max_tokens;
    for (bool overlap : {false, true}) {
      args.overlap = overlap;
      Engine engine(args);
      std::mt19937 gen(1);
      std::uniform_int_distribution<int32_t> tok(2, int32_t(engine.model_config().vocab_size - 1));
      double best = 1e30;
      int64_t steps = 0;
      for (int64_t r = 0; r < repeat; ++r) {
        std::vector<EngineRequest> reqs;
        for (int64_t i = 0; i < n_requests; ++i) {
          EngineRequest q;
          q.id = std::to_string(r) + "-" + std::to_string(i);
          for (int64_t t = 0; t < prompt_len; ++t) q.prompt.push_back(tok(gen));
          q.params.temperature = 0.0f;
          q.params.max_tokens = max_tokens;
          q.params.ignore_eos = true;
          reqs.push_back(std::move(q));
        }
        const int64_t steps0 = engine.stats().n_steps;
        const auto t0 = std::chrono::steady_clock::now();
        engine.generate(std::move(reqs));
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s < best) {
          best = s;
          steps = engine.stats().n_steps - steps0;
        }
      }
      const double out = double(n_requests * max_tokens);
      std::printf("%-8s %-16s %10.3f %12.1f %12.1f %8lld\n", overlap ? "on" : "off",
                  batch_invariant ? "on" : "off", best, out / best,
                  double(n_requests * (prompt_len + max_tokens)) / best, (long long)steps);
    }
  }
  return 0;
}
