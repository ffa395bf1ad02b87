// CpuRunner: ModelRunner on the CPU backend: a Model (src/model) and one host
// SequenceState per live sequence. Sequence ids are slot indices, reused after a free.
//
// Thread-safety: as ModelRunner (one thread at a time).
#pragma once

#include <memory>
#include <vector>

#include "model/model.h"
#include "runtime/model_runner.h"

namespace deepinfer {

struct CpuRunnerOptions {
  int64_t max_sequences = 1 << 20;  // the states live in host memory: no real bound
  int64_t max_batch_tokens = 1 << 20;
};

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
  double busy_seconds() const override { return busy_seconds_; }

 private:
  SequenceState& live(int64_t sequence) const;

  std::unique_ptr<Model> model_;
  CpuRunnerOptions options_;
  std::vector<std::unique_ptr<SequenceState>> states_;  // by id; null = free
  std::vector<int64_t> free_ids_;
  int64_t n_live_ = 0;
  std::vector<SequenceChunk> chunks_;
  double busy_seconds_ = 0;
};

}  // namespace deepinfer
