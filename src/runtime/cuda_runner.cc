#include "runtime/cuda_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <vector>

#include "base/error.h"
#include "base/logging.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/event.h"
#include "ops/sampling/sampling_cuda.h"
#include "ops/sampling/token_bitmask.h"
#include "ops/sampling/token_bitmask_cuda.h"
#include "runtime/gpu_model.h"
#include "runtime/gpu_runner_sizing.h"
#include "runtime/gpu_state_plan.h"
#include "runtime/runner_kernels.h"

namespace deepinfer {

struct CudaRunner::Timing {
  cuda::Event start, end;
};

namespace {

struct PinnedFree {
  void operator()(void* p) const { cudaFreeHost(p); }
};
using Pinned = std::unique_ptr<void, PinnedFree>;

Pinned pinned(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, std::max<size_t>(bytes, 1)));
  return Pinned(p);
}

}  // namespace

// The device sampler's workspace (rows at a time) and the per-row buffers' capacity.
struct CudaRunner::Sampling {
  Sampling(int64_t ws_rows, int64_t vocab) : ws(ws_rows, vocab) {}
  SamplingWorkspace ws;
};

// One launched step's buffers. Rows: up to max_out_rows of the model.
struct CudaRunner::Slot {
  Slot(int64_t max_rows, int64_t n_eos)
      : tokens(size_t(max_rows) * sizeof(int32_t)),
        params(size_t(max_rows) * sizeof(SampleRowParams)),
        eos_offsets(size_t(std::max<int64_t>(max_rows * n_eos, 1)) * sizeof(int64_t)),
        tokens_host(pinned(size_t(max_rows) * sizeof(int32_t))),
        params_host(pinned(size_t(max_rows) * sizeof(SampleRowParams))),
        eos_offsets_host(pinned(size_t(max_rows * n_eos) * sizeof(int64_t))) {}
  // Grammar bitmasks of the masked kSample rows: [n_masked, n_words] uint32 then the rows'
  // indices (int32 [n_masked]), staged in pinned memory and uploaded with one copy. Room for
  // mask_rows rows (one per sequence; grown if a launch ever masks more).
  void reserve_masks(int64_t rows, int64_t n_words) {
    if (rows <= mask_rows) return;
    const size_t bytes = size_t(rows) * size_t(n_words + 1) * sizeof(uint32_t);
    masks_host.reset();
    masks_host = pinned(bytes);
    masks = cuda::DeviceBuffer(bytes);
    mask_rows = rows;
  }
  cuda::Event start, end;
  Pinned masks_host;
  cuda::DeviceBuffer masks;
  int64_t mask_rows = 0;
  cuda::DeviceBuffer tokens;  // int32 [rows]: sampled ids (read by the next launch's references)
  cuda::DeviceBuffer params;  // SampleRowParams [rows]
  cuda::DeviceBuffer eos_offsets;  // int64 [rows * n_eos]: logits elements masked before sampling
  Pinned tokens_host, params_host, eos_offsets_host, logits_host;
  int64_t logits_host_rows = 0;  // capacity of logits_host
  std::vector<RowMode> modes;    // per output row
  std::vector<int64_t> logits_row;
  int64_t n_host = 0;
  int64_t vocab = 0;
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
  g.expert_checkpoint = o.expert_checkpoint;
  g.expert_format = parse_expert_format(o.expert_format);
  g.max_rollback = o.max_rollback;
  g.mtp = o.mtp;
  g.dspark = o.dspark;
  if (o.kv_cache_dtype != "auto") g.kv_cache_dtype = kv_cache_dtype_from_string(o.kv_cache_dtype);
  // Weights and activations estimated; the state pools exactly as GpuModel plans them.
  // The routed experts' format as GpuModel will resolve it (resolve_expert_format): w4a8 when
  // asked for, or by auto for FP8 weights over a checkpoint's FP4 experts on sm_90.
  int dev = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  const bool w4a8 = g.expert_format == ExpertFormat::kW4a8 ||
                    (g.expert_format == ExpertFormat::kAuto && o.fp8_weights && major == 9 &&
                     !o.expert_checkpoint.empty() && config.quant.expert_dtype == "fp4" &&
                     config.hidden_size % 32 == 0 && config.moe_intermediate_size % 32 == 0);
  GpuSizing sizing = estimate_gpu_sizing(config, o.max_context, o.max_batch_tokens, o.fp8_weights, w4a8);
  const GpuStatePlan plan = plan_gpu_state(config, g);
  sizing.state_bytes_per_sequence = plan.state_bytes_per_sequence();
  if (o.mtp) {  // the MTP-1 window ring and kept streams (gpu_model_impl.h GpuMtp), fp32
    sizing.state_bytes_per_sequence += 4 * ((config.sliding_window + o.max_rollback + 1) * config.head_dim +
                                            (o.max_rollback + 1) * config.hc_mult * config.hidden_size);
  }
  if (o.dspark) {  // each stage's context ring (gpu_model_impl.h GpuDspark), fp32
    sizing.state_bytes_per_sequence += 4 * config.dspark.n_stages *
                                       (config.sliding_window + o.max_rollback + 1) * config.head_dim;
  }
  sizing.activation_bytes += plan.fixed_state_bytes();
  // The device sampler's workspace (CudaRunner::Sampling: sort keys and ids in and out,
  // fp64 probabilities, about the same again for CUB's scratch) for one row per sequence.
  sizing.activation_bytes += std::min(o.max_sequences, o.max_batch_tokens) * config.vocab_size * 40;
  // Both slots' device grammar bitmasks (CudaRunner::Slot::masks), one row per sequence.
  sizing.activation_bytes += 2 * std::min(o.max_sequences, o.max_batch_tokens) *
                             (token_bitmask_words(config.vocab_size) + 1) * int64_t(sizeof(uint32_t));
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
  const int64_t max_rows = g.max_out_rows > 0 ? g.max_out_rows : g.max_batch_tokens;
  const auto n_eos = int64_t(model_->config().eos_token_ids.size());
  for (auto& slot : slots_) {
    slot = std::make_unique<Slot>(max_rows, n_eos);
    slot->reserve_masks(std::min(max_rows, g.max_sequences),
                        token_bitmask_words(model_->config().vocab_size));
    // Host rows' logits: one row per sequence (what the engine asks at most), pinned here
    // rather than on the first step that has a host row (cudaMallocHost in the step loop).
    slot->logits_host_rows = std::min(max_rows, g.max_sequences);
    slot->logits_host = pinned(size_t(slot->logits_host_rows) * size_t(model_->config().vocab_size) *
                               sizeof(float));
  }
  // The engine samples one row per sequence: the workspace holds that many rows (larger
  // launches are sampled in pieces).
  sampling_ = std::make_unique<Sampling>(std::min(max_rows, g.max_sequences), model_->config().vocab_size);
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  name_ = "cuda:" + std::to_string(device) + " (" + (options.fp8_weights ? "fp8" : "fp32") + " " +
          weights_from + ", " + numerics_name(options.numerics) + ", kv " +
          kv_cache_dtype_name(resolved_kv_cache_dtype(g)) + (g.cuda_graphs ? ", cuda graphs" : "") + (g.mtp ? ", mtp drafter" : "") + (g.dspark ? ", dspark drafter" : "") +
          (options.batch_invariant ? ", batch-invariant)" : ")");
  LOG(INFO) << "cuda runner: " << name_ << ", capacity " << g.max_sequences << " sequences of "
            << g.max_context << " tokens, " << g.max_batch_tokens << " tokens per step";
}

CudaRunner::~CudaRunner() {
  // A launched step may still copy into the slots' pinned buffers.
  if (model_) {
    try {
      model_->synchronize();
    } catch (...) {
    }
  }
}

const ModelConfig& CudaRunner::config() const { return model_->config(); }
int64_t CudaRunner::new_sequence() { return model_->new_sequence(); }
void CudaRunner::free_sequence(int64_t sequence) { model_->free_sequence(sequence); }
int64_t CudaRunner::n_tokens(int64_t sequence) const { return model_->n_tokens(sequence); }
int64_t CudaRunner::host_waits() const { return model_->host_waits(); }
int64_t CudaRunner::rollback_depth() const { return model_->options().max_rollback; }

std::string CudaRunner::drafter() const {
  return model_->has_dspark() ? "dspark" : (model_->has_mtp() ? "mtp" : "none");
}
int64_t CudaRunner::draft_length() const {
  return model_->has_dspark() ? model_->dspark_block_size() : (model_->has_mtp() ? 1 : 0);
}

RunnerDraft CudaRunner::draft(int64_t sequence, int32_t next, int64_t n_drafts) {
  const DraftRequest r{sequence, next, n_drafts};
  return std::move(draft_batch(std::span<const DraftRequest>(&r, 1))[0]);
}

std::vector<RunnerDraft> CudaRunner::draft_batch(std::span<const DraftRequest> requests) {
  ICHECK(n_launched_.load() == n_collected_.load()) << "CudaRunner: draft() with a launched step uncollected";
  CHECK_KIND(kUnsupported, model_->has_mtp() || model_->has_dspark())
      << "CudaRunner: no drafter on the device (the runner was built without the MTP-1 or DSpark drafter)";
  const bool block_drafter = model_->has_dspark();  // drafts its whole block, entries keep a prefix
  std::vector<RunnerDraft> out(requests.size());
  std::vector<int64_t> seqs, at;
  std::vector<int32_t> next;
  int64_t n = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    CHECK(requests[i].n_drafts >= 0) << "CudaRunner: " << requests[i].n_drafts << " drafts asked";
    if (requests[i].n_drafts == 0) continue;
    seqs.push_back(requests[i].sequence);
    next.push_back(requests[i].next);
    at.push_back(int64_t(i));
    n = std::max(n, block_drafter ? std::min(requests[i].n_drafts, draft_length()) : requests[i].n_drafts);
  }
  if (seqs.empty()) return out;
  // DSpark drafts rows = sequences x block in one pass, at most max_batch_tokens: larger calls
  // go in groups (one host synchronisation each).
  const int64_t group = block_drafter ? std::max<int64_t>(1, capacity_.max_batch_tokens / draft_length())
                                      : int64_t(seqs.size());
  std::vector<std::vector<float>> prob;  // computed on the device: no logits copied back
  std::vector<DraftBlock> blocks;
  for (size_t g0 = 0; g0 < seqs.size(); g0 += size_t(group)) {
    const size_t len = std::min(seqs.size() - g0, size_t(group));
    std::vector<std::vector<float>> p;
    std::vector<DraftBlock> part = model_->draft(std::span<const int64_t>(seqs).subspan(g0, len),
                                                 std::span<const int32_t>(next).subspan(g0, len), n, &p);
    std::move(part.begin(), part.end(), std::back_inserter(blocks));
    std::move(p.begin(), p.end(), std::back_inserter(prob));
  }
  for (size_t b = 0; b < blocks.size(); ++b) {
    RunnerDraft& d = out[size_t(at[b])];
    const int64_t keep = std::min(requests[size_t(at[b])].n_drafts, int64_t(blocks[b].tokens.size()));
    d.tokens.assign(blocks[b].tokens.begin(), blocks[b].tokens.begin() + keep);
    d.probability.assign(prob[b].begin(), prob[b].begin() + keep);
    if (!blocks[b].confidence.empty()) {
      d.confidence.assign(blocks[b].confidence.begin(), blocks[b].confidence.begin() + keep);
    }
  }
  return out;
}

std::shared_ptr<const PrefixState> CudaRunner::export_prefix(int64_t sequence, const PrefixState* parent) {
  ICHECK(!in_launch_.load()) << "CudaRunner: export_prefix() while a launch() call runs";
  return model_->export_prefix(sequence, parent);
}

int64_t CudaRunner::import_prefix(std::span<const PrefixState* const> chain) {
  ICHECK(!in_launch_.load()) << "CudaRunner: import_prefix() while a launch() call runs";
  return model_->import_prefix(chain);
}

void CudaRunner::truncate(int64_t sequence, int64_t n_tokens) {
  ICHECK(n_launched_.load() == n_collected_.load()) << "CudaRunner: truncate() with a launched step uncollected";
  model_->truncate(sequence, n_tokens);
}

Tensor CudaRunner::forward(std::span<const RunnerChunk> chunks) {
  ICHECK(n_launched_.load() == n_collected_.load()) << "CudaRunner: forward() with a launched step uncollected";
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

void CudaRunner::launch(std::span<const RunnerChunk> chunks, std::span<const RowRequest> rows,
                        const std::function<void()>& before_sampling) {
  const int64_t n = n_launched_.load();
  ICHECK(n - n_collected_.load() < 2) << "CudaRunner: two launched steps are not collected yet";
  CHECK(!chunks.empty()) << "CudaRunner: launch without chunks";
  in_launch_.store(true);
  struct LaunchScope {
    std::atomic<bool>& flag;
    ~LaunchScope() { flag.store(false); }
  } launch_scope{in_launch_};
  Slot& s = *slots_[n % 2];
  const Slot* prev = n > 0 ? slots_[(n - 1) % 2].get() : nullptr;
  int64_t n_out = 0;
  std::vector<GpuChunk> g;
  g.reserve(chunks.size());
  for (const RunnerChunk& c : chunks) {
    for (int32_t t : c.tokens) {
      if (!is_sample_ref(t)) continue;
      const int64_t j = sample_ref_row(t);
      CHECK(prev != nullptr && j < int64_t(prev->modes.size()) && prev->modes[size_t(j)] == RowMode::kSample)
          << "CudaRunner: input refers to row " << j << " of the previous launch, which sampled no token there";
    }
    g.push_back({c.sequence, c.tokens, c.all_logits});
    n_out += c.all_logits ? int64_t(c.tokens.size()) : 1;
  }
  CHECK(int64_t(rows.size()) == n_out) << "CudaRunner: " << rows.size() << " row requests for " << n_out
                                       << " output rows";
  for (const RowRequest& r : rows) {
    CHECK(r.top_k >= 0 && r.top_k <= int64_t(INT32_MAX)) << "CudaRunner: top_k " << r.top_k;
  }
  const int64_t V = model_->config().vocab_size;
  auto stream = static_cast<cudaStream_t>(model_->stream());
  model_->forward_device(g, prev != nullptr ? static_cast<const int32_t*>(prev->tokens.data()) : nullptr,
                         s.start.get());
  ICHECK(model_->n_logits_rows() == n_out);
  // The forward is enqueued: host work here (the engine's grammar masks) overlaps it.
  if (before_sampling) before_sampling();
  float* logits = model_->device_logits();  // kSample rows' EOS entries are masked in place
  s.vocab = V;
  s.modes.resize(rows.size());
  s.logits_row.assign(rows.size(), -1);
  int64_t lo = n_out, hi = 0, n_host = 0;
  bool all_greedy = true;
  for (int64_t i = 0; i < n_out; ++i) {
    const RowRequest& r = rows[size_t(i)];
    s.modes[size_t(i)] = r.mode;
    if (r.mode == RowMode::kSample) {
      lo = std::min(lo, i);
      hi = i + 1;
      all_greedy &= r.temperature == 0.0f || r.top_k == 1;
    } else if (r.mode == RowMode::kHost) {
      s.logits_row[size_t(i)] = n_host++;
    }
  }
  auto* tokens = static_cast<int32_t*>(s.tokens.data());
  if (lo < hi) {
    // Grammar bitmasks first (the EOS fill and the samplers see the masked rows): staged in
    // the slot's pinned buffer (its last launch is collected, so its upload is done), one
    // upload, one kernel over the masked rows.
    int64_t n_bitmask = 0;
    for (int64_t i = lo; i < hi; ++i) {
      n_bitmask += rows[size_t(i)].mode == RowMode::kSample && rows[size_t(i)].bitmask != nullptr;
    }
    if (n_bitmask > 0) {
      const int64_t n_words = token_bitmask_words(V);
      s.reserve_masks(n_bitmask, n_words);
      auto* mh = static_cast<uint32_t*>(s.masks_host.get());
      auto* rh = reinterpret_cast<int32_t*>(mh + n_bitmask * n_words);
      int64_t k = 0;
      for (int64_t i = lo; i < hi; ++i) {
        const RowRequest& r = rows[size_t(i)];
        if (r.mode != RowMode::kSample || r.bitmask == nullptr) continue;
        std::copy(r.bitmask, r.bitmask + n_words, mh + k * n_words);
        rh[k++] = static_cast<int32_t>(i);
      }
      auto* md = static_cast<uint32_t*>(s.masks.data());
      CUDA_CHECK(cudaMemcpyAsync(md, mh, size_t(n_bitmask * (n_words + 1)) * sizeof(uint32_t),
                                 cudaMemcpyHostToDevice, stream));
      apply_token_bitmask_cuda(stream, logits, md, reinterpret_cast<const int32_t*>(md + n_bitmask * n_words),
                               n_bitmask, V);
    }
    auto* oh = static_cast<int64_t*>(s.eos_offsets_host.get());
    int64_t n_masked = 0;
    for (int64_t i = lo; i < hi; ++i) {
      if (rows[size_t(i)].mode != RowMode::kSample || !rows[size_t(i)].mask_eos) continue;
      for (int64_t eos : model_->config().eos_token_ids) oh[n_masked++] = i * V + eos;
    }
    if (n_masked > 0) {
      auto* od = static_cast<int64_t*>(s.eos_offsets.data());
      CUDA_CHECK(cudaMemcpyAsync(od, oh, size_t(n_masked) * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
      fill_at_cuda(stream, logits, od, n_masked, -INFINITY);
    }
    if (all_greedy) {
      argmax_rows_cuda(stream, logits + lo * V, hi - lo, V, tokens + lo);
    } else {
      // Rows in [lo, hi) that are not kSample are sampled greedily (cheap) and ignored.
      auto* ph = static_cast<SampleRowParams*>(s.params_host.get());
      for (int64_t i = lo; i < hi; ++i) {
        const RowRequest& r = rows[size_t(i)];
        SampleRowParams p;
        if (r.mode == RowMode::kSample) {
          p.temperature = r.temperature;
          p.top_k = static_cast<int32_t>(r.top_k);
          p.top_p = r.top_p;
          p.min_p = r.min_p;
          p.seed = r.seed;
          p.position = r.position;
        } else {
          p.temperature = 0.0f;
        }
        ph[i] = p;
      }
      auto* pd = static_cast<SampleRowParams*>(s.params.data());
      CUDA_CHECK(cudaMemcpyAsync(pd + lo, ph + lo, size_t(hi - lo) * sizeof(SampleRowParams),
                                 cudaMemcpyHostToDevice, stream));
      const int64_t step = sampling_->ws.max_rows();
      for (int64_t r0 = lo; r0 < hi; r0 += step) {
        const int64_t m = std::min(step, hi - r0);
        sample_cuda(stream, logits + r0 * V, m, V, pd + r0, sampling_->ws, tokens + r0);
      }
    }
    CUDA_CHECK(cudaMemcpyAsync(static_cast<int32_t*>(s.tokens_host.get()) + lo, tokens + lo,
                               size_t(hi - lo) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  }
  if (n_host > 0) {
    if (s.logits_host_rows < n_host) {
      // Sized at init for one row per sequence; a caller asking more grows it here.
      const int64_t want = std::max<int64_t>(n_host, capacity_.max_sequences);
      s.logits_host.reset();
      s.logits_host = pinned(size_t(want) * size_t(V) * sizeof(float));
      s.logits_host_rows = want;
    }
    auto* dst = static_cast<float*>(s.logits_host.get());
    for (int64_t i = 0; i < n_out;) {  // runs of consecutive host rows, one copy each
      if (s.logits_row[size_t(i)] < 0) {
        ++i;
        continue;
      }
      int64_t j = i;
      while (j < n_out && s.logits_row[size_t(j)] >= 0) ++j;
      CUDA_CHECK(cudaMemcpyAsync(dst + s.logits_row[size_t(i)] * V, logits + i * V,
                                 size_t(j - i) * size_t(V) * sizeof(float), cudaMemcpyDeviceToHost, stream));
      i = j;
    }
  }
  s.n_host = n_host;
  s.end.record(stream);
  n_launched_.store(n + 1);
}

StepResult CudaRunner::collect() {
  const int64_t k = n_collected_.load();
  ICHECK(k < n_launched_.load()) << "CudaRunner: collect() without a launched step";
  Slot& s = *slots_[k % 2];
  s.end.synchronize();
  busy_seconds_ += double(cuda::Event::elapsed_ms(s.start, s.end)) * 1e-3;
  StepResult r;
  const auto* th = static_cast<const int32_t*>(s.tokens_host.get());
  r.tokens.assign(s.modes.size(), -1);
  for (size_t i = 0; i < s.modes.size(); ++i) {
    if (s.modes[i] == RowMode::kSample) r.tokens[i] = th[i];
  }
  r.logits_row = s.logits_row;
  r.logits = s.n_host > 0 ? Tensor::wrap(s.logits_host.get(), DType::F32, {s.n_host, s.vocab}, nullptr)
                          : Tensor::empty(DType::F32, {0, s.vocab});
  n_collected_.store(k + 1);
  return r;
}

}  // namespace deepinfer
