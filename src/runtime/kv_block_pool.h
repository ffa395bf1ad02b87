// KvBlockPool: host bookkeeping of one paged state pool of GpuModel (the sliding-window
// pool, or the compressed pool of one compress ratio): a shared free list of n_blocks
// physical blocks and, per sequence, a block table of max_blocks logical blocks (logical
// entry e lives in column e / block_size). Every layer of the model has its own cache memory
// for the pool, all addressed through the same tables (the layers' entries grow alike).
//
// The tables live in pinned host memory (`host_table`, [n_seqs, max_blocks] int32) and on the
// device (`device_table`, same shape); changed columns are remembered per sequence and
// upload() sends them with one cudaMemcpyAsync per changed sequence (before a forward,
// outside any CUDA graph). Columns without a block hold 0 on the device (never read by a
// correct caller; 0 keeps a stray read inside the pool).
//
// Thread-safety: none (GpuModel's one thread). Forwards do not wait for the device, so before
// rewriting the pinned table after an upload, ensure() waits for that upload's copies (an
// event; they run at the start of the previous forward, so this rarely waits).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace deepinfer {

class KvBlockPool {
 public:
  KvBlockPool() = default;
  ~KvBlockPool();
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;
  // host_table (pinned) and device_table hold n_seqs * max_blocks int32; both are zeroed here.
  void init(int64_t n_seqs, int64_t max_blocks, int64_t n_blocks, int64_t block_size,
            int32_t* host_table, int32_t* device_table);

  int64_t block_size() const { return block_size_; }
  int64_t max_blocks() const { return max_blocks_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }
  const int32_t* device_table() const { return device_table_; }

  // Makes sure columns [lo, hi) of `seq` have blocks (allocating missing ones). Throws
  // Error(kResourceExhausted) when the free list runs out (GpuModel sizes pools so it cannot).
  void ensure(int64_t seq, int64_t lo, int64_t hi);
  // Frees the blocks of columns outside [lo, hi).
  void keep_only(int64_t seq, int64_t lo, int64_t hi);
  void release(int64_t seq) { keep_only(seq, 0, 0); }
  // Physical slot of logical entry e (its column must have a block).
  int32_t slot(int64_t seq, int64_t e) const;

  // Sends the changed columns to the device table on `stream`.
  void upload(cudaStream_t stream);

 private:
  int64_t n_seqs_ = 0, max_blocks_ = 0, n_blocks_ = 0, block_size_ = 0;
  int32_t* host_table_ = nullptr;
  int32_t* device_table_ = nullptr;
  std::vector<int32_t> owner_;           // [n_seqs * max_blocks]: block id or -1
  std::vector<int32_t> free_;            // stack; pops low ids first
  std::vector<int64_t> dirty_lo_, dirty_hi_;  // per sequence, columns to upload
  std::vector<int64_t> span_lo_, span_hi_;
  cudaEvent_t uploaded_ = nullptr;  // after the last upload's copies
  bool upload_pending_ = false;    // per sequence, columns that may hold blocks
};

}  // namespace deepinfer
