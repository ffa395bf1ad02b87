// Model: the DeepSeek-V4 / V4.1 backbone forward on the CPU backend (MODEL_SPEC §A, §C),
// written once against the ops; per-layer structure from the config's LayerPlan, family
// numerics from its ModelTraits. It processes a batch of sequence chunks: each chunk is a run of
// tokens of one sequence continuing from that sequence's state (a prefill chunk of any
// size, or one decode token). Dense work (projections, norms, MoE) runs over all rows of
// the batch together; attention and the compressors run per sequence.
//
// Thread-safety: a Model is immutable after construction; forward() may be called from
// one thread at a time per SequenceState.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "model/sequence_state.h"
#include "model/weights.h"
#include "ops/linear/linear.h"
#include "model/decision_trace.h"
#include "ops/engram/engram.h"
#include "ops/rope/rope.h"
#include "tensor/tensor.h"

namespace deepinfer {

class ContextParallel;  // parallel/context_parallel.h
class ExpertParallel;   // parallel/expert_parallel.h

// `official`: the quantise->dequantise roundings the model was trained with (FP8 window
// and compressed KV, Hadamard + FP4 indexer q/k; MODEL_SPEC §A.10) on top of fp32 math.
// `reference`: plain fp32, no roundings: what transformers computes.
enum class Numerics { kOfficial, kReference };

const char* numerics_name(Numerics numerics);
Numerics parse_numerics(const std::string& name);

struct ModelOptions {
  Numerics numerics = Numerics::kOfficial;
  // Fixed reduction order in every GEMM so a row's logits do not depend on the batch.
  bool batch_invariant = false;
  // How many positions Model::truncate may roll back (speculative verification of up to this
  // many drafts); -1: the checkpoint drafter's draft_length() (DSpark: its block size, MTP: 1),
  // else 0.
  int64_t max_rollback = -1;
  // SWA bounded replay (model/swa_replay.h; V4.1 only, an approximation): in a prefill chunk
  // with a prompt_length L, the decoder layers compute only the positions >= L - this many.
  // 0: off. At least sliding_window + the rollback depth.
  int64_t swa_bounded_replay_keep = 0;
  // MoE expert parallelism (parallel/expert_parallel.h): the backbone keeps only the routed
  // experts of this rank's slots and exchanges rows with the EP group in every MoE layer, so
  // forward() is collective over that group (every rank calls it once per step; a rank with no
  // chunks calls it with none). The drafters' (MTP / DSpark) MoE keep all their experts on
  // every rank and exchange nothing. Null: every expert local.
  std::shared_ptr<ExpertParallel> expert_parallel;
};

// The speculative drafter a checkpoint carries (MODEL_SPEC §A.9 / §D).
enum class DrafterKind { kNone, kMtp, kDspark };
const char* drafter_kind_name(DrafterKind kind);  // "none", "mtp", "dspark"

// A greedy draft after a sequence's committed positions 0..p, given the token y the target
// chose for p+1: `tokens[i]` is the draft for position p+2+i, `logits` [n, V] the drafter's
// logits that chose it (DSpark: Markov-corrected), `hidden` [n, D] the collapsed pre-norm
// hidden h_i (DSpark: last-site collapse; MTP: the MTP block's hc_head). DSpark only:
// `confidence[i]` the raw confidence logit c_i (sigma(c_0)...sigma(c_i) estimates that drafts
// 0..i are all accepted); MTP leaves it empty.
struct DraftBlock {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  std::vector<float> confidence;
  std::vector<float> hidden;
};

struct SequenceChunk {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every token of the chunk, else only the last
  // The length of the prompt this chunk is (part of) the prefill of, for SWA bounded replay
  // (ModelOptions::swa_bounded_replay_keep): every chunk of one prefill carries the same value.
  // 0: not a prefill (no position is skipped).
  int64_t prompt_length = 0;
};

class Model {
 public:
  Model(ModelConfig config, ModelWeights weights, ModelOptions options);

  // Loads config.json + weights from a checkpoint directory.
  static std::unique_ptr<Model> load(const std::string& dir, const ModelOptions& options);
  // Builds a model from any weight source (random weights, tests).
  static std::unique_ptr<Model> from_source(const ModelConfig& config, WeightSource& source,
                                            const ModelOptions& options);

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }

  std::unique_ptr<SequenceState> new_state() const;

  // Rolls a sequence back to its first `n_tokens` positions (speculative drafts that were not
  // accepted), by construction: window slots, compressor rows and draft rings are indexed by
  // position and the next forward overwrites what the rolled-back positions wrote; entries
  // and index keys beyond the new length are dropped. At most rollback_depth() positions.
  void truncate(SequenceState& state, int64_t n_tokens) const;
  int64_t rollback_depth() const;

  // Runs the chunks, advancing each state. Returns fp32 logits [n_rows, V]: for each chunk
  // in order, all its rows (all_logits) or its last row. Validates token ids and the
  // context limit before touching any state.
  Tensor forward(std::span<const SequenceChunk> chunks) const;

  // Context-parallel prefill of one chunk (model/context_parallel_forward.cc): every rank of the
  // CP group calls it with the same chunk on equal states; each rank computes the dense work of
  // its zigzag share of the positions (parallel/context_parallel.h) and gathers per layer what
  // attention needs from the others (window K=V, compressor inputs), so that afterwards every
  // rank's state equals what forward({chunk}) leaves and every rank returns the same logits
  // (bitwise forward's under batch_invariant). Collective; throws kInvalidInput on every rank
  // when the ranks' chunks disagree, kUnsupported with SWA bounded replay or a DecisionTrace.
  Tensor forward_context_parallel(const SequenceChunk& chunk, const ContextParallel& cp) const;

  // Whether the checkpoint has a drafter (its context is then kept in every state): DSpark
  // (V4-0731 / V4.1 keys) or V4's MTP-1 (mtp.0.* in a V4 checkpoint without DSpark keys).
  bool has_drafter() const { return drafter_kind() != DrafterKind::kNone; }
  DrafterKind drafter_kind() const {
    return weights_.has_dspark ? DrafterKind::kDspark
                               : (weights_.has_mtp ? DrafterKind::kMtp : DrafterKind::kNone);
  }
  // Drafts one draft() call gives by default: DSpark's block size, MTP's 1.
  int64_t draft_length() const;
  // Greedy (temperature 0) draft after the state's committed positions, given the token
  // `next` the target chose for the next position. Reads the state, changes nothing.
  // `n_drafts` (default draft_length()): DSpark drafts its whole block and keeps the first
  // n_drafts (at most the block size); MTP chains n_drafts steps, step i at position p+i
  // feeding the MTP block's own output streams of step i-1 and its argmax (step 0: X^L[p] and
  // `next`), attending to the committed MTP keys and the chain's own keys.
  DraftBlock draft(const SequenceState& state, int32_t next) const;
  DraftBlock draft(const SequenceState& state, int32_t next, int64_t n_drafts) const;

  // Test instrumentation (model/decision_trace.h): while set, forward() records the routed
  // experts and indexer picks of every position it computes into `trace` (one sequence per
  // forward; positions below trace->max_positions). nullptr stops recording.
  void set_decision_trace(DecisionTrace* trace) { trace_ = trace; }

 private:
  struct Batch;
  // forward's checks of one chunk (token ids, context limit, state), before any state changes.
  void check_chunk(const SequenceChunk& chunk) const;
  struct CompressorInputs;  // model_batch.h
  struct CpStep;            // context_parallel_forward.cc
  void attention_block(int64_t layer, Batch& batch, const float* x, float* out) const;
  void feed_compressors(int64_t layer, Batch& batch, const float* x) const;
  // feed_compressors in two parts: the per-row projections, then the in-order stepping of the
  // batch's rows into the states.
  CompressorInputs compressor_inputs(int64_t layer, const float* x, int64_t n_rows) const;
  void step_compressors(int64_t layer, Batch& batch, const CompressorInputs& in) const;
  // Context parallel: attention of one layer for this rank's rows (context_parallel_forward.cc).
  void attention_block_cp(int64_t layer, CpStep& step, const float* x, float* out) const;
  // forward_context_parallel inside the expert-parallel step brackets (when EP is on).
  Tensor forward_context_parallel_rows(const SequenceChunk& chunk, const ContextParallel& cp) const;
  void select_entries(int64_t layer, Batch& batch, const float* x, const float* q_r) const;
  void moe_block(int64_t layer, const Batch& batch, const float* x, float* out) const;
  // forward() without the expert-parallel step brackets; forward_expert_parallel
  // (moe_block.cc) brackets it with ExpertParallel::begin_step / end_step (end_step runs the
  // layers a failed or empty forward did not reach with zero rows, so the collectives match).
  Tensor forward_rows(std::span<const SequenceChunk> chunks) const;
  Tensor forward_expert_parallel(std::span<const SequenceChunk> chunks) const;
  // Expert parallelism: hands the kept routed experts to the ExpertParallel (moe_block.cc).
  void adopt_routed_experts();
  void engram_block(int64_t layer, const Batch& batch, float* X) const;
  // engram_block in two parts: the rows' n-grams [N, max_ngram], then the update of X.
  std::vector<int32_t> engram_rows(int64_t layer, const Batch& batch) const;
  void engram_apply(int64_t layer, const int32_t* ngram_rows, int64_t n_rows, float* X) const;
  const EngramLayerTables& engram_tables_of(int64_t layer) const;
  // The final head: logits [n, V] of final streams Xo [n, hc*D] (single-pass mHC: collapsed
  // with `pre_o` [n, hc], else the hc_head mix; pre_o unused).
  void head(const float* Xo, const float* pre_o, int64_t n, float* logits) const;
  // After a forward of `batch`: Engram's recent tokens and n_tokens of each segment's state.
  void advance_states(const Batch& batch) const;
  // DSpark: writes each row's context K=V (from the taps [N, n_taps, D]) into its state.
  void write_draft_context(const Batch& batch, const float* taps) const;
  DraftBlock draft_dspark(const SequenceState& state, int32_t next, int64_t n_drafts) const;
  // MTP-1: writes the MTP window K=V of the positions whose next token this forward sees
  // (the row before each chunk from the saved streams) and saves the chunk's final streams.
  void write_mtp_context(const Batch& batch, const float* X) const;
  DraftBlock draft_mtp(const SequenceState& state, int32_t next, int64_t n_drafts) const;
  // Adds the token of `pos` to the compressor's window; when it completes the window,
  // writes the pooled, normalised (pre-RoPE) entry to `pooled` and returns true.
  bool compressor_step(const CompressorWeights& w, CompressorState& st, const float* a,
                       const float* z, int64_t pos, float* pooled) const;

  ModelConfig config_;
  ModelWeights weights_;
  ModelOptions options_;
  GemmMode gemm_mode_;
  RopeTable rope_main_, rope_compress_;
  DecisionTrace* trace_ = nullptr;
  // SWA bounded replay on: the decoder boundary (model/swa_replay.h); -1: off.
  int64_t replay_boundary_ = -1;
  // Engram hash constants, one per engram layer in config order (ops/engram/engram.h).
  std::vector<EngramLayerTables> engram_tables_;
};

}  // namespace deepinfer
