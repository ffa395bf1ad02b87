// `deepinfer bench --multi-turn N`: the multi-turn chat workload and its report
// (cli/bench_multiturn.h).
#include "cli/bench_multiturn.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/args.h"
#include "cli/bench_engine.h"
#include "cli/bench_http.h"
#include "cli/bench_metrics.h"
#include "cli/bench_traffic.h"
#include "cli/startup_summary.h"

namespace deepinfer {
namespace {

using Clock = std::chrono::steady_clock;

struct Conversation {
  std::vector<std::vector<int32_t>> users;  // user message of each turn
  std::vector<int32_t> history;             // the prompt of the turn in flight, then its reply
  int64_t turn = 0;                         // turns sent so far
  bool started = false;                     // the turn in flight produced a token
  double send_s = 0, last_s = 0;
};

}  // namespace

MultiTurnRun run_multiturn(const EngineArgs& args, const MultiTurnConfig& c, const EngineStartupNotes* startup) {
  CHECK(c.conversations >= 1 && c.turns >= 1 && c.input_len >= 1 && c.output_len >= 1 && c.system_len >= 0 &&
        c.concurrency >= 0)
      << "bench --multi-turn: conversations, turns, --input-len and --output-len must be >= 1";
  Engine engine(args);
  if (startup != nullptr) {
    print_startup_summary(engine_startup_summary("bench", args, engine, startup->device_note, startup->tokenizer_note));
  }
  const int64_t vocab = engine.model_config().vocab_size;
  MultiTurnRun run;
  run.prefix_caching = engine.prefix_caching();
  run.backend = engine.runner().name();

  // Every stream from the seed: the system prompt, each conversation's user messages, the
  // warm-up prompt; none depends on another's length.
  std::mt19937_64 system_gen(c.seed);
  const std::vector<int32_t> system = random_token_ids(system_gen, c.system_len, vocab);
  std::vector<Conversation> convs(static_cast<size_t>(c.conversations));
  for (size_t i = 0; i < convs.size(); ++i) {
    std::mt19937_64 gen(c.seed + 1000003 * (i + 1));
    for (int64_t t = 0; t < c.turns; ++t) convs[i].users.push_back(random_token_ids(gen, c.input_len, vocab));
  }
  if (c.warmup) {
    std::mt19937_64 gen(c.seed ^ 0x5eed5eed5eedULL);
    engine.add_request(bench_request("warmup", random_token_ids(gen, c.input_len, vocab), c.output_len));
    while (engine.has_unfinished()) engine.step();
  }
  const EngineStats before = engine.stats();

  run.records.resize(size_t(c.conversations * c.turns));
  auto record = [&](size_t conv, int64_t turn) -> TurnRecord& {
    return run.records[conv * size_t(c.turns) + size_t(turn)];
  };
  const auto t0 = Clock::now();
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  int64_t active = 0;
  size_t next_conv = 0;
  // Sends conversation i's next turn; false (the conversation ends) when the engine refuses it.
  auto send = [&](size_t i) {
    Conversation& cv = convs[i];
    TurnRecord& r = record(i, cv.turn);
    r.conversation = int64_t(i);
    r.turn = cv.turn + 1;
    cv.history.insert(cv.history.end(), cv.users[size_t(cv.turn)].begin(), cv.users[size_t(cv.turn)].end());
    r.n_prompt_tokens = int64_t(cv.history.size());
    cv.started = false;
    cv.send_s = now();
    try {
      engine.add_request(
          bench_request(std::to_string(i) + ":" + std::to_string(cv.turn), cv.history, c.output_len));
    } catch (const std::exception& e) {
      r.error = e.what();
      return false;
    }
    ++cv.turn;
    return true;
  };
  const int64_t cap = c.concurrency > 0 ? c.concurrency : c.conversations;
  double end = 0;
  while (true) {
    while (active < cap && next_conv < convs.size()) {
      const size_t i = next_conv++;
      convs[i].history = system;
      if (send(i)) ++active;
    }
    if (!engine.has_unfinished()) break;
    for (const RequestOutput& out : engine.step()) {
      const double at = now();
      const size_t colon = out.id.find(':');
      const size_t i = size_t(std::stoll(out.id.substr(0, colon)));
      Conversation& cv = convs[i];
      TurnRecord& r = record(i, cv.turn - 1);
      if (!out.new_tokens.empty()) {
        if (!cv.started) r.ttft_s = at - cv.send_s;
        cv.started = true;
        cv.last_s = at;
        r.n_output_tokens += int64_t(out.new_tokens.size());
        cv.history.insert(cv.history.end(), out.new_tokens.begin(), out.new_tokens.end());
      }
      if (!out.finished) continue;
      end = at;
      r.e2el_s = (cv.started ? cv.last_s : at) - cv.send_s;
      r.n_cached_tokens = out.n_cached_tokens;
      r.ok = out.finish_reason == "stop" || out.finish_reason == "length";
      if (!r.ok) r.error = out.finish_reason + (out.error.empty() ? "" : ": " + out.error);
      if (!r.ok || cv.turn == c.turns || !send(i)) --active;
    }
  }
  run.duration_s = end;
  const EngineStats& after = engine.stats();
  run.lookups = after.prefix_cache_queries - before.prefix_cache_queries;
  run.lookup_tokens = after.prefix_cache_lookup_tokens - before.prefix_cache_lookup_tokens;
  run.query_tokens = after.prefix_cache_query_tokens - before.prefix_cache_query_tokens;
  run.hit_tokens = after.prefix_cache_hit_tokens - before.prefix_cache_hit_tokens;
  run.block_tokens = after.prefix_cache_block_tokens;
  return run;
}

namespace {

// Random text of n words, one of a few common English words each (about one token per word with
// DeepSeek's tokenizer), each after a space.
std::string random_words(std::mt19937_64& gen, int64_t n) {
  static const char* kWords[] = {"time", "year", "people", "way",   "day",   "man",  "thing", "woman",
                                 "life", "child", "world", "school", "state", "family", "student", "group",
                                 "country", "problem", "hand", "part", "place", "case", "week", "company"};
  std::string s;
  for (int64_t i = 0; i < n; ++i) {
    s += ' ';
    s += kWords[gen() % (sizeof(kWords) / sizeof(kWords[0]))];
  }
  return s;
}

// The sum over label sets of a counter or gauge in Prometheus text (-1: absent).
double metric_value(const std::string& text, const std::string& name) {
  double total = -1;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != ' ' && next != '{') continue;
    const size_t sp = line.rfind(' ');
    try {
      total = std::max(total, 0.0) + std::stod(line.substr(sp + 1));
    } catch (const std::logic_error&) {
    }
  }
  return total;
}

}  // namespace

MultiTurnRun run_multiturn_http(const HttpTarget& target, const MultiTurnConfig& c) {
  CHECK(c.conversations >= 1 && c.turns >= 1 && c.input_len >= 1 && c.output_len >= 1 && c.system_len >= 0 &&
        c.concurrency >= 0)
      << "bench --multi-turn: conversations, turns, --input-len and --output-len must be >= 1";
  MultiTurnRun run;
  run.backend = "http://" + target.host + ":" + target.port + target.path_prefix + target.endpoint + " (" +
                target.model + ")";
  std::mt19937_64 system_gen(c.seed);
  const std::string system = random_words(system_gen, c.system_len);
  std::vector<std::vector<std::string>> users(size_t(c.conversations));
  for (size_t i = 0; i < users.size(); ++i) {
    std::mt19937_64 gen(c.seed + 1000003 * (i + 1));
    for (int64_t t = 0; t < c.turns; ++t) users[i].push_back(random_words(gen, c.input_len));
  }
  if (c.warmup) {
    std::mt19937_64 gen(c.seed ^ 0x5eed5eed5eedULL);
    RequestRecord r;
    http_text_completion(target, random_words(gen, c.input_len), c.output_len, r);
    CHECK(r.ok) << "the warm-up request to " << run.backend << " failed: " << r.error;
  }
  const std::string before = http_get(target, "/metrics");
  run.records.resize(size_t(c.conversations * c.turns));
  const auto t0 = Clock::now();
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::mutex mu;
  size_t next = 0;
  double end = 0;
  const int64_t workers = c.concurrency > 0 ? std::min(c.concurrency, c.conversations) : c.conversations;
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      while (true) {
        size_t i;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (next == users.size()) return;
          i = next++;
        }
        std::string history = system;
        for (int64_t t = 0; t < c.turns; ++t) {
          TurnRecord& tr = run.records[i * size_t(c.turns) + size_t(t)];
          tr.conversation = int64_t(i);
          tr.turn = t + 1;
          history += users[i][size_t(t)];
          RequestRecord r;
          const double sent = now();
          const HttpReply reply = http_text_completion(target, history, c.output_len, r);
          tr.ok = r.ok;
          tr.error = r.error;
          tr.n_prompt_tokens = r.n_prompt_tokens;
          tr.n_cached_tokens = reply.cached_tokens.value_or(0);
          tr.n_output_tokens = r.n_output_tokens;
          tr.ttft_s = r.ttft_s;
          tr.e2el_s = r.e2el_s;
          {
            std::lock_guard<std::mutex> lock(mu);
            end = std::max(end, sent + r.e2el_s);
          }
          if (!r.ok) break;
          history += reply.text;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  run.duration_s = end;
  const std::string after = http_get(target, "/metrics");
  auto delta = [&](const char* name) {
    const double a = metric_value(after, name), b = metric_value(before, name);
    return a < 0 || b < 0 ? int64_t(0) : int64_t(a - b);
  };
  run.lookup_tokens = delta("vllm:prefix_cache_queries_total");
  run.hit_tokens = delta("vllm:prefix_cache_hits_total");
  run.query_tokens = delta("deepinfer_prefix_cache_query_tokens_total");
  run.lookups = delta("deepinfer_prefix_cache_queries_total");
  run.block_tokens = int64_t(std::max(0.0, metric_value(after, "deepinfer_prefix_cache_block_tokens")));
  run.prefix_caching = run.block_tokens > 0 || run.lookup_tokens > 0;
  return run;
}

namespace {

struct RunSummary {
  int64_t n_ok = 0, n_failed = 0, prompt_tokens = 0, cached_tokens = 0;
  Stat ttft, ttft_later, e2el;
  std::string first_error;
};

RunSummary summarize_run(const MultiTurnRun& run) {
  RunSummary s;
  std::vector<double> ttft, later, e2el;
  for (const TurnRecord& r : run.records) {
    if (!r.ok) {
      // A conversation that ended early leaves its later turns unsent (no error): not counted.
      if (!r.error.empty()) {
        ++s.n_failed;
        if (s.first_error.empty()) s.first_error = r.error;
      }
      continue;
    }
    ++s.n_ok;
    s.prompt_tokens += r.n_prompt_tokens;
    s.cached_tokens += r.n_cached_tokens;
    ttft.push_back(r.ttft_s);
    if (r.turn >= 2) later.push_back(r.ttft_s);
    e2el.push_back(r.e2el_s);
  }
  s.ttft = stat_of(ttft);
  s.ttft_later = stat_of(later);
  s.e2el = stat_of(e2el);
  return s;
}

std::string run_json(const MultiTurnRun& run, const MultiTurnConfig& c) {
  nlohmann::json records = nlohmann::json::array();
  for (const TurnRecord& r : run.records) {
    nlohmann::json j = {{"conversation", r.conversation}, {"turn", r.turn},
                        {"ok", r.ok},
                        {"prompt_tokens", r.n_prompt_tokens},
                        {"cached_tokens", r.n_cached_tokens},
                        {"output_tokens", r.n_output_tokens},
                        {"ttft", r.ttft_s},
                        {"e2el", r.e2el_s}};
    if (!r.error.empty()) j["error"] = r.error;
    records.push_back(std::move(j));
  }
  const RunSummary s = summarize_run(run);
  nlohmann::json j = {{"prefix_caching", run.prefix_caching},
                      {"backend", run.backend},
                      {"conversations", c.conversations},
                      {"turns", c.turns},
                      {"system_len", c.system_len},
                      {"input_len", c.input_len},
                      {"output_len", c.output_len},
                      {"concurrency", c.concurrency > 0 ? c.concurrency : c.conversations},
                      {"seed", c.seed},
                      {"duration", run.duration_s},
                      {"completed", s.n_ok},
                      {"failed", s.n_failed},
                      {"prefix_cache_block_tokens", run.block_tokens},
                      {"prefix_cache_lookups", run.lookups},
                      {"prefix_cache_lookup_tokens", run.lookup_tokens},
                      {"prefix_cache_query_tokens", run.query_tokens},
                      {"prefix_cache_hit_tokens", run.hit_tokens},
                      {"hit_rate", run.hit_rate()},
                      {"ideal_share", run.ideal_share()},
                      {"median_ttft_ms", s.ttft.median * 1e3},
                      {"p99_ttft_ms", s.ttft.p99 * 1e3},
                      {"median_ttft_later_turns_ms", s.ttft_later.median * 1e3},
                      {"p99_ttft_later_turns_ms", s.ttft_later.p99 * 1e3},
                      {"median_e2el_ms", s.e2el.median * 1e3},
                      {"records", std::move(records)}};
  return j.dump();
}

std::string table_row(const MultiTurnRun& run) {
  const RunSummary s = summarize_run(run);
  char line[1024];
  std::snprintf(line, sizeof(line),
                "| %s | %lld | %lld | %.1f%% | %.1f%% | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f |\n",
                run.prefix_caching ? "on" : "off", static_cast<long long>(s.n_ok),
                static_cast<long long>(s.prompt_tokens), 100.0 * run.hit_rate(), 100.0 * run.ideal_share(),
                s.ttft.median * 1e3, s.ttft.p99 * 1e3, s.ttft_later.median * 1e3, s.ttft_later.p99 * 1e3,
                s.e2el.median * 1e3, run.duration_s);
  return line;
}

}  // namespace

int bench_multiturn(const Args& args, const EngineArgs& base, const EngineStartupNotes& notes,
                    const HttpTarget* server) {
  MultiTurnConfig c;
  c.turns = args.get_int("multi-turn", 0);
  c.conversations = args.get_int("num-prompts", c.conversations);
  c.system_len = args.get_int("system-len", 0);
  c.input_len = args.get_int("input-len", c.input_len);
  c.output_len = args.get_int("output-len", c.output_len);
  c.seed = static_cast<uint64_t>(args.get_int("seed", 0));
  c.warmup = !args.has("no-warmup");
  if (args.has("concurrency")) {
    const std::string v = args.get("concurrency");
    CHECK(v.find(',') == std::string::npos) << "--multi-turn takes one --concurrency value (conversations at once)";
    c.concurrency = args.get_int("concurrency", 0);
    CHECK(c.concurrency >= 1) << "--concurrency must be >= 1";
  }
  CHECK(c.turns >= 1) << "--multi-turn N: N (turns per conversation) must be >= 1";
  CHECK(args.positional().empty()) << "unexpected argument '" << (args.positional().empty() ? "" : args.positional()[0])
                                    << "'";
  for (const char* name : {"request-rate", "max-concurrency", "goodput"}) {
    CHECK(!args.has(name)) << "--" << name << " does not apply to --multi-turn (a closed loop of conversations)";
  }
  std::vector<bool> modes;
  if (server != nullptr) {
    modes = {true};  // the server's own configuration
  } else if (args.has("enable-prefix-caching")) {
    modes = {true};
  } else if (args.has("no-enable-prefix-caching")) {
    modes = {false};
  } else {
    modes = {true, false};
  }
  std::ofstream result_file;
  if (args.has("save-result")) {
    result_file.open(args.get("save-result"));
    CHECK(result_file.good()) << "--save-result: cannot write " << args.get("save-result");
  }
  std::vector<MultiTurnRun> runs;
  for (bool on : modes) {
    EngineArgs a = base;
    a.enable_prefix_caching = on;
    MultiTurnRun run = server != nullptr ? run_multiturn_http(*server, c) : run_multiturn(a, c, &notes);
    const RunSummary s = summarize_run(run);
    std::printf("============ Multi-turn (prefix caching %s) ============\n", run.prefix_caching ? "on" : "off");
    std::printf("%-40s %s\n", "Backend:", run.backend.c_str());
    std::printf("%-40s %lld x %lld\n", "Conversations x turns:", static_cast<long long>(c.conversations),
                static_cast<long long>(c.turns));
    std::printf("%-40s %lld\n", "Successful requests:", static_cast<long long>(s.n_ok));
    std::printf("%-40s %lld\n", "Failed requests:", static_cast<long long>(s.n_failed));
    if (!s.first_error.empty()) std::printf("%-40s %s\n", "First failure:", s.first_error.c_str());
    std::printf("%-40s %.2f\n", "Duration (s):", run.duration_s);
    std::printf("%-40s %lld\n", "Prompt tokens:", static_cast<long long>(s.prompt_tokens));
    std::printf("%-40s %lld\n", "Cached prompt tokens:", static_cast<long long>(run.hit_tokens));
    std::printf("%-40s %.4f\n", "Prefix cache hit rate (hits / queried):", run.hit_rate());
    std::printf("%-40s %.4f\n", "Hits / full blocks that could hit:", run.ideal_share());
    std::printf("%-40s %.2f / %.2f\n", "TTFT p50 / p99 (ms):", s.ttft.median * 1e3, s.ttft.p99 * 1e3);
    std::printf("%-40s %.2f / %.2f\n", "TTFT p50 / p99, turns >= 2 (ms):", s.ttft_later.median * 1e3,
                s.ttft_later.p99 * 1e3);
    std::printf("%-40s %.2f\n", "E2EL p50 (ms):", s.e2el.median * 1e3);
    std::fflush(stdout);
    if (result_file.is_open()) result_file << run_json(run, c) << "\n" << std::flush;
    runs.push_back(std::move(run));
  }
  std::ostringstream table;
  table << "\nBackend: " << runs.front().backend << "; " << c.conversations << " conversations x " << c.turns
        << " turns, system " << c.system_len << " + user " << c.input_len << " + reply " << c.output_len
        << (server != nullptr ? " words" : " tokens") << " per turn, " << (c.concurrency > 0 ? c.concurrency : c.conversations)
        << " conversations at once, seed " << c.seed << "\n\n"
        << "| prefix caching | requests | prompt tokens | hit rate | of ideal | TTFT p50 ms | TTFT p99 ms | "
           "TTFT p50 turns>=2 ms | TTFT p99 turns>=2 ms | E2EL p50 ms | duration s |\n"
        << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const MultiTurnRun& r : runs) table << table_row(r);
  std::fputs(table.str().c_str(), stdout);
  if (args.has("out")) std::ofstream(args.get("out")) << table.str();
  int64_t failed = 0;
  for (const MultiTurnRun& r : runs) failed += summarize_run(r).n_failed;
  return failed == 0 ? 0 : 1;
}

}  // namespace deepinfer
