// Benchmark (not a test: it reports, asserts nothing): prefix caching on the CPU backend.
// For one prompt on a built-in model: cold prefill; the cached boundary's bytes (shared
// append-only rows vs the per-position copy) and the copy-on-hit import; the forwards the
// alternatives would run instead of the copy (replaying the last window of positions, which
// is not exact, and the exact dependency cone of num_layers windows); and the engine's time
// to first token of a re-sent prompt with the cache on vs off.
//
//   bench_prefix_cache [model: tiny | tiny-v4.1] [prompt_len] [block_tokens]
//   default: tiny 2048 128
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/state_segment.h"
#include "model/tiny_model.h"
#include "model/weight_source.h"

namespace deepinfer {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::unique_ptr<Model> make(const std::string& name) {
  const ModelConfig cfg = builtin_model_config(name);
  auto source = random_weights(cfg, kTinySeed);
  return Model::from_source(cfg, *source, {Numerics::kOfficial, false});
}

// Runs tokens [state.n_tokens, end) in chunks of 512; returns the seconds.
double advance(const Model& m, SequenceState& s, const std::vector<int32_t>& tokens, int64_t end) {
  const double t0 = now();
  while (s.n_tokens < end) {
    const int64_t n = std::min<int64_t>(512, end - s.n_tokens);
    SequenceChunk c{&s, std::span<const int32_t>(tokens.data() + s.n_tokens, size_t(n)), false};
    m.forward(std::span<const SequenceChunk>(&c, 1));
  }
  return now() - t0;
}

double median3(double a, double b, double c) { return std::max(std::min(a, b), std::min(std::max(a, b), c)); }

void run(const std::string& name, int64_t n, int64_t B) {
  auto model = make(name);
  const ModelConfig& cfg = model->config();
  std::mt19937 rng(5);
  std::vector<int32_t> prompt(static_cast<size_t>(n));
  for (auto& t : prompt) t = int32_t(rng() % uint32_t(cfg.vocab_size));
  const int64_t hit = (n - 1) / B * B, W = cfg.sliding_window, L = cfg.num_layers;
  std::printf("%s: %lld layers, window %lld, prompt %lld, block %lld, hit %lld\n", name.c_str(), (long long)L,
              (long long)W, (long long)n, (long long)B, (long long)hit);

  // Cold prefill, stopping at hit - L*W and hit - W to keep copies for the replay timings.
  auto state = model->new_state();
  const int64_t cone = std::max<int64_t>(0, hit - L * W), tail = std::max<int64_t>(0, hit - W);
  double cold = advance(*model, *state, prompt, cone);
  SequenceState at_cone = *state;
  cold += advance(*model, *state, prompt, tail);
  SequenceState at_tail = *state;
  cold += advance(*model, *state, prompt, hit);
  const double t_export0 = now();
  auto segment = export_segment(*state, nullptr);
  const double t_export = now() - t_export0;
  cold += advance(*model, *state, prompt, n);
  int64_t appended = 0;
  for (const auto& arrays : segment->appended) {
    for (const auto& v : arrays) appended += int64_t(v.size() * sizeof(float));
  }
  const StateSegment* chain[] = {segment.get()};
  const double t_import0 = now();
  auto imported = import_segments(chain);
  const double t_import = now() - t_import0;
  const double t_rest = advance(*model, *imported, prompt, n);
  const double t_replay_window = advance(*model, at_tail, prompt, hit);
  const double t_replay_cone = advance(*model, at_cone, prompt, hit);
  std::printf("  cold prefill of %lld tokens: %.1f ms\n", (long long)n, cold * 1e3);
  std::printf("  boundary at %lld: %.2f MB (shared append-only rows %.2f MB, per-position copy %.2f MB); "
              "export %.2f ms, import (copy on hit) %.2f ms, then the last %lld tokens %.1f ms\n",
              (long long)hit, segment->bytes() / 1e6, appended / 1e6, (segment->bytes() - appended) / 1e6,
              t_export * 1e3, t_import * 1e3, (long long)(n - hit), t_rest * 1e3);
  std::printf("  instead of the copy: replay the last window (%lld positions, inexact) %.1f ms; the exact "
              "dependency cone (%lld positions) %.1f ms\n",
              (long long)(hit - tail), t_replay_window * 1e3, (long long)(hit - cone), t_replay_cone * 1e3);

  // Engine: time to first token of a re-sent prompt, cache on vs off (median of 3).
  auto ttft = [&](bool enable) {
    EngineArgs a;
    a.enable_prefix_caching = enable;
    a.prefix_cache_block_tokens = B;
    a.max_num_batched_tokens = 512;
    a.max_model_len = n + 8;
    a.model_dir = name;
    Engine e(a, make(name), nullptr);
    EngineRequest r;
    r.prompt = prompt;
    r.params.temperature = 0;
    r.params.max_tokens = 1;
    double t[4];
    for (int i = 0; i < 4; ++i) {
      r.id = "r" + std::to_string(i);
      const double t0 = now();
      e.generate({r});
      t[i] = now() - t0;
    }
    return std::make_pair(t[0], median3(t[1], t[2], t[3]));
  };
  const auto [off_first, off] = ttft(false);
  const auto [on_first, on] = ttft(true);
  std::printf("  engine TTFT (max_tokens 1): cache off %.1f ms (first %.1f); cache on, first send %.1f ms, "
              "re-sent %.1f ms: %.1fx\n",
              off * 1e3, off_first * 1e3, on_first * 1e3, on * 1e3, off / on);
}

}  // namespace
}  // namespace deepinfer

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "tiny";
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 2048;
  const int64_t B = argc > 3 ? std::atoll(argv[3]) : 128;
  deepinfer::run(name, n, B);
  return 0;
}
