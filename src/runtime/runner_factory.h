// make_model_runner: the engine's model on the requested device: the built-in tiny model,
// a checkpoint directory, or a config.json with --dummy-weights, as a CpuRunner or (in a
// build with DEEPINFER_CUDA) a CudaRunner.
#pragma once

#include <memory>
#include <string>

#include "model/model.h"
#include "runtime/model_runner.h"

namespace deepinfer {

class CpuStepDriver;  // runtime/cpu_runner.h

struct RunnerArgs {
  std::string device = "cpu";   // "cpu" | "cuda"
  std::string model_dir;        // empty: the built-in tiny model
  bool dummy_weights = false;   // random weights for model_dir's config.json
  uint64_t dummy_seed = 0;
  ModelOptions model_options;   // numerics, batch_invariant
  int64_t max_sequences = 64;   // at most (CUDA: fewer when device memory holds fewer)
  int64_t max_context = 0;      // CUDA state depth; 0: min(max_position_embeddings, kDefaultGpuContext)
  int64_t max_batch_tokens = 2048;
  double gpu_memory_utilization = 0.9;
  std::string weight_format = "fp32";  // CUDA: "fp32" | "fp8" (block-scaled FP8 projections)
  std::string kv_cache_dtype = "auto";  // CUDA: "auto" | "fp8" | "bf16" (GpuModelOptions::kv_cache_dtype)
  std::string expert_format = "auto";   // CUDA: "auto" | "fp8" | "w4a8" (GpuModelOptions::expert_format)
  bool cuda_graphs = false;             // CUDA: GpuModelOptions::cuda_graphs
  // CUDA: the drafter the runner keeps (EngineArgs::speculative_method / num_speculative_tokens):
  // "mtp" or "auto" with a checkpoint that has mtp.0 builds the MTP-1 drafter on the device
  // (rollback depth: max(model_options.max_rollback, num_speculative_tokens or 1)); "dspark"
  // or "auto" with a checkpoint that has DSpark (V4.1, V4-Flash-DSpark / 0731) builds the DSpark
  // drafter on the device (fp32 weights only: auto with fp8 keeps none; rollback depth:
  // num_speculative_tokens or the block size). The CPU runner keeps the checkpoint's drafter
  // whatever these say.
  std::string speculative_method = "none";
  int64_t num_speculative_tokens = 0;
  // CPU: CpuRunnerOptions::step_driver (serve's context-parallel prefill); refused on cuda.
  std::shared_ptr<CpuStepDriver> cpu_step_driver;
};

// Default depth of the GPU state pools when no max_model_len is given (V4's 1M-token limit
// would leave room for no sequence at all).
constexpr int64_t kDefaultGpuContext = 8192;

// True when this build has the CUDA backend.
bool cuda_backend_built();

// Throws Error(kUnsupported) for device "cuda" in a CPU-only build, kInvalidInput for an
// unknown device.
std::unique_ptr<ModelRunner> make_model_runner(const RunnerArgs& args);

}  // namespace deepinfer
