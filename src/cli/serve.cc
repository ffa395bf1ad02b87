// `deepinfer serve`: the OpenAI-compatible HTTP server (src/server) over the batched Engine.
#include "cli/serve.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "base/logging.h"
#include "cli/args.h"
#include "cli/engine_setup.h"
#include "cli/model_loading.h"
#include "cli/serve_parallel.h"
#include "cli/startup_summary.h"
#include "engine/async_engine.h"
#include "engine/engine.h"
#include "recipe/chat_encoding.h"
#include "server/cors.h"
#include "server/server.h"
#include "server/spec_metrics.h"
#include "model/tiny_model.h"
#include "parallel/parallel_metrics.h"

namespace deepinfer {

namespace {

// Every serve option, in help order (its help is the reference for the server's flags).
const OptionGroups& serve_options() {
  static const OptionGroups groups = {
      kModelOptionGroup,
      {"HTTP server",
       {
           {"host", "ADDR", "Address to listen on (default 127.0.0.1)."},
           {"port", "N", "Port (default 8000)."},
           {"api-key", "KEY", "Require `Authorization: Bearer KEY` on every /v1 request."},
           {"allowed-origins", "LIST",
            "CORS: origins browsers may call from, a JSON list ('[\"*\"]') or comma-separated (default: none, CORS off)."},
           {"served-model-name", "NAME",
            "The model name of /v1/models and responses (default: the directory's name, or deepinfer-tiny)."},
           {"max-body-bytes", "N", "Largest request body accepted (default 8 MiB)."},
           {"io-threads", "N", "HTTP I/O threads (default 1)."},
           {"prep-threads", "N", "Threads that parse requests and encode prompts (default 2)."},
           {"http-idle-timeout", "S", "Seconds an idle keep-alive connection is kept (default 60)."},
           {"http-read-timeout", "S", "Seconds a request's header and body may take to arrive (default 30)."},
           {"http-write-timeout", "S", "Seconds a client may take to accept a response write (default 60)."},
           {"drain-seconds", "S", "On SIGINT / SIGTERM, seconds running requests may finish (default 30)."},
       }},
      {"Chat",
       {
           {"chat-encoding", "auto|v4|v4.1", "Chat template; auto (default) follows the checkpoint's model_type."},
           {"default-thinking", "on|off", "Reasoning for chat requests that do not say (default off)."},
       }},
      {"Engine and scheduling",
       {
           {"max-model-len", "N", "Longest request, prompt + output (default: what the model and device hold)."},
           {"max-num-seqs", "N", "Requests running at once (default 64)."},
           {"max-num-batched-tokens", "N", "Tokens per step (default 2048)."},
           {"max-live-requests", "N", "Requests admitted, running or waiting (default max(1024, 4 x max-num-seqs))."},
           {"scheduling-policy", "fcfs|priority", "Order of admission (default fcfs)."},
           {"state-budget-mib", "N", "CPU: the attention state pools (default 1024)."},
           {"no-overlap", "", "Do not schedule step t+1 while step t runs."},
       }},
      kPrefillOptionGroup,
      kSpeculativeOptionGroup,
      kPrefixCacheOptionGroup,
      {"Structured output",
       {
           {"grammar-threads", "N", "Threads compiling response_format constraints (default 2)."},
           {"grammar-max-states", "N", "States one constraint may compile to (default 1000000; 0: no limit)."},
           {"grammar-max-memory-mb", "N", "Memory one constraint's compilation may use (default 256; 0: no limit)."},
           {"grammar-timeout-ms", "N", "Time one constraint's compilation may take (default 2000; 0: no limit)."},
           {"max-prompt-schema-bytes", "N", "A json_schema response_format is shown in the prompt up to this size (default 8192; 0: never)."},
       }},
      kDeviceOptionGroup,
      {"Parallelism (one process per device; parallel/dp/launcher.h)",
       {
           {"data-parallel-size", "N", "Attention data-parallel replicas, each its own process with its own requests (default 1)."},
           {"expert-parallel-size", "N", "Ranks per MoE expert-parallel group; its replicas step in lockstep (default 1)."},
           {"context-parallel-size", "N",
            "Ranks per context-parallel group (default 1): each group is one replica whose rank 0 serves it; "
            "long prefill chunks run on all its ranks (zigzag split), the rest on rank 0 (cpu)."},
           {"cp-min-tokens", "N",
            "Context parallel: the shortest prefill chunk run on the whole group (default 256)."},
           {"eplb-interval", "N",
            "Expert parallel load balancer: re-place the routed experts every N engine steps from the "
            "windowed expert loads (default 0: off; the load imbalance is measured either way, /metrics)."},
           {"eplb-window", "N", "EPLB: steps of expert loads the placement sees (default 100)."},
           {"eplb-extra-slots", "N",
            "EPLB: redundant expert slots per rank, filled with copies of the hottest experts (default 0)."},
           {"internal-port-base", "P", "Rank r serves 127.0.0.1:(P + r) behind the front (default --port + 1)."},
           {"dp-poll-interval", "S", "Seconds between the front's load polls of each replica (default 0.2)."},
           {"dp-health-timeout", "S", "A replica that does not answer a poll this long is out of service (default 5)."},
           {"dp-request-timeout", "S", "A request whose replica sends nothing this long is answered 503 (default 600; 0: none)."},
           {"dp-rank-offset", "N", "Internal (set by the launcher): the global rank of this MPI job's rank 0."},
       }},
  };
  return groups;
}

}  // namespace

std::string serve_usage() {
  return format_usage(
      "usage: deepinfer serve [--model DIR] [--host 127.0.0.1] [--port 8000] [options]\n\n"
      "OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/responses, /v1/models,\n"
      "/health, /metrics (also under vLLM's names), /tokenize, /detokenize, /version. The startup\n"
      "summary goes to stderr once the model is loaded.\n"
      "Without --model the trained tiny V4.1 model (models/trained-v41) is served\n"
      "($DEEPINFER_DEFAULT_MODEL overrides it; --model tiny is the random-weight tiny model).\n",
      serve_options());
}

int cmd_serve(int argc, char** argv) {
  // One malloc arena for every thread, set before any thread starts. glibc's malloc_trim
  // (AsyncEngine calls it once idle) cannot hand back the free top of a per-thread arena, and
  // after the engine frees a large mmapped buffer (the logits) glibc stops trimming arena tops
  // below twice its size: a burst of requests then left 6-35 MB resident for good (tiny model,
  // 500 streams). In the main arena malloc_trim returns all of it; throughput was unchanged.
  mallopt(M_ARENA_MAX, 1);
  Args args(argc, argv, 2, serve_options());
  EngineArgs engine_args;
  engine_args.model_dir = args.get("model");
  engine_args.model_options.numerics = parse_numerics(args.get("numerics", "official"));
  engine_args.model_options.batch_invariant = args.has("batch-invariant");
  engine_args.dummy_weights = args.has("dummy-weights");
  CHECK(!engine_args.dummy_weights || !engine_args.model_dir.empty()) << "--dummy-weights needs --model DIR";
  engine_args.model_dir = model_or_default(engine_args.model_dir);
  engine_args.max_num_seqs = args.get_int("max-num-seqs", engine_args.max_num_seqs);
  engine_args.max_num_batched_tokens = args.get_int("max-num-batched-tokens", engine_args.max_num_batched_tokens);
  apply_prefill_options(args, engine_args);
  engine_args.max_model_len = args.get_int("max-model-len", 0);
  engine_args.state_budget_bytes = args.get_int("state-budget-mib", 0) << 20;
  engine_args.overlap = !args.has("no-overlap");
  apply_speculative_options(args, engine_args);
  apply_prefix_cache_options(args, engine_args);
  const std::string device_note = apply_device_options(args, engine_args);
  const TokenizerChoice tokenizer_choice = resolve_tokenizer(args.get("tokenizer"), engine_args);
  CHECK_KIND(kNotFound, tokenizer_choice.found) << "serving needs a tokenizer: " << tokenizer_choice.note;
  const std::string policy = args.get("scheduling-policy", "fcfs");
  CHECK(policy == "fcfs" || policy == "priority") << "--scheduling-policy must be fcfs or priority";
  engine_args.priority = policy == "priority";

  server::ServerOptions options;
  options.host = args.get("host", options.host);
  int64_t port = args.get_int("port", options.port);
  CHECK(port >= 0 && port < 65536) << "--port " << port << " is out of range";
  // Data / expert parallelism: this process is the launcher (then done here) or one rank on
  // its internal port (serve_parallel.h).
  ServeParallel parallel;
  if (const std::optional<int> rc = setup_serve_parallel(args, argc, argv, options.host, port, engine_args, parallel)) {
    return *rc;
  }
  // A context-parallel follower has no server: it runs its leader's prefill chunks (cp_serve.h).
  if (parallel.cp_follower()) return run_serve_cp_follower(engine_args, parallel);
  options.port = static_cast<uint16_t>(port);
  options.api_key = args.get("api-key");
  options.allowed_origins = server::parse_allowed_origins(args.get("allowed-origins"));
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
                                // the default model when it is built in: its label, as before a default existed;
                                // a name given with --model: that name
                                !args.has("model") && selects_builtin_model(dir)
                                    ? builtin_model_label(dir)
                                    : std::filesystem::path(dir).filename().string());

  // Bound before the model loads: an address in use is reported at once.
  server::ListeningSocket listener(options.host, options.port);
  auto engine = std::make_unique<Engine>(engine_args);
  // The engine's tokenizer (it lives as long as the engine, which outlives the server).
  const recipe::Tokenizer* tokenizer = engine->tokenizer();
  CHECK_KIND(kNotFound, tokenizer != nullptr)
      << "serving needs a tokenizer: " << (selects_builtin_model(dir) ? tiny_tokenizer_path() : dir + "/tokenizer.json")
      << " does not exist (give --tokenizer PATH)";
  StartupSummary summary = engine_startup_summary("serve", engine_args, *engine, device_note, tokenizer_choice.note);
  if (engine_args.device == "cpu" && parallel.model_expert_bytes == 0) {
    parallel.model_expert_bytes = model_routed_expert_bytes(engine->model_config());
  }
  if (parallel.expert_parallel) summary.memory += "; " + parallel.expert_memory_plan();
  options.extra_metrics = [&parallel] { return parallel.metrics_text(); };
  if (parallel.parallel()) {
    summary.parallelism = parallel.describe();
    print_startup_summary(summary, parallel.log_prefix());
  } else {
    print_startup_summary(summary);
  }
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
  auto spec_board = std::make_shared<server::SpecStatsBoard>();
  options.spec_stats = spec_board;
  AsyncEngine async_engine(parallel.wrap(server::make_spec_stats_tap(std::move(engine), spec_board)), async_options);
  server::Server server(options, std::move(listener), *tokenizer, std::move(eos_ids), async_engine);
  start_rank0_front(args, parallel);
  server.run();
  return 0;
}

}  // namespace deepinfer
