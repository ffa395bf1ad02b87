// KvBlockPool (runtime/kv_block_pool.h): blocks handed out once until freed, freed blocks
// reused, slot arithmetic, exhaustion reported, and upload() bringing the device table to the
// host table's values (read back and compared) after interleaved growth of two sequences.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <set>
#include <vector>

#include "base/error.h"
#include "runtime/kv_block_pool.h"

namespace deepinfer {
namespace {

struct Tables {
  int32_t* host = nullptr;
  int32_t* device = nullptr;
  Tables(int64_t n) {
    EXPECT_EQ(cudaMallocHost(&host, n * sizeof(int32_t)), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&device, n * sizeof(int32_t)), cudaSuccess);
  }
  ~Tables() {
    cudaFreeHost(host);
    cudaFree(device);
  }
};

std::vector<int32_t> read_device(const int32_t* p, int64_t n) {
  std::vector<int32_t> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

TEST(KvBlockPool, AllocatesFreesAndUploads) {
  const int64_t n_seqs = 3, max_blocks = 6, n_blocks = 8, B = 4;
  Tables t(n_seqs * max_blocks);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    KvBlockPool pool;
    pool.init(n_seqs, max_blocks, n_blocks, B, t.host, t.device);
    EXPECT_EQ(pool.n_free(), n_blocks);
    // Interleaved growth: seq 0 and seq 1 take one column at a time in turn.
    for (int64_t col = 0; col < 3; ++col) {
      pool.ensure(0, 0, col + 1);
      pool.ensure(1, 0, col + 1);
    }
    EXPECT_EQ(pool.n_free(), n_blocks - 6);
    std::set<int32_t> used;
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t col = 0; col < 3; ++col) used.insert(t.host[s * max_blocks + col]);
    }
    EXPECT_EQ(used.size(), 6u);  // distinct blocks
    for (int32_t b : used) EXPECT_TRUE(b >= 0 && b < n_blocks);
    // Non-contiguous: seq 0's second column is not the block after its first.
    EXPECT_NE(t.host[1], t.host[0] + 1);
    // Slots: entry e lives in column e / B at offset e % B.
    EXPECT_EQ(pool.slot(0, 9), t.host[2] * B + 1);
    EXPECT_EQ(pool.slot(1, 3), t.host[max_blocks + 0] * B + 3);
    EXPECT_THROW(pool.slot(0, 3 * B), Error);  // column 3 has no block

    pool.upload(stream);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<int32_t> dev = read_device(t.device, n_seqs * max_blocks);
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t col = 0; col < 3; ++col) {
        EXPECT_EQ(dev[s * max_blocks + col], t.host[s * max_blocks + col]) << s << " " << col;
      }
    }
    EXPECT_EQ(dev[2 * max_blocks], 0);  // untouched columns stay 0

    // Sliding window: seq 0 keeps columns [2, 3) only; its two freed blocks are reused.
    const int32_t freed0 = t.host[0], freed1 = t.host[1];
    pool.keep_only(0, 2, 3);
    EXPECT_EQ(pool.n_free(), n_blocks - 4);
    EXPECT_EQ(pool.slot(0, 2 * B), t.host[2] * B);
    EXPECT_THROW(pool.slot(0, 0), Error);
    pool.ensure(2, 0, 4);  // takes the 2 never-used blocks and the 2 freed ones
    std::set<int32_t> seq2;
    for (int64_t col = 0; col < 4; ++col) seq2.insert(t.host[2 * max_blocks + col]);
    EXPECT_EQ(seq2.size(), 4u);
    EXPECT_TRUE(seq2.count(freed0) && seq2.count(freed1));
    EXPECT_EQ(pool.n_free(), 0);
    try {
      pool.ensure(1, 3, 4);
      ADD_FAILURE() << "no error when the pool is exhausted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
    }
    pool.upload(stream);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    dev = read_device(t.device, n_seqs * max_blocks);
    for (int64_t col = 0; col < 4; ++col) {
      EXPECT_EQ(dev[2 * max_blocks + col], t.host[2 * max_blocks + col]) << col;
    }
    pool.release(2);
    pool.release(1);
    pool.release(0);
    EXPECT_EQ(pool.n_free(), n_blocks);
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace deepinfer
