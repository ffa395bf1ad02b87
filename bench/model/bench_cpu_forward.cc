// CPU forward throughput of the built-in tiny model: prefill tokens/s and single-sequence
// decode tokens/s, default GEMMs vs batch-invariant (fixed-order) GEMMs, official numerics.
// Prints a markdown table. Reports only; asserts nothing.
#include <chrono>
#include <cstdio>
#include <random>

#include "base/parallel.h"
#include "model/model.h"
#include "model/tiny_model.h"

using namespace deepinfer;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n_prompt = argc > 1 ? std::atoll(argv[1]) : 512;
  const int64_t n_decode = argc > 2 ? std::atoll(argv[2]) : 64;
  const ModelConfig cfg = tiny_model_config();
  auto source = random_weights(cfg, kTinySeed);
  const ModelWeights weights = load_model_weights(cfg, *source);
  std::mt19937 gen(1);
  std::vector<int32_t> prompt(n_prompt);
  for (auto& t : prompt) t = static_cast<int32_t>(gen() % cfg.vocab_size);
  std::printf("| mode | threads | prefill %lld tok (tok/s) | decode %lld tok (tok/s) |\n",
              static_cast<long long>(n_prompt), static_cast<long long>(n_decode));
  std::printf("|---|---|---|---|\n");
  for (bool invariant : {false, true}) {
    Model model(cfg, weights, {Numerics::kOfficial, invariant});
    auto state = model.new_state();
    auto t0 = std::chrono::steady_clock::now();
    SequenceChunk chunk{state.get(), prompt, false};
    Tensor logits = model.forward(std::span<const SequenceChunk>(&chunk, 1));
    const double prefill = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n_decode; ++i) {
      const int32_t tok[1] = {static_cast<int32_t>(i % cfg.vocab_size)};
      SequenceChunk step{state.get(), std::span<const int32_t>(tok, 1), false};
      logits = model.forward(std::span<const SequenceChunk>(&step, 1));
    }
    const double decode = seconds_since(t0);
    std::printf("| %s | %d | %.0f | %.1f |\n", invariant ? "batch-invariant" : "default", num_threads(),
                n_prompt / prefill, n_decode / decode);
  }
  return 0;
}
