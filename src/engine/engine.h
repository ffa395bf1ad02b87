// Engine: serves many requests at once on one model (DESIGN.md §1 `engine`).
// The step loop is  schedule -> execute -> update:
//   scheduler.schedule() picks each running request's chunk (prefill chunk, decode token,
//   recomputation after preemption) within the token budget; the model runs all chunks as
//   one batch; the sampler picks tokens for the requests whose chunk reached their end;
//   scheduler.update() appends them and finishes requests (max_tokens, EOS, stop ids); the
//   detokenizer finds stop strings.
// With overlap on, the CPU schedules step t+1 while step t executes.
//
// Sampling rows: a request whose next token needs only temperature / top-k / top-p / min-p /
// seed, EOS masking and a grammar mask is sampled by the runner (RowMode::kSample: on the
// device for CUDA, sample_token on the CPU; the grammar bitmask is filled by the runner's
// before_sampling hook while the forward runs and applied by the runner); rows that need the
// raw logits (logprobs, the on_logits hook), penalties or logit_bias get host logits (only
// those rows are copied) and are sampled here. The tokens are the same either way. A step
// with a constrained request is never chained (its next mask needs this step's token).
//
// Overlap: a worker thread launches step t (on the CPU it computes it; on CUDA it enqueues
// it) while the calling thread schedules step t+1. When every token step t+1 needs from
// step t is sampled by the runner, step t+1 is launched right away with references to
// those samples (read on the device), before step t's tokens reach the host; otherwise
// after step t's host sampling. Then step t's tokens are collected, the scheduler updated
// and step t detokenized while step t+1 runs. step() returns the outputs of the step that
// just completed. Results are identical with overlap on or off.
//
// Backends: the model runs through a ModelRunner (runtime/model_runner.h): CpuRunner (the
// CPU Model, states in host memory) or CudaRunner (GpuModel, states in device pools), chosen
// by EngineArgs::device. The scheduler's limits never exceed the runner's capacity.
//
// State: the scheduler's StateCache does the block accounting (admission, preemption); each
// request's attention state itself is one runner sequence, taken when a chunk starts at
// position 0 and freed on preemption (the request then recomputes prompt + outputs) or when
// it finishes. A freed sequence is handed back to the runner only once no step in flight
// may still read it (its id could otherwise be reused under a running forward).
//
// Sampling: penalties see the request's output tokens (as generate_loop does); EOS is masked
// before min_tokens outputs and with ignore_eos; the RNG position is the output index.
//
// Failures of one request: an exception while sampling its row or computing its grammar mask,
// a grammar mask that allows nothing, a backend token its matcher refuses, or a failure while
// its output is detokenized end that request with finish_reason "error" (RequestOutput::error)
// in the step's outputs; every other request of the step continues as if it were not there.
// Failures of the step itself (the forward, the scheduler) still throw from step().
//
// Determinism: a request's sampled tokens depend only on its prompt, parameters and seed
// (the sampler's RNG is keyed by (seed, output index)); with ModelOptions::batch_invariant
// its logits are bitwise the same in any batch composition, chunking or after preemption.
//
// Speculative decoding (EngineArgs::speculative_method; engine_spec.cc, spec_decode.h): after
// each step, every running request that decodes next gets up to num_speculative_tokens
// drafts from the drafter (ModelRunner::draft on its committed state, or the test hook; a
// constrained request's drafts are cut before the first one its grammar refuses); the
// scheduler gives it the chunk [y, drafts] (fewer drafts near max_tokens or when the step's
// budget is short), which runs in the same batch as prefills and plain decodes with logits at
// every row (kHost rows); the engine verifies the rows in order (each with the penalties,
// logit_bias, grammar mask, EOS mask and logprobs of the output before it, accepted drafts
// included; nothing past a stop token id), commits the accepted drafts plus one token, and
// rolls the sequence back to the committed positions (ModelRunner::truncate). Greedy output
// is token for token that of non-speculative decoding (with batch_invariant the committed
// logits are bitwise equal); sampled output has the same distribution (rejection sampling).
// Stop strings and max_tokens apply to the committed tokens as to any others. Preemption
// drops the drafts with the state; abort works as always. spec_scheduling "confidence"
// (EngineArgs) verifies only the draft prefixes worth their step time. Speculative steps
// are not chained: with speculative decoding on, the engine runs one step at a time whatever
// `overlap` says. Why (measured on the CPU with tests/engine/bench_spec_schedule, golden
// DSpark checkpoint, 16-64 requests): per step the host work that chaining could hide
// (scheduling, verification, updates, detokenization) is 0.04-0.7 ms of 8-106 ms, under 1%;
// drafting is 5-33 ms (20-48% of the wall time; one ModelRunner::draft per request, in
// turn), and it cannot overlap the step it drafts for (its input is that step's committed
// tokens) while on the CPU it would compete with the next forward for the same cores.
// What would pay there is drafting all requests in one batched drafter forward; chaining pays
// on a device backend (verification and drafting on the device, the host scheduling step t+1
// with a draft budget from two steps old, spec_schedule.h distribute_drafts).
// CPU backend only for now (CudaRunner has no rollback: refused at construction).
//
// Thread-safety: Engine is single-threaded (one caller drives add_request/step/abort).
// AsyncEngine (async_engine.h) runs the loop on its own thread for the server.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "grammar/budget.h"
#include "grammar/compiled_grammar.h"
#include "model/model.h"
#include "runtime/model_runner.h"

namespace deepinfer {

namespace recipe {
class Tokenizer;
}
class StateCache;
class CpuStepDriver;  // runtime/cpu_runner.h

struct EngineArgs {
  std::string model_dir;               // empty: the built-in tiny model
  ModelOptions model_options;          // numerics, batch_invariant, swa_bounded_replay_keep
  bool dummy_weights = false;          // random weights for model_dir's config.json
  std::string device = "cpu";          // "cpu" | "cuda" (a build with DEEPINFER_CUDA)
  // cuda: fraction of the device's memory the engine may use (weights, activations and the
  // per-sequence state pools, sized at start: fewer sequences than max_num_seqs when short).
  double gpu_memory_utilization = 0.9;
  std::string weight_format = "fp32";  // cuda: "fp32" | "fp8" (block-scaled FP8 projections)
  std::string kv_cache_dtype = "auto";  // cuda: "auto" (fp8 official, bf16 reference) | "fp8" | "bf16"
  // cuda: the routed experts' device format (GpuModelOptions::expert_format): "auto" (w4a8 for
  // FP4 checkpoint experts with fp8 weights on sm_90, else fp8) | "fp8" | "w4a8".
  std::string expert_format = "auto";
  bool cuda_graphs = false;            // cuda: decode steps replay CUDA graphs (either weight format)
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  // Fairness while a long prompt is prefilled (scheduler/scheduler.h, 0: off): the prefill
  // tokens of a step that also runs decodes, and a request's prefill chunk while it shares
  // its step with other work. A prefill alone gets max_num_batched_tokens.
  int64_t max_prefill_tokens_with_decodes = 512;
  int64_t long_prefill_token_threshold = 256;
  // 0: the model's max_position_embeddings (cuda: at most runtime's kDefaultGpuContext,
  // the depth of the device state pools).
  int64_t max_model_len = 0;
  int64_t state_budget_bytes = 0;      // 0: a default CPU budget; sizes the state pools
  bool overlap = true;                 // schedule step t+1 while step t runs
  // Attention data parallel (parallel/dp/dp_lockstep.h): every step() runs exactly one forward,
  // an empty one (zero chunks) when nothing is scheduled here, so that the ranks of an
  // expert-parallel group, whose MoE layers are collective, run their forwards together. Steps
  // then run one at a time (overlap is ignored); speculative decoding is refused (kUnsupported:
  // drafting runs forwards of its own, a different number per rank).
  bool collective_steps = false;
  // Device cpu: runs every launched step's forward in place of Model::forward (serve's
  // context-parallel prefill, parallel/dp/cp_serve.h; CpuRunnerOptions::step_driver). Null: off.
  std::shared_ptr<CpuStepDriver> cpu_step_driver;
  bool priority = false;               // priority scheduling instead of FCFS
  // tokenizer.json for detokenization and stop strings. Empty: model_dir/tokenizer.json,
  // or for the built-in tiny model $DEEPINFER_TINY_TOKENIZER or the repository's
  // models/tiny/tokenizer.json; without a tokenizer new_text stays empty and stop strings
  // are refused.
  std::string tokenizer_path;
  int64_t block_size = 64;             // state-cache block, in entries
  // Automatic prefix caching (engine/prefix_cache_state.h; issue 18): a request whose first
  // tokens match a cached block chain (same model, numerics and batch-invariance) starts from
  // the cached state, with the logits a cold run gives. On by default where the backend
  // supports it (CPU and CUDA: ModelRunner::supports_prefix_state; elsewhere it is off
  // whatever this says). CLI:
  // --enable-prefix-caching / --no-enable-prefix-caching.
  bool enable_prefix_caching = true;
  // Tokens per cached block: 128 is a multiple of every V4 / V4.1 compress ratio (4, 128;
  // 2, 1), of the default state block (64) and V4's window (128). Any value >= 1 is exact.
  int64_t prefix_cache_block_tokens = 128;
  // Memory the cached states may hold (host memory on the CPU, device memory on CUDA); least recently used blocks not in use go first.
  int64_t prefix_cache_bytes = int64_t(1) << 30;
  uint64_t dummy_seed = 0;             // seed of the --dummy-weights random weights
  // Budgets of each structured-output compilation (grammar/budget.h): a constraint over them
  // is refused (kResourceExhausted naming the budget) after bounded time and memory.
  grammar::CompileLimits grammar_limits;
  // Speculative decoding (engine/spec_decode.h; CPU backend). speculative_method: "none",
  // "dspark" or "mtp" (the checkpoint's drafter of that kind; refused when it has none),
  // "auto" (the checkpoint's drafter if it has one, else none). num_speculative_tokens: drafts
  // per verification, 0 = the drafter's default (DSpark: dspark_block_size; MTP: 1), at most
  // the model's rollback depth. spec_scheduling: "fixed" (every decoding request verifies
  // num_speculative_tokens drafts, fewer near max_tokens or when the step's token budget is
  // short); "confidence" (engine/spec_schedule.h): each step verifies, of all requests'
  // drafts, the prefixes that maximise expected committed tokens per second under a
  // step-time-vs-tokens curve profiled at start-up (forwards of 1..N tokens on the runner,
  // spread over sequences of num_speculative_tokens + 1 tokens) and corrected online with the
  // measured step times; per-draft acceptance estimates: DSpark sigma(confidence logit), MTP
  // the drafter's softmax probability of its draft, a test drafter's `confidence` (each
  // calibrated online: the cumulative estimate of position j times (accepted + 4) /
  // (estimated + 4) over the verifications so far), else the engine's running per-position
  // acceptance (EngineStats); drafts after a stop token id
  // are worth 0. The choice depends only on the request's state and greedy drafts (never on a
  // sampled draft's own value, which would bias rejection sampling), so the output stays
  // lossless (greedy: token for token) whichever drafts are verified. While
  // speculative decoding is on, steps run one at a time (no overlap: a step's drafts need the
  // previous step's tokens); results are those of overlap off.
  std::string speculative_method = "none";
  int64_t num_speculative_tokens = 0;
  std::string spec_scheduling = "fixed";
  // Test hook for spec_scheduling "confidence": the step-time curve (seconds vs tokens, as
  // spec_schedule.h's StepTimeCurve takes it) instead of the start-up profile, never
  // corrected, so the schedule is deterministic. Empty: profiled.
  std::vector<std::pair<int64_t, double>> spec_step_time;
  // Test hook: a drafter replacing the checkpoint's (speculative decoding is then on with
  // num_speculative_tokens drafts, which must be set, whatever speculative_method says).
  // Called with the request id, its tokens (prompt + outputs; the last one is the token the
  // target chose last, not yet computed) and the most drafts wanted. Returns the drafts and
  // optionally `q`, [drafts, V]: the probabilities each draft was drawn from (for sampled
  // verification; empty: one-hot at the drafts, a greedy drafter).
  // `confidence` (optional, one per draft): raw confidence logits c_j as DSpark's head gives
  // them (sigma(c_j): the chance that draft j is accepted after drafts 0..j-1 were), read by
  // spec_scheduling "confidence". With a full q they must not depend on the sampled drafts'
  // values (that would bias the verified output).
  struct DraftProposal {
    std::vector<int32_t> tokens;
    std::vector<float> q;
    std::vector<float> confidence;
  };
  std::function<DraftProposal(const std::string& id, std::span<const int32_t> tokens, int64_t k)>
      spec_test_drafter;
  // Test/debug hook: sees the raw fp32 logits row (before penalties) every time a request
  // samples, with the index of the output token being sampled.
  std::function<void(const std::string& id, int64_t output_index, std::span<const float> logits)>
      on_logits;
};

struct EngineRequest {
  std::string id;                      // unique among live requests
  std::vector<int32_t> prompt;
  SamplingParams params;
  std::vector<std::string> stop;       // stop strings (matched on detokenized text)
  int64_t priority = 0;
  int64_t n_logprobs = -1;             // -1: none; k >= 0: chosen token + top-k logprobs
  bool skip_special_tokens = true;     // in new_text
  // Structured output: kind "json_schema", "json_object", "regex" or "ebnf" (empty: none)
  // and its text (schema JSON, pattern, grammar). Every sampled token is masked by the
  // constraint; EOS is allowed exactly when the output is complete. Needs a tokenizer.
  std::string constraint_kind;
  std::string constraint;
  // Optional: the constraint already compiled by Engine::compile_constraint on another thread
  // (the server's grammar pool), so the engine thread only wraps it in a matcher.
  std::shared_ptr<const grammar::CompiledGrammar> compiled_constraint;
};

// Log-softmax of the model's raw logits row (before penalties and temperature).
struct TokenLogprob {
  int32_t token;
  float logprob;
  std::vector<std::pair<int32_t, float>> top;  // top-k (id, logprob), best first, ties by id
};

struct RequestOutput {
  std::string id;
  std::vector<int32_t> new_tokens;     // tokens produced since the last output of this id
  std::string new_text;                // their detokenized text (complete UTF-8 only)
  std::vector<TokenLogprob> logprobs;  // one per new token when requested
  bool finished = false;
  std::string finish_reason;           // "stop", "length", "abort" or "error" when finished
  // finish_reason "error": why this request failed inside its own sampling, grammar matching or
  // detokenization. Such a failure ends that request only; the others keep running. Names no
  // source location (it may reach a client).
  std::string error;
  std::string stop_reason;             // the stop string that ended it, if one did
  int64_t n_prompt_tokens = 0;
  int64_t n_output_tokens = 0;         // outputs so far, all outputs included
  int64_t n_preemptions = 0;           // times its state was dropped and recomputed
  // Prompt tokens served from the prefix cache on its (first) admission
  // (usage.prompt_tokens_details.cached_tokens).
  int64_t n_cached_tokens = 0;
};

struct EngineStats {
  int64_t n_steps = 0;                 // forward calls
  int64_t n_scheduled_tokens = 0;      // tokens computed, recomputation included
  int64_t n_preemptions = 0;
  int64_t max_running = 0;             // most chunks in one step
  // Steps finished (collected from the runner) and the runner's busy time over them
  // (ModelRunner::busy_seconds, less the start-up profile of spec_scheduling "confidence"),
  // updated on the engine's thread as each step is collected.
  int64_t n_steps_done = 0;
  double busy_seconds = 0;
  // Speculative decoding (zero while off). A verification is one request's [y, drafts] chunk.
  int64_t n_verifications = 0;
  int64_t n_drafts_verified = 0;       // draft tokens verified
  int64_t n_drafts_accepted = 0;       // of those, accepted
  std::vector<int64_t> accepted_at;    // [k]: verifications that accepted draft i
  std::vector<int64_t> verified_at;    // [k]: verifications that carried draft i
  // spec_scheduling "confidence", [k]: over verifications that carried draft i with the
  // drafter's own estimate, the sum of its uncalibrated estimates of P(drafts 0..i accepted)
  // and how many of them accepted draft i (the engine calibrates the estimates with both).
  std::vector<double> predicted_at;
  std::vector<int64_t> calibrated_accepted_at;
  int64_t n_verify_steps = 0;          // steps with at least one verification
  int64_t n_verified_tokens = 0;       // tokens of verification chunks ([y, drafts]) in them
  double draft_seconds = 0;            // wall time spent drafting (on the engine's thread)
  // Prefix caching (zero while off), updated as steps are prepared. A query is an admission
  // attempt; query tokens are the full blocks it could have hit (the ideal), hit tokens those
  // it did.
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  int64_t prefix_cache_query_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  // Tokens of the requests looked up (their whole prompt + outputs at admission): vLLM's
  // prefix-cache queries (its hit rate is hit tokens / these).
  int64_t prefix_cache_lookup_tokens = 0;
  int64_t prefix_cache_block_tokens = 0;  // tokens per cached block (0: caching off)
  int64_t prefix_cache_blocks = 0;     // cached block boundaries (entries) now
  int64_t prefix_cache_bytes = 0;      // host memory they hold now
  int64_t prefix_cache_evictions = 0;
  int64_t prefix_cache_pinned = 0;     // entries held by admitted requests' pending hits now
  double prefix_cache_hit_rate() const {
    return prefix_cache_query_tokens ? double(prefix_cache_hit_tokens) / double(prefix_cache_query_tokens) : 0.0;
  }
  // Tokens committed per verification: accepted drafts + the target's token.
  double mean_acceptance_length() const {
    return n_verifications ? double(n_drafts_accepted + n_verifications) / double(n_verifications) : 0.0;
  }
  double verified_tokens_per_step() const {
    return n_verify_steps ? double(n_verified_tokens) / double(n_verify_steps) : 0.0;
  }
  // Of the verifications that carried draft i, the share that accepted it (and all before it).
  double acceptance_at(size_t i) const {
    return i < verified_at.size() && verified_at[i] > 0 ? double(accepted_at[i]) / double(verified_at[i]) : 0.0;
  }
  // Drafting's share of the time spent computing (drafts + forwards).
  double draft_time_share() const {
    return draft_seconds + busy_seconds > 0 ? draft_seconds / (draft_seconds + busy_seconds) : 0.0;
  }
};

class Engine {
 public:
  // Loads the model named by args (model_dir with real or dummy weights, or the tiny model).
  explicit Engine(const EngineArgs& args);
  // Serves a given model (args.model_dir, dummy_weights, model_options, device and the GPU
  // sizing are ignored); `tokenizer` may be null (see EngineArgs::tokenizer_path).
  Engine(const EngineArgs& args, std::unique_ptr<Model> model,
         std::shared_ptr<const recipe::Tokenizer> tokenizer);
  Engine(const EngineArgs& args, std::unique_ptr<ModelRunner> runner,
         std::shared_ptr<const recipe::Tokenizer> tokenizer);
  ~Engine();

  const ModelConfig& model_config() const;
  // The backend. Its busy_seconds() may be read only while no step is in flight (overlap
  // off, or has_unfinished() false).
  const ModelRunner& runner() const;
  // Longest request (prompt + outputs) the engine accepts: args.max_model_len or what the
  // model and the runner hold.
  int64_t max_model_len() const;
  const recipe::Tokenizer* tokenizer() const;  // null without one
  // Block accounting of the scheduler's state cache (tests check it returns to all_free()).
  const StateCache& state_cache() const;
  const EngineStats& stats() const;
  // Validates and queues a request; throws Error (bad params, prompt too long, duplicate id)
  // and leaves the engine unchanged.
  void add_request(EngineRequest request);
  // Compiles (or finds in the cache) a structured-output constraint; callable from any thread
  // while the engine runs. Same errors as a constrained add_request.
  std::shared_ptr<const grammar::CompiledGrammar> compile_constraint(const std::string& kind,
                                                                     const std::string& text);
  // Cancels a request at any time, freeing its state. False if unknown or finished.
  bool abort(const std::string& id);
  // Runs one step; returns outputs for requests that produced tokens or finished (an
  // aborted request's final output comes from the next step()). New text is held back
  // while it could be the start of a stop string.
  std::vector<RequestOutput> step();
  bool has_unfinished() const;
  // Whether automatic prefix caching is on (EngineArgs::enable_prefix_caching and a backend
  // that supports it).
  bool prefix_caching() const;
  // Drafts verified per decoding request and step (0: speculative decoding is off).
  int64_t speculative_tokens() const;
  // Blocking convenience: runs until every given request finishes; outputs in input order
  // with all tokens, text and logprobs accumulated. Other live requests advance too; their
  // outputs are returned by the next step().
  std::vector<RequestOutput> generate(std::vector<EngineRequest> requests);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
