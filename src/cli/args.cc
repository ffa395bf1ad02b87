#include "cli/args.h"

#include <algorithm>
#include <sstream>

#include "base/error.h"
#include "cli/engine_setup.h"
#include "engine/engine.h"

namespace deepinfer {
namespace {

// Help lines: "  --name VALUE" padded to this column, then the text wrapped at kWidth.
constexpr size_t kHelpColumn = 34;
constexpr size_t kWidth = 100;

void append_wrapped(std::ostringstream& out, const std::string& text, size_t column) {
  std::istringstream words(text);
  std::string word;
  size_t at = column;
  bool first = true;
  while (words >> word) {
    if (!first && at + 1 + word.size() > kWidth) {
      out << "\n" << std::string(column, ' ');
      at = column;
      first = true;
    }
    if (!first) {
      out << ' ';
      ++at;
    }
    out << word;
    at += word.size();
    first = false;
  }
  out << "\n";
}

}  // namespace

std::string format_usage(const std::string& synopsis, const OptionGroups& groups, const std::string& epilogue) {
  std::ostringstream out;
  out << synopsis;
  for (const OptionGroup& g : groups) {
    out << "\n" << g.title << ":\n";
    for (const OptionHelp& o : g.options) {
      const bool optional = o.value.rfind("[=", 0) == 0;  // "--name" or "--name=VALUE"
      std::string head = "  --" + o.name + (o.value.empty() || optional ? o.value : " " + o.value);
      if (head.size() + 2 > kHelpColumn) {
        out << head << "\n" << std::string(kHelpColumn, ' ');
      } else {
        out << head << std::string(kHelpColumn - head.size(), ' ');
      }
      append_wrapped(out, o.help, kHelpColumn);
    }
  }
  if (!epilogue.empty()) out << "\n" << epilogue;
  return out.str();
}

bool wants_help(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

std::set<std::string> option_names(const OptionGroups& groups) {
  std::set<std::string> names;
  for (const OptionGroup& g : groups) {
    for (const OptionHelp& o : g.options) {
      if (!o.value.empty()) names.insert(o.name);
    }
  }
  return names;
}

std::set<std::string> flag_names(const OptionGroups& groups) {
  std::set<std::string> names;
  for (const OptionGroup& g : groups) {
    for (const OptionHelp& o : g.options) {
      if (o.value.empty() || o.value.rfind("[=", 0) == 0) names.insert(o.name);
    }
  }
  return names;
}

Args::Args(int argc, char** argv, int first, const std::set<std::string>& options,
           const std::set<std::string>& flags) {
  parse(argc, argv, first, options, flags);
}

Args::Args(int argc, char** argv, int first, const OptionGroups& groups) {
  parse(argc, argv, first, option_names(groups), flag_names(groups));
}

void Args::parse(int argc, char** argv, int first, const std::set<std::string>& options,
                 const std::set<std::string>& flags) {
  const std::string command = first >= 2 ? std::string(" ") + argv[first - 1] : "";
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
    if (flags.count(name) && (eq == std::string::npos || !options.count(name))) {
      CHECK(eq == std::string::npos) << "--" << name << " is a flag: it takes no value";
      flags_.insert(name);
      continue;
    }
    CHECK(options.count(name)) << "unknown option --" << name << " (deepinfer" << command
                               << " --help lists the options)";
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

const OptionGroup kModelOptionGroup = {
    "Model",
    {
        {"model", "DIR|tiny|tiny-v4.1",
         "Checkpoint directory (config.json, safetensors, tokenizer.json) or a built-in model; default: "
         "the built-in tiny V4 model (random weights, the real tokenizer)."},
        {"tokenizer", "PATH",
         "tokenizer.json to use instead of the model's (default: DIR/tokenizer.json; a config-only "
         "directory run with --dummy-weights gets the built-in tokenizer of its family, logged)."},
        {"dummy-weights", "", "Random weights for DIR's config.json (benchmarks; needs --model DIR)."},
        {"numerics", "official|reference",
         "official (default): the quantise-dequantise round trips the model was trained with; "
         "reference: plain fp32, as transformers computes."},
        {"batch-invariant", "", "Reductions independent of the batch: a request's logits are bitwise "
                                "the same alone or in any batch."},
        {"swa-bounded-replay", "[=KEEP]",
         "V4.1, cpu, an approximation: in a prefill the decoder layers (from the first ratio-1 KV "
         "source on) compute only the last KEEP prompt positions (default 140; at least the window + "
         "the rollback depth); long-range KV stays exact. Turns prefix caching off."},
    }};

const OptionGroup kDeviceOptionGroup = {
    "Device and formats",
    {
        {"device", "auto|cpu|cuda",
         "Backend. auto (default): cuda in a CUDA build on a machine with a GPU, for a model the CUDA "
         "backend runs (V4.1 falls back to cpu with a log line); cpu otherwise."},
        {"weight-format", "auto|fp8|fp32",
         "cuda: auto (default) = fp8: projections, experts and head in 128x128 block FP8 (a checkpoint's "
         "FP8 weights as stored, FP4 experts converted exactly); fp32 only on request. cpu: fp32."},
        {"expert-format", "auto|fp8|w4a8",
         "cuda: routed experts on the device; auto (default) = w4a8 for a checkpoint's FP4 experts with "
         "fp8 weights on an sm_90 GPU (FP4 codes as stored, half the memory of fp8), else fp8 (FP4 "
         "converted exactly to 128x128 block FP8; fp32 with --weight-format fp32)."},
        {"kv-cache-dtype", "auto|fp8|bf16",
         "cuda: KV entries; auto (default) = fp8 with official numerics, bf16 with reference."},
        {"cuda-graphs", "", "cuda: decode steps replay CUDA graphs (the default on cuda)."},
        {"no-cuda-graphs", "", "cuda: every step runs eagerly."},
        {"gpu-memory-utilization", "F",
         "cuda: fraction of the device memory for weights, activations and state pools (default 0.9)."},
    }};

const std::set<std::string> kDeviceOptions = option_names({kDeviceOptionGroup});
const std::set<std::string> kDeviceFlags = flag_names({kDeviceOptionGroup});
const std::string kDeviceUsage = format_usage("", {kDeviceOptionGroup});

std::string apply_device_options(const Args& args, EngineArgs& engine_args) {
  if (args.has("swa-bounded-replay")) {  // the device choice must see it (refused on cuda)
    engine_args.model_options.swa_bounded_replay_keep = args.get_int("swa-bounded-replay", 140);
    CHECK(engine_args.model_options.swa_bounded_replay_keep > 0)
        << "--swa-bounded-replay KEEP must be positive, got "
        << engine_args.model_options.swa_bounded_replay_keep;
  }
  engine_args.gpu_memory_utilization =
      args.get_double("gpu-memory-utilization", engine_args.gpu_memory_utilization);
  CHECK(engine_args.gpu_memory_utilization > 0.0 && engine_args.gpu_memory_utilization <= 1.0)
      << "--gpu-memory-utilization must be in (0, 1]";
  CHECK(!(args.has("cuda-graphs") && args.has("no-cuda-graphs")))
      << "give --cuda-graphs or --no-cuda-graphs, not both";
  DeviceRequest request;
  request.device = args.get("device", "auto");
  request.weight_format = args.get("weight-format", "auto");
  request.kv_cache_dtype = args.get("kv-cache-dtype", "auto");
  request.expert_format = args.get("expert-format", "auto");
  request.cuda_graphs = args.has("cuda-graphs") ? 1 : args.has("no-cuda-graphs") ? 0 : -1;
  return resolve_device(request, cuda_device_count(), engine_args);
}

const OptionGroup kPrefillOptionGroup = {
    "Prefill fairness (0: off)",
    {
        {"max-prefill-tokens-with-decodes", "N",
         "Prefill tokens of a step that also runs decodes (default 512)."},
        {"long-prefill-token-threshold", "N",
         "A request's prefill chunk while it shares its step with other work (default 256)."},
    }};

void apply_prefill_options(const Args& args, EngineArgs& engine_args) {
  engine_args.max_prefill_tokens_with_decodes =
      args.get_int("max-prefill-tokens-with-decodes", engine_args.max_prefill_tokens_with_decodes);
  engine_args.long_prefill_token_threshold =
      args.get_int("long-prefill-token-threshold", engine_args.long_prefill_token_threshold);
  CHECK(engine_args.max_prefill_tokens_with_decodes >= 0 && engine_args.long_prefill_token_threshold >= 0)
      << "--max-prefill-tokens-with-decodes and --long-prefill-token-threshold must be >= 0 (0: off)";
}

const OptionGroup kSpeculativeOptionGroup = {
    "Speculative decoding",
    {
        {"speculative-method", "auto|dspark|mtp|none",
         "Draft tokens with the checkpoint's drafter and verify them in one forward (greedy output "
         "unchanged, sampled output the same distribution). auto (default): the checkpoint's DSpark or "
         "MTP drafter when it has one and the backend verifies drafts (cpu; cuda: V4's MTP, V4.1's "
         "DSpark), else none; dspark / mtp: that drafter, an error when the checkpoint has none."},
        {"num-speculative-tokens", "N",
         "Drafts per verification (default 0: the drafter's own, DSpark its block size, MTP 1)."},
        {"spec-scheduling", "fixed|confidence",
         "fixed (default): every decoding request verifies N drafts; confidence: each step verifies the "
         "draft prefixes worth their step time."},
    }};

void apply_speculative_options(const Args& args, EngineArgs& engine_args) {
  const std::string method = args.get("speculative-method", "auto");
  CHECK(method == "auto" || method == "dspark" || method == "mtp" || method == "none")
      << "--speculative-method must be auto, dspark, mtp or none, got '" << method << "'";
  const int64_t k = args.get_int("num-speculative-tokens", 0);
  CHECK(k >= 0) << "--num-speculative-tokens must be >= 0 (0: the drafter's default), got " << k;
  const std::string scheduling = args.get("spec-scheduling", "fixed");
  CHECK(scheduling == "fixed" || scheduling == "confidence")
      << "--spec-scheduling must be fixed or confidence, got '" << scheduling << "'";
  CHECK(method != "none" || (!args.has("num-speculative-tokens") && !args.has("spec-scheduling")))
      << "--num-speculative-tokens and --spec-scheduling need speculative decoding (--speculative-method "
         "is none)";
  engine_args.speculative_method = method;
  engine_args.num_speculative_tokens = k;
  engine_args.spec_scheduling = scheduling;
}

const OptionGroup kPrefixCacheOptionGroup = {
    "Prefix caching",
    {
        {"enable-prefix-caching", "",
         "Reuse the cached state of a prompt's leading 128-token blocks (the default where the backend "
         "supports it: cpu and cuda); the logits are those of a cold run."},
        {"no-enable-prefix-caching", "", "Compute every prompt from its first token."},
    }};

void apply_prefix_cache_options(const Args& args, EngineArgs& engine_args) {
  CHECK(!(args.has("enable-prefix-caching") && args.has("no-enable-prefix-caching")))
      << "give --enable-prefix-caching or --no-enable-prefix-caching, not both";
  if (args.has("no-enable-prefix-caching")) engine_args.enable_prefix_caching = false;
  if (args.has("enable-prefix-caching")) engine_args.enable_prefix_caching = true;
}

}  // namespace deepinfer
