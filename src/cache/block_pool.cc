#include "cache/block_pool.h"

#include <limits>

#include "base/error.h"

namespace deepinfer {

BlockPool::BlockPool(int64_t n_blocks) {
  CHECK(n_blocks >= 0 && n_blocks <= std::numeric_limits<int32_t>::max())
      << "BlockPool: block count " << n_blocks << " out of range";
  allocated_.assign(size_t(n_blocks), 0);
  free_.reserve(size_t(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

bool BlockPool::is_allocated(int32_t block) const {
  return block >= 0 && block < num_blocks() && allocated_[size_t(block)] != 0;
}

int32_t BlockPool::allocate() {
  CHECK_KIND(kResourceExhausted, !free_.empty())
      << "BlockPool: all " << num_blocks() << " blocks are in use";
  const int32_t block = free_.back();
  free_.pop_back();
  allocated_[size_t(block)] = 1;
  return block;
}

void BlockPool::free(int32_t block) {
  ICHECK(is_allocated(block)) << "BlockPool: freeing block " << block
                              << " that is not allocated (pool of " << num_blocks() << ")";
  allocated_[size_t(block)] = 0;
  free_.push_back(block);
}

}  // namespace deepinfer
