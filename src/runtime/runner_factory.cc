#include "runtime/runner_factory.h"

#include <algorithm>

#include "base/error.h"
#include "base/logging.h"
#include "io/config_parser.h"
#include "model/tiny_model.h"
#include "model/weight_source.h"
#include "runtime/cpu_runner.h"
#ifdef DEEPINFER_CUDA
#include "runtime/cuda_runner.h"
#include "runtime/gpu_weight_stream.h"
#include "runtime/streamed_weights.h"
#endif

namespace deepinfer {
namespace {

struct Source {
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
};

bool builtin(const RunnerArgs& args) { return selects_builtin_model(args.model_dir); }

Source open_source(const RunnerArgs& args) {
  Source s;
  if (builtin(args)) {
    s.config = builtin_model_config(args.model_dir);
    s.weights = random_weights(s.config, kTinySeed);
    LOG(INFO) << "engine: built-in " << builtin_model_label(args.model_dir)
              << " model (random weights, seed " << kTinySeed << ")";
  } else if (args.dummy_weights) {
    s.config = load_model_config(args.model_dir + "/config.json");
    s.weights = random_weights(s.config, args.dummy_seed);
    LOG(INFO) << "engine: " << args.model_dir << "/config.json with dummy weights (seed "
              << args.dummy_seed << ")";
  } else {
    s.config = load_model_config(args.model_dir + "/config.json");
    s.weights = open_checkpoint_weights(args.model_dir, s.config);
  }
  return s;
}

}  // namespace

bool cuda_backend_built() {
#ifdef DEEPINFER_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<ModelRunner> make_model_runner(const RunnerArgs& args) {
  CHECK(args.device == "cpu" || args.device == "cuda")
      << "engine: unknown device '" << args.device << "' (cpu or cuda)";
  CHECK(args.weight_format == "fp32" || args.weight_format == "fp8")
      << "engine: unknown weight format '" << args.weight_format << "' (fp32 or fp8)";
  CHECK_KIND(kUnsupported, args.device == "cuda" || args.weight_format == "fp32")
      << "engine: weight format fp8 is available on device cuda only";
  CHECK(args.kv_cache_dtype == "auto" || args.kv_cache_dtype == "fp8" || args.kv_cache_dtype == "bf16")
      << "engine: unknown kv cache dtype '" << args.kv_cache_dtype << "' (auto, fp8 or bf16)";
  CHECK_KIND(kUnsupported, args.device == "cuda" || (args.kv_cache_dtype == "auto" && !args.cuda_graphs))
      << "engine: kv_cache_dtype and cuda_graphs are settings of device cuda";
  CHECK_KIND(kUnsupported, args.device == "cpu" || args.model_options.swa_bounded_replay_keep == 0)
      << "engine: --swa-bounded-replay (swa_bounded_replay_keep) is not implemented on device cuda yet";
  CHECK_KIND(kUnsupported, args.device == "cpu" || args.cpu_step_driver == nullptr)
      << "engine: context-parallel prefill (--context-parallel-size) runs on device cpu only for now";
  if (args.device == "cpu") {
    std::unique_ptr<Model> model;
    if (builtin(args) || args.dummy_weights) {
      Source s = open_source(args);
      model = Model::from_source(s.config, *s.weights, args.model_options);
    } else {
      model = Model::load(args.model_dir, args.model_options);
    }
    CpuRunnerOptions o;
    o.max_sequences = std::max<int64_t>(args.max_sequences, 1);
    o.step_driver = args.cpu_step_driver;
    return std::make_unique<CpuRunner>(std::move(model), o);
  }
  // DeepSeek-V4.1 on the CUDA backend: fp32 or 32x32-block FP8 weights (routed experts W4A8,
  // FP4 as stored), the bf16 or the fp8 KV cache (its 528 / 288 / 68-byte formats); GpuModel
  // refuses by name what it cannot run (FP8 routed experts, DSpark with FP8 weights).
  CHECK_KIND(kUnsupported, cuda_backend_built())
      << "engine: device 'cuda' needs a build with the CUDA backend (configure with -DDEEPINFER_CUDA=ON)";
#ifdef DEEPINFER_CUDA
  const ModelConfig family = builtin(args) ? builtin_model_config(args.model_dir)
                                           : load_model_config(args.model_dir + "/config.json");
  CudaRunnerOptions o;
  o.max_sequences = std::max<int64_t>(args.max_sequences, 1);
  o.max_batch_tokens = args.max_batch_tokens;
  o.gpu_memory_utilization = args.gpu_memory_utilization;
  o.numerics = args.model_options.numerics;
  o.batch_invariant = args.model_options.batch_invariant;
  o.fp8_weights = args.weight_format == "fp8";
  // V4.1: auto stays the bf16 cache for now (the FP8 / FP4 values of official numerics are
  // exact in it; the fp8 formats pass the GPU goldens, but the engine's CUDA tests run V4.1 on
  // bf16); --kv-cache-dtype fp8 asks for the 528 / 288 / 68-byte formats.
  const bool v41 = family.is_v41();
  o.kv_cache_dtype = v41 && args.kv_cache_dtype == "auto" ? "bf16" : args.kv_cache_dtype;
  o.cuda_graphs = args.cuda_graphs;
  o.expert_format = args.expert_format;
  o.max_rollback = std::max<int64_t>(args.model_options.max_rollback, 0);
  // Drafter on the device: V4's MTP-1 (GpuModelOptions::mtp) or the DSpark of V4.1 and of
  // V4-Flash-DSpark / 0731 (GpuModelOptions::dspark) when asked for (mtp / dspark, auto) and the
  // checkpoint has it;
  // rolls back as many positions as the engine verifies drafts (MTP's natural draft length is 1,
  // it chains more; DSpark's is its block, num_speculative_tokens at most that).
  const std::string& spec = args.speculative_method;
  CHECK_KIND(kUnsupported, spec != "dspark" || family.dspark.block_size > 0)
      << "engine: --speculative-method dspark, but the config has no DSpark drafter (dspark_block_size)";
  // DSpark with FP8 weights: V4-Flash-DSpark / 0731 (128x128 blocks; its routed experts FP8,
  // also when the backbone's are W4A8); V4.1's (32x32 blocks) GpuModel refuses, so it is
  // refused here by name when asked for and off under auto.
  const bool dspark_weights_ok = args.weight_format != "fp8" || !v41;
  CHECK_KIND(kUnsupported, spec != "dspark" || dspark_weights_ok)
      << "engine: the DeepSeek-V4.1 DSpark drafter runs on device cuda with --weight-format fp32 only";
  auto use_mtp = [&](bool has_mtp) {
    if (!has_mtp || (spec != "mtp" && spec != "auto")) return;
    o.mtp = true;
    o.max_rollback = std::max(o.max_rollback, std::max<int64_t>(args.num_speculative_tokens, 1));
  };
  auto use_dspark = [&](const ModelConfig& c, bool has_dspark) {
    if (!has_dspark || (spec != "dspark" && spec != "auto") || !dspark_weights_ok) return;
    o.dspark = true;
    const int64_t k = args.num_speculative_tokens > 0 ? args.num_speculative_tokens : c.dspark.block_size;
    o.max_rollback = std::max(o.max_rollback, k);
  };
  auto context = [&](const ModelConfig& c) {
    const int64_t limit = c.max_position_embeddings;
    if (args.max_context > 0) return args.max_context;
    return limit > 0 ? std::min(limit, kDefaultGpuContext) : kDefaultGpuContext;
  };
  if (args.dummy_weights && !builtin(args)) {
    const ModelConfig config = load_model_config(args.model_dir + "/config.json");
    const bool hashed = std::find(config.hash_layers.begin(), config.hash_layers.end(), true) !=
                        config.hash_layers.end();
    if (!hashed) {
      // Generated on the device: V4-Flash-size configs do not fit in host fp32.
      LOG(INFO) << "engine: " << args.model_dir << "/config.json with device dummy weights (seed "
                << args.dummy_seed << ")";
      o.max_context = context(config);
      // A random drafter only when asked for by name (auto: its acceptance would be noise).
      if (spec == "mtp") use_mtp(config.num_nextn_predict_layers >= 1 && config.dspark.block_size == 0);
      if (spec == "dspark") use_dspark(config, config.dspark.block_size > 0);
      return std::make_unique<CudaRunner>(config, args.dummy_seed, o);
    }
    LOG(INFO) << "engine: the config has hash-routed layers; dummy weights are made on the host";
  }
  if (!builtin(args) && !args.dummy_weights) {
    // A DeepSeek-V4 / V4.1 checkpoint goes to the device tensor by tensor (no host fp32 model;
    // FP8 codes as stored, FP4 experts as stored (W4A8) or converted exactly, V4.1's Engram
    // tables a row range at a time; runtime/gpu_weight_stream.h).
    const GpuWeightStream stream(args.model_dir, family);
    o.max_context = context(family);
    o.expert_checkpoint = args.model_dir;
    use_mtp(stream.weights().has_mtp);
    // The DSpark drafters (streamed as the backbone) in the backbone's weight format; V4.1's
    // with fp32 weights only.
    if (dspark_weights_ok) {
      use_dspark(family, stream.weights().has_dspark);
    } else if (spec == "auto" && stream.weights().has_dspark) {
      LOG(INFO) << "engine: the checkpoint's DeepSeek-V4.1 DSpark drafter runs on device cuda with "
                   "--weight-format fp32 only; speculative decoding is off";
    }
    return std::make_unique<CudaRunner>(family, stream.weights(), o);
  }
  Source s = open_source(args);
  o.max_context = context(s.config);
  // Quantised routed experts go to the device from their checkpoint codes (FP4: exact FP8).
  if (!builtin(args) && !args.dummy_weights) o.expert_checkpoint = args.model_dir;
  const ModelWeights weights = load_model_weights(s.config, *s.weights);
  use_mtp(weights.has_mtp);
  use_dspark(s.config, weights.has_dspark);
  return std::make_unique<CudaRunner>(s.config, weights, o);
#else
  return nullptr;
#endif
}

}  // namespace deepinfer
