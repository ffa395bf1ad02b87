// MpiCommunicator across processes (run under mpirun with 2 and 4 ranks): every collective
// against data each rank can predict for every other rank, with awkward sizes (0-byte pieces,
// unequal pieces, > 1 MB, pieces split into several MPI messages), split into groups,
// broadcast from a non-zero root, mismatched sizes, and the timeout: a rank that skips a
// collective makes the others throw Error(kDevice) within the timeout, and the broken
// communicator then throws at once. MpiDeadRank (its own ctest entry, mpirun --enable-recovery)
// has one rank exit before a collective.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "base/error.h"
#include "parallel/launch.h"
#include "parallel/mpi_communicator.h"

namespace deepinfer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Byte i of the piece rank `from` sends rank `to`.
uint8_t piece_byte(int from, int to, int64_t i) {
  return static_cast<uint8_t>((from * 131 + to * 17 + i * 7 + (i >> 8)) & 0xff);
}

// Bytes rank `from` sends rank `to`: zeros, tiny, unequal and (when big) > 1 MB pieces.
int64_t piece_size(int from, int to, bool big) {
  if ((from + 2 * to) % 3 == 0) return 0;
  const int64_t base = big ? (int64_t{1} << 20) + 4099 : 5;
  return base + 13 * from + 3 * to;
}

void exchange_and_check(MpiCommunicator& comm, bool big) {
  const int me = comm.rank(), n = comm.size();
  std::vector<int64_t> send_bytes(n), recv_bytes(n);
  for (int p = 0; p < n; ++p) {
    send_bytes[p] = piece_size(me, p, big);
    recv_bytes[p] = piece_size(p, me, big);
  }
  std::vector<uint8_t> send(std::accumulate(send_bytes.begin(), send_bytes.end(), int64_t{0}));
  std::vector<uint8_t> recv(std::accumulate(recv_bytes.begin(), recv_bytes.end(), int64_t{0}),
                            0xee);
  for (int p = 0, off = 0; p < n; off += static_cast<int>(send_bytes[p]), ++p) {
    for (int64_t i = 0; i < send_bytes[p]; ++i) send[off + i] = piece_byte(me, p, i);
  }
  comm.all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes);
  int64_t off = 0;
  for (int p = 0; p < n; ++p) {
    for (int64_t i = 0; i < recv_bytes[p]; ++i) {
      ASSERT_EQ(recv[off + i], piece_byte(p, me, i)) << "from rank " << p << " byte " << i;
    }
    off += recv_bytes[p];
  }
}

TEST(MpiCommunicator, Identity) {
  auto comm = MpiCommunicator::world();
  const WorldInfo info = world_info_from_env();
  EXPECT_TRUE(info.under_mpi);
  EXPECT_EQ(comm->rank(), info.rank);
  EXPECT_EQ(comm->size(), info.size);
  EXPECT_GE(comm->size(), 2);
  EXPECT_STREQ(comm->backend(), "mpi");
  EXPECT_EQ(comm->memory(), CommMemory::kHost);
  EXPECT_STREQ(make_world_communicator(CommMemory::kHost)->backend(), "mpi");
}

TEST(MpiCommunicator, AllReduce) {
  auto comm = MpiCommunicator::world();
  const int me = comm->rank(), n = comm->size();
  const int64_t count = 300'000;  // 1.2 MB of F32
  std::vector<float> x(count);
  for (int64_t i = 0; i < count; ++i) x[i] = 0.1f * static_cast<float>((i * (me + 3)) % 97) - me;
  std::vector<float> sum(count), mx(count), mn(count);
  comm->all_reduce(x.data(), sum.data(), count, DType::F32, ReduceOp::kSum);
  comm->all_reduce(x.data(), mx.data(), count, DType::F32, ReduceOp::kMax);
  comm->all_reduce(x.data(), mn.data(), count, DType::F32, ReduceOp::kMin);
  for (int64_t i = 0; i < count; i += 997) {
    float s = 0, hi = -1e30f, lo = 1e30f;
    for (int p = 0; p < n; ++p) {  // rank order: the result must be bitwise this
      const float v = 0.1f * static_cast<float>((i * (p + 3)) % 97) - p;
      s = p == 0 ? v : s + v;
      hi = std::max(hi, v);
      lo = std::min(lo, v);
    }
    ASSERT_EQ(sum[i], s) << i;
    ASSERT_EQ(mx[i], hi) << i;
    ASSERT_EQ(mn[i], lo) << i;
  }
  // Every rank holds the same bits.
  std::vector<float> gathered(static_cast<size_t>(n) * 64);
  comm->all_gather(sum.data(), gathered.data(), 64 * sizeof(float));
  for (int p = 1; p < n; ++p) {
    EXPECT_EQ(std::memcmp(gathered.data(), gathered.data() + p * 64, 64 * sizeof(float)), 0);
  }

  std::vector<double> d = {1.0 * me, -0.5, 1e300};
  comm->all_reduce(d.data(), d.data(), 3, DType::F64, ReduceOp::kMax);  // in place
  EXPECT_EQ(d[0], n - 1.0);
  EXPECT_EQ(d[1], -0.5);
  std::vector<int64_t> i64 = {me, int64_t{1} << 40};
  comm->all_reduce(i64.data(), i64.data(), 2, DType::I64, ReduceOp::kSum);
  EXPECT_EQ(i64[0], int64_t{n} * (n - 1) / 2);
  EXPECT_EQ(i64[1], int64_t{n} << 40);
  int32_t i32[2] = {me, -me}, o32[2] = {0, 0};
  comm->all_reduce(i32, o32, 2, DType::I32, ReduceOp::kMin);
  EXPECT_EQ(o32[0], 0);
  EXPECT_EQ(o32[1], -(n - 1));
  comm->all_reduce(nullptr, nullptr, 0, DType::F32, ReduceOp::kSum);  // 0 elements
  EXPECT_THROW(comm->all_reduce(i32, o32, 1, DType::BF16, ReduceOp::kSum), Error);
}

TEST(MpiCommunicator, AllGather) {
  auto comm = MpiCommunicator::world();
  const int me = comm->rank(), n = comm->size();
  for (int64_t bytes : {int64_t{0}, int64_t{1}, int64_t{7}, (int64_t{3} << 19) + 11}) {
    std::vector<uint8_t> send(bytes), recv(bytes * n, 0xee);
    for (int64_t i = 0; i < bytes; ++i) send[i] = piece_byte(me, 0, i);
    comm->all_gather(send.data(), recv.data(), bytes);
    for (int p = 0; p < n; ++p) {
      for (int64_t i = 0; i < bytes; ++i) {
        ASSERT_EQ(recv[p * bytes + i], piece_byte(p, 0, i)) << bytes << " " << p << " " << i;
      }
    }
  }
}

TEST(MpiCommunicator, AllToAllV) {
  auto comm = MpiCommunicator::world();
  exchange_and_check(*comm, false);
  exchange_and_check(*comm, true);
  // All pieces empty.
  std::vector<int64_t> zero(comm->size(), 0);
  comm->all_to_all_v(nullptr, zero, nullptr, zero);
}

TEST(MpiCommunicator, ChunkedMessages) {
  // Pieces larger than the largest MPI message go as several messages: small limit, same data.
  auto comm = MpiCommunicator::world();
  comm->set_max_message_bytes(1000);
  exchange_and_check(*comm, false);
  exchange_and_check(*comm, true);
  const int me = comm->rank(), n = comm->size();
  const int64_t bytes = 10'007;
  std::vector<uint8_t> send(bytes), recv(bytes * n);
  for (int64_t i = 0; i < bytes; ++i) send[i] = piece_byte(me, 1, i);
  comm->all_gather(send.data(), recv.data(), bytes);
  for (int p = 0; p < n; ++p) {
    for (int64_t i = 0; i < bytes; ++i) ASSERT_EQ(recv[p * bytes + i], piece_byte(p, 1, i));
  }
  std::vector<uint8_t> b(bytes, me == n - 1 ? 0 : 0xee);
  if (me == n - 1) b = send;
  comm->broadcast(b.data(), bytes, n - 1);
  for (int64_t i = 0; i < bytes; ++i) ASSERT_EQ(b[i], piece_byte(n - 1, 1, i));
  std::vector<float> x(3000, 1.0f + me);
  comm->all_reduce(x.data(), x.data(), 3000, DType::F32, ReduceOp::kSum);
  EXPECT_EQ(x[2999], n * (n + 1) / 2.0f);
  EXPECT_THROW(comm->set_max_message_bytes(0), Error);
}

TEST(MpiCommunicator, AllToAllCountsBroadcastBarrier) {
  auto comm = MpiCommunicator::world();
  const int me = comm->rank(), n = comm->size();
  std::vector<int64_t> send(n), recv(n, -1);
  for (int p = 0; p < n; ++p) send[p] = 1000 * me + p + (int64_t{1} << 33);
  comm->all_to_all_counts(send, recv);
  for (int p = 0; p < n; ++p) EXPECT_EQ(recv[p], 1000 * p + me + (int64_t{1} << 33));

  const int root = n - 1;  // a non-zero root
  std::vector<uint8_t> big((int64_t{1} << 20) + 3, me == root ? 0x5a : 0);
  comm->broadcast(big.data(), static_cast<int64_t>(big.size()), root);
  EXPECT_EQ(big.front(), 0x5a);
  EXPECT_EQ(big.back(), 0x5a);
  comm->broadcast(nullptr, 0, 1);
  EXPECT_THROW(comm->broadcast(big.data(), 1, n), Error);
  comm->barrier();
}

TEST(MpiCommunicator, Split) {
  auto comm = MpiCommunicator::world();
  const int me = comm->rank(), n = comm->size();
  // Two groups by parity, ordered by descending world rank.
  auto sub = comm->split(me % 2, -me);
  const int group_size = (n - me % 2 + 1) / 2;
  ASSERT_EQ(sub->size(), group_size);
  std::vector<int32_t> members(group_size);
  const int32_t mine = me;
  sub->all_gather(&mine, members.data(), sizeof(mine));
  for (int i = 0; i < group_size; ++i) {
    EXPECT_EQ(members[i] % 2, me % 2);
    if (i > 0) EXPECT_GT(members[i - 1], members[i]);
    if (members[i] == me) EXPECT_EQ(sub->rank(), i);
  }
  EXPECT_EQ(sub->timeout(), comm->timeout());
  // The groups are independent: a collective in one group while the other runs another.
  exchange_and_check(dynamic_cast<MpiCommunicator&>(*sub), false);
  // A bad color on one rank fails on every rank (no hang).
  try {
    comm->split(me == 0 ? -1 : 0, 0);
    FAIL() << "negative color accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("rank 0 asked for color -1"), std::string::npos)
        << e.what();
  }
  comm->barrier();  // still usable
}

TEST(MpiCommunicator, ParallelGroups) {
  auto comm = MpiCommunicator::world();
  const int n = comm->size(), me = comm->rank();
  ParallelConfig config{n / 2, 2, 2};  // CP pairs, EP pairs
  ParallelGroups g = make_parallel_groups(*comm, config);
  EXPECT_EQ(g.dp_index, me / 2);
  EXPECT_EQ(g.cp_rank, me % 2);
  EXPECT_EQ(g.ep->size(), 2);
  EXPECT_EQ(g.cp->size(), 2);
  EXPECT_EQ(g.ep->rank(), me % 2);
  int32_t mine = me, got[2];
  g.ep->all_gather(&mine, got, sizeof(mine));
  EXPECT_EQ(got[0], me / 2 * 2);
  EXPECT_EQ(got[1], me / 2 * 2 + 1);
  ParallelGroups all = make_parallel_groups(*comm, {n, n, 1});
  EXPECT_EQ(all.ep->size(), n);
  EXPECT_EQ(all.cp->size(), 1);
}

TEST(MpiCommunicator, MismatchedSizesFail) {
  auto comm = MpiCommunicator::world();
  const int me = comm->rank(), n = comm->size();
  // Rank 0 expects one byte fewer from rank 1 than rank 1 sends.
  std::vector<int64_t> send_bytes(n, 4), recv_bytes(n, 4);
  if (me == 0) recv_bytes[1] = 3;
  std::vector<char> send(4 * n, 'a'), recv(4 * n);
  if (me == 0) {
    try {
      comm->all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes);
      FAIL() << "a 4-byte piece was received into 3 bytes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("all_to_all_v failed on rank 0 of"),
                std::string::npos)
          << e.what();
    }
    EXPECT_TRUE(comm->broken());
  } else {
    comm->all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes);
  }
  MpiCommunicator::world()->barrier();
}

TEST(MpiCommunicator, TimeoutWhenAPeerSkips) {
  auto comm = MpiCommunicator::world();
  comm->set_timeout(std::chrono::milliseconds(2000));
  const int me = comm->rank(), n = comm->size();
  if (me != n - 1) {  // the last rank never joins this all_reduce
    float x = 1.0f;
    const auto t0 = Clock::now();
    try {
      comm->all_reduce(&x, &x, 1, DType::F32, ReduceOp::kSum);
      FAIL() << "all_reduce without rank " << n - 1 << " completed";
    } catch (const Error& e) {
      const double waited = seconds_since(t0);
      EXPECT_EQ(e.kind(), ErrorKind::kDevice);
      const std::string want = "mpi all_reduce timed out after 2 s on rank " +
                               std::to_string(me) + " of " + std::to_string(n) +
                               " (a peer died or hangs)";
      EXPECT_EQ(std::string(e.what()), want);
      EXPECT_GE(waited, 1.9);
      EXPECT_LT(waited, 4.0);
    }
    EXPECT_TRUE(comm->broken());
    const auto t1 = Clock::now();
    try {
      comm->barrier();
      FAIL() << "a broken communicator ran a barrier";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kDevice);
      EXPECT_NE(std::string(e.what()).find("the communicator is broken"), std::string::npos)
          << e.what();
    }
    EXPECT_LT(seconds_since(t1), 0.1);
    auto child = [&] { comm->split(0, 0); };
    EXPECT_THROW(child(), Error);
  }
  // The rest of the world is unaffected.
  MpiCommunicator::world()->barrier();
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// Own ctest entry (test_communicator_mpi_dead_rank): the last rank exits before a collective;
// the others must throw instead of hanging.
TEST(MpiDeadRank, SurvivorsThrow) {
  auto comm = MpiCommunicator::world();
  comm->set_timeout(std::chrono::milliseconds(3000));
  const int me = comm->rank(), n = comm->size();
  comm->barrier();
  if (me == n - 1) _exit(0);
  float x = 1.0f;
  const auto t0 = Clock::now();
  try {
    comm->all_reduce(&x, &x, 1, DType::F32, ReduceOp::kSum);
    FAIL() << "all_reduce with a dead rank completed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDevice);
    EXPECT_NE(std::string(e.what()).find("mpi all_reduce"), std::string::npos) << e.what();
    fprintf(stderr, "rank %d: %s after %.2f s\n", me, e.what(), seconds_since(t0));
  }
  EXPECT_LT(seconds_since(t0), 6.0);
  EXPECT_TRUE(comm->broken());
  // Under --enable-recovery mpirun exits 0 whatever the survivors return, so the ctest entry
  // passes on these lines (one per survivor) and fails on gtest's FAILED (CMakeLists.txt).
  if (!::testing::Test::HasFailure()) std::printf("dead-rank survivor %d: ok\n", me);
  std::fflush(stdout);
  std::fflush(stderr);
  // No MPI_Finalize with a dead peer: it hung after main returned in 4 of 10 runs on a loaded
  // 2-core machine (2026-12-03; survivors spinning in exit, mpirun waiting, the ctest timeout),
  // 0 of 10 with this exit. (A peer that only hangs, the np2 / np4 timeout tests, finalises:
  // there mpirun fails a job whose ranks skip it.)
  _exit(::testing::Test::HasFailure() ? 1 : 0);
}

}  // namespace
}  // namespace deepinfer
