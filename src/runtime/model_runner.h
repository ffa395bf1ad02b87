// ModelRunner: the model as the engine runs it, on one backend (DESIGN.md §1 `runtime`).
// The engine sees sequences (ids handed out by the runner, each holding one request's
// attention state), runs batches of chunks and gets host fp32 logits back (forward), or
// launches a step and collects per output row a token sampled on the backend or the host
// logits the engine asked for (launch / collect: the engine's step path). No CUDA types
// here: the engine builds without CUDA.
//
// Implementations: CpuRunner (runtime/cpu_runner.h: Model + one host SequenceState per
// sequence) and CudaRunner (runtime/cuda_runner.h: GpuModel with its device state pools;
// built only with DEEPINFER_CUDA). make_model_runner (runtime/runner_factory.h) picks one.
//
// Thread-safety: one thread at a time, except that collect() of step t may run while
// launch() of step t+1 runs on another thread. The engine calls launch() on its worker
// thread and collect / new_sequence / free_sequence on its own thread; it takes or frees
// sequences only while no launch() call is running (a launched step may still be running
// on the device: its work is ordered before any later launch's, so a freed sequence's
// storage is reused only by work that runs after it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "tensor/tensor.h"

namespace deepinfer {

struct RunnerChunk {
  int64_t sequence = -1;  // from new_sequence()
  // Token ids. In launch() a token may also be a reference to the previous launch's sample:
  // sample_ref(j) stands for the token sampled for that launch's output row j (which must
  // have been a kSample row); the runner reads it where it lies (on the device for CUDA), so
  // the step can be launched before the host has the previous step's tokens.
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every token of the chunk, else only the last
  // The tokens the sequence's prefill covers, for SWA bounded replay (SequenceChunk::
  // prompt_length); 0: none given.
  int64_t prompt_length = 0;
};

// Token value standing for "the token sampled at output row j of the previous launch".
constexpr int32_t sample_ref(int64_t j) { return static_cast<int32_t>(-1 - j); }
constexpr bool is_sample_ref(int32_t token) { return token < 0; }
constexpr int64_t sample_ref_row(int32_t token) { return -1 - int64_t(token); }

// What launch() does with one output row of the forward.
enum class RowMode : uint8_t {
  kNone,    // nothing (the engine needs neither logits nor a token: a prefill chunk's middle)
  kHost,    // host fp32 logits (the engine samples on the host: penalties, masks, logprobs)
  kSample,  // a token sampled on the backend with the fields below (sample_token's rule)
};

// Per output row of a launch. kSample rows are sampled exactly as sample_token (engine/
// sampler.h) samples the raw logits row with these fields, after setting the logits of the
// tokens `bitmask` disallows to -inf (when given) and then those of the config's
// eos_token_ids to -inf when mask_eos (penalties and logit_bias are not applied: rows that
// need them are kHost), on either backend: the CUDA sampler (ops/sampling/sampling_cuda.h)
// follows the same rule and the same (seed, position) random stream, so the tokens are those
// of the host path. The grammar mask is applied by apply_token_bitmask (ops/sampling/
// token_bitmask.h; on the device for CUDA) to the row in place.
struct RowRequest {
  RowMode mode = RowMode::kNone;
  float temperature = 1.0f;  // 0 = greedy
  int64_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  int64_t position = 0;  // the output index the random number is drawn for
  bool mask_eos = false;  // EOS may not be sampled (min_tokens not reached, ignore_eos)
  // kSample only, optional: the row's grammar bitmask, token_bitmask_words(V) uint32 words
  // (bit t % 32 of word t / 32 set <=> token t allowed; GrammarMatcher's layout). Host memory
  // read during launch() only (copied there): it need not outlive the call.
  const uint32_t* bitmask = nullptr;
};

// What collect() returns for one launch.
struct StepResult {
  std::vector<int32_t> tokens;      // [n_rows]: sampled token of kSample rows, else -1
  std::vector<int64_t> logits_row;  // [n_rows]: row of `logits` for kHost rows, else -1
  // Host fp32 [at least the kHost rows, V]. May be a view of the runner's own (pinned)
  // buffer: valid until the second launch after this step's.
  Tensor logits;
};

// A speculative draft after a sequence's committed positions (ModelRunner::draft): `tokens[i]`
// is the drafter's greedy (argmax) token for the position i+1 after the given next token;
// `confidence[i]` the drafter's raw confidence logit c_i where it has one (DSpark; empty
// otherwise); `probability[i]` the drafter's own softmax probability of tokens[i] (empty where
// the runner does not have the drafter's logits).
struct RunnerDraft {
  std::vector<int32_t> tokens;
  std::vector<float> confidence;
  std::vector<float> probability;
};

// One entry of ModelRunner::draft_batch: draft() of `sequence` given `next`, `n_drafts` drafts.
struct DraftRequest {
  int64_t sequence = -1;
  int32_t next = 0;
  int64_t n_drafts = 0;
};

// What the runner can hold. The engine's scheduler limits never exceed these.
struct RunnerCapacity {
  int64_t max_sequences = 0;     // live sequences at once
  int64_t max_context = 0;       // tokens per sequence
  int64_t max_batch_tokens = 0;  // rows of one forward
};

// Prefix caching (engine/prefix_cache_state.h): a read-only piece of a sequence's state that
// a runner exported, positions [begin, end) after its parent piece (the piece ending at
// `begin`; none for begin 0). Shared between requests; `bytes`: the memory it holds.
struct PrefixState {
  virtual ~PrefixState() = default;
  int64_t begin = 0, end = 0;
  int64_t bytes = 0;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelConfig& config() const = 0;
  virtual RunnerCapacity capacity() const = 0;
  // Backend and sizing for logs, e.g. "cpu" or "cuda:0 (fp32 weights)".
  virtual std::string name() const = 0;

  // A fresh sequence at position 0; throws Error(kResourceExhausted) when max_sequences
  // are live.
  virtual int64_t new_sequence() = 0;
  // Frees a live sequence (its id may be handed out again); throws Error for an unknown id.
  virtual void free_sequence(int64_t sequence) = 0;
  // Tokens a live sequence has consumed.
  virtual int64_t n_tokens(int64_t sequence) const = 0;

  // Runs the chunks (each sequence at most once), advancing each sequence. Returns host fp32
  // logits [n_rows, V]: for each chunk in order, all its rows (all_logits) or its last row.
  // Validates ids, sequences, the context limit and the batch size before any work.
  virtual Tensor forward(std::span<const RunnerChunk> chunks) = 0;

  // Asynchronous step: launch() validates like forward() and starts the chunks (CUDA:
  // enqueued on the device, returns before it finishes; CPU: computed in the call), with one
  // RowRequest per output row (rows in forward()'s order); collect() waits for the oldest
  // launched step not yet collected and returns its tokens and host logits. At most two
  // launched steps may be uncollected: step t+1 may be launched (its chunks referring to
  // step t's samples with sample_ref) before step t is collected. Sequences advance at
  // launch. Thread-safety: collect() of step t may run on another thread while launch() of
  // step t+1 runs; nothing else concurrently.
  // `before_sampling` (optional) runs on the calling thread once the forward is started
  // (CUDA: enqueued, so it overlaps the device work; CPU: computed) and before any row's
  // `bitmask` is read: the engine fills the grammar bitmasks there, so mask computation
  // overlaps the device forward. The bitmask pointers are given up front; their contents
  // may be written by the hook.
  virtual void launch(std::span<const RunnerChunk> chunks, std::span<const RowRequest> rows,
                      const std::function<void()>& before_sampling = {}) = 0;
  virtual StepResult collect() = 0;

  // Time the backend spent computing forwards since construction, in seconds: on CUDA the
  // device time between events recorded before and after each forward on its stream (for a
  // launch: the forward, its sampling and the copies of tokens and logits; host syncs inside
  // a forward count as busy), on the CPU the wall time of forwards (launches: with their
  // sampling). Launched steps count once collected. Benchmarks compare it with the wall
  // time of the step loop: the rest is idle time between steps.
  virtual double busy_seconds() const = 0;

  // Speculative decoding (engine/spec_decode.h). A runner without it keeps the defaults:
  // no drafter, no rollback, and draft() / truncate() refuse.
  // The checkpoint's drafter: "none", "mtp" or "dspark".
  virtual std::string drafter() const { return "none"; }
  // Drafts one draft() call gives by default (DSpark: its block size; MTP: 1; none: 0).
  virtual int64_t draft_length() const { return 0; }
  // How many positions truncate() may roll a sequence back (the most drafts one
  // verification may carry).
  virtual int64_t rollback_depth() const { return 0; }
  // Rolls a live sequence back to its first `n_tokens` positions (rejected drafts); at most
  // rollback_depth() positions. Only while no launched step is uncollected.
  virtual void truncate(int64_t sequence, int64_t n_tokens);
  // Greedy draft of up to `n_drafts` tokens after a live sequence's committed positions,
  // given the token `next` the target chose for the next position. Reads the state, changes
  // nothing. Only while no launched step is uncollected.
  virtual RunnerDraft draft(int64_t sequence, int32_t next, int64_t n_drafts);
  // draft() for several sequences (each at most once) in one call, results in order. Default:
  // draft() for each in turn; CudaRunner batches them (one small forward per draft step over
  // all the sequences). Same contract per entry as draft().
  virtual std::vector<RunnerDraft> draft_batch(std::span<const DraftRequest> requests);

  // Prefix caching. A runner without it keeps the defaults: supports_prefix_state() false,
  // the other two refuse. Both only while no launch() call runs (a launched step's writes to
  // the sequence are ordered before them).
  virtual bool supports_prefix_state() const { return false; }
  // The live sequence's state at its n_tokens as a piece after `parent` (null: from 0; else
  // a piece this runner exported from a prefix of the same tokens).
  virtual std::shared_ptr<const PrefixState> export_prefix(int64_t sequence, const PrefixState* parent);
  // A new live sequence whose state is the end of `chain` (pieces oldest first, each the
  // parent of the next): equal to the exported sequence's, so its next forward computes
  // what the exporting sequence's would have. Throws as new_sequence().
  virtual int64_t import_prefix(std::span<const PrefixState* const> chain);
};

}  // namespace deepinfer
