#include "runtime/cuda_runner.h"

#include <cuda_runtime.h>

#include <vector>

#include "base/error.h"
#include "base/logging.h"
#include "cuda/cuda_check.h"
#include "cuda/event.h"
#include "runtime/gpu_model.h"
#include "runtime/gpu_runner_sizing.h"
#include "runtime/gpu_state_plan.h"

namespace deepinfer {

struct CudaRunner::Timing {
  cuda::Event start, end;
};

namespace {

// GpuModel options for `o` with the sequences that fit on the current device (throws when
// not even one does); `summary` gets the sizing line for the log.
GpuModelOptions size_model(const ModelConfig& config, const CudaRunnerOptions& o, std::string* summary) {
  CHECK(o.max_sequences > 0 && o.max_context > 0 && o.max_batch_tokens > 0)
      << "cuda runner: max_sequences, max_context and max_batch_tokens must be positive";
  GpuModelOptions g;
  g.max_sequences = o.max_sequences;
  g.max_context = o.max_context;
  g.max_batch_tokens = o.max_batch_tokens;
  g.numerics = o.numerics;
  g.weight_format = o.fp8_weights ? WeightFormat::kFp8 : WeightFormat::kF32;
  g.batch_invariant = o.batch_invariant;
  g.cuda_graphs = o.cuda_graphs;
  if (o.kv_cache_dtype != "auto") g.kv_cache_dtype = kv_cache_dtype_from_string(o.kv_cache_dtype);
  // Weights and activations estimated; the state pools exactly as GpuModel plans them.
  GpuSizing sizing = estimate_gpu_sizing(config, o.max_context, o.max_batch_tokens, o.fp8_weights);
  const GpuStatePlan plan = plan_gpu_state(config, g);
  sizing.state_bytes_per_sequence = plan.state_bytes_per_sequence();
  sizing.activation_bytes += plan.fixed_state_bytes();
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t n = gpu_sequences_that_fit(sizing, int64_t(free_bytes), int64_t(total_bytes),
                                           o.gpu_memory_utilization, o.max_sequences);
  *summary = gpu_sizing_summary(sizing) + "; " + std::to_string(free_bytes >> 20) + " MiB free of " +
             std::to_string(total_bytes >> 20) + " MiB";
  CHECK_KIND(kResourceExhausted, n >= 1)
      << "cuda runner: not even one sequence of " << o.max_context << " tokens fits in "
      << o.gpu_memory_utilization << " of the device (" << *summary
      << "): lower max_model_len or max_num_batched_tokens, or raise gpu_memory_utilization";
  g.max_sequences = n;
  return g;
}

}  // namespace

CudaRunner::CudaRunner(const ModelConfig& config, const ModelWeights& weights,
                       const CudaRunnerOptions& options) {
  std::string summary;
  const GpuModelOptions g = size_model(config, options, &summary);
  model_ = std::make_unique<GpuModel>(config, weights, g);
  LOG(INFO) << "cuda runner: " << summary;
  init(options, "host weights");
}

CudaRunner::CudaRunner(const ModelConfig& config, uint64_t seed, const CudaRunnerOptions& options) {
  std::string summary;
  const GpuModelOptions g = size_model(config, options, &summary);
  model_ = std::make_unique<GpuModel>(config, seed, g);
  LOG(INFO) << "cuda runner: " << summary;
  init(options, "device dummy weights");
}

void CudaRunner::init(const CudaRunnerOptions& options, const std::string& weights_from) {
  const GpuModelOptions& g = model_->options();
  capacity_ = {g.max_sequences, g.max_context, g.max_batch_tokens};
  timing_ = std::make_unique<Timing>();
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  name_ = "cuda:" + std::to_string(device) + " (" + (options.fp8_weights ? "fp8" : "fp32") + " " +
          weights_from + ", " + numerics_name(options.numerics) + ", kv " +
          kv_cache_dtype_name(resolved_kv_cache_dtype(g)) + (g.cuda_graphs ? ", cuda graphs" : "") +
          (options.batch_invariant ? ", batch-invariant)" : ")");
  LOG(INFO) << "cuda runner: " << name_ << ", capacity " << g.max_sequences << " sequences of "
            << g.max_context << " tokens, " << g.max_batch_tokens << " tokens per step";
}

CudaRunner::~CudaRunner() = default;

const ModelConfig& CudaRunner::config() const { return model_->config(); }
int64_t CudaRunner::new_sequence() { return model_->new_sequence(); }
void CudaRunner::free_sequence(int64_t sequence) { model_->free_sequence(sequence); }
int64_t CudaRunner::n_tokens(int64_t sequence) const { return model_->n_tokens(sequence); }

Tensor CudaRunner::forward(std::span<const RunnerChunk> chunks) {
  std::vector<GpuChunk> g;
  g.reserve(chunks.size());
  for (const RunnerChunk& c : chunks) g.push_back({c.sequence, c.tokens, c.all_logits});
  auto stream = static_cast<cudaStream_t>(model_->stream());
  timing_->start.record(stream);
  Tensor logits = model_->forward(g);  // returns once the stream has finished
  timing_->end.record(stream);
  timing_->end.synchronize();
  busy_seconds_ += double(cuda::Event::elapsed_ms(timing_->start, timing_->end)) * 1e-3;
  return logits;
}

}  // namespace deepinfer
