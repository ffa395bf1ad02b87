#include "runtime/cpu_runner.h"

#include <chrono>

#include "base/error.h"

namespace deepinfer {

CpuRunner::CpuRunner(std::unique_ptr<Model> model, const CpuRunnerOptions& options)
    : model_(std::move(model)), options_(options) {
  CHECK(model_ != nullptr) << "CpuRunner: no model";
  CHECK(options_.max_sequences > 0 && options_.max_batch_tokens > 0)
      << "CpuRunner: max_sequences and max_batch_tokens must be positive";
}

RunnerCapacity CpuRunner::capacity() const {
  const int64_t limit = model_->config().max_position_embeddings;
  return {options_.max_sequences, limit > 0 ? limit : int64_t(1) << 40, options_.max_batch_tokens};
}

std::string CpuRunner::name() const {
  return std::string("cpu (") + numerics_name(model_->options().numerics) +
         (model_->options().batch_invariant ? ", batch-invariant)" : ")");
}

int64_t CpuRunner::new_sequence() {
  CHECK_KIND(kResourceExhausted, n_live_ < options_.max_sequences)
      << "CpuRunner: all " << options_.max_sequences << " sequences are in use";
  int64_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = int64_t(states_.size());
    states_.emplace_back();
  }
  states_[size_t(id)] = model_->new_state();
  ++n_live_;
  return id;
}

SequenceState& CpuRunner::live(int64_t sequence) const {
  CHECK(sequence >= 0 && sequence < int64_t(states_.size()) && states_[size_t(sequence)])
      << "CpuRunner: " << sequence << " is not a live sequence";
  return *states_[size_t(sequence)];
}

void CpuRunner::free_sequence(int64_t sequence) {
  live(sequence);
  states_[size_t(sequence)].reset();
  free_ids_.push_back(sequence);
  --n_live_;
}

int64_t CpuRunner::n_tokens(int64_t sequence) const { return live(sequence).n_tokens; }

Tensor CpuRunner::forward(std::span<const RunnerChunk> chunks) {
  chunks_.clear();
  int64_t rows = 0;
  for (const RunnerChunk& c : chunks) {
    SequenceState& s = live(c.sequence);
    for (const SequenceChunk& prev : chunks_) {
      CHECK(prev.state != &s) << "CpuRunner: sequence " << c.sequence << " appears twice in one batch";
    }
    chunks_.push_back({&s, c.tokens, c.all_logits});
    rows += int64_t(c.tokens.size());
  }
  CHECK_KIND(kResourceExhausted, rows <= options_.max_batch_tokens)
      << "CpuRunner: " << rows << " rows exceed max_batch_tokens " << options_.max_batch_tokens;
  const auto t0 = std::chrono::steady_clock::now();
  Tensor logits = model_->forward(chunks_);
  busy_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return logits;
}

}  // namespace deepinfer
