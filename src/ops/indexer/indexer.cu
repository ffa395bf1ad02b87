// Lightning indexer on the GPU: scores (one warp per key, q of the row in shared memory)
// and an exact per-row top-k (radix select + ordered collection).
#include <cub/block/block_scan.cuh>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/indexer/indexer_cuda.h"
#include "ops/indexer/indexer_device.cuh"

namespace deepinfer {
namespace {

constexpr int kScoreWarps = 8;
constexpr int kKeysPerBlock = 64;
constexpr int kMaxPerLane = 8;  // head_dim <= 256

__global__ void __launch_bounds__(kScoreWarps * 32) indexer_scores_kernel(IndexerScoresParams p) {
  extern __shared__ float s_q[];  // [n_heads * head_dim] then g [n_heads]
  const int64_t row = blockIdx.y;
  const int64_t n_keys = (static_cast<int64_t>(p.positions[row]) + 1) / p.ratio;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kKeysPerBlock;
  if (first >= n_keys) return;
  const int64_t qn = p.n_heads * p.head_dim;
  float* s_g = s_q + qn;
  indexer_device::stage_row(p, row, qn, s_q, s_g);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_lane = static_cast<int>(p.head_dim / 32);
  const int64_t last = min(n_keys, first + kKeysPerBlock);
  for (int64_t s = first + warp; s < last; s += kScoreWarps) {
    const float* key = p.keys + (static_cast<int64_t>(p.slot[row]) * p.max_entries + s) * p.head_dim;
    float k[kMaxPerLane];
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) k[i] = i < per_lane ? key[i * 32 + lane] : 0.0f;
    const float total =
        indexer_device::key_score(s_q, s_g, k, per_lane, lane, p.n_heads, p.head_dim, p.scale);
    if (lane == 0) p.scores[row * p.score_stride + s] = total;
  }
}

constexpr int kTopkThreads = 512;

// Order-preserving map of fp32 to uint32 (larger float -> larger key; -0 == +0).
__device__ __forceinline__ uint32_t order_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(kTopkThreads)
    topk_rows_kernel(const float* scores, int64_t score_stride, const int32_t* positions,
                     int64_t ratio, const int32_t* n_keys_arr, int64_t k, int32_t* selected,
                     int32_t* n_selected) {
  using Scan = cub::BlockScan<int, kTopkThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_remaining, s_base, s_tie_base;
  const int64_t row = blockIdx.x;
  const int64_t n = n_keys_arr != nullptr ? n_keys_arr[row]
                                          : (static_cast<int64_t>(positions[row]) + 1) / ratio;
  const float* sc = scores + row * score_stride;
  int32_t* out = selected + row * k;
  const int64_t take = n < k ? n : k;
  if (threadIdx.x == 0) n_selected[row] = static_cast<int32_t>(take);
  if (take == 0) return;

  uint32_t prefix = 0, mask = 0;
  int remaining = static_cast<int>(take);  // rank (1-based) of the threshold among the matches
  if (take < n) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
      __syncthreads();
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const uint32_t key = order_key(sc[i]);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xff], 1);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        int cum = 0, digit = 255;
        for (; digit > 0; --digit) {
          if (cum + hist[digit] >= remaining) break;
          cum += hist[digit];
        }
        s_prefix = prefix | (static_cast<uint32_t>(digit) << shift);
        s_remaining = remaining - cum;
      }
      __syncthreads();
      prefix = s_prefix;
      remaining = s_remaining;
      mask |= 0xffu << shift;
      __syncthreads();
    }
  } else {
    prefix = 0;  // take everything: threshold is the smallest key, ties unlimited
    remaining = static_cast<int>(n);
  }
  // prefix is now the threshold key; `remaining` elements equal to it are taken (lowest
  // indices first); everything above it is taken.
  const uint32_t thr = prefix;
  if (threadIdx.x == 0) {
    s_base = 0;
    s_tie_base = 0;
  }
  __syncthreads();
  for (int64_t begin = 0; begin < n; begin += blockDim.x) {
    const int64_t i = begin + threadIdx.x;
    uint32_t key = 0;
    bool valid = i < n;
    if (valid) key = order_key(sc[i]);
    const int is_tie = valid && key == thr && take < n ? 1 : 0;
    int tie_rank = 0, tie_total = 0;
    Scan(scan_tmp).ExclusiveSum(is_tie, tie_rank, tie_total);
    __syncthreads();
    const int tie_base = s_tie_base;
    const bool pick = valid && (take >= n || key > thr || (is_tie && tie_base + tie_rank < remaining));
    int pos = 0, n_pick = 0;
    Scan(scan_tmp).ExclusiveSum(pick ? 1 : 0, pos, n_pick);
    const int base = s_base;
    if (pick) out[base + pos] = static_cast<int32_t>(i);
    __syncthreads();
    if (threadIdx.x == 0) {
      s_base = base + n_pick;
      s_tie_base = tie_base + tie_total;
    }
    __syncthreads();
  }
}

}  // namespace

void indexer_scores_cuda(cudaStream_t stream, const IndexerScoresParams& p) {
  CHECK_KIND(kUnsupported, p.head_dim > 0 && p.head_dim % 32 == 0 && p.head_dim <= 32 * kMaxPerLane)
      << "indexer scores: head_dim " << p.head_dim << " must be a multiple of 32, at most 256";
  CHECK(p.ratio > 0) << "indexer scores: ratio must be positive";
  if (p.n_rows == 0 || p.max_entries == 0) return;
  const size_t smem = static_cast<size_t>(p.n_heads * p.head_dim + p.n_heads) * sizeof(float);
  CHECK_KIND(kUnsupported, smem <= 200 * 1024) << "indexer scores: q of " << smem << " bytes";
  static thread_local size_t configured = 48 * 1024;
  if (smem > configured) {
    CUDA_CHECK(cudaFuncSetAttribute(indexer_scores_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    configured = smem;
  }
  const dim3 grid(static_cast<unsigned>((p.max_entries + kKeysPerBlock - 1) / kKeysPerBlock),
                  static_cast<unsigned>(p.n_rows));
  CHECK_KIND(kUnsupported, p.n_rows < 65536) << "indexer scores: too many rows";
  indexer_scores_kernel<<<grid, kScoreWarps * 32, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void topk_rows_cuda(cudaStream_t stream, const float* scores, int64_t n_rows, int64_t score_stride,
                    const int32_t* positions, int64_t ratio, const int32_t* n_keys, int64_t k,
                    int32_t* selected, int32_t* n_selected) {
  CHECK(k > 0) << "topk: k must be positive";
  CHECK(n_keys != nullptr || ratio > 0) << "topk: ratio must be positive";
  if (n_rows == 0) return;
  CHECK_KIND(kUnsupported, n_rows < (int64_t{1} << 31)) << "topk: too many rows";
  topk_rows_kernel<<<static_cast<unsigned>(n_rows), kTopkThreads, 0, stream>>>(
      scores, score_stride, positions, ratio, n_keys, k, selected, n_selected);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
