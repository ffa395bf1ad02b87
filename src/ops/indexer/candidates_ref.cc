#include "ops/indexer/candidates.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "ops/indexer/indexer.h"

namespace deepinfer {

std::vector<uint8_t> candidate_blocks_ref(const float* scores, int64_t n, int64_t block,
                                          int64_t n_pick) {
  CHECK(block > 0 && n_pick > 0) << "candidate blocks: block " << block << ", n_pick " << n_pick;
  const int64_t n_blocks = (n + block - 1) / block;
  std::vector<uint8_t> mask(n_blocks, 0);
  if (n == 0) return mask;
  std::vector<float> block_max(n_blocks, -INFINITY);
  for (int64_t s = 0; s < n; ++s) block_max[s / block] = std::max(block_max[s / block], scores[s]);
  block_max[n_blocks - 1] = INFINITY;
  for (int64_t b : topk_indices(block_max.data(), n_blocks, n_pick)) {
    if (block_max[b] != -INFINITY) mask[b] = 1;
  }
  return mask;
}

}  // namespace deepinfer
