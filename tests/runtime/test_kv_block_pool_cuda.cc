// KvBlockPool (runtime/kv_block_pool.h): blocks handed out once until freed, freed blocks
// reused, slot arithmetic, exhaustion reported, and upload() bringing the device table to the
// host mirror's values (read back and compared) after interleaved growth of two sequences;
// upload() packs only the changed columns into the caller's pinned staging buffer, and the
// mirror may change (ensure / keep_only, no waiting) while an upload's copies are still held
// back on the stream: the device then gets the values of the upload, not the later ones.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <set>
#include <vector>

#include "base/error.h"
#include "runtime/kv_block_pool.h"
#include "stream_gate.h"

namespace deepinfer {
namespace {

struct Buffers {
  int32_t* device = nullptr;
  int32_t* staging = nullptr;  // pinned
  Buffers(int64_t n) {
    EXPECT_EQ(cudaMalloc(&device, n * sizeof(int32_t)), cudaSuccess);
    EXPECT_EQ(cudaMallocHost(&staging, n * sizeof(int32_t)), cudaSuccess);
  }
  ~Buffers() {
    cudaFree(device);
    cudaFreeHost(staging);
  }
};

std::vector<int32_t> read_device(const int32_t* p, int64_t n) {
  std::vector<int32_t> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

TEST(KvBlockPool, AllocatesFreesAndUploads) {
  const int64_t n_seqs = 3, max_blocks = 6, n_blocks = 8, B = 4;
  Buffers t(n_seqs * max_blocks);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    KvBlockPool pool;
    pool.init(n_seqs, max_blocks, n_blocks, B, t.device);
    EXPECT_EQ(pool.n_free(), n_blocks);
    EXPECT_EQ(pool.table_ints(), n_seqs * max_blocks);
    const int32_t* host = pool.host_table();
    // Interleaved growth: seq 0 and seq 1 take one column at a time in turn.
    for (int64_t col = 0; col < 3; ++col) {
      pool.ensure(0, 0, col + 1);
      pool.ensure(1, 0, col + 1);
    }
    EXPECT_EQ(pool.n_free(), n_blocks - 6);
    std::set<int32_t> used;
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t col = 0; col < 3; ++col) used.insert(host[s * max_blocks + col]);
    }
    EXPECT_EQ(used.size(), 6u);  // distinct blocks
    for (int32_t b : used) EXPECT_TRUE(b >= 0 && b < n_blocks);
    // Non-contiguous: seq 0's second column is not the block after its first.
    EXPECT_NE(host[1], host[0] + 1);
    // Slots: entry e lives in column e / B at offset e % B.
    EXPECT_EQ(pool.slot(0, 9), host[2] * B + 1);
    EXPECT_EQ(pool.slot(1, 3), host[max_blocks + 0] * B + 3);
    EXPECT_THROW(pool.slot(0, 3 * B), Error);  // column 3 has no block

    // Too small a staging buffer is refused before anything is staged or enqueued.
    EXPECT_THROW(pool.upload(stream, t.staging, 2), Error);
    // Two sequences of 3 changed columns each: 6 ints staged, in sequence order.
    EXPECT_EQ(pool.upload(stream, t.staging, pool.table_ints()), 6);
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(t.staging[i], host[(i / 3) * max_blocks + i % 3]) << i;
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<int32_t> dev = read_device(t.device, n_seqs * max_blocks);
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t col = 0; col < 3; ++col) {
        EXPECT_EQ(dev[s * max_blocks + col], host[s * max_blocks + col]) << s << " " << col;
      }
    }
    EXPECT_EQ(dev[2 * max_blocks], 0);  // untouched columns stay 0
    EXPECT_EQ(pool.upload(stream, t.staging, pool.table_ints()), 0);  // nothing changed since

    // Sliding window: seq 0 keeps columns [2, 3) only; its two freed blocks are reused.
    const int32_t freed0 = host[0], freed1 = host[1];
    pool.keep_only(0, 2, 3);
    EXPECT_EQ(pool.n_free(), n_blocks - 4);
    EXPECT_EQ(pool.slot(0, 2 * B), host[2] * B);
    EXPECT_THROW(pool.slot(0, 0), Error);
    pool.ensure(2, 0, 4);  // takes the 2 never-used blocks and the 2 freed ones
    std::set<int32_t> seq2;
    for (int64_t col = 0; col < 4; ++col) seq2.insert(host[2 * max_blocks + col]);
    EXPECT_EQ(seq2.size(), 4u);
    EXPECT_TRUE(seq2.count(freed0) && seq2.count(freed1));
    EXPECT_EQ(pool.n_free(), 0);
    try {
      pool.ensure(1, 3, 4);
      ADD_FAILURE() << "no error when the pool is exhausted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
    }
    EXPECT_EQ(pool.upload(stream, t.staging, pool.table_ints()), 4);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    dev = read_device(t.device, n_seqs * max_blocks);
    for (int64_t col = 0; col < 4; ++col) {
      EXPECT_EQ(dev[2 * max_blocks + col], host[2 * max_blocks + col]) << col;
    }
    pool.release(2);
    pool.release(1);
    pool.release(0);
    EXPECT_EQ(pool.n_free(), n_blocks);
  }
  cudaStreamDestroy(stream);
}

// The copies of an upload are held back on the stream (a gate) while the host frees and
// takes blocks again and stages a second upload into another buffer: nothing waits, and the
// device table ends with the second upload's values, the first's having run before them.
TEST(KvBlockPool, MirrorChangesWhileAnUploadIsPending) {
  const int64_t n_seqs = 2, max_blocks = 4, n_blocks = 8, B = 8;
  Buffers t(n_seqs * max_blocks), second(n_seqs * max_blocks);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    KvBlockPool pool;
    pool.init(n_seqs, max_blocks, n_blocks, B, t.device);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    testing::StreamGate gate;
    gate.close(stream);
    pool.ensure(0, 0, 3);
    pool.ensure(1, 0, 2);
    EXPECT_EQ(pool.upload(stream, t.staging, pool.table_ints()), 5);
    const std::vector<int32_t> first(pool.host_table(), pool.host_table() + pool.table_ints());
    // While those copies wait: seq 0 slides to column 2, seq 1 grows; freed blocks are reused.
    const auto t0 = std::chrono::steady_clock::now();
    pool.keep_only(0, 2, 3);
    pool.ensure(0, 2, 4);
    pool.ensure(1, 0, 4);
    const double host_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(host_ms, 1000.0) << "ensure() waited for the held-back upload";
    EXPECT_EQ(pool.n_free(), n_blocks - 6);
    // The first upload's staging still holds its own values.
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(t.staging[i], first[i]) << i;
    for (int64_t i = 0; i < 2; ++i) EXPECT_EQ(t.staging[3 + i], first[max_blocks + i]) << i;
    // Changed since: seq 0 column 3, seq 1 columns 2..3.
    EXPECT_EQ(pool.upload(stream, second.staging, pool.table_ints()), 3);
    gate.open();
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_FALSE(gate.timed_out());
    const std::vector<int32_t> dev = read_device(t.device, n_seqs * max_blocks);
    const int32_t* host = pool.host_table();
    // Columns given blocks: the mirror's values; seq 0's freed columns 0..1 keep the first
    // upload's (stale, never read by a correct caller).
    for (int64_t col = 0; col < 4; ++col) {
      EXPECT_EQ(dev[col], col < 2 ? first[col] : host[col]) << "seq 0 column " << col;
      EXPECT_EQ(dev[max_blocks + col], host[max_blocks + col]) << "seq 1 column " << col;
    }
    EXPECT_EQ(pool.slot(0, 3 * B + 5), host[3] * B + 5);
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace deepinfer
