// moe_align_cuda: one CTA. Counting uses shared-memory atomics (a count does not depend on
// the order of the additions); the expert offsets are an exclusive scan of the tile-rounded
// counts (each thread sums kScanPer consecutive experts, then a warp-shuffle scan per warp and
// one over the warp totals: integer sums, exact in any order); the placement of slots is done
// by one warp walking the slots in order, 32 at a time, from a chunk of the ids that the whole
// CTA first copies into shared memory (so the walk does not wait on global loads): lanes
// routed to the same expert find each other with __match_any_sync and take consecutive rows
// after that expert's cursor, so rows of an expert come out in ascending slot order whatever
// the thread timing.
#include <algorithm>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/moe/moe_grouped_cuda.h"

namespace deepinfer {
namespace {

constexpr int kThreads = 1024;
constexpr int kScanPer = (kMoeAlignMaxExperts + kThreads - 1) / kThreads;  // experts per thread
constexpr int kIdsChunk = 2048;  // slots staged in shared memory per placement round

struct AlignParams {
  const int32_t* ids;
  int64_t n_slots;
  int32_t n_experts;
  int64_t tiles_cap;
  MoeAlignBuffers out;
};

__device__ __forceinline__ int32_t tile_rounded(int32_t c) {
  const int32_t t = static_cast<int32_t>(kMoeRowTile);
  return (c + t - 1) / t * t;
}

__global__ void __launch_bounds__(kThreads) moe_align_kernel(AlignParams p) {
  __shared__ int32_t cursor[kMoeAlignMaxExperts];
  __shared__ int32_t offs[kMoeAlignMaxExperts + 1];
  __shared__ int32_t warp_sum[kThreads / 32];
  __shared__ int32_t ids_s[kIdsChunk];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int32_t n_exp = p.n_experts;
  for (int e = tid; e < n_exp; e += kThreads) cursor[e] = 0;
  __syncthreads();
  for (int64_t s = tid; s < p.n_slots; s += kThreads) {
    const int32_t e = p.ids[s];
    if (e >= 0 && e < n_exp) atomicAdd(&cursor[e], 1);
  }
  __syncthreads();
  // offs[e] = sum over e' < e of tile_rounded(cursor[e']); offs[n_exp] = the total.
  const int e0 = tid * kScanPer;
  int32_t local = 0;
  for (int i = 0; i < kScanPer; ++i) {
    if (e0 + i < n_exp) local += tile_rounded(cursor[e0 + i]);
  }
  int32_t incl = local;  // inclusive scan of `local` over the warp
  for (int d = 1; d < 32; d *= 2) {
    const int32_t v = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += v;
  }
  if (lane == 31) warp_sum[warp] = incl;
  __syncthreads();
  if (warp == 0) {  // exclusive scan of the warp totals (kThreads / 32 == 32 of them)
    const int32_t wv = warp_sum[lane];
    int32_t wi = wv;
    for (int d = 1; d < 32; d *= 2) {
      const int32_t v = __shfl_up_sync(0xffffffffu, wi, d);
      if (lane >= d) wi += v;
    }
    warp_sum[lane] = wi - wv;
  }
  __syncthreads();
  int32_t run = warp_sum[warp] + incl - local;  // exclusive prefix of this thread's experts
  for (int i = 0; i < kScanPer; ++i) {
    const int e = e0 + i;
    if (e < n_exp) {
      offs[e] = run;
      run += tile_rounded(cursor[e]);
    }
    if (e == n_exp) offs[e] = run;
  }
  if (tid == kThreads - 1 && kThreads * kScanPer == n_exp) offs[n_exp] = run;
  __syncthreads();
  const int32_t total = offs[n_exp];
  for (int e = tid; e <= n_exp; e += kThreads) p.out.offsets[e] = offs[e];
  // Padding rows of each expert, and the counts.
  for (int e = tid; e < n_exp; e += kThreads) {
    const int32_t c = cursor[e];
    p.out.counts[e] = c;
    for (int32_t r = offs[e] + c; r < offs[e + 1]; ++r) p.out.row_slot[r] = -1;
  }
  // Tile list: tile i covers rows [i * tile, (i + 1) * tile) of one expert (blocks are
  // tile-aligned), found by binary search in the offsets.
  for (int64_t i = tid; i < p.tiles_cap; i += kThreads) {
    const int64_t row0 = i * kMoeRowTile;
    if (row0 >= total) {
      p.out.tile_expert[i] = -1;
      continue;
    }
    int lo = 0, hi = n_exp - 1;  // last e with offs[e] <= row0 (and a non-empty block)
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (offs[mid] <= row0) lo = mid; else hi = mid - 1;
    }
    p.out.tile_expert[i] = lo;
    p.out.tile_row0[i] = static_cast<int32_t>(row0);
  }
  // Placement by warp 0 in slot order; cursor[e] becomes the next free row of expert e.
  __syncthreads();  // everyone is done reading cursor[] as counts
  for (int e = tid; e < n_exp; e += kThreads) cursor[e] = offs[e];
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int64_t c0 = 0; c0 < p.n_slots; c0 += kIdsChunk) {
    const int n_c = static_cast<int>(p.n_slots - c0 < kIdsChunk ? p.n_slots - c0 : kIdsChunk);
    __syncthreads();  // cursor[] initialised / the previous chunk's walk is done with ids_s
    for (int i = tid; i < n_c; i += kThreads) {
      const int32_t e = p.ids[c0 + i];
      ids_s[i] = e >= 0 && e < n_exp ? e : -1;
    }
    __syncthreads();
    if (warp != 0) continue;
    for (int base = 0; base < n_c; base += 32) {
      const int i = base + lane;
      const int64_t s = c0 + i;
      const int32_t e = i < n_c ? ids_s[i] : -1;
      const unsigned group = __match_any_sync(0xffffffffu, e);
      int32_t pos = -1;
      if (e >= 0) pos = cursor[e] + __popc(group & lanes_below);
      __syncwarp();
      if (e >= 0 && lane == 31 - __clz(group)) cursor[e] += __popc(group);
      __syncwarp();
      if (i < n_c) {
        p.out.slot_row[s] = pos;
        if (pos >= 0) p.out.row_slot[pos] = static_cast<int32_t>(s);
      }
    }
  }
}

}  // namespace

int64_t moe_rows_cap(int64_t n_tokens, int64_t top_k, int64_t n_experts) {
  const int64_t slots = n_tokens * top_k;
  return slots + std::min(n_experts, slots) * (kMoeRowTile - 1);
}

int64_t moe_tiles_cap(int64_t n_tokens, int64_t top_k, int64_t n_experts) {
  return moe_rows_cap(n_tokens, top_k, n_experts) / kMoeRowTile;
}

void moe_align_cuda(cudaStream_t stream, const int32_t* ids, int64_t n_tokens, int64_t top_k,
                    int64_t n_experts, const MoeAlignBuffers& out) {
  CHECK_KIND(kUnsupported, n_experts >= 1 && n_experts <= kMoeAlignMaxExperts)
      << "moe_align: " << n_experts << " experts (at most " << kMoeAlignMaxExperts << ")";
  CHECK(n_tokens >= 0 && top_k >= 1) << "moe_align: T=" << n_tokens << " top_k=" << top_k;
  CHECK_KIND(kUnsupported, moe_rows_cap(n_tokens, top_k, n_experts) < (int64_t{1} << 31))
      << "moe_align: " << n_tokens << " tokens x top " << top_k << " overflow int32 rows";
  const AlignParams p{ids, n_tokens * top_k, static_cast<int32_t>(n_experts),
                      moe_tiles_cap(n_tokens, top_k, n_experts), out};
  moe_align_kernel<<<1, kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
