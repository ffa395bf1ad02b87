// BlockPool: a fixed set of block ids [0, n_blocks) with O(1) allocate and free.
// Blocks are fixed-size, so there is no fragmentation: any free id serves any request.
// Not thread-safe (the scheduler thread owns it).
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

class BlockPool {
 public:
  explicit BlockPool(int64_t n_blocks);

  int64_t num_blocks() const { return int64_t(allocated_.size()); }
  int64_t num_free() const { return int64_t(free_.size()); }
  bool is_allocated(int32_t block) const;

  // Returns a free block id; throws kResourceExhausted when none is free.
  int32_t allocate();
  // Returns `block` to the pool; ICHECKs that it is allocated (no double free).
  void free(int32_t block);

 private:
  std::vector<int32_t> free_;       // stack of free ids; lowest ids are handed out first
  std::vector<uint8_t> allocated_;  // per id, for the double-free check
};

}  // namespace deepinfer
