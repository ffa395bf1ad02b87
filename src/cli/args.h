// A small command-line parser: `--name value`, `--name=value`, `--flag`, positional words.
// Unknown or malformed options raise an Error naming them. Help: main.cc prints a command's
// usage (its OptionGroups formatted by format_usage) for `--help` / `-h` anywhere after the
// command, before the command runs (as argparse does, `-h` is never an option's value).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace deepinfer {

// One option in a command's help. An empty `value` makes it a flag (no value).
struct OptionHelp {
  std::string name;   // without the leading "--"
  std::string value;  // placeholder shown in the help, e.g. "N", "cpu|cuda"; "" for a flag
  std::string help;   // what it does and its default
};

// Options under a title ("Model", "Engine", ...), in help order.
struct OptionGroup {
  std::string title;
  std::vector<OptionHelp> options;
};
using OptionGroups = std::vector<OptionGroup>;

// The help text: the synopsis lines, then each group with one aligned line (wrapped) per
// option, then the epilogue.
std::string format_usage(const std::string& synopsis, const OptionGroups& groups,
                         const std::string& epilogue = "");

// True when "--help" or "-h" is among argv[first..argc).
bool wants_help(int argc, char** argv, int first);

class Args {
 public:
  // `flags` take no value; every other `--name` needs one.
  Args(int argc, char** argv, int first, const std::set<std::string>& options,
       const std::set<std::string>& flags);
  // Options and flags as listed in `groups` (the command's help).
  Args(int argc, char** argv, int first, const OptionGroups& groups);

  bool has(const std::string& name) const { return values_.count(name) || flags_.count(name); }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  void parse(int argc, char** argv, int first, const std::set<std::string>& options,
             const std::set<std::string>& flags);

  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
};

// The option (with a value) and flag names of `groups`.
std::set<std::string> option_names(const OptionGroups& groups);
std::set<std::string> flag_names(const OptionGroups& groups);

struct EngineArgs;

// The model options of every engine command: --model, --tokenizer, --dummy-weights,
// --numerics, --batch-invariant, --swa-bounded-replay[=KEEP] (read by apply_device_options).
// An option whose value placeholder starts with "[=" takes an optional value: "--name" alone
// (a flag) or "--name=VALUE".
extern const OptionGroup kModelOptionGroup;

// Options every engine command takes for the backend (apply_device_options): --device,
// --gpu-memory-utilization, --weight-format, --kv-cache-dtype, --cuda-graphs / --no-cuda-graphs.
extern const OptionGroup kDeviceOptionGroup;
// Their names, for commands that build Args from sets (kDeviceOptions take a value).
extern const std::set<std::string> kDeviceOptions;
extern const std::set<std::string> kDeviceFlags;
// Their help lines (format_usage of kDeviceOptionGroup alone).
extern const std::string kDeviceUsage;

// Copies the device options (and --swa-bounded-replay[=KEEP], which the device choice must
// see: it is refused on cuda) into `engine_args`, resolving the defaults (cli/engine_setup.h:
// --device auto picks the GPU when there is one and the model runs there; on cuda the fast
// formats: FP8 weights, FP8 KV (kv auto with official numerics), CUDA graphs). Needs
// engine_args.model_dir, dummy_weights and model_options set. Returns one line saying what
// was chosen and why (the startup summary prints it).
std::string apply_device_options(const Args& args, EngineArgs& engine_args);

// --max-prefill-tokens-with-decodes N and --long-prefill-token-threshold N (0: off) into
// `engine_args` (scheduler/scheduler.h: prefill limits); they must be >= 0.
extern const OptionGroup kPrefillOptionGroup;
void apply_prefill_options(const Args& args, EngineArgs& engine_args);

// Speculative decoding (engine.h EngineArgs::speculative_method), shared by generate, serve
// and bench: --speculative-method auto|dspark|mtp|none (default auto: the checkpoint's
// drafter when it has one and the backend can verify drafts, else none), --num-speculative-
// tokens N (0: the drafter's default), --spec-scheduling fixed|confidence. Values are checked
// here; an explicit method the checkpoint lacks is refused by the engine.
extern const OptionGroup kSpeculativeOptionGroup;
void apply_speculative_options(const Args& args, EngineArgs& engine_args);

// --enable-prefix-caching / --no-enable-prefix-caching into EngineArgs::enable_prefix_caching.
extern const OptionGroup kPrefixCacheOptionGroup;
void apply_prefix_cache_options(const Args& args, EngineArgs& engine_args);

}  // namespace deepinfer
