// CudaRunner: ModelRunner on one CUDA device, over GpuModel (runtime/gpu_model.h). Built only
// with DEEPINFER_CUDA. Sequence ids are GpuModel's state-pool slots.
//
// Busy time: a pair of CUDA events on the model's stream around each forward (launch: from
// the forward's first upload to the end of its sampling and copies).
//
// Steps (launch / collect): the forward is enqueued with GpuModel::forward_device, its input
// sample references read from the previous launch's device token buffer; kSample rows are
// sampled on the device (all greedy: one arg-max kernel; otherwise sample_cuda, the same rule
// and random stream as the host sampler); the tokens and only the kHost rows' logits are
// copied into pinned host buffers (allocated per slot at construction for one row per sequence,
// grown if a caller ever asks more); an event
// marks the end. Rows with a grammar bitmask (RowRequest::bitmask) have it applied on the
// device first (apply_token_bitmask_cuda): the step's masks are copied into the slot's pinned
// staging buffer (allocated once, one row per sequence; grown if ever short), uploaded with
// one async copy and applied before the EOS fill and the samplers. collect() waits for that
// event. Two slots alternate, so step t+1 can be enqueued while step t runs. collect()'s logits are a view of the slot's pinned buffer,
// valid until the second launch after that step. forward() must not be called while a
// launched step is uncollected.
//
// Sizing: at construction the runner reads the device's free memory and sizes GpuModel's
// per-sequence pools so that weights + activations + max_sequences * state stay within
// gpu_memory_utilization of the device (runtime/gpu_runner_sizing.h); the result is logged.
//
// Thread-safety: as ModelRunner (one thread at a time; GpuModel binds no host thread).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "model/model.h"
#include "model/weights.h"
#include "runtime/model_runner.h"

namespace deepinfer {

class GpuModel;

struct CudaRunnerOptions {
  int64_t max_sequences = 64;  // at most this many; fewer when the memory holds fewer
  int64_t max_context = 4096;  // tokens per sequence (the state pools' depth)
  int64_t max_batch_tokens = 2048;
  double gpu_memory_utilization = 0.9;
  Numerics numerics = Numerics::kOfficial;
  bool fp8_weights = false;     // GpuModel's WeightFormat::kFp8, else kF32
  bool batch_invariant = false;  // GpuModelOptions::batch_invariant
  std::string kv_cache_dtype = "auto";  // "auto" (GpuModel's default) | "fp8" | "bf16"
  bool cuda_graphs = false;             // GpuModelOptions::cuda_graphs
  std::string expert_checkpoint;        // GpuModelOptions::expert_checkpoint (fp8 weights)
  // GpuModelOptions::expert_format: "auto" (W4A8 for FP4 checkpoint experts with fp8 weights
  // on sm_90), "fp8" or "w4a8". The sizing estimate counts the experts in FP8 either way.
  std::string expert_format = "auto";
  int64_t max_rollback = 0;             // GpuModelOptions::max_rollback (rollback_depth())
  // GpuModelOptions::mtp: V4's MTP-1 drafter on the device (the weights must have mtp.0;
  // device dummy weights: random). drafter() is then "mtp".
  bool mtp = false;
  // GpuModelOptions::dspark: V4.1's DSpark drafter on the device (the weights must have it;
  // device dummy weights: random). drafter() is then "dspark". At most one of mtp and dspark.
  bool dspark = false;
};

class CudaRunner final : public ModelRunner {
 public:
  // Uploads host weights.
  CudaRunner(const ModelConfig& config, const ModelWeights& weights, const CudaRunnerOptions& options);
  // Dummy weights generated on the device from `seed` (GpuModel's device generator; configs
  // with hash-routed layers are refused there).
  CudaRunner(const ModelConfig& config, uint64_t seed, const CudaRunnerOptions& options);
  ~CudaRunner() override;

  const ModelConfig& config() const override;
  RunnerCapacity capacity() const override { return capacity_; }
  std::string name() const override { return name_; }
  int64_t new_sequence() override;
  void free_sequence(int64_t sequence) override;
  int64_t n_tokens(int64_t sequence) const override;
  Tensor forward(std::span<const RunnerChunk> chunks) override;
  void launch(std::span<const RunnerChunk> chunks, std::span<const RowRequest> rows,
              const std::function<void()>& before_sampling = {}) override;
  StepResult collect() override;
  double busy_seconds() const override { return busy_seconds_; }
  // Speculative verification: rows at every position of a [y, drafts] chunk are launch()'s
  // all_logits rows (kHost or kSample, as for any chunk); truncate() is GpuModel::truncate
  // (exact: the state is kept by position). Drafter: MTP-1 when CudaRunnerOptions::mtp
  // (GpuModel::draft, n_drafts chained steps, at most rollback_depth() + 1; probability[i] =
  // the drafter's softmax probability of tokens[i], computed on the device in fp32), else
  // "none" and draft() refuses (the engine's test drafter, or none).
  // DSpark when CudaRunnerOptions::dspark (GpuModel::draft: the whole block of every
  // sequence in one pass, each entry keeps its first n_drafts <= draft_length(); confidence[i]
  // the raw c_i, probability[i] as for MTP).
  std::string drafter() const override;
  int64_t draft_length() const override;
  RunnerDraft draft(int64_t sequence, int32_t next, int64_t n_drafts) override;
  // All entries in one GpuModel::draft of max n_drafts steps (each entry keeps its first
  // n_drafts; entries asking 0 get none).
  std::vector<RunnerDraft> draft_batch(std::span<const DraftRequest> requests) override;
  int64_t rollback_depth() const override;
  void truncate(int64_t sequence, int64_t n_tokens) override;
  // Prefix caching (engine/prefix_cache_state.h): GpuModel::export_prefix / import_prefix
  // (runtime/gpu_prefix_state.cc: device copies on the model's stream, pieces in device
  // memory). Allowed while launched steps are uncollected (their writes are ordered before
  // the copies on the stream: the engine's overlapped loop exports between launches), refused
  // while a launch() call runs. A piece of another runner or model layout is refused.
  bool supports_prefix_state() const override { return true; }
  std::shared_ptr<const PrefixState> export_prefix(int64_t sequence, const PrefixState* parent) override;
  int64_t import_prefix(std::span<const PrefixState* const> chain) override;
  // GpuModel::host_waits(): forwards whose staging slot made the host wait for the device
  // (0 in the engine's launch / collect loop).
  int64_t host_waits() const;

 private:
  struct Timing;
  struct Slot;
  struct Sampling;
  void init(const CudaRunnerOptions& options, const std::string& weights_from);

  std::unique_ptr<GpuModel> model_;
  std::unique_ptr<Timing> timing_;
  std::unique_ptr<Sampling> sampling_;
  std::unique_ptr<Slot> slots_[2];  // launch n uses slots_[n % 2]
  std::atomic<int64_t> n_launched_{0}, n_collected_{0};
  std::atomic<bool> in_launch_{false};  // a launch() call is running (prefix states refused)
  RunnerCapacity capacity_;
  std::string name_;
  double busy_seconds_ = 0;
};

}  // namespace deepinfer
