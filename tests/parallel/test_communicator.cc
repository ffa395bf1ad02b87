// SingleCommunicator (world size 1) and the launch helpers that need no second process:
// copies with the collective semantics, argument checks, DEEPINFER_COMM_TIMEOUT_S, WorldInfo
// parsing and the ParallelConfig arithmetic.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "parallel/launch.h"
#include "parallel/single_communicator.h"

namespace deepinfer {
namespace {

// Sets (or unsets, for nullptr) an environment variable for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

TEST(SingleCommunicator, Identity) {
  SingleCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_STREQ(comm.backend(), "single");
  EXPECT_EQ(comm.memory(), CommMemory::kHost);
}

TEST(SingleCommunicator, CollectivesCopy) {
  SingleCommunicator comm;
  std::vector<float> x = {1.5f, -2.0f, 3.25f};
  std::vector<float> y(3, 0.0f);
  comm.all_reduce(x.data(), y.data(), 3, DType::F32, ReduceOp::kSum);
  EXPECT_EQ(y, x);
  comm.all_reduce(x.data(), x.data(), 3, DType::F32, ReduceOp::kMax);  // in place
  EXPECT_EQ(y, x);

  std::vector<char> g(5, 0);
  comm.all_gather("hello", g.data(), 5);
  EXPECT_EQ(std::string(g.begin(), g.end()), "hello");

  std::vector<char> r(4, 0);
  const int64_t n[1] = {4};
  comm.all_to_all_v("abcd", n, r.data(), n);
  EXPECT_EQ(std::string(r.begin(), r.end()), "abcd");

  const int64_t sc[1] = {17};
  int64_t rc[1] = {0};
  comm.all_to_all_counts(sc, rc);
  EXPECT_EQ(rc[0], 17);

  char b[3] = {'x', 'y', 'z'};
  comm.broadcast(b, 3, 0);
  EXPECT_EQ(std::string(b, 3), "xyz");
  comm.barrier();

  auto sub = comm.split(3, 9);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(sub->rank(), 0);
}

TEST(SingleCommunicator, RejectsBadArguments) {
  SingleCommunicator comm;
  std::vector<uint16_t> h(2);
  try {
    comm.all_reduce(h.data(), h.data(), 2, DType::BF16, ReduceOp::kSum);
    FAIL() << "BF16 all_reduce accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("BF16"), std::string::npos) << e.what();
  }
  char buf[4];
  const int64_t two[2] = {2, 2};
  const int64_t one_a[1] = {2}, one_b[1] = {3};
  EXPECT_THROW(comm.all_to_all_v(buf, two, buf, two), Error);
  EXPECT_THROW(comm.all_to_all_v(buf, one_a, buf, one_b), Error);
  EXPECT_THROW(comm.broadcast(buf, 4, 1), Error);
  EXPECT_THROW(comm.split(-1, 0), Error);
#ifndef DEEPINFER_CUDA
  EXPECT_THROW(SingleCommunicator(CommMemory::kDevice), Error);
#endif
}

TEST(CommTimeout, FromEnvironment) {
  {
    ScopedEnv e("DEEPINFER_COMM_TIMEOUT_S", nullptr);
    EXPECT_EQ(comm_timeout_from_env().count(), 60'000);
  }
  {
    ScopedEnv e("DEEPINFER_COMM_TIMEOUT_S", "2.5");
    EXPECT_EQ(comm_timeout_from_env().count(), 2'500);
    EXPECT_EQ(SingleCommunicator().timeout().count(), 2'500);
  }
  for (const char* bad : {"0", "-1", "abc", "3s", "inf"}) {
    ScopedEnv e("DEEPINFER_COMM_TIMEOUT_S", bad);
    EXPECT_THROW(comm_timeout_from_env(), Error) << bad;
  }
}

TEST(WorldInfo, FromEnvironment) {
  ScopedEnv a("OMPI_COMM_WORLD_SIZE", nullptr), b("OMPI_COMM_WORLD_RANK", nullptr),
      c("OMPI_COMM_WORLD_LOCAL_RANK", nullptr), d("RANK", nullptr), e("WORLD_SIZE", nullptr),
      f("LOCAL_RANK", nullptr), g("MASTER_ADDR", nullptr), h("MASTER_PORT", nullptr);
  WorldInfo alone = world_info_from_env();
  EXPECT_EQ(alone.rank, 0);
  EXPECT_EQ(alone.size, 1);
  EXPECT_FALSE(alone.under_mpi);
  EXPECT_STREQ(make_world_communicator(CommMemory::kHost)->backend(), "single");
  {
    ScopedEnv s("OMPI_COMM_WORLD_SIZE", "4"), r("OMPI_COMM_WORLD_RANK", "3"),
        l("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    WorldInfo w = world_info_from_env();
    EXPECT_TRUE(w.under_mpi);
    EXPECT_EQ(w.rank, 3);
    EXPECT_EQ(w.size, 4);
    EXPECT_EQ(w.local_rank, 1);
  }
  {
    ScopedEnv s("WORLD_SIZE", "2"), r("RANK", "1"), ad("MASTER_ADDR", "127.0.0.1"),
        p("MASTER_PORT", "29500");
    WorldInfo w = world_info_from_env();
    EXPECT_FALSE(w.under_mpi);
    EXPECT_EQ(w.rank, 1);
    EXPECT_EQ(w.size, 2);
    EXPECT_EQ(w.master_addr, "127.0.0.1");
    EXPECT_EQ(w.master_port, 29500);
    // The CPU backend's multi-rank transport is MPI only.
    try {
      make_world_communicator(CommMemory::kHost);
      FAIL() << "host communicator without mpirun accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), ErrorKind::kUnsupported);
      EXPECT_NE(std::string(err.what()).find("mpirun -np 2"), std::string::npos) << err.what();
    }
  }
  {
    ScopedEnv s("WORLD_SIZE", "2"), r("RANK", "2"), ad("MASTER_ADDR", "x"), p("MASTER_PORT", "1");
    EXPECT_THROW(world_info_from_env(), Error);  // rank >= size
  }
  {
    ScopedEnv s("WORLD_SIZE", "2"), r("RANK", "0");
    EXPECT_THROW(world_info_from_env(), Error);  // no MASTER_ADDR / PORT
  }
  {
    ScopedEnv r("RANK", "0");
    EXPECT_THROW(world_info_from_env(), Error);  // RANK without WORLD_SIZE
  }
  {
    ScopedEnv s("OMPI_COMM_WORLD_SIZE", "two"), r("OMPI_COMM_WORLD_RANK", "0");
    EXPECT_THROW(world_info_from_env(), Error);
  }
}

std::string validate_message(ParallelConfig c, int world) {
  try {
    c.validate(world);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    return e.what();
  }
  return "";
}

TEST(ParallelConfig, Validate) {
  EXPECT_EQ(validate_message({1, 1, 1}, 1), "");
  EXPECT_EQ(validate_message({4, 4, 1}, 4), "");
  EXPECT_EQ(validate_message({2, 4, 2}, 4), "");
  EXPECT_EQ(validate_message({4, 2, 1}, 4), "");  // two EP groups of 2
  EXPECT_NE(validate_message({2, 1, 1}, 4).find("must equal the number of ranks (4)"),
            std::string::npos);
  EXPECT_NE(validate_message({4, 3, 1}, 4).find("--expert-parallel-size 3 does not divide"),
            std::string::npos);
  EXPECT_NE(validate_message({0, 1, 1}, 1).find(">= 1"), std::string::npos);
  EXPECT_NE(validate_message({4, 8, 1}, 4).find("--expert-parallel-size 8"), std::string::npos);
}

TEST(ParallelConfig, GroupsOnOneRank) {
  SingleCommunicator world;
  ParallelGroups g = make_parallel_groups(world, {1, 1, 1});
  EXPECT_EQ(g.dp_index, 0);
  EXPECT_EQ(g.cp_rank, 0);
  EXPECT_EQ(g.ep->size(), 1);
  EXPECT_EQ(g.cp->size(), 1);
}

}  // namespace
}  // namespace deepinfer
