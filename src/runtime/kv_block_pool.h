// KvBlockPool: host bookkeeping of one paged state pool of GpuModel (the sliding-window
// pool, or the compressed pool of one compress ratio): a shared free list of n_blocks
// physical blocks and, per sequence, a block table of max_blocks logical blocks (logical
// entry e lives in column e / block_size). Every layer of the model has its own cache memory
// for the pool, all addressed through the same tables (the layers' entries grow alike).
//
// The tables live in a host mirror owned by the pool (plain memory, [n_seqs, max_blocks]
// int32, host_table()) and on the device (`device_table`, same shape). Changed columns are
// remembered per sequence (one contiguous range each); upload() packs those ranges into a
// caller-given pinned staging buffer and sends each with one cudaMemcpyAsync from there
// (before a forward, outside any CUDA graph). The mirror itself is never the source of an
// async copy, so ensure() / keep_only() may rewrite it at any time: they never wait for the
// device. The staging buffer is the caller's to protect: it must not be rewritten until the
// copies of the upload that filled it have run (GpuModel packs it into the forward's
// metadata staging slot, guarded by that slot's event). Columns without a block hold 0 on
// the device until first given one (never read by a correct caller; 0 keeps a stray read
// inside the pool); a freed column keeps its old block id on the device.
//
// Thread-safety: none (GpuModel's one thread).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace deepinfer {

class KvBlockPool {
 public:
  KvBlockPool() = default;
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;
  // device_table holds n_seqs * max_blocks int32; it and the host mirror are zeroed here
  // (the device one synchronously: construction time).
  void init(int64_t n_seqs, int64_t max_blocks, int64_t n_blocks, int64_t block_size,
            int32_t* device_table);

  int64_t block_size() const { return block_size_; }
  int64_t max_blocks() const { return max_blocks_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }
  const int32_t* device_table() const { return device_table_; }
  // The host mirror [n_seqs, max_blocks]: block id of each column given one (0 elsewhere;
  // a freed column keeps its last id).
  const int32_t* host_table() const { return host_table_.data(); }
  // Ints of staging one upload() may need at most: n_seqs * max_blocks (every column dirty).
  int64_t table_ints() const { return n_seqs_ * max_blocks_; }

  // Makes sure columns [lo, hi) of `seq` have blocks (allocating missing ones). Throws
  // Error(kResourceExhausted) when the free list runs out (GpuModel sizes pools so it cannot).
  // Host only: never waits for the device.
  void ensure(int64_t seq, int64_t lo, int64_t hi);
  // Frees the blocks of columns outside [lo, hi).
  void keep_only(int64_t seq, int64_t lo, int64_t hi);
  void release(int64_t seq) { keep_only(seq, 0, 0); }
  // Physical slot of logical entry e (its column must have a block).
  int32_t slot(int64_t seq, int64_t e) const;

  // Sends the changed columns to the device table on `stream`: packs them into `staging`
  // (pinned host memory of `capacity` ints; capacity >= table_ints() always suffices) and
  // enqueues one async copy per changed sequence from there. Returns the ints of staging
  // used (0: nothing changed, nothing enqueued). The caller keeps `staging` unchanged until
  // those copies have run (an event recorded after them on `stream`).
  int64_t upload(cudaStream_t stream, int32_t* staging, int64_t capacity);

 private:
  int64_t n_seqs_ = 0, max_blocks_ = 0, n_blocks_ = 0, block_size_ = 0;
  std::vector<int32_t> host_table_;      // [n_seqs * max_blocks]: the mirror
  int32_t* device_table_ = nullptr;
  std::vector<int32_t> owner_;           // [n_seqs * max_blocks]: block id or -1
  std::vector<int32_t> free_;            // stack; pops low ids first
  std::vector<int64_t> dirty_lo_, dirty_hi_;  // per sequence, columns to upload
  std::vector<int64_t> span_lo_, span_hi_;    // per sequence, columns that may hold blocks
};

}  // namespace deepinfer
