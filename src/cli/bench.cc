#include "cli/bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/args.h"
#include "cli/bench_engine.h"
#include "cli/bench_fairness.h"
#include "cli/bench_http.h"
#include "cli/bench_idle.h"
#include "cli/bench_metrics.h"
#include "cli/bench_multiturn.h"
#include "cli/bench_traffic.h"
#include "cli/engine_setup.h"
#include "engine/engine.h"
#include "io/config_parser.h"
#include "model/tiny_model.h"

namespace deepinfer {

namespace {

const OptionGroups& bench_options() {
  static const OptionGroups groups = {
      {"Traffic",
       {
           {"input-len", "N", "Prompt tokens per request: random ids, seeded (default 128)."},
           {"output-len", "N", "Output tokens per request: greedy, EOS ignored (default 32)."},
           {"temperature", "T", "In process: sample at temperature T instead of greedy (request i seeded i; "
                                "default 0)."},
           {"num-prompts", "N", "Requests per run (default 32)."},
           {"concurrency", "1,4,16", "Closed loop: N requests in flight, a new one sent when one finishes; "
                                     "one run per value (default 1,4,16)."},
           {"request-rate", "R,...", "Open loop instead: Poisson arrivals at R requests/s (inf: all at once), "
                                     "one run per value."},
           {"max-concurrency", "N", "Open loop: at most N requests in flight (default: unbounded)."},
           {"seed", "S", "Seed of the prompts and the arrivals (default 0)."},
           {"no-warmup", "", "Skip the warm-up request (not recorded) before each run."},
       }},
      {"Multi-turn chat (cli/bench_multiturn.h)",
       {
           {"multi-turn", "N", "Conversations (--num-prompts, default 8) of N turns: turn k re-sends the "
                               "conversation so far (user messages of --input-len tokens, the model's replies of "
                               "--output-len) plus a new user message; at most --concurrency conversations at "
                               "once (default all). Runs prefix caching on and off (or the one asked for); "
                               "reports TTFT p50/p99 and the prefix-cache hit rate. With --base-url: text turns of "
                               "--input-len words, the hit rate from the server's /metrics."},
           {"system-len", "N", "Multi-turn: a shared system prompt of N tokens before every conversation "
                               "(default 0)."},
       }},
      {"Results",
       {
           {"goodput", "ttft:MS", "SLO for goodput, e.g. --goodput ttft:500 tpot:50 (ttft, tpot, e2el in ms): "
                                  "requests/s meeting all of them."},
           {"out", "PREFIX", "Write PREFIX.md (the table), PREFIX.csv and PREFIX.png (matplotlib plot)."},
           {"save-result", "FILE", "Write each run as one JSON line: vLLM's --save-result keys, the "
                                   "summary and the per-request ttfts, itls, e2els, input/output lengths."},
           {"no-overlap-table", "", "In process, closed loop: skip the overlap on/off idle-time table."},
       }},
      {"A running server (instead of the engine in this process)",
       {
           {"base-url", "URL", "http://HOST:PORT of an OpenAI-compatible server (ours, vLLM, SGLang): "
                               "streaming completions; --model NAME is then the served model's name "
                               "(default: the first of GET /v1/models)."},
           {"endpoint", "PATH", "Completions endpoint taking token-id prompts (default /v1/completions)."},
           {"vocab-size", "N", "Random prompt ids are below min(N, 100000) (default 100000)."},
       }},
      kModelOptionGroup,
      {"Engine (in process)",
       {
           {"max-num-seqs", "N", "Open loop: requests running at once (default 64; closed loop: --concurrency)."},
           {"max-num-batched-tokens", "N", "Tokens per step (default 2048)."},
           {"max-model-len", "N", "Longest request (default: what the model and device hold)."},
           {"no-overlap", "", "Do not schedule step t+1 while step t runs."},
       }},
      kPrefillOptionGroup,
      kSpeculativeOptionGroup,
      kPrefixCacheOptionGroup,
      kDeviceOptionGroup,
  };
  return groups;
}

}  // namespace

std::string bench_usage() {
  return format_usage(
      "usage: deepinfer bench [--model DIR] [--concurrency 1,4,16 | --request-rate R] [options]\n"
      "       deepinfer bench --base-url http://HOST:PORT [--model NAME] [options]\n"
      "       deepinfer bench --fairness [options]\n\n"
      "Serving benchmark in the terms of `vllm bench serve`: per run, request / output / total token\n"
      "throughput, TTFT, TPOT, ITL and E2E latency (mean, median, p99) and goodput; then a table of\n"
      "the runs. TTFT counts from each request's own send.\n",
      bench_options(),
      "--fairness: how running streams and a short request fare while a long prompt is prefilled\n"
      "(engine level): [--streams 4] [--long-len 20000] [--short-len 16] [--stream-prompt-len 64]\n"
      "[--warmup-steps 8] [--short-after-steps 2] [--repeat N] [--no-alone] [--out FILE], and the\n"
      "Model, Engine, Prefill and Device options above.\n");
}

namespace {

std::vector<std::string> split(const std::string& text, const std::string& what) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  CHECK(!out.empty()) << what << " is empty";
  return out;
}

std::vector<int64_t> parse_concurrency(const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& item : split(text, "--concurrency")) {
    size_t used = 0;
    try {
      out.push_back(std::stoll(item, &used));
    } catch (const std::logic_error&) {
      used = 0;
    }
    CHECK(used == item.size() && used > 0) << "--concurrency: '" << item << "' is not a number";
    CHECK(out.back() >= 1) << "--concurrency values must be >= 1";
  }
  return out;
}

std::vector<double> parse_rates(const std::string& text) {
  std::vector<double> out;
  for (const std::string& item : split(text, "--request-rate")) {
    if (item == "inf") {
      out.push_back(kInfiniteRate);
      continue;
    }
    size_t used = 0;
    try {
      out.push_back(std::stod(item, &used));
    } catch (const std::logic_error&) {
      used = 0;
    }
    CHECK(used == item.size() && used > 0) << "--request-rate: '" << item << "' is not a number or inf";
    CHECK(out.back() > 0 && std::isfinite(out.back())) << "--request-rate values must be > 0 (or inf)";
  }
  return out;
}

// `--goodput ttft:500 tpot:50`: the words after --goodput's value are positional to Args.
Slo goodput_slo(const Args& args) {
  std::vector<std::string> items;
  if (args.has("goodput")) items.push_back(args.get("goodput"));
  for (const std::string& p : args.positional()) {
    CHECK(args.has("goodput") && p.find(':') != std::string::npos) << "unexpected argument '" << p << "'";
    items.push_back(p);
  }
  return parse_slo(items);
}

EngineArgs engine_args(const Args& args, EngineStartupNotes& notes) {
  EngineArgs base;
  base.model_dir = args.get("model");
  base.dummy_weights = args.has("dummy-weights");
  CHECK(!base.dummy_weights || !base.model_dir.empty()) << "--dummy-weights needs --model DIR (its config.json)";
  base.model_dir = model_or_default(base.model_dir);
  base.model_options.numerics = parse_numerics(args.get("numerics", "official"));
  base.model_options.batch_invariant = args.has("batch-invariant");
  base.overlap = !args.has("no-overlap");
  base.max_num_seqs = args.get_int("max-num-seqs", base.max_num_seqs);
  base.max_num_batched_tokens = args.get_int("max-num-batched-tokens", 2048);
  base.max_model_len = args.get_int("max-model-len", 0);
  apply_prefill_options(args, base);
  apply_speculative_options(args, base);
  apply_prefix_cache_options(args, base);
  notes.device_note = apply_device_options(args, base);
  notes.tokenizer_note = resolve_tokenizer(args.get("tokenizer"), base).note;
  return base;
}

// The vocabulary random prompts draw from: the engine's model's, or --vocab-size for a server.
int64_t prompt_vocab(const Args& args, const EngineArgs* base) {
  if (base == nullptr) return args.get_int("vocab-size", 100000);
  if (selects_builtin_model(base->model_dir)) return builtin_model_config(base->model_dir).vocab_size;
  return load_model_config(base->model_dir).vocab_size;
}

void refuse_for_server(const Args& args) {
  for (const char* name : {"dummy-weights", "tokenizer", "numerics", "batch-invariant", "no-overlap", "max-num-seqs",
                           "max-num-batched-tokens", "max-model-len", "max-prefill-tokens-with-decodes",
                           "long-prefill-token-threshold", "device", "gpu-memory-utilization", "weight-format",
                           "kv-cache-dtype", "cuda-graphs", "no-cuda-graphs", "speculative-method",
                           "num-speculative-tokens", "spec-scheduling", "enable-prefix-caching",
                           "no-enable-prefix-caching"}) {
    CHECK(!args.has(name)) << "--" << name << " configures the in-process engine; with --base-url the server's "
                           << "own options apply";
  }
}

void write_outputs(const std::string& prefix, const std::string& table, const std::vector<BenchSummary>& runs) {
  std::ofstream(prefix + ".md") << table;
  std::ofstream(prefix + ".csv") << csv_table(runs);
  const std::string cmd = "python3 " + std::string(DEEPINFER_SOURCE_DIR) + "/tools/plot_bench.py '" + prefix +
                          ".csv' '" + prefix + ".png'";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "deepinfer bench: plotting failed (is matplotlib installed?); table and CSV written\n");
  }
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--fairness") return cmd_bench_fairness(argc, argv);
  }
  Args args(argc, argv, 2, bench_options());
  const bool server = args.has("base-url");
  if (args.has("multi-turn")) {
    EngineStartupNotes notes;
    if (!server) return bench_multiturn(args, engine_args(args, notes), notes);
    refuse_for_server(args);
    HttpTarget target = parse_base_url(args.get("base-url"));
    target.endpoint = args.get("endpoint", target.endpoint);
    if (const char* key = std::getenv("OPENAI_API_KEY")) target.api_key = key;
    target.model = args.has("model") ? args.get("model") : first_served_model(target);
    return bench_multiturn(args, EngineArgs{}, notes, &target);
  }
  CHECK(!args.has("system-len")) << "--system-len needs --multi-turn";
  const Slo slo = goodput_slo(args);
  CHECK(server || !args.has("endpoint")) << "--endpoint needs --base-url";
  CHECK(server || !args.has("vocab-size")) << "--vocab-size needs --base-url (in process the model's is used)";
  CHECK(!(args.has("concurrency") && args.has("request-rate")))
      << "--concurrency is the closed loop; with --request-rate cap the open loop with --max-concurrency";
  CHECK(args.has("request-rate") || !args.has("max-concurrency")) << "--max-concurrency needs --request-rate";
  const int64_t input_len = args.get_int("input-len", 128);
  const int64_t output_len = args.get_int("output-len", 32);
  const int64_t n_prompts = args.get_int("num-prompts", 32);
  CHECK(input_len >= 1 && output_len >= 1 && n_prompts >= 1) << "lengths and --num-prompts must be >= 1";
  const uint64_t seed = static_cast<uint64_t>(args.get_int("seed", 0));
  const bool warmup = !args.has("no-warmup");
  const double temperature = args.get_double("temperature", 0.0);
  CHECK(temperature >= 0 && temperature <= 100) << "--temperature must be in 0..100";
  CHECK(!server || !args.has("temperature")) << "--temperature is for the in-process engine (not --base-url)";

  HttpTarget target;
  EngineArgs base;
  EngineStartupNotes notes;
  if (server) {
    refuse_for_server(args);
    target = parse_base_url(args.get("base-url"));
    target.endpoint = args.get("endpoint", target.endpoint);
    if (const char* key = std::getenv("OPENAI_API_KEY")) target.api_key = key;
    target.model = args.has("model") ? args.get("model") : first_served_model(target);
  } else {
    base = engine_args(args, notes);
  }
  const int64_t vocab = prompt_vocab(args, server ? nullptr : &base);
  CHECK(vocab >= 1) << "--vocab-size must be >= 1";

  // The runs of the sweep: one Traffic each, the same prompts in all.
  std::vector<Traffic> runs;
  const auto prompts = random_prompts(n_prompts, input_len, vocab, seed);
  if (args.has("request-rate")) {
    const int64_t cap = args.get_int("max-concurrency", 0);
    CHECK(cap >= 0) << "--max-concurrency must be >= 1 (or 0: unbounded)";
    for (double rate : parse_rates(args.get("request-rate"))) {
      runs.push_back({prompts, poisson_arrivals(n_prompts, rate, seed), cap, output_len, rate});
    }
  } else {
    for (int64_t c : parse_concurrency(args.get("concurrency", "1,4,16"))) {
      runs.push_back({prompts, std::vector<double>(static_cast<size_t>(n_prompts), 0.0), c, output_len, 0.0});
    }
  }

  for (Traffic& t : runs) t.temperature = temperature;

  std::vector<BenchSummary> summaries;
  std::string backend;
  std::ofstream result_file;
  if (args.has("save-result")) {
    result_file.open(args.get("save-result"));
    CHECK(result_file.good()) << "--save-result: cannot write " << args.get("save-result");
  }
  for (const Traffic& traffic : runs) {
    std::vector<RequestRecord> records;
    double duration = 0;
    std::string spec_block;
    if (server) {
      HttpRun run = run_http_traffic(target, traffic, warmup);
      records = std::move(run.records);
      duration = run.duration_s;
      backend = "http://" + target.host + ":" + target.port + target.path_prefix + target.endpoint + " (" +
                target.model + ")";
    } else {
      EngineRun run = run_engine_traffic(base, traffic, warmup, summaries.empty() ? &notes : nullptr);
      records = std::move(run.records);
      duration = run.duration_s;
      backend = run.backend + (base.overlap ? "" : ", overlap off");
      spec_block = std::move(run.spec_summary);
    }
    BenchSummary s = summarize(records, duration, slo);
    s.label = traffic.label();
    s.max_concurrency = traffic.max_concurrency;
    s.request_rate = traffic.request_rate;
    std::fputs((format_summary(s, backend) + spec_block).c_str(), stdout);
    std::fflush(stdout);
    if (result_file.is_open()) result_file << summary_json(s, records) << "\n" << std::flush;
    summaries.push_back(std::move(s));
  }

  std::ostringstream table;
  table << "\nBackend: " << backend << "; " << n_prompts << " requests of in/out " << input_len << "/"
        << output_len << " tokens per run";
  if (slo.any()) {
    table << "; goodput SLO";
    if (slo.ttft_ms) table << " ttft " << *slo.ttft_ms << " ms";
    if (slo.tpot_ms) table << " tpot " << *slo.tpot_ms << " ms";
    if (slo.e2el_ms) table << " e2el " << *slo.e2el_ms << " ms";
  }
  table << "\n\n" << markdown_table(summaries);
  if (!server && !args.has("request-rate") && !args.has("no-overlap-table")) {
    int64_t c = 0;
    for (const Traffic& t : runs) c = std::max(c, t.max_concurrency);
    table << idle_table(base, c, input_len, output_len, seed);
  }
  std::fputs(table.str().c_str(), stdout);
  if (args.has("out")) write_outputs(args.get("out"), table.str(), summaries);
  int64_t failed = 0;
  for (const BenchSummary& s : summaries) failed += s.n_failed;
  return failed == 0 ? 0 : 1;
}

}  // namespace deepinfer
