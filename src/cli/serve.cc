// `deepinfer serve`: the OpenAI-compatible HTTP server (src/server) over the batched Engine.
#include "cli/serve.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "base/logging.h"
#include "cli/args.h"
#include "cli/model_loading.h"
#include "engine/async_engine.h"
#include "engine/engine.h"
#include "recipe/chat_encoding.h"
#include "server/server.h"

namespace deepinfer {

void serve_usage() {
  std::fprintf(stderr,
               "usage: deepinfer serve [--model DIR] [--host 127.0.0.1] [--port 8000] [--api-key KEY]\n"
               "         [--served-model-name NAME] [--max-model-len N] [--max-num-seqs N]\n"
               "         [--max-num-batched-tokens N] [--max-prefill-tokens-with-decodes 512]\n"
               "         [--long-prefill-token-threshold 256] [--max-live-requests N] [--max-body-bytes N]\n"
               "         [--chat-encoding auto|v4|v4.1] [--numerics official|reference] [--batch-invariant]\n"
               "         [--dummy-weights] [--io-threads N] [--prep-threads N] [--drain-seconds S]\n"
               "         [--default-thinking on|off] [--scheduling-policy fcfs|priority]\n"
               "         [--state-budget-mib N] [--no-overlap] [--http-idle-timeout S]\n"
               "         [--http-read-timeout S] [--http-write-timeout S] [--grammar-threads N]\n"
               "         [--grammar-max-states N] [--grammar-max-memory-mb N] [--grammar-timeout-ms N]\n"
               "         [--max-prompt-schema-bytes N]\n"
               "%s"
               "Without --model the built-in tiny model (random weights, real tokenizer) is served.\n",
               kDeviceUsage);
}

int cmd_serve(int argc, char** argv) {
  // One malloc arena for every thread, set before any thread starts. glibc's malloc_trim
  // (AsyncEngine calls it once idle) cannot hand back the free top of a per-thread arena, and
  // after the engine frees a large mmapped buffer (the logits) glibc stops trimming arena tops
  // below twice its size: a burst of requests then left 6-35 MB resident for good (tiny model,
  // 500 streams). In the main arena malloc_trim returns all of it; throughput was unchanged.
  mallopt(M_ARENA_MAX, 1);
  std::set<std::string> names = {"model", "host", "port", "api-key", "served-model-name", "max-model-len",
                                 "max-num-seqs", "max-num-batched-tokens", "max-live-requests",
                                 "max-prefill-tokens-with-decodes", "long-prefill-token-threshold",
                                 "max-body-bytes", "chat-encoding", "numerics", "io-threads",
                                 "prep-threads", "drain-seconds", "default-thinking", "grammar-threads", "grammar-max-states",
                                 "grammar-max-memory-mb", "grammar-timeout-ms", "max-prompt-schema-bytes",
                                 "scheduling-policy", "state-budget-mib", "http-idle-timeout",
                                 "http-read-timeout", "http-write-timeout"};
  names.insert(kDeviceOptions.begin(), kDeviceOptions.end());
  std::set<std::string> flags = {"batch-invariant", "dummy-weights", "no-overlap", "help"};
  flags.insert(kDeviceFlags.begin(), kDeviceFlags.end());
  Args args(argc, argv, 2, names, flags);
  if (args.has("help")) {
    serve_usage();
    return 0;
  }
  EngineArgs engine_args;
  engine_args.model_dir = args.get("model");
  engine_args.model_options.numerics = parse_numerics(args.get("numerics", "official"));
  engine_args.model_options.batch_invariant = args.has("batch-invariant");
  engine_args.dummy_weights = args.has("dummy-weights");
  engine_args.max_num_seqs = args.get_int("max-num-seqs", engine_args.max_num_seqs);
  engine_args.max_num_batched_tokens = args.get_int("max-num-batched-tokens", engine_args.max_num_batched_tokens);
  apply_prefill_options(args, engine_args);
  engine_args.max_model_len = args.get_int("max-model-len", 0);
  engine_args.state_budget_bytes = args.get_int("state-budget-mib", 0) << 20;
  engine_args.overlap = !args.has("no-overlap");
  apply_device_options(args, engine_args);
  const std::string policy = args.get("scheduling-policy", "fcfs");
  CHECK(policy == "fcfs" || policy == "priority") << "--scheduling-policy must be fcfs or priority";
  engine_args.priority = policy == "priority";

  server::ServerOptions options;
  options.host = args.get("host", options.host);
  const int64_t port = args.get_int("port", options.port);
  CHECK(port >= 0 && port < 65536) << "--port " << port << " is out of range";
  options.port = static_cast<uint16_t>(port);
  options.api_key = args.get("api-key");
  const int64_t body = args.get_int("max-body-bytes", static_cast<int64_t>(options.max_body_bytes));
  CHECK(body > 0) << "--max-body-bytes must be positive";
  options.max_body_bytes = static_cast<size_t>(body);
  options.n_io_threads = static_cast<int>(args.get_int("io-threads", 1));
  CHECK(options.n_io_threads >= 1 && options.n_io_threads <= 256) << "--io-threads must be in 1..256";
  options.n_prep_threads = static_cast<int>(args.get_int("prep-threads", options.n_prep_threads));
  CHECK(options.n_prep_threads >= 1 && options.n_prep_threads <= 256) << "--prep-threads must be in 1..256";
  options.n_grammar_threads = static_cast<int>(args.get_int("grammar-threads", options.n_grammar_threads));
  CHECK(options.n_grammar_threads >= 1 && options.n_grammar_threads <= 256) << "--grammar-threads must be in 1..256";
  // Budgets of every constraint compilation (grammar/budget.h); 0 turns one off. The server's
  // check and the engine's compilation use the same limits.
  grammar::CompileLimits& gl = options.limits.grammar;
  gl.max_states = args.get_int("grammar-max-states", gl.max_states);
  gl.max_memory_bytes = args.get_int("grammar-max-memory-mb", gl.max_memory_bytes >> 20) << 20;
  gl.timeout_ms = args.get_int("grammar-timeout-ms", gl.timeout_ms);
  CHECK(gl.max_states >= 0 && gl.max_memory_bytes >= 0 && gl.timeout_ms >= 0)
      << "--grammar-max-states, --grammar-max-memory-mb and --grammar-timeout-ms must be >= 0";
  engine_args.grammar_limits = gl;
  options.limits.max_prompt_schema_bytes =
      args.get_int("max-prompt-schema-bytes", options.limits.max_prompt_schema_bytes);
  CHECK(options.limits.max_prompt_schema_bytes >= 0) << "--max-prompt-schema-bytes must be >= 0";
  options.drain_seconds = args.get_double("drain-seconds", options.drain_seconds);
  // Connection timeouts (server.h): idle keep-alive, a request's arrival, a response's take-up.
  for (auto [name, value] : {std::pair<const char*, double*>{"http-idle-timeout", &options.idle_timeout_seconds},
                             {"http-read-timeout", &options.read_timeout_seconds},
                             {"http-write-timeout", &options.write_timeout_seconds}}) {
    *value = args.get_double(name, *value);
    CHECK(*value > 0 && *value <= 86400) << "--" << name << " must be in (0, 86400] seconds";
  }
  const std::string thinking = args.get("default-thinking", "off");
  CHECK(thinking == "on" || thinking == "off") << "--default-thinking must be on or off";
  options.default_thinking = thinking == "on";
  const std::string dir = engine_args.model_dir;
  options.model_name = args.get("served-model-name",
                                dir.empty() ? "deepinfer-tiny" : std::filesystem::path(dir).filename().string());

  // Bound before the model loads: an address in use is reported at once.
  server::ListeningSocket listener(options.host, options.port);
  auto engine = std::make_unique<Engine>(engine_args);
  // The engine's tokenizer (it lives as long as the engine, which outlives the server).
  const recipe::Tokenizer* tokenizer = engine->tokenizer();
  CHECK_KIND(kNotFound, tokenizer != nullptr)
      << "serving needs a tokenizer: " << (dir.empty() ? tiny_tokenizer_path() : dir + "/tokenizer.json")
      << " does not exist";
  const ModelConfig& config = engine->model_config();
  options.max_model_len = engine->max_model_len();
  std::vector<int32_t> eos_ids(config.eos_token_ids.begin(), config.eos_token_ids.end());
  // The chat encoding follows the checkpoint (model_type deepseek_v41* is V4.1) unless given.
  const std::string encoding = args.get("chat-encoding", "auto");
  if (encoding == "auto") {
    options.chat_version = config.model_type.rfind("deepseek_v41", 0) == 0 ? recipe::ChatVersion::kV41
                                                                           : recipe::ChatVersion::kV4;
  } else {
    options.chat_version = recipe::parse_chat_version(encoding);
  }

  AsyncEngineOptions async_options;
  // Waiting requests cost only their prompt: admit many more than run at once.
  async_options.max_live_requests =
      args.get_int("max-live-requests", std::max<int64_t>(1024, 4 * engine_args.max_num_seqs));
  AsyncEngine async_engine(make_step_engine(std::move(engine)), async_options);
  server::Server server(options, std::move(listener), *tokenizer, std::move(eos_ids), async_engine);
  server.run();
  return 0;
}

}  // namespace deepinfer
