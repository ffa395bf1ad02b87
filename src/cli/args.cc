#include "cli/args.h"

#include "base/error.h"
#include "engine/engine.h"

namespace deepinfer {

Args::Args(int argc, char** argv, int first, const std::set<std::string>& options,
           const std::set<std::string>& flags) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (flags.count(name)) {
      flags_.insert(name);
      continue;
    }
    CHECK(options.count(name)) << "unknown option --" << name;
    if (eq == std::string::npos) {
      CHECK(i + 1 < argc) << "option --" << name << " needs a value";
      value = argv[++i];
    }
    values_[name] = value;
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  try {
    size_t used = 0;
    const int64_t v = std::stoll(it->second, &used);
    CHECK(used == it->second.size()) << "--" << name << " expects an integer, got '" << it->second << "'";
    return v;
  } catch (const std::logic_error&) {
    THROW(kInvalidInput) << "--" << name << " expects an integer, got '" << it->second << "'";
  }
}

double Args::get_double(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  try {
    size_t used = 0;
    const double v = std::stod(it->second, &used);
    CHECK(used == it->second.size()) << "--" << name << " expects a number, got '" << it->second << "'";
    return v;
  } catch (const std::logic_error&) {
    THROW(kInvalidInput) << "--" << name << " expects a number, got '" << it->second << "'";
  }
}

const std::set<std::string> kDeviceOptions = {"device", "gpu-memory-utilization", "weight-format",
                                               "kv-cache-dtype"};

const std::set<std::string> kDeviceFlags = {"cuda-graphs"};

const char* const kDeviceUsage =
    "         [--device cpu|cuda] [--gpu-memory-utilization 0.9] [--weight-format fp32|fp8]\n"
    "         [--kv-cache-dtype auto|fp8|bf16] [--cuda-graphs]\n";

void apply_device_options(const Args& args, EngineArgs& engine_args) {
  engine_args.device = args.get("device", engine_args.device);
  engine_args.gpu_memory_utilization =
      args.get_double("gpu-memory-utilization", engine_args.gpu_memory_utilization);
  CHECK(engine_args.gpu_memory_utilization > 0.0 && engine_args.gpu_memory_utilization <= 1.0)
      << "--gpu-memory-utilization must be in (0, 1]";
  engine_args.weight_format = args.get("weight-format", engine_args.weight_format);
  engine_args.kv_cache_dtype = args.get("kv-cache-dtype", engine_args.kv_cache_dtype);
  engine_args.cuda_graphs = args.has("cuda-graphs");
}

void apply_prefill_options(const Args& args, EngineArgs& engine_args) {
  engine_args.max_prefill_tokens_with_decodes =
      args.get_int("max-prefill-tokens-with-decodes", engine_args.max_prefill_tokens_with_decodes);
  engine_args.long_prefill_token_threshold =
      args.get_int("long-prefill-token-threshold", engine_args.long_prefill_token_threshold);
  CHECK(engine_args.max_prefill_tokens_with_decodes >= 0 && engine_args.long_prefill_token_threshold >= 0)
      << "--max-prefill-tokens-with-decodes and --long-prefill-token-threshold must be >= 0 (0: off)";
}

}  // namespace deepinfer
