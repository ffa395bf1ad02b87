// ModelRunner: the model as the engine runs it, on one backend (DESIGN.md §1 `runtime`).
// The engine sees sequences (ids handed out by the runner, each holding one request's
// attention state), runs batches of chunks and gets host fp32 logits back. No CUDA types
// here: the engine builds without CUDA.
//
// Implementations: CpuRunner (runtime/cpu_runner.h: Model + one host SequenceState per
// sequence) and CudaRunner (runtime/cuda_runner.h: GpuModel with its device state pools;
// built only with DEEPINFER_CUDA). make_model_runner (runtime/runner_factory.h) picks one.
//
// Thread-safety: one thread at a time. The engine calls forward() on its worker thread and
// new_sequence/free_sequence on its own thread, never at the same time (it frees the
// sequences of finished requests only once no forward that may read them is running).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "io/model_config.h"
#include "tensor/tensor.h"

namespace deepinfer {

struct RunnerChunk {
  int64_t sequence = -1;  // from new_sequence()
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every token of the chunk, else only the last
};

// What the runner can hold. The engine's scheduler limits never exceed these.
struct RunnerCapacity {
  int64_t max_sequences = 0;     // live sequences at once
  int64_t max_context = 0;       // tokens per sequence
  int64_t max_batch_tokens = 0;  // rows of one forward
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

  // Time the backend spent computing forwards since construction, in seconds: on CUDA the
  // device time between events recorded before and after each forward on its stream (host
  // syncs inside a forward count as busy), on the CPU the forwards' wall time. Benchmarks
  // compare it with the wall time of the step loop: the rest is idle time between steps.
  virtual double busy_seconds() const = 0;
};

}  // namespace deepinfer
