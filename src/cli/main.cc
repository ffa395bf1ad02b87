// deepinfer command line: `deepinfer generate ...` (see usage()).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "base/error.h"
#include "base/logging.h"
#include "cli/args.h"
#include "cli/bench.h"
#include "cli/model_loading.h"
#include "cli/serve.h"
#include "engine/engine.h"
#include "engine/generate_loop.h"

namespace deepinfer {
namespace {

void usage() {
  std::fprintf(stderr,
               "usage: deepinfer generate [--model DIR] (--prompt TEXT | --prompt-ids 1,2,3)\n"
               "         [--max-tokens N] [--temperature T] [--top-p P] [--top-k K] [--min-p P]\n"
               "         [--seed S] [--numerics official|reference] [--batch-invariant] [--ignore-eos]\n"
               "%s"
               "Without --model the built-in tiny model (random weights, real tokenizer) runs.\n"
               "       deepinfer bench [--model DIR [--dummy-weights]] [--input-len N] [--output-len N]\n"
               "         [--num-prompts N] [--concurrency 1,4,16] [--out PREFIX] [--no-overlap]\n"
               "         [--max-num-batched-tokens N] [--max-model-len N] [--no-overlap-table]\n"
               "         [--max-prefill-tokens-with-decodes 512] [--long-prefill-token-threshold 256]\n"
               "       deepinfer bench --fairness [--streams 4] [--long-len 20000] [--short-len 16]\n"
               "         [--stream-prompt-len 64] [--warmup-steps 8] [--short-after-steps 2] [--repeat N]\n"
               "         [--no-alone] [--out FILE] (and the engine options above)\n"
               "%s",
               kDeviceUsage, kDeviceUsage);
  serve_usage();
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

// generate on a non-CPU device: one request through the Engine, text streamed as it comes.
int generate_with_engine(const Args& args, EngineArgs engine_args) {
  engine_args.max_num_seqs = 1;
  Engine engine(engine_args);
  std::vector<int32_t> prompt;
  if (args.has("prompt-ids")) {
    prompt = parse_ids(args.get("prompt-ids"));
  } else {
    CHECK(args.has("prompt")) << "give --prompt TEXT or --prompt-ids";
    CHECK(engine.tokenizer() != nullptr) << "this model has no tokenizer.json: use --prompt-ids";
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
  std::set<std::string> names = {"model", "prompt", "prompt-ids", "max-tokens", "temperature", "top-p",
                                 "top-k", "min-p", "seed", "numerics"};
  names.insert(kDeviceOptions.begin(), kDeviceOptions.end());
  std::set<std::string> flags = {"batch-invariant", "ignore-eos", "dummy-weights"};
  flags.insert(kDeviceFlags.begin(), kDeviceFlags.end());
  Args args(argc, argv, 2, names, flags);
  ModelOptions options;
  options.numerics = parse_numerics(args.get("numerics", "official"));
  options.batch_invariant = args.has("batch-invariant");
  if (args.get("device", "cpu") != "cpu" || args.has("dummy-weights") || args.has("kv-cache-dtype") ||
      args.has("cuda-graphs")) {
    EngineArgs engine_args;
    engine_args.model_dir = args.get("model");
    engine_args.dummy_weights = args.has("dummy-weights");
    CHECK(!engine_args.dummy_weights || !engine_args.model_dir.empty()) << "--dummy-weights needs --model DIR";
    engine_args.model_options = options;
    apply_device_options(args, engine_args);
    return generate_with_engine(args, engine_args);
  }
  CHECK(args.get("weight-format", "fp32") == "fp32") << "--weight-format fp8 needs --device cuda";
  LoadedModel loaded = load_model_for_cli(args.get("model"), options);

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
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    deepinfer::usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "generate") return deepinfer::cmd_generate(argc, argv);
    if (cmd == "serve") return deepinfer::cmd_serve(argc, argv);
    if (cmd == "bench") return deepinfer::cmd_bench(argc, argv);
    std::fprintf(stderr, "deepinfer: unknown command '%s'\n", cmd.c_str());
    deepinfer::usage();
    return 2;
  } catch (const deepinfer::Error& e) {
    std::fprintf(stderr, "deepinfer: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepinfer: internal error: %s\n", e.what());
    return 1;
  }
}
