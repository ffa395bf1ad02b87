// How the command line sets up an engine beyond copying flags: the default device and formats,
// and which tokenizer a model directory gets.
#pragma once

#include <string>

#include "engine/engine.h"

namespace deepinfer {

// CUDA devices this process sees (cudaGetDeviceCount at run time); 0 in a build without the
// CUDA backend, or when the driver reports none or fails.
int cuda_device_count();

// The device flags as given ("auto" / -1 when not given).
struct DeviceRequest {
  std::string device = "auto";          // auto | cpu | cuda
  std::string weight_format = "auto";   // auto | fp8 | fp32
  std::string kv_cache_dtype = "auto";  // auto | fp8 | bf16 (passed on: the runner resolves auto)
  std::string expert_format = "auto";   // auto | fp8 | w4a8 (passed on: GpuModel resolves auto)
  int cuda_graphs = -1;                 // -1: the device's default, 0: off, 1: on
};

// Sets engine_args.device, weight_format, kv_cache_dtype and cuda_graphs from `request`:
//  * device auto: cuda when n_gpus > 0 (cuda_device_count(): 0 in a build without the CUDA
//    backend) and the model is not V4.1 (the CUDA backend has none of its kernels; such a
//    model stays on cpu, logged); cpu otherwise. An explicit --device is kept as given (the runner refuses what it cannot run).
//  * on cuda: weight format auto = fp8, CUDA graphs on unless switched off; on cpu: fp32,
//    graphs off (an explicit fp8 or --cuda-graphs reaches the runner, which refuses it).
// Reads the model's config.json only when the choice depends on it (device auto with a GPU;
// the fp8 note on cuda). Returns one line saying what was chosen and why.
std::string resolve_device(const DeviceRequest& request, int n_gpus, EngineArgs& engine_args);

struct TokenizerChoice {
  std::string note;    // which file and why, for the startup summary
  bool found = false;  // false: the engine runs on token ids only
};

// The tokenizer of `engine_args` (model_dir, dummy_weights): `tokenizer` (--tokenizer PATH)
// when given; else the built-in model's or the directory's tokenizer.json; else, for a
// directory without one run with dummy weights (a config-only directory such as
// bench/configs/v4-flash-4l), the built-in tokenizer of the model's family (V4:
// models/tiny/tokenizer.json; V4.1: the same with V4.1's two renamed tokens), logged. Sets
// engine_args.tokenizer_path when the engine's own default would not find that file.
TokenizerChoice resolve_tokenizer(const std::string& tokenizer, EngineArgs& engine_args);

}  // namespace deepinfer
