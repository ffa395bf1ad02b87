// `deepinfer bench --multi-turn N` (in process, or --base-url: run_multiturn_http): chat-like traffic that re-sends conversations,
// to measure automatic prefix caching (issue 18).
//
// Workload: --num-prompts conversations of N turns each. Turn k's prompt is the shared system
// prompt (--system-len tokens, default 0), then turns 1..k-1 as they happened (each user
// message followed by the model's own reply: its greedy output tokens), then a new user
// message of --input-len tokens; the reply is --output-len greedy tokens (EOS ignored). User
// messages are random ordinary token ids drawn from --seed (a conversation's from its own
// stream), so the traffic is deterministic. At most --concurrency conversations are active
// (default: all); an active conversation sends its next turn as soon as its reply is complete
// (no think time); a finished conversation makes room for the next one.
//
// Runs with prefix caching on and then off (only the one asked for when --enable-prefix-caching
// or --no-enable-prefix-caching is given), each on a fresh engine after one warm-up request (a
// prompt no conversation shares; not recorded). Reports per run: TTFT p50 / p99 over all turns
// and over turns >= 2 (those that can hit), E2EL p50, and the prefix-cache hit rate from the
// engine's counters over the run: hit tokens / tokens of the requests looked up (vLLM's
// vllm:prefix_cache_hits / _queries) and hit tokens / the full blocks that could have hit (the
// ideal: 1 when every re-sent block hits). --save-result FILE: one JSON line per run with those
// counters and every request's record (conversation, turn, prompt / cached / output tokens,
// TTFT, E2EL). --out FILE: the markdown table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace deepinfer {

class Args;
struct EngineStartupNotes;
struct HttpTarget;

struct MultiTurnConfig {
  int64_t conversations = 8;
  int64_t turns = 4;
  int64_t system_len = 0;    // shared system prompt tokens
  int64_t input_len = 128;   // tokens of each new user message
  int64_t output_len = 32;   // tokens of each reply
  int64_t concurrency = 0;   // conversations active at once; 0: all
  uint64_t seed = 0;
  bool warmup = true;
};

struct TurnRecord {
  int64_t conversation = 0, turn = 0;  // turn from 1
  bool ok = false;
  std::string error;
  int64_t n_prompt_tokens = 0;
  int64_t n_cached_tokens = 0;         // RequestOutput::n_cached_tokens
  int64_t n_output_tokens = 0;
  double ttft_s = 0, e2el_s = 0;
};

struct MultiTurnRun {
  bool prefix_caching = false;  // what the engine ran (Engine::prefix_caching())
  std::string backend;
  std::vector<TurnRecord> records;  // conversation-major, turn order
  double duration_s = 0;
  // Engine counters over the run (warm-up excluded).
  int64_t lookups = 0, lookup_tokens = 0, query_tokens = 0, hit_tokens = 0, block_tokens = 0;
  double hit_rate() const { return lookup_tokens ? double(hit_tokens) / double(lookup_tokens) : 0.0; }
  double ideal_share() const { return query_tokens ? double(hit_tokens) / double(query_tokens) : 0.0; }
};

// One run of the workload on a fresh engine built from `args` (prefix caching as it says).
// With `startup`, the startup summary is printed once the engine is loaded.
MultiTurnRun run_multiturn(const EngineArgs& args, const MultiTurnConfig& config,
                           const EngineStartupNotes* startup = nullptr);

// The same workload against a running server (bench --base-url, cli/bench_http.h), as text:
// user messages of --input-len random common words (about one token each), the history re-sent
// as the text the server streamed back, through streaming completions with a string prompt.
// Per request: prompt and cached tokens from the usage chunk (prompt_tokens_details.
// cached_tokens; 0 when the server sends none). The run's counters are the deltas of the
// server's /metrics over it (vllm:prefix_cache_queries_total / _hits_total, and
// deepinfer_prefix_cache_query_tokens_total / _block_tokens where the server has them), so no
// other traffic may reach the server meanwhile. prefix_caching: the server reports a block size
// or counted queries.
MultiTurnRun run_multiturn_http(const HttpTarget& target, const MultiTurnConfig& config);

// `deepinfer bench --multi-turn N ...` after cmd_bench parsed the engine options into `base`,
// or with `server` against it (one run, the server's configuration). Returns the exit status
// (1 when any request failed).
int bench_multiturn(const Args& args, const EngineArgs& base, const EngineStartupNotes& notes,
                    const HttpTarget* server = nullptr);

}  // namespace deepinfer
