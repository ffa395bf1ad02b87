// Sampling: iota ids + segment offsets, CUB segmented descending radix sort of (logit, id)
// per row, then one block per row: greedy rows take the arg-max (block reduction), the
// others compute their candidates' probabilities in parallel and walk them on one thread.
#include <cub/device/device_segmented_radix_sort.cuh>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/sampling/sampling_cuda.h"

namespace deepinfer {
namespace {

constexpr int kThreads = 256;

__device__ double uniform_01(uint64_t seed, int64_t position) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(position) * 0xd1b54a32d192ed03ull +
               0x2545f4914f6cdd1dull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

// Sort inputs: ids 0..V-1 per row, and the logits with -0 made +0 (the CPU orders them as
// equal, by id; the radix sort would put +0 first).
__global__ void prepare_kernel(const float* logits, float* keys_in, int32_t* ids, int32_t* offsets,
                               int64_t n_rows, int64_t vocab) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx < n_rows * vocab) {
    ids[idx] = static_cast<int32_t>(idx % vocab);
    const float v = logits[idx];
    keys_in[idx] = v == 0.0f ? 0.0f : v;
  }
  if (idx <= n_rows) offsets[idx] = static_cast<int32_t>(idx * vocab);
}

__device__ __forceinline__ bool is_greedy(const SampleRowParams& p) {
  return p.temperature == 0.0f || p.top_k == 1;
}

// The block's arg-max of row[0, vocab) into *token (written by thread 0): each thread keeps
// its strided maximum (its first element always taken, then strictly larger ones: the first
// index on ties), then a tree keeps the larger value, the lower id on ties. Needs
// blockDim.x == kThreads; every thread of the block must call it.
__device__ __forceinline__ void block_argmax(const float* row, int64_t vocab, int32_t* token) {
  __shared__ float s_v[kThreads];
  __shared__ int s_i[kThreads];
  float best = -INFINITY;
  int best_i = 0x7fffffff;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = row[i];
    if (v > best || best_i == 0x7fffffff) {
      best = v;
      best_i = static_cast<int>(i);
    }
  }
  s_v[threadIdx.x] = best;
  s_i[threadIdx.x] = best_i;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      const float ov = s_v[threadIdx.x + stride];
      const int oi = s_i[threadIdx.x + stride];
      if (oi != 0x7fffffff && (s_i[threadIdx.x] == 0x7fffffff || ov > s_v[threadIdx.x] ||
                               (ov == s_v[threadIdx.x] && oi < s_i[threadIdx.x]))) {
        s_v[threadIdx.x] = ov;
        s_i[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *token = s_i[0];
}

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float* logits, int64_t vocab, int32_t* tokens) {
  block_argmax(logits + static_cast<int64_t>(blockIdx.x) * vocab, vocab, tokens + blockIdx.x);
}

__global__ void __launch_bounds__(kThreads)
    finish_kernel(const float* logits, const float* sorted, const int32_t* ids, double* probs,
                  int64_t vocab, const SampleRowParams* params, int32_t* tokens) {
  const int64_t row = blockIdx.x;
  const SampleRowParams p = params[row];
  if (is_greedy(p)) {
    block_argmax(logits + row * vocab, vocab, tokens + row);
    return;
  }
  const float* key = sorted + row * vocab;
  const int32_t* id = ids + row * vocab;
  double* pr = probs + row * vocab;
  const int64_t k = p.top_k > 0 && p.top_k < vocab ? p.top_k : vocab;
  const double mx = key[0];
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    pr[i] = exp((static_cast<double>(key[i]) - mx) / p.temperature);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0.0;
  for (int64_t i = 0; i < k; ++i) total += pr[i];
  int64_t keep = k;
  for (int64_t i = 0; i < k; ++i) {
    pr[i] /= total;
    if (p.min_p > 0.0f && pr[i] < p.min_p * pr[0] && i < keep) keep = i;
  }
  double cum = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    cum += pr[i];
    if (cum >= p.top_p) {
      keep = i + 1;
      break;
    }
  }
  if (keep < 1) keep = 1;
  double mass = 0.0;
  for (int64_t i = 0; i < keep; ++i) mass += pr[i];
  const double u = uniform_01(p.seed, p.position) * mass;
  double acc = 0.0;
  int32_t token = id[keep - 1];
  for (int64_t i = 0; i < keep; ++i) {
    acc += pr[i];
    if (u < acc) {
      token = id[i];
      break;
    }
  }
  tokens[row] = token;
}


size_t cub_temp_bytes(int64_t rows, int64_t vocab) {
  size_t bytes = 0;
  CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, bytes, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<int>(rows * vocab), static_cast<int>(rows), static_cast<const int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr)));
  return bytes;
}

}  // namespace

SamplingWorkspace::SamplingWorkspace(int64_t max_rows, int64_t vocab)
    : max_rows_(max_rows), vocab_(vocab) {
  CHECK(max_rows > 0 && vocab > 0) << "sampling workspace: rows " << max_rows << ", vocab " << vocab;
  CHECK_KIND(kUnsupported, max_rows * vocab < (int64_t{1} << 31))
      << "sampling workspace: " << max_rows << " x " << vocab << " exceeds 2^31 entries";
  const size_t n = static_cast<size_t>(max_rows * vocab);
  cub_bytes_ = cub_temp_bytes(max_rows, vocab);
  keys_in_ = cuda::DeviceBuffer(n * sizeof(float));
  keys_ = cuda::DeviceBuffer(n * sizeof(float));
  ids_in_ = cuda::DeviceBuffer(n * sizeof(int32_t));
  ids_out_ = cuda::DeviceBuffer(n * sizeof(int32_t));
  probs_ = cuda::DeviceBuffer(n * sizeof(double));
  offsets_ = cuda::DeviceBuffer((max_rows + 1) * sizeof(int32_t));
  cub_temp_ = cuda::DeviceBuffer(std::max<size_t>(cub_bytes_, 1));
}

void sample_cuda(cudaStream_t stream, const float* logits, int64_t n_rows, int64_t vocab,
                 const SampleRowParams* params, SamplingWorkspace& ws, int32_t* tokens) {
  CHECK(vocab == ws.vocab_ && n_rows <= ws.max_rows_)
      << "sample: " << n_rows << " rows of " << vocab << " for a workspace of " << ws.max_rows_
      << " x " << ws.vocab_;
  if (n_rows == 0) return;
  auto* ids_in = static_cast<int32_t*>(ws.ids_in_.data());
  auto* ids_out = static_cast<int32_t*>(ws.ids_out_.data());
  auto* offsets = static_cast<int32_t*>(ws.offsets_.data());
  auto* keys = static_cast<float*>(ws.keys_.data());
  const int64_t total = n_rows * vocab;
  const int64_t blocks = (std::max(total, n_rows + 1) + kThreads - 1) / kThreads;
  auto* keys_in = static_cast<float*>(ws.keys_in_.data());
  prepare_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(logits, keys_in, ids_in,
                                                                        offsets, n_rows, vocab);
  CUDA_CHECK_LAUNCH();
  size_t temp = ws.cub_bytes_;
  CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      ws.cub_temp_.data(), temp, keys_in, keys, ids_in, ids_out, static_cast<int>(total),
      static_cast<int>(n_rows), offsets, offsets + 1, 0, 32, stream));
  finish_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(
      logits, keys, ids_out, static_cast<double*>(ws.probs_.data()), vocab, params, tokens);
  CUDA_CHECK_LAUNCH();
}

void argmax_rows_cuda(cudaStream_t s, const float* logits, int64_t n_rows, int64_t vocab,
                      int32_t* tokens) {
  if (n_rows <= 0) return;
  argmax_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, s>>>(logits, vocab, tokens);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
