// Engine::Impl: the engine's state and step machinery (engine.h describes the behaviour).
// Private to src/engine: engine.cc holds the step loop, request handling and sampling;
// engine_spec.cc speculative decoding (drafts, verification).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/prefix_cache_state.h"
#include "engine/spec_schedule.h"
#include "engine/step_worker.h"
#include "engine/structured_output.h"
#include "engine/text_stream.h"
#include "scheduler/scheduler.h"

namespace deepinfer {

namespace engine_detail {
// A row's grammar mask must allow something; throws Error otherwise.
void check_mask_allows_something(const uint32_t* mask, size_t n_words);
// Inside a catch block: the message a failed request ends with (also logged).
std::string row_failure(const std::string& id);
}  // namespace engine_detail

struct Engine::Impl {
  // Engine-side state of a live request (the scheduler holds its tokens and counters).
  struct Live {
    std::string id;
    SamplingParams params;
    int64_t n_logprobs = -1;
    int64_t n_prompt = 0;
    int64_t sequence = -1;  // the runner's sequence holding its state, or -1
    int64_t n_cached = -1;  // prompt tokens its first admission got from the prefix cache
    std::unique_ptr<TextStream> text;
    std::unique_ptr<grammar::GrammarMatcher> matcher;  // structured output, or null
    std::vector<TokenLogprob> logprobs;  // by output index, when requested
    int64_t n_emitted = 0;               // output tokens already reported
    // Speculative decoding: the drafter's distributions of the drafts proposed last
    // ([drafts, V]; empty: one-hot, a greedy drafter).
    std::vector<float> draft_q;
    // Confidence scheduling: the drafter's own estimates of P(drafts 0..j accepted) for the
    // drafts proposed last, uncalibrated (empty: none of its own).
    std::vector<double> draft_estimate;
  };
  // One step between schedule() and update(): its chunks' inputs and, once run, logits.
  struct InFlight {
    SchedulerOutput sched;
    std::vector<std::vector<int32_t>> tokens;  // per chunk
    std::vector<RunnerChunk> chunks;
    std::vector<RowRequest> rows;              // per chunk (its last row): none, host or sample
    // The runner's output rows: rows[i] for each chunk, except that a verification chunk
    // ([y, drafts], all_logits) has one kHost row per token; out_row[i] is chunk i's first.
    std::vector<RowRequest> launch_rows;
    std::vector<int64_t> out_row;
    StepResult result;                         // once collected
    // Overlap: grammar bitmasks of the sampling rows, computed while the forward runs
    // ([n_chunks, n_mask_words]; row i valid where has_mask[i]).
    std::vector<uint32_t> masks;
    std::vector<uint8_t> has_mask;
    // Constrained kSample rows: the row's matcher (null for other rows) and the bitmasks the
    // RowRequests point to ([n_constrained, launch_mask_words], in row order), filled by
    // launch() just before the runner call (on the worker with overlap), applied by the
    // runner; sample() accepts the runner's token into the matcher.
    std::vector<grammar::GrammarMatcher*> launch_matchers;
    std::vector<uint32_t> launch_masks;
    size_t launch_mask_words = 0;
    // Per chunk: why launch() could not compute its row's mask ("" if it could). Such a row's
    // mask allows every token (the runner samples something) and sample() fails the request.
    std::vector<std::string> launch_errors;
    std::vector<std::string> launch_ids;  // per chunk: the request id of a constrained kSample row
  };
  // sample()'s result: tokens per chunk, and the requests whose rows failed (scheduler id,
  // message). A failed row gets a placeholder token so that a step scheduled meanwhile has an
  // input; update() ends the request before the scheduler sees that token.
  struct Sampled {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::pair<int64_t, std::string>> failed;
  };

  EngineArgs args;
  std::unique_ptr<ModelRunner> runner;
  std::shared_ptr<const recipe::Tokenizer> tokenizer;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<PrefixStateCache> prefix;  // automatic prefix caching, or null (off)
  void sync_prefix_stats();
  std::unordered_map<int64_t, Live> live;        // by scheduler id
  std::unordered_map<std::string, int64_t> ids;  // request id -> scheduler id
  int64_t next_num = 0;
  std::vector<RequestOutput> pending;            // returned first by the next step()
  // Sequences of finished or preempted requests that a step in flight may still read:
  // handed back to the runner by free_deferred() once no step is in flight.
  std::vector<int64_t> deferred_frees;
  std::unique_ptr<InFlight> inflight;            // overlap: the step the worker runs
  std::unique_ptr<StepWorker> worker;
  EngineStats stats;
  int64_t max_model_len = 0;
  std::unique_ptr<StructuredOutput> structured;  // built on the first constrained request
  std::once_flag structured_once;                // ... or compile_constraint() call, any thread
  StructuredOutput& structured_output() {
    std::call_once(structured_once, [this] {
      std::vector<int32_t> stops;
      for (int64_t eos : runner->config().eos_token_ids) stops.push_back(int32_t(eos));
      structured = std::make_unique<StructuredOutput>(*tokenizer, runner->config().vocab_size, stops,
                                                      256, args.grammar_limits);
    });
    return *structured;
  }
  // Matchers of retired requests, kept until no launch runs: a launch on the worker may be
  // filling the bitmask of a request that finished (max_tokens, stop string) or was aborted.
  std::vector<std::unique_ptr<grammar::GrammarMatcher>> retired_matchers;
  // Speculative decoding: drafts per verification (0: off).
  int64_t spec_k = 0;
  // spec_scheduling "confidence": the step-time curve (spec_schedule.h; empty otherwise), and
  // the runner's busy time its start-up profile took (not counted in stats.busy_seconds).
  StepTimeCurve step_curve;
  bool fixed_curve = false;  // EngineArgs::spec_step_time: never corrected
  // The drafter's per-draft estimates (conditional) -> conditional rates calibrated online
  // with EngineStats::predicted_at / calibrated_accepted_at.
  std::vector<double> calibrated(const std::vector<double>& rates) const;
  double busy_offset = 0;
  // Profiles step_curve on the runner (before any request: its sequences are its own).
  void profile_step_curve();
  // Per-draft acceptance estimates from the engine's running per-position acceptance, for
  // drafts without their own (spec_schedule.h).
  std::vector<double> running_acceptance(size_t n) const;

  void init();
  void init_speculative();
  std::unique_ptr<InFlight> prepare(SchedulerOutput so,
                                    const std::unordered_map<int64_t, int32_t>& in_flight_samples);
  void note_preempted(const SchedulerOutput& so);
  void release(Live& l);
  void free_deferred();
  // Launches the step; the bitmasks of its constrained kSample rows are filled by the
  // runner's before_sampling hook, i.e. while the forward runs on the device.
  void launch(InFlight& f) {
    runner->launch(f.chunks, f.launch_rows, [&f] {
      size_t k = 0;
      for (size_t i = 0; i < f.launch_matchers.size(); ++i) {
        grammar::GrammarMatcher* m = f.launch_matchers[i];
        if (m == nullptr) continue;
        uint32_t* mask = f.launch_masks.data() + f.launch_mask_words * k++;
        try {
          m->fill_next_token_bitmask(mask);
          engine_detail::check_mask_allows_something(mask, f.launch_mask_words);
        } catch (...) {
          std::fill(mask, mask + f.launch_mask_words, ~0u);
          f.launch_errors[i] = engine_detail::row_failure(f.launch_ids[i]);
        }
      }
    });
  }
  RowRequest row_request(const Live& l, const Request& r, const ScheduledChunk& c) const;
  // Whether `next` can be launched before `f`'s tokens reach the host: every request of
  // `next` that needs a token `f` samples has it sampled on the backend.
  bool can_chain(const InFlight& f, const SchedulerOutput& next) const;
  // A step was collected: counts it; with confidence scheduling its busy time corrects the
  // step-time curve (steps are collected one at a time then: the delta is this step's).
  void note_done(const InFlight& f) {
    ++stats.n_steps_done;
    const double busy = runner->busy_seconds() - busy_offset;
    if (!step_curve.empty() && !fixed_curve) step_curve.observe(f.sched.n_scheduled_tokens, busy - stats.busy_seconds);
    stats.busy_seconds = busy;
  }
  Sampled sample(const InFlight& f);
  void precompute_masks(InFlight& f);
  // `precomputed`: the request's grammar bitmask from precompute_masks(), or null.
  int32_t sample_one(Live& l, const Request& r, const float* logits, const uint32_t* precomputed);
  // The logits row the token of output index `position` is drawn from: raw logits with
  // logit_bias and penalties over `history` (the outputs before it), the grammar mask
  // (`precomputed`, or the matcher's) or the EOS mask applied. A per-thread buffer.
  const std::vector<float>& target_row(Live& l, std::span<const int32_t> history, const float* logits,
                                       int64_t position, const uint32_t* precomputed);
  // The token of output index `position` is `token`, drawn from raw `logits`: the matcher
  // takes it and its logprob is kept.
  void commit_token(Live& l, const float* logits, int64_t position, int32_t token);
  // Verifies chunk i's drafts (spec_decode.h) on its rows' logits; returns the committed
  // tokens (accepted drafts + one).
  std::vector<int32_t> verify(const InFlight& f, size_t i, Live& l, const Request& r);
  // After update(): drafts for every running request that decodes next (spec_k > 0).
  void propose_drafts();
  // After verify(): rolls chunk i's sequence back to its committed positions and counts
  // the verification in stats.
  void note_verification(const InFlight& f, size_t i, Live& l, const std::vector<int32_t>& committed);
  void update(const InFlight& f, const Sampled& sampled, std::vector<RequestOutput>& out);
  // Ends a live request with finish_reason "error" (a failure of its own, `message`).
  void fail(int64_t num, const std::string& message, std::vector<RequestOutput>& out);
  RequestOutput emit(Live& l, std::span<const int32_t> outputs, std::optional<FinishReason> reason,
                     int64_t n_preemptions);
  void retire(int64_t num);
};

}  // namespace deepinfer
