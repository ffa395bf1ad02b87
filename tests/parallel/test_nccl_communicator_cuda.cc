// NcclCommunicator at world size 1 on one GPU (label cuda): every collective round-trips device
// buffers on the caller's stream, through each bootstrap (no launcher, a host communicator, a
// TcpStore); all_to_all_counts through NCCL's device path; split; enqueue-only mode; argument
// errors; and the device-memory SingleCommunicator that make_world_communicator picks alone.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "parallel/launch.h"
#include "parallel/nccl_communicator.h"
#include "parallel/single_communicator.h"
#include "parallel/tcp_store.h"

namespace deepinfer {
namespace {

// A device copy of host bytes, and back.
struct Dev {
  void* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t bytes) : n(bytes) { CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes)); }
  ~Dev() { cudaFree(p); }
  template <typename T>
  void put(const std::vector<T>& v) {
    CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  template <typename T>
  std::vector<T> get(size_t count) const {
    std::vector<T> v(count);
    CUDA_CHECK(cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

class NcclSingle : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no GPU";
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

// The collectives of a one-rank world: results equal the inputs.
void round_trip(Communicator& comm) {
  ASSERT_EQ(comm.size(), 1);
  ASSERT_EQ(comm.rank(), 0);
  ASSERT_EQ(comm.memory(), CommMemory::kDevice);
  const int64_t count = 300'000;  // > 1 MB
  std::vector<float> x(count);
  for (int64_t i = 0; i < count; ++i) x[i] = 0.25f * static_cast<float>(i % 1001) - 7.0f;
  Dev a(count * 4), b(count * 4);
  a.put(x);
  comm.all_reduce(a.p, b.p, count, DType::F32, ReduceOp::kSum);
  EXPECT_EQ(b.get<float>(count), x);
  comm.all_reduce(b.p, b.p, count, DType::F32, ReduceOp::kMax);  // in place
  EXPECT_EQ(b.get<float>(count), x);
  std::vector<int64_t> i64 = {int64_t{1} << 40, -3};
  Dev c(16);
  c.put(i64);
  comm.all_reduce(c.p, c.p, 2, DType::I64, ReduceOp::kMin);
  EXPECT_EQ(c.get<int64_t>(2), i64);

  std::vector<uint8_t> bytes(4099);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  Dev s(bytes.size()), r(bytes.size());
  s.put(bytes);
  comm.all_gather(s.p, r.p, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(r.get<uint8_t>(bytes.size()), bytes);
  comm.all_gather(s.p, r.p, 0);

  CUDA_CHECK(cudaMemset(r.p, 0, bytes.size()));
  const int64_t n[1] = {static_cast<int64_t>(bytes.size())};
  comm.all_to_all_v(s.p, n, r.p, n);
  EXPECT_EQ(r.get<uint8_t>(bytes.size()), bytes);
  const int64_t zero[1] = {0};
  comm.all_to_all_v(s.p, zero, r.p, zero);

  const int64_t send_counts[1] = {123456789012};
  int64_t recv_counts[1] = {0};
  comm.all_to_all_counts(send_counts, recv_counts);
  EXPECT_EQ(recv_counts[0], 123456789012);

  comm.broadcast(s.p, static_cast<int64_t>(bytes.size()), 0);
  EXPECT_EQ(s.get<uint8_t>(bytes.size()), bytes);
  comm.barrier();

  auto sub = comm.split(5, 0);
  ASSERT_EQ(sub->size(), 1);
  CUDA_CHECK(cudaMemset(r.p, 0, bytes.size()));
  sub->all_gather(s.p, r.p, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(r.get<uint8_t>(bytes.size()), bytes);

  std::vector<uint16_t> h(2);
  EXPECT_THROW(comm.all_reduce(a.p, a.p, 2, DType::BF16, ReduceOp::kSum), Error);
  const int64_t two[2] = {1, 1};
  EXPECT_THROW(comm.all_to_all_v(s.p, two, r.p, two), Error);
  EXPECT_THROW(comm.broadcast(s.p, 1, 1), Error);
}

TEST_F(NcclSingle, NoLauncher) {
  auto comm = NcclCommunicator::single(stream_);
  EXPECT_STREQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->stream(), stream_);
  round_trip(*comm);
}

TEST_F(NcclSingle, OverAHostCommunicator) {
  auto comm = NcclCommunicator::bootstrap(std::make_unique<SingleCommunicator>(), stream_);
  round_trip(*comm);
}

TEST_F(NcclSingle, OverATcpStore) {
  TcpStore store("", 0, true, std::chrono::milliseconds(10'000));
  auto comm = NcclCommunicator::bootstrap(store, 0, 1, stream_);
  round_trip(*comm);
}

TEST_F(NcclSingle, EnqueueOnly) {
  auto comm = NcclCommunicator::single(stream_);
  comm->set_wait(false);
  std::vector<double> x(1000);
  std::iota(x.begin(), x.end(), -3.5);
  Dev a(8000), b(8000);
  a.put(x);
  comm->all_reduce(a.p, b.p, 1000, DType::F64, ReduceOp::kSum);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  EXPECT_EQ(b.get<double>(1000), x);
}

TEST_F(NcclSingle, WorldCommunicatorAloneIsSingleOnDevice) {
  auto comm = make_world_communicator(CommMemory::kDevice);
  EXPECT_STREQ(comm->backend(), "single");
  round_trip(*comm);
}

}  // namespace
}  // namespace deepinfer
