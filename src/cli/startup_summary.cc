#include "cli/startup_summary.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#ifdef DEEPINFER_CUDA
#include <cuda_runtime.h>
#endif

#include "base/logging.h"
#include "cache/state_cache.h"
#include "model/tiny_model.h"
#include "runtime/gpu_runner_sizing.h"

namespace deepinfer {
namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", bytes / double(int64_t(1) << 30));
  return text;
}

std::string checkpoint_formats(const ModelConfig& c) {
  if (c.quant.method.empty() && c.quant.expert_dtype.empty()) return "unquantised";
  std::string s = c.quant.method.empty() ? "dense unquantised" : c.quant.method + " " +
      std::to_string(c.quant.weight_block_n) + "x" + std::to_string(c.quant.weight_block_k) + " blocks";
  if (!c.quant.expert_dtype.empty()) s += ", experts " + c.quant.expert_dtype;
  return s;
}

}  // namespace

std::string StartupSummary::format() const {
  std::ostringstream out;
  out << "deepinfer " << command << ": startup summary\n";
  const std::pair<const char*, const std::string*> lines[] = {
      {"model", &model},         {"tokenizer", &tokenizer},     {"device", &device},
      {"formats", &formats},     {"backend", &backend},         {"memory plan", &memory},
      {"capacity", &capacity},   {"parallelism", &parallelism}, {"speculative", &speculative},
      {"prefix cache", &prefix_cache}};
  for (const auto& [label, value] : lines) {
    std::string pad(std::max<size_t>(1, 15 - std::string(label).size()), ' ');
    out << "  " << label << pad << *value << "\n";
  }
  return out.str();
}

std::string describe_model(const std::string& model_dir, bool dummy_weights, uint64_t dummy_seed,
                           const ModelConfig& c) {
  std::ostringstream out;
  const bool builtin = selects_builtin_model(model_dir);
  out << (builtin ? builtin_model_label(model_dir) : model_dir) << " (" << c.model_type << ", " << c.num_layers
      << " layers, hidden " << c.hidden_size << ", " << c.n_routed_experts << " experts top-" << c.n_experts_per_tok
      << ", vocab " << c.vocab_size << "), ";
  if (builtin) {
    out << "built-in, random weights (seed " << kTinySeed << ")";
  } else if (dummy_weights) {
    out << "dummy weights (seed " << dummy_seed << ")";
  } else {
    out << "checkpoint weights " << checkpoint_formats(c);
  }
  return out.str();
}

std::string speculative_in_effect(const EngineArgs& args, const Engine& engine) {
  const int64_t k = engine.speculative_tokens();
  if (k == 0) {
    if (args.speculative_method == "none") return "none";
    const std::string drafter = engine.runner().drafter();
    return "none (" + args.speculative_method + ": " +
           (drafter == "none" ? "the " + args.device + " runner has no drafter for this checkpoint"
                              : "the " + args.device + " runner cannot verify drafts") +
           ")";
  }
  const std::string drafter = args.spec_test_drafter ? std::string("test drafter") : engine.runner().drafter();
  return drafter + (args.speculative_method == drafter ? "" : " (" + args.speculative_method + ")") + ", " + std::to_string(k) + " draft" + (k == 1 ? "" : "s") +
         " per verification" + (args.num_speculative_tokens > 0 ? "" : " (the drafter's default)") + ", " +
         args.spec_scheduling + " scheduling";
}

StartupSummary engine_startup_summary(const std::string& command, const EngineArgs& args, const Engine& engine,
                                      const std::string& device_note, const std::string& tokenizer_note) {
  StartupSummary s;
  s.command = command;
  const ModelConfig& c = engine.model_config();
  const RunnerCapacity cap = engine.runner().capacity();
  const bool cuda = args.device == "cuda";
  const std::string numerics = numerics_name(args.model_options.numerics);
  s.model = describe_model(args.model_dir, args.dummy_weights, args.dummy_seed, c);
  s.tokenizer = tokenizer_note;
  s.device = args.device + " (" + device_note + ")";
  if (cuda) {
    // GpuModel's rule for kv auto: FP8 entries with official numerics, bf16 with reference.
    const std::string kv = args.kv_cache_dtype != "auto" ? args.kv_cache_dtype
                           : args.model_options.numerics == Numerics::kOfficial ? "fp8" : "bf16";
    s.formats = "weights " + args.weight_format + ", kv cache " + kv + ", cuda graphs " +
                (args.cuda_graphs ? "on" : "off") + ", numerics " + numerics;
  } else {
    s.formats = "weights fp32, kv cache fp32 (" + numerics +
                (args.model_options.numerics == Numerics::kOfficial ? " numerics: the FP8 / FP4 round trips"
                                                                       " of the trained model" : " numerics")
                + "), cuda graphs off (cpu)";
  }
  if (args.model_options.batch_invariant) s.formats += ", batch-invariant";
  s.backend = engine.runner().name();

  const GpuSizing sizing = estimate_gpu_sizing(c, cap.max_context, cap.max_batch_tokens,
                                               cuda && args.weight_format == "fp8");
  const StateCache& cache = engine.state_cache();
  if (cuda) {
    std::string device_memory;
#ifdef DEEPINFER_CUDA
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      device_memory = ", " + gib(double(free_bytes)) + " free of " + gib(double(total_bytes)) + " now";
    } else {
      cudaGetLastError();
    }
#endif
    char util[32];
    std::snprintf(util, sizeof(util), "%.2f", args.gpu_memory_utilization);
    s.memory = "weights ~" + gib(double(sizing.weight_bytes)) + ", activations ~" + gib(double(sizing.activation_bytes)) +
               " (estimates); state pools sized for " + std::to_string(cap.max_sequences) +
               " sequences within gpu-memory-utilization " + util + device_memory;
  } else {
    int64_t blocks = 0;
    for (int64_t g = 0; g < cache.n_groups(); ++g) blocks += cache.num_blocks(g);
    s.memory = "host: weights ~" + gib(double(sizing.weight_bytes)) + " fp32 (estimate); state pools of " +
               std::to_string(blocks) + " blocks of " + std::to_string(args.block_size) + " entries in " +
               std::to_string(cache.n_groups()) + " groups" +
               (args.state_budget_bytes > 0 ? " (--state-budget-mib " + std::to_string(args.state_budget_bytes >> 20) + ")"
                                            : " (default budget)");
  }
  s.speculative = speculative_in_effect(args, engine);
  s.prefix_cache = engine.prefix_caching()
                       ? "on, blocks of " + std::to_string(args.prefix_cache_block_tokens) + " tokens, up to " +
                             gib(double(args.prefix_cache_bytes)) +
                             (engine.runner().name().rfind("cuda", 0) == 0 ? " of device memory" : " of host memory")
                       : args.enable_prefix_caching ? "off (the " + engine.runner().name() + " backend has none yet)"
                                                    : "off (--no-enable-prefix-caching)";
  if (args.speculative_method == "auto" && engine.speculative_tokens() == 0 && args.device != "cpu") {
    LOG(INFO) << "speculative decoding: auto falls back to none: " << engine.runner().name()
              << " reports no drafter it can verify with";
  }
  const int64_t n_requests = std::min({args.max_num_seqs, cap.max_sequences, cache.num_slots()});
  s.capacity = "up to " + std::to_string(n_requests) + " concurrent requests of " +
               std::to_string(engine.max_model_len()) + " tokens, " + std::to_string(args.max_num_batched_tokens) +
               " tokens per step";
  return s;
}

void print_startup_summary(const StartupSummary& summary, const std::string& prefix) {
  std::string text;
  const std::string lines = summary.format();
  for (size_t at = 0; at < lines.size();) {
    const size_t end = std::min(lines.find('\n', at), lines.size());
    text += prefix + lines.substr(at, end - at) + "\n";
    at = end + 1;
  }
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

}  // namespace deepinfer
