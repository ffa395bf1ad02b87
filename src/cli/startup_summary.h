// The one-screen summary generate, serve and bench print (stderr) once the model is loaded:
// model, tokenizer, device, formats, memory plan, capacity, parallelism, speculative
// decoding and prefix cache, one labelled line each:
//
//   deepinfer serve: startup summary
//     model          bench/configs/v4-flash-4l (deepseek_v4, 4 layers, ...), dummy weights (seed 0)
//     tokenizer      ...
//     device         cuda (auto: 1 CUDA device found, using cuda:0; ...)
//     formats        weights fp8, kv cache fp8, cuda graphs on, numerics official
//     backend        the runner's own description (ModelRunner::name())
//     memory plan    ...
//     capacity       up to N concurrent requests of L tokens, B tokens per step
//     parallelism    single device
//     speculative    none
//     prefix cache   off
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"

namespace deepinfer {

struct StartupSummary {
  std::string command;  // "generate", "serve", "bench"
  std::string model, tokenizer, device, formats, backend, memory, capacity;
  std::string parallelism = "single device (no tensor / expert / data parallelism)";
  std::string speculative = "none";  // speculative_in_effect()
  std::string prefix_cache = "off";

  // The lines above, one per field ("  label  value").
  std::string format() const;
};

// "DIR (deepseek_v4, 4 layers, hidden 4096, 256 experts top-6, vocab 129280), checkpoint
// weights fp8 ..." for a model directory or the built-in tiny model.
std::string describe_model(const std::string& model_dir, bool dummy_weights, uint64_t dummy_seed,
                           const ModelConfig& config);

// The speculative decoding `engine` runs, as the summary's line: "dspark (auto), 5 drafts per
// verification (the drafter's default), fixed scheduling", "none", or "none (auto: why)" when
// the requested method found no drafter the runner can verify with.
std::string speculative_in_effect(const EngineArgs& args, const Engine& engine);

// The summary of an engine built from `args`; `device_note` is apply_device_options' line,
// `tokenizer_note` resolve_tokenizer's.
StartupSummary engine_startup_summary(const std::string& command, const EngineArgs& args, const Engine& engine,
                                      const std::string& device_note, const std::string& tokenizer_note);

// Prints summary.format() to stderr, every line after `prefix` (a rank's "[rank 1] ").
void print_startup_summary(const StartupSummary& summary, const std::string& prefix = "");

}  // namespace deepinfer
