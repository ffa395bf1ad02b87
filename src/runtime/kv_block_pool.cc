#include "runtime/kv_block_pool.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "cuda/cuda_check.h"

namespace deepinfer {

void KvBlockPool::init(int64_t n_seqs, int64_t max_blocks, int64_t n_blocks, int64_t block_size,
                       int32_t* device_table) {
  ICHECK(n_seqs > 0 && max_blocks > 0 && n_blocks > 0 && block_size > 0)
      << "KvBlockPool: " << n_seqs << " sequences, " << max_blocks << " columns, " << n_blocks
      << " blocks of " << block_size;
  n_seqs_ = n_seqs;
  max_blocks_ = max_blocks;
  n_blocks_ = n_blocks;
  block_size_ = block_size;
  device_table_ = device_table;
  host_table_.assign(n_seqs * max_blocks, 0);
  owner_.assign(n_seqs * max_blocks, -1);
  free_.resize(n_blocks);
  for (int64_t i = 0; i < n_blocks; ++i) free_[i] = static_cast<int32_t>(n_blocks - 1 - i);
  dirty_lo_.assign(n_seqs, max_blocks);
  dirty_hi_.assign(n_seqs, 0);
  span_lo_.assign(n_seqs, 0);
  span_hi_.assign(n_seqs, 0);
  CUDA_CHECK(cudaMemset(device_table_, 0, n_seqs * max_blocks * sizeof(int32_t)));
}

void KvBlockPool::ensure(int64_t seq, int64_t lo, int64_t hi) {
  ICHECK(seq >= 0 && seq < n_seqs_ && lo >= 0 && hi <= max_blocks_)
      << "KvBlockPool::ensure: sequence " << seq << ", columns [" << lo << ", " << hi << ")";
  if (lo >= hi) return;
  if (span_lo_[seq] >= span_hi_[seq]) {
    span_lo_[seq] = lo;
    span_hi_[seq] = hi;
  } else {
    span_lo_[seq] = std::min(span_lo_[seq], lo);
    span_hi_[seq] = std::max(span_hi_[seq], hi);
  }
  for (int64_t b = lo; b < hi; ++b) {
    int32_t& o = owner_[seq * max_blocks_ + b];
    if (o >= 0) continue;
    CHECK_KIND(kResourceExhausted, !free_.empty())
        << "KvBlockPool: all " << n_blocks_ << " blocks are in use";
    o = free_.back();
    free_.pop_back();
    host_table_[seq * max_blocks_ + b] = o;  // the mirror: no copy reads it
    dirty_lo_[seq] = std::min(dirty_lo_[seq], b);
    dirty_hi_[seq] = std::max(dirty_hi_[seq], b + 1);
  }
}

void KvBlockPool::keep_only(int64_t seq, int64_t lo, int64_t hi) {
  ICHECK(seq >= 0 && seq < n_seqs_) << "KvBlockPool::keep_only: sequence " << seq;
  for (int64_t b = span_lo_[seq]; b < span_hi_[seq]; ++b) {
    if (b >= lo && b < hi) continue;
    int32_t& o = owner_[seq * max_blocks_ + b];
    if (o < 0) continue;
    free_.push_back(o);
    o = -1;
  }
  span_lo_[seq] = std::max(span_lo_[seq], lo);
  span_hi_[seq] = std::min(span_hi_[seq], hi);
}

int32_t KvBlockPool::slot(int64_t seq, int64_t e) const {
  const int32_t b = owner_[seq * max_blocks_ + e / block_size_];
  ICHECK(b >= 0) << "KvBlockPool: entry " << e << " of sequence " << seq << " has no block";
  return static_cast<int32_t>(b * block_size_ + e % block_size_);
}

int64_t KvBlockPool::upload(cudaStream_t stream, int32_t* staging, int64_t capacity) {
  int64_t used = 0;
  for (int64_t s = 0; s < n_seqs_; ++s) {
    if (dirty_lo_[s] >= dirty_hi_[s]) continue;
    const int64_t at = s * max_blocks_ + dirty_lo_[s], n = dirty_hi_[s] - dirty_lo_[s];
    ICHECK(used + n <= capacity) << "KvBlockPool::upload: " << used + n
                                 << " ints exceed the staging capacity " << capacity;
    std::memcpy(staging + used, host_table_.data() + at, n * sizeof(int32_t));
    CUDA_CHECK(cudaMemcpyAsync(device_table_ + at, staging + used, n * sizeof(int32_t),
                               cudaMemcpyHostToDevice, stream));
    used += n;
    dirty_lo_[s] = max_blocks_;
    dirty_hi_[s] = 0;
  }
  return used;
}

}  // namespace deepinfer
