// deepinfer command line: `deepinfer COMMAND [options]` (top_usage(); each command's --help).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "base/error.h"
#include "base/logging.h"
#include "cli/args.h"
#include "cli/bench.h"
#include "cli/engine_setup.h"
#include "cli/model_loading.h"
#include "cli/serve.h"
#include "cli/startup_summary.h"
#include "engine/engine.h"
#include "engine/generate_loop.h"
#include "model/tiny_model.h"

namespace deepinfer {
namespace {

const OptionGroups& generate_options() {
  static const OptionGroups groups = {
      kModelOptionGroup,
      {"Prompt and sampling",
       {
           {"prompt", "TEXT", "The prompt text (needs a tokenizer)."},
           {"prompt-ids", "1,2,3", "The prompt as token ids, comma-separated (no tokenizer needed)."},
           {"max-tokens", "N", "Tokens to generate (default 32)."},
           {"temperature", "T", "0 = greedy (default 0)."},
           {"top-p", "P", "Nucleus sampling (default 1)."},
           {"top-k", "K", "0 = off (default 0)."},
           {"min-p", "P", "0 = off (default 0)."},
           {"seed", "S", "Seed of the sampler (default 0)."},
           {"ignore-eos", "", "Keep generating past the end-of-sequence token."},
       }},
      kSpeculativeOptionGroup,
      kPrefixCacheOptionGroup,
      kDeviceOptionGroup,
  };
  return groups;
}

std::string generate_usage() {
  return format_usage(
      "usage: deepinfer generate [--model DIR] (--prompt TEXT | --prompt-ids 1,2,3) [options]\n\n"
      "Generates one completion: text on stdout as it comes, the startup summary and timings on stderr.\n"
      "Without --model the trained tiny V4.1 model (models/trained-v41) runs ($DEEPINFER_DEFAULT_MODEL\n"
      "overrides it; --model tiny is the random-weight tiny model). On the CPU a\n"
      "checkpoint without a drafter (or --speculative-method none) runs the plain generate loop; with\n"
      "speculative decoding, or on cuda, the request goes through the engine.\n",
      generate_options());
}

struct Command {
  const char* name;
  const char* summary;
  std::string (*usage)();
  int (*run)(int argc, char** argv);
};

int cmd_generate(int argc, char** argv);

const Command kCommands[] = {
    {"generate", "one completion from a prompt (text or token ids)", generate_usage, cmd_generate},
    {"serve", "the OpenAI-compatible HTTP server", serve_usage, cmd_serve},
    {"bench", "offline serving benchmark (throughput, TTFT, TPOT; --fairness)", bench_usage, cmd_bench},
};

std::string top_usage() {
  std::string text =
      "usage: deepinfer COMMAND [options]\n\n"
      "A C++/CUDA inference engine for the DeepSeek-V4 family.\n\nCommands:\n";
  for (const Command& c : kCommands) {
    text += "  " + std::string(c.name) + std::string(12 - std::string(c.name).size(), ' ') + c.summary + "\n";
  }
  text +=
      "  help [CMD]  this text, or a command's options\n\n"
      "`deepinfer COMMAND --help` (or -h) lists that command's options; `deepinfer serve --help` is\n"
      "the reference for the server's flags.\n";
  return text;
}

const Command* find_command(const std::string& name) {
  for (const Command& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      ids.push_back(static_cast<int32_t>(std::stol(item)));
    } catch (const std::logic_error&) {
      THROW(kInvalidInput) << "--prompt-ids: '" << item << "' is not a token id";
    }
  }
  return ids;
}

SamplingParams sampling_params(const Args& args) {
  SamplingParams params;
  params.max_tokens = args.get_int("max-tokens", 32);
  params.temperature = static_cast<float>(args.get_double("temperature", 0.0));
  params.top_p = static_cast<float>(args.get_double("top-p", 1.0));
  params.top_k = args.get_int("top-k", 0);
  params.min_p = static_cast<float>(args.get_double("min-p", 0.0));
  params.seed = static_cast<uint64_t>(args.get_int("seed", 0));
  params.ignore_eos = args.has("ignore-eos");
  return params;
}

// generate through the Engine (a device backend, or speculative decoding): one request, text
// streamed as it comes. `loaded`: the model already loaded on the CPU (else the engine loads it).
int generate_with_engine(const Args& args, EngineArgs engine_args, const std::string& device_note,
                         const std::string& tokenizer_note, LoadedModel* loaded = nullptr) {
  engine_args.max_num_seqs = 1;
  std::unique_ptr<Engine> owned =
      loaded == nullptr ? std::make_unique<Engine>(engine_args)
                        : std::make_unique<Engine>(engine_args, std::move(loaded->model),
                                                   std::shared_ptr<const recipe::Tokenizer>(std::move(loaded->tokenizer)));
  Engine& engine = *owned;
  print_startup_summary(engine_startup_summary("generate", engine_args, engine, device_note, tokenizer_note));
  std::vector<int32_t> prompt;
  if (args.has("prompt-ids")) {
    prompt = parse_ids(args.get("prompt-ids"));
  } else {
    CHECK(args.has("prompt")) << "give --prompt TEXT or --prompt-ids";
    CHECK(engine.tokenizer() != nullptr) << "this model has no tokenizer.json: use --prompt-ids or --tokenizer PATH";
    prompt = engine.tokenizer()->encode(args.get("prompt"), /*add_special_tokens=*/true);
  }
  EngineRequest request;
  request.id = "generate";
  request.prompt = prompt;
  request.params = sampling_params(args);
  request.skip_special_tokens = false;
  const auto t0 = std::chrono::steady_clock::now();
  double first = 0;
  engine.add_request(std::move(request));
  RequestOutput last;
  while (engine.has_unfinished()) {
    for (RequestOutput& o : engine.step()) {
      if (first == 0 && !o.new_tokens.empty()) {
        first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      if (engine.tokenizer() != nullptr) {
        std::fwrite(o.new_text.data(), 1, o.new_text.size(), stdout);
      } else {
        for (int32_t t : o.new_tokens) std::printf("[%d]", t);
      }
      std::fflush(stdout);
      last = std::move(o);
    }
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n");
  const double tps = last.n_output_tokens > 1 ? (last.n_output_tokens - 1) / std::max(total - first, 1e-9) : 0.0;
  std::fprintf(stderr, "[%zu prompt tokens, %lld generated, finish=%s, %s] first token %.1f ms, decode %.1f tok/s\n",
               prompt.size(), static_cast<long long>(last.n_output_tokens), last.finish_reason.c_str(),
               engine.runner().name().c_str(), first * 1e3, tps);
  return 0;
}

int cmd_generate(int argc, char** argv) {
  Args args(argc, argv, 2, generate_options());
  EngineArgs engine_args;
  engine_args.model_dir = args.get("model");
  engine_args.dummy_weights = args.has("dummy-weights");
  CHECK(!engine_args.dummy_weights || !engine_args.model_dir.empty()) << "--dummy-weights needs --model DIR";
  engine_args.model_dir = model_or_default(engine_args.model_dir);
  engine_args.model_options.numerics = parse_numerics(args.get("numerics", "official"));
  engine_args.model_options.batch_invariant = args.has("batch-invariant");
  const std::string device_note = apply_device_options(args, engine_args);
  apply_speculative_options(args, engine_args);
  apply_prefix_cache_options(args, engine_args);
  const std::string tokenizer_note = resolve_tokenizer(args.get("tokenizer"), engine_args).note;
  const std::string& method = engine_args.speculative_method;
  if (engine_args.device != "cpu" || engine_args.dummy_weights || args.has("kv-cache-dtype") ||
      engine_args.cuda_graphs || method == "dspark" || method == "mtp") {
    return generate_with_engine(args, engine_args, device_note, tokenizer_note);
  }
  CHECK(engine_args.weight_format == "fp32") << "--weight-format fp8 needs --device cuda";
  LoadedModel loaded = load_model_for_cli(engine_args.model_dir, engine_args.model_options, engine_args.tokenizer_path);
  // auto with a drafter: speculative decoding in the engine, on the model just loaded.
  if (method == "auto" && loaded.model->has_drafter()) {
    return generate_with_engine(args, engine_args, device_note, tokenizer_note, &loaded);
  }
  // The plain loop (model/generate_loop.h) on the CPU: one sequence, prefill and decode timed apart.
  StartupSummary summary;
  summary.command = "generate";
  summary.model = describe_model(engine_args.model_dir, false, 0, loaded.model->config());
  summary.tokenizer = tokenizer_note;
  summary.device = "cpu (" + device_note + ")";
  summary.formats = std::string("weights fp32, kv cache fp32 (") + numerics_name(engine_args.model_options.numerics) +
                    " numerics), cuda graphs off (cpu)";
  summary.backend = "cpu, the plain generate loop (one sequence, no engine)";
  summary.speculative = method == "none" ? "none" : "none (auto: the checkpoint has no drafter)";
  summary.memory = "host: the model's fp32 weights and one sequence's state";
  summary.prefix_cache = "off (the plain loop runs one sequence)";
  summary.capacity = "1 request of up to " + std::to_string(loaded.model->config().max_position_embeddings) + " tokens";
  print_startup_summary(summary);

  std::vector<int32_t> prompt;
  if (args.has("prompt-ids")) {
    prompt = parse_ids(args.get("prompt-ids"));
  } else {
    CHECK(args.has("prompt")) << "give --prompt TEXT or --prompt-ids";
    prompt = loaded.encode(args.get("prompt"));
  }
  const SamplingParams params = sampling_params(args);
  std::string printed;
  auto stream = loaded.make_stream();
  GenerateResult r = generate_tokens(*loaded.model, prompt, params, [&](int32_t token) {
    const std::string piece = stream(token);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");
  const double tps = r.decode_seconds > 0 ? (r.tokens.size() - 1) / r.decode_seconds : 0.0;
  std::fprintf(stderr,
               "[%zu prompt tokens, %zu generated, finish=%s] prefill %.1f ms (%.0f tok/s), "
               "decode %.1f tok/s\n",
               prompt.size(), r.tokens.size(), r.finish_reason.c_str(), r.prefill_seconds * 1e3,
               prompt.size() / std::max(r.prefill_seconds, 1e-9), tps);
  return 0;
}

}  // namespace
}  // namespace deepinfer

int main(int argc, char** argv) {
  using deepinfer::find_command;
  const std::string cmd = argc < 2 ? "" : argv[1];
  if (cmd.empty() || cmd == "--help" || cmd == "-h" || cmd == "help") {
    const deepinfer::Command* c = cmd == "help" && argc > 2 ? find_command(argv[2]) : nullptr;
    const std::string text = c != nullptr ? c->usage() : deepinfer::top_usage();
    std::fputs(text.c_str(), cmd.empty() ? stderr : stdout);
    return cmd.empty() || (cmd == "help" && argc > 2 && c == nullptr) ? 2 : 0;
  }
  const deepinfer::Command* c = find_command(cmd);
  if (c == nullptr) {
    std::fprintf(stderr, "deepinfer: unknown command '%s'\n\n%s", cmd.c_str(), deepinfer::top_usage().c_str());
    return 2;
  }
  try {
    if (deepinfer::wants_help(argc, argv, 2)) {
      std::fputs(c->usage().c_str(), stdout);
      return 0;
    }
    return c->run(argc, argv);
  } catch (const deepinfer::Error& e) {
    std::fprintf(stderr, "deepinfer: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepinfer: internal error: %s\n", e.what());
    return 1;
  }
}
