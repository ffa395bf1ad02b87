// A small command-line parser: `--name value`, `--flag`, positional words. Unknown or
// malformed options raise an Error naming them.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace deepinfer {

class Args {
 public:
  // `flags` take no value; every other `--name` needs one.
  Args(int argc, char** argv, int first, const std::set<std::string>& options,
       const std::set<std::string>& flags);

  bool has(const std::string& name) const { return values_.count(name) || flags_.count(name); }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
};

struct EngineArgs;

// Options every engine command takes for the backend: --device cpu|cuda,
// --gpu-memory-utilization F, --weight-format fp32|fp8, --kv-cache-dtype auto|fp8|bf16, and
// the flag --cuda-graphs (kDeviceFlags).
extern const std::set<std::string> kDeviceOptions;
extern const std::set<std::string> kDeviceFlags;
// Copies them into `engine_args` (validated by the engine when it starts).
void apply_device_options(const Args& args, EngineArgs& engine_args);
// One usage line for them.
extern const char* const kDeviceUsage;

// --max-prefill-tokens-with-decodes N and --long-prefill-token-threshold N (0: off) into
// `engine_args` (scheduler/scheduler.h: prefill limits); they must be >= 0.
void apply_prefill_options(const Args& args, EngineArgs& engine_args);

}  // namespace deepinfer
