// moe_align_cuda: one CTA. Counting uses shared-memory atomics (a count does not depend on
// the order of the additions); the placement of slots is done by one warp walking the slots
// in order, 32 at a time: lanes routed to the same expert find each other with
// __match_any_sync and take consecutive rows after that expert's cursor, so rows of an
// expert come out in ascending slot order whatever the thread timing.
#include <algorithm>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/moe/moe_grouped_cuda.h"

namespace deepinfer {
namespace {

constexpr int kThreads = 1024;

struct AlignParams {
  const int32_t* ids;
  int64_t n_slots;
  int32_t n_experts;
  int64_t tiles_cap;
  MoeAlignBuffers out;
};

__global__ void __launch_bounds__(kThreads) moe_align_kernel(AlignParams p) {
  __shared__ int32_t cursor[kMoeAlignMaxExperts];
  __shared__ int32_t offs[kMoeAlignMaxExperts + 1];
  const int tid = threadIdx.x;
  const int32_t n_exp = p.n_experts;
  for (int e = tid; e < n_exp; e += kThreads) cursor[e] = 0;
  __syncthreads();
  for (int64_t s = tid; s < p.n_slots; s += kThreads) {
    const int32_t e = p.ids[s];
    if (e >= 0 && e < n_exp) atomicAdd(&cursor[e], 1);
  }
  __syncthreads();
  if (tid == 0) {
    int32_t acc = 0;
    for (int e = 0; e < n_exp; ++e) {
      offs[e] = acc;
      acc += (cursor[e] + static_cast<int32_t>(kMoeRowTile) - 1) /
             static_cast<int32_t>(kMoeRowTile) * static_cast<int32_t>(kMoeRowTile);
    }
    offs[n_exp] = acc;
  }
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
  __syncthreads();
  // Placement by warp 0 in slot order; cursor[e] becomes the next free row of expert e.
  if (tid >= 32) return;
  for (int e = tid; e < n_exp; e += 32) cursor[e] = offs[e];
  __syncwarp();
  const int lane = tid;
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int64_t base = 0; base < p.n_slots; base += 32) {
    const int64_t s = base + lane;
    int32_t e = s < p.n_slots ? p.ids[s] : -1;
    if (e >= n_exp) e = -1;
    if (e < 0) e = -1;
    const unsigned group = __match_any_sync(0xffffffffu, e);
    int32_t pos = -1;
    if (e >= 0) pos = cursor[e] + __popc(group & lanes_below);
    __syncwarp();
    if (e >= 0 && lane == 31 - __clz(group)) cursor[e] += __popc(group);
    __syncwarp();
    if (s < p.n_slots) {
      p.out.slot_row[s] = pos;
      if (pos >= 0) p.out.row_slot[pos] = static_cast<int32_t>(s);
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
