// Pool sizing: how many blocks of each StateGroup and how many compressor state slots fit a
// byte budget (free device memory × utilisation, or a CPU memory budget).
//
// The budget is spent in two parts:
//   1. per concurrent request, independent of its length: window blocks (a decode step reads
//      W positions, which touch at most ceil((W-1)/block_size)+1 blocks; one block more is
//      kept for a chunk's boundary) and one compressor state slot; plus window blocks for
//      one step's worth of prefill tokens (ceil(max_num_batched_tokens / block_size));
//   2. everything left goes to the compressed and indexer groups, split in proportion to
//      their bytes per token so all of them hold the same number of tokens.
// If part 1 for max_num_seqs requests does not leave room for one request of
// max_model_len, the concurrency is lowered (and logged); if even one request does not fit
// the call throws kResourceExhausted naming the numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/cache_layout.h"

namespace deepinfer {

struct PoolPlanOptions {
  int64_t max_num_seqs = 256;             // concurrent requests to provide for
  int64_t max_num_batched_tokens = 8192;  // tokens per step (window blocks for prefill chunks)
  int64_t max_model_len = 0;              // a request of this many tokens must fit; 0: no check
};

struct PoolPlan {
  std::vector<int64_t> n_blocks;  // per group, in CacheLayout::groups() order
  int64_t n_state_slots = 0;      // compressor state slots (= concurrent requests)
  int64_t used_bytes = 0;         // bytes the pools take
  // Tokens the compressed pools hold at once, summed over requests (block rounding of each
  // request ignored); -1 when the layout has no compressed layer (only windows: unbounded).
  int64_t max_tokens = -1;
  int64_t max_concurrent_requests = 0;

  // One line for the start-up log: capacity and the blocks per group.
  std::string summary(const CacheLayout& layout) const;
};

// Blocks touched by `n_positions` consecutive positions at any alignment.
int64_t blocks_spanned(int64_t n_positions, int64_t block_size);

// Plans pools for `budget_bytes` and logs the summary at INFO.
PoolPlan plan_pools(const CacheLayout& layout, int64_t budget_bytes,
                    const PoolPlanOptions& options);

}  // namespace deepinfer
