// CpuRunner: ModelRunner on the CPU backend: a Model (src/model) and one host
// SequenceState per live sequence. Sequence ids are slot indices, reused after a free.
//
// launch() computes the forward in the call and samples its kSample rows (grammar bitmask
// applied with apply_token_bitmask_ref, then EOS masked, on a copy of the row) with the host
// sampler set by set_sampler (the engine's sample_token: the sampler lives in the engine
// layer, above this one); collect() hands the result over. kHost rows' logits are the
// forward's logits tensor itself (logits_row[i] = i), nothing copied.
//
// A CpuStepDriver (CpuRunnerOptions::step_driver; serve's context-parallel prefill,
// parallel/dp/cp_serve.h) runs each launch()'s forward in place of Model::forward and hears of
// every other change to a sequence's state (free_sequence, truncate, forward()).
//
// Thread-safety: as ModelRunner (one thread at a time; collect() of step t may overlap
// launch() of step t+1).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "model/model.h"
#include "runtime/model_runner.h"

namespace deepinfer {

// Runs the forward of every launched step in place of model.forward(chunks) (it must return
// what that returns: the same rows, the same logits bitwise under batch_invariant, every state
// advanced the same way). Called by the runner's launching thread only.
class CpuStepDriver {
 public:
  virtual ~CpuStepDriver() = default;
  // chunks[i] is a chunk of runner sequence sequences[i].
  virtual Tensor forward_step(const Model& model, std::span<const SequenceChunk> chunks,
                              std::span<const int64_t> sequences) = 0;
  // Sequence `sequence`'s state changed outside forward_step (advanced by forward(), rolled
  // back) or the sequence was freed (its id may be handed out again).
  virtual void invalidate(int64_t sequence) = 0;
};

struct CpuRunnerOptions {
  int64_t max_sequences = 1 << 20;  // the states live in host memory: no real bound
  int64_t max_batch_tokens = 1 << 20;
  std::shared_ptr<CpuStepDriver> step_driver;  // null: launch() calls Model::forward
};

// Samples one kSample row from its raw logits row (called from several threads at once).
using HostRowSampler = std::function<int32_t(std::span<const float> logits, const RowRequest& row)>;

class CpuRunner final : public ModelRunner {
 public:
  explicit CpuRunner(std::unique_ptr<Model> model, const CpuRunnerOptions& options = {});

  const Model& model() const { return *model_; }

  const ModelConfig& config() const override { return model_->config(); }
  RunnerCapacity capacity() const override;
  std::string name() const override;
  int64_t new_sequence() override;
  void free_sequence(int64_t sequence) override;
  int64_t n_tokens(int64_t sequence) const override;
  Tensor forward(std::span<const RunnerChunk> chunks) override;
  void launch(std::span<const RunnerChunk> chunks, std::span<const RowRequest> rows,
              const std::function<void()>& before_sampling = {}) override;
  StepResult collect() override;
  double busy_seconds() const override { return busy_seconds_; }
  // The sampler of kSample rows; launch() refuses kSample rows without one.
  void set_sampler(HostRowSampler sampler) { sampler_ = std::move(sampler); }
  // Speculative decoding: Model::truncate and Model::draft on the sequence's state.
  std::string drafter() const override;
  int64_t draft_length() const override;
  int64_t rollback_depth() const override { return model_->rollback_depth(); }
  void truncate(int64_t sequence, int64_t n_tokens) override;
  RunnerDraft draft(int64_t sequence, int32_t next, int64_t n_drafts) override;
  // Prefix caching: pieces are model/state_segment.h segments (append-only entries shared
  // along the chain, per-position parts copied at the boundary); import copies them into a
  // fresh state (copy on hit).
  // Not under SWA bounded replay: its decoder rings do not hold the skipped positions.
  bool supports_prefix_state() const override { return model_->options().swa_bounded_replay_keep == 0; }
  std::shared_ptr<const PrefixState> export_prefix(int64_t sequence, const PrefixState* parent) override;
  int64_t import_prefix(std::span<const PrefixState* const> chain) override;

 private:
  struct Launched {
    StepResult result;
    double busy_seconds = 0;
  };
  SequenceState& live(int64_t sequence) const;
  int64_t take_id();  // a free sequence id, counted live (its state not set)
  // forward() without the timing; `step`: a launched step (through the step driver if any).
  Tensor run_model(std::span<const RunnerChunk> chunks, bool step);

  std::unique_ptr<Model> model_;
  CpuRunnerOptions options_;
  std::vector<std::unique_ptr<SequenceState>> states_;  // by id; null = free
  std::vector<int64_t> free_ids_;
  int64_t n_live_ = 0;
  std::vector<SequenceChunk> chunks_;
  std::vector<int64_t> chunk_sequences_;  // runner id of each of chunks_
  double busy_seconds_ = 0;
  HostRowSampler sampler_;
  Launched slots_[2];                    // launch n writes slots_[n % 2]
  std::atomic<int64_t> n_launched_{0}, n_collected_{0};
  std::vector<std::vector<int32_t>> resolved_;  // launch(): chunk tokens with refs resolved
};

}  // namespace deepinfer
