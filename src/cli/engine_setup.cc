#include "cli/engine_setup.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#ifdef DEEPINFER_CUDA
#include <cuda_runtime.h>
#endif

#include "base/error.h"
#include "base/logging.h"
#include "cli/model_loading.h"
#include "io/config_parser.h"
#include "model/tiny_model.h"
#include "recipe/v41_tokenizer.h"
#include "runtime/runner_factory.h"

namespace deepinfer {
namespace {

ModelConfig model_config_of(const EngineArgs& args) {
  return selects_builtin_model(args.model_dir) ? builtin_model_config(args.model_dir)
                                               : load_model_config(args.model_dir + "/config.json");
}

// The V4.1 built-in tokenizer as a file the engine can load (EngineArgs::tokenizer_path is a
// path): written once per process to the temporary directory, removed at exit.
class V41TokenizerFile {
 public:
  const std::string& path() {
    if (path_.empty()) {
      const std::string text = recipe::v41_tokenizer_json_from_v4(tiny_tokenizer_path());
      const std::string path = (std::filesystem::temp_directory_path() /
                                ("deepinfer-v41-tokenizer-" + std::to_string(getpid()) + ".json"))
                                   .string();
      std::ofstream out(path, std::ios::binary);
      out << text;
      out.close();
      CHECK(out.good()) << "cannot write the V4.1 tokenizer to " << path;
      path_ = path;
    }
    return path_;
  }
  ~V41TokenizerFile() {
    if (!path_.empty()) std::remove(path_.c_str());
  }

 private:
  std::string path_;
};

V41TokenizerFile& v41_tokenizer_file() {
  static V41TokenizerFile file;
  return file;
}

}  // namespace

int cuda_device_count() {
#ifdef DEEPINFER_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear the error, report none
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

std::string resolve_device(const DeviceRequest& request, int n_gpus, EngineArgs& engine_args) {
  CHECK(request.device == "auto" || request.device == "cpu" || request.device == "cuda")
      << "--device must be auto, cpu or cuda, not '" << request.device << "'";
  CHECK(request.weight_format == "auto" || request.weight_format == "fp8" || request.weight_format == "fp32")
      << "--weight-format must be auto, fp8 or fp32, not '" << request.weight_format << "'";
  std::string why;
  if (request.device != "auto") {
    engine_args.device = request.device;
    why = "--device " + request.device;
  } else if (n_gpus <= 0) {
    engine_args.device = "cpu";
    why = cuda_backend_built() ? "auto: no CUDA device found" : "auto: this build has no CUDA backend";
  } else if (engine_args.model_options.swa_bounded_replay_keep > 0) {
    engine_args.device = "cpu";
    why = "auto: --swa-bounded-replay runs on the CPU backend only for now";
    LOG(INFO) << "device cpu: " << why.substr(6);
  } else {
    engine_args.device = "cuda";
    why = "auto: " + std::to_string(n_gpus) + " CUDA device" + (n_gpus == 1 ? "" : "s") + " found, using cuda:0";
  }
  const bool cuda = engine_args.device == "cuda";
  // DeepSeek-V4.1 on cuda: FP8 (32x32 blocks, routed experts W4A8) for a checkpoint that stores
  // block-FP8 weights and FP4 experts, as the released one does; fp32 otherwise (its routed
  // experts would be FP8, which V4.1 on cuda does not run; dummy weights have no FP4 codes).
  auto fp8_default = [&] {
    const ModelConfig family = model_config_of(engine_args);
    return !family.is_v41() || (!engine_args.dummy_weights && family.quant.method == "fp8" &&
                                family.quant.expert_dtype == "fp4");
  };
  const bool fp8_auto = cuda && fp8_default();
  engine_args.weight_format = request.weight_format != "auto" ? request.weight_format : fp8_auto ? "fp8" : "fp32";
  engine_args.kv_cache_dtype = request.kv_cache_dtype;
  CHECK(request.expert_format == "auto" || request.expert_format == "fp8" || request.expert_format == "w4a8")
      << "--expert-format must be auto, fp8 or w4a8, not '" << request.expert_format << "'";
  CHECK(cuda || request.expert_format == "auto") << "--expert-format is a setting of --device cuda";
  engine_args.expert_format = request.expert_format;
  engine_args.cuda_graphs = request.cuda_graphs < 0 ? cuda : request.cuda_graphs == 1;
  if (cuda && engine_args.weight_format == "fp8") {
    const bool stored_fp8 = !engine_args.dummy_weights && model_config_of(engine_args).quant.method == "fp8";
    why += stored_fp8 ? "; weights fp8 as the checkpoint stores them"
                      : "; weights quantised to block FP8 at load (--weight-format fp32 keeps fp32)";
  }
  return why;
}

TokenizerChoice resolve_tokenizer(const std::string& tokenizer, EngineArgs& engine_args) {
  if (!tokenizer.empty()) {
    CHECK_KIND(kNotFound, std::filesystem::exists(tokenizer)) << "--tokenizer " << tokenizer << " does not exist";
    engine_args.tokenizer_path = tokenizer;
    return {tokenizer + " (--tokenizer)", true};
  }
  if (selects_builtin_model(engine_args.model_dir)) {
    const std::string path = tiny_tokenizer_path();
    const bool v41 = builtin_model_uses_v41_tokenizer(engine_args.model_dir);
    return {path + (v41 ? " (built-in, V4.1 spellings)" : " (built-in)"), std::filesystem::exists(path)};
  }
  const std::string own = engine_args.model_dir + "/tokenizer.json";
  if (std::filesystem::exists(own)) return {own, true};
  if (!engine_args.dummy_weights) {
    return {"none: token ids only (" + own + " does not exist; --tokenizer PATH adds one)", false};
  }
  const bool v41 = model_config_of(engine_args).is_v41();
  engine_args.tokenizer_path = v41 ? v41_tokenizer_file().path() : tiny_tokenizer_path();
  const std::string note = std::string("built-in ") + (v41 ? "V4.1" : "V4") + " tokenizer (" +
                           tiny_tokenizer_path() + (v41 ? ", V4.1 spellings" : "") + "): " + own +
                           " does not exist";
  LOG(INFO) << "tokenizer: " << note;
  return {note, true};
}

}  // namespace deepinfer
