// Expert-parallel dispatch / combine on the device (parallel/ep_dispatch_cuda.h) against the
// host planner and the definition (ep_test_util.h):
//  * EpDispatcher over one rank (everything goes to self; the acceptance's degenerate case):
//    the send tables equal ep_plan_send, the grouped rows equal the host grouping of the
//    received records byte for byte, and dispatch -> the per-expert test op (y = q s (e+1) w,
//    computed on the host over the device's grouped rows) -> combine equals the output written
//    from the definition exactly, at T = 0, 1, 7, 300 with k = 6 of 256 experts; the
//    fixed-capacity (decode) exchange gives bitwise the counted one's output and layout; over a
//    SingleCommunicator (stream 0) and over NcclCommunicator::single (its own stream);
//  * four ranks emulated on one GPU with the stage functions (the exchange done by device
//    copies, a placement with replicated experts): every rank's send records and grouped rows
//    equal the host emulation's, and the outputs equal the definition.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ep_test_util.h"
#include "parallel/ep_dispatch_cuda.h"
#include "parallel/nccl_communicator.h"
#include "parallel/single_communicator.h"

namespace deepinfer {
namespace {

using ep_test::Geometry;
using ep_test::RankInput;

template <typename T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(16, v.size() * sizeof(T))));
  if (!v.empty()) CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <typename T>
std::vector<T> download(const T* d, int64_t n) {
  std::vector<T> v(n);
  if (n > 0) CUDA_CHECK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

struct DeviceInput {
  int32_t* ids;
  float* weights;
  uint8_t* xq;
  float* sx;
  float* shared;
  explicit DeviceInput(const RankInput& in)
      : ids(upload(in.ids)), weights(upload(in.weights)), xq(upload(in.xq)), sx(upload(in.sx)),
        shared(upload(in.shared)) {}
  ~DeviceInput() {
    for (void* p : {static_cast<void*>(ids), static_cast<void*>(weights),
                    static_cast<void*>(xq), static_cast<void*>(sx), static_cast<void*>(shared)}) {
      cudaFree(p);
    }
  }
};

// The test op over the device's grouped rows (host), uploaded into y [rows_cap, D].
void run_test_op(const ExpertPlacement& pl, int64_t rank, const std::vector<uint8_t>& xq,
                 const std::vector<float>& sx, const std::vector<int32_t>& row_slot,
                 const std::vector<int32_t>& recv_slot, const std::vector<float>& weight,
                 int64_t rows, int64_t rows_cap, const Geometry& g, float* y) {
  std::vector<float> host(rows_cap * g.D, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t i = row_slot[r];
    if (i < 0) continue;
    const int32_t e = pl.expert_at(rank, recv_slot[i]);
    for (int64_t d = 0; d < g.D; ++d) {
      host[r * g.D + d] = ep_test::op_value(e4m3_to_f32(xq[r * g.D + d]),
                                            sx[(d / g.scale_block) * rows_cap + r], e, weight[i]);
    }
  }
  CUDA_CHECK(cudaMemcpy(y, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
}

// The grouped rows of one rank equal the host grouping of its received records.
void expect_grouping(const ep_test::HostRank& h, const std::vector<int32_t>& counts,
                     const std::vector<int32_t>& offsets, const std::vector<int32_t>& row_slot,
                     const std::vector<uint8_t>& xq, const std::vector<float>& sx,
                     int64_t rows_cap, const Geometry& g) {
  const EpRecvGrouping& want = h.grouping;
  for (size_t l = 0; l < want.counts.size(); ++l) ASSERT_EQ(counts[l], want.counts[l]);
  for (size_t l = 0; l < want.offsets.size(); ++l) ASSERT_EQ(offsets[l], want.offsets[l]);
  for (int64_t r = 0; r < want.offsets.back(); ++r) {
    ASSERT_EQ(row_slot[r], want.row_recv[r]) << "grouped row " << r;
    const int32_t i = want.row_recv[r];
    for (int64_t d = 0; d < g.D; ++d) {
      ASSERT_EQ(xq[r * g.D + d], i < 0 ? 0 : h.recv[i * g.rec() + d]) << "row " << r;
    }
    for (int64_t b = 0; b < g.n_sb(); ++b) {
      float s = 1.0f;
      if (i >= 0) std::memcpy(&s, &h.recv[i * g.rec() + g.D + 4 * b], 4);
      ASSERT_EQ(sx[b * rows_cap + r], s) << "row " << r << " block " << b;
    }
  }
}

struct OneRankResult {
  std::vector<float> out;
  std::vector<int32_t> offsets, row_slot;
};

// comm on `stream` (SingleCommunicator: stream 0, see the header; NcclCommunicator: its own).
OneRankResult run_one_rank(Communicator& comm, cudaStream_t stream, const RankInput& in,
                           EpExchange exchange, const Geometry& g) {
  const ExpertPlacement pl = ExpertPlacement::contiguous(256, 1);
  const EpDispatchShape shape{g.max_tokens, g.k, g.D, g.scale_block};
  EpDispatcher ep(comm, pl, shape, exchange, stream);
  const EpMemory m = ep_memory(exchange, 1, g.max_tokens, g.k, 256, 256, g.D, g.scale_block, 64);
  EXPECT_EQ(ep.memory().total(), m.total());
  DeviceInput d(in);
  const int64_t T = in.n_tokens;
  ep.dispatch(d.ids, d.weights, d.xq, d.sx, std::max<int64_t>(T, 1), T);
  CUDA_CHECK(cudaStreamSynchronize(stream));

  const auto host = ep_test::emulate(pl, {in}, exchange, g);
  const EpSendPlan& plan = host[0].plan;
  const EpSendTables& tab = ep.send_tables();
  EXPECT_EQ(download(tab.slot_pos, T * g.k), plan.slot_pos);
  EXPECT_EQ(download(tab.slot_local, T * g.k), plan.slot_local);
  EXPECT_EQ(download(tab.slot_order, T * g.k), plan.slot_order);
  EXPECT_EQ(download(tab.peer_rows, 1)[0], plan.peer_rows[0]);

  const EpExpertInput& x = ep.expert_input();
  const int64_t n_recv = x.n_recv;
  EXPECT_EQ(n_recv, exchange == EpExchange::kCounted ? plan.peer_rows[0] : g.max_tokens * g.k);
  OneRankResult res;
  const auto counts = download(x.align.counts, 256);
  res.offsets = download(x.align.offsets, 257);
  const int64_t rows = res.offsets[256];
  res.row_slot = download(x.align.row_slot, rows);
  const auto xq = download(x.xq, x.rows_cap * g.D);
  const auto sx = download(x.sx, g.n_sb() * x.rows_cap);
  expect_grouping(host[0], counts, res.offsets, res.row_slot, xq, sx, x.rows_cap, g);
  std::vector<int32_t> slots(n_recv);
  for (int64_t i = 0; i < n_recv; ++i) slots[i] = host[0].recv_slot[i];
  run_test_op(pl, 0, xq, sx, res.row_slot, slots, download(x.weight, n_recv), rows, x.rows_cap,
              g, ep.expert_output());

  float* out = nullptr;
  CUDA_CHECK(cudaMalloc(&out, std::max<int64_t>(16, T * g.D * 4)));
  std::vector<float> nan(T * g.D, std::numeric_limits<float>::quiet_NaN());
  if (T > 0) CUDA_CHECK(cudaMemcpy(out, nan.data(), nan.size() * 4, cudaMemcpyHostToDevice));
  ep.combine(d.shared, out);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  res.out = download(out, T * g.D);
  CUDA_CHECK(cudaFree(out));
  return res;
}

void check_one_rank(Communicator& comm, cudaStream_t stream) {
  const Geometry g{6, 512, 128, 300};
  std::mt19937 rng(5);
  for (int64_t T : {0, 1, 7, 300}) {
    SCOPED_TRACE("T = " + std::to_string(T));
    const RankInput in = ep_test::random_input(rng, T, 6, 256, g.D, g.n_sb(), 17);
    const std::vector<float> want = ep_test::expected_output(in, 6, g.D, g.scale_block);
    const OneRankResult counted = run_one_rank(comm, stream, in, EpExchange::kCounted, g);
    const OneRankResult fixed = run_one_rank(comm, stream, in, EpExchange::kFixedCapacity, g);
    ASSERT_EQ(counted.out.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(counted.out[i], want[i]) << "element " << i;
      ASSERT_EQ(std::memcmp(&fixed.out[i], &counted.out[i], 4), 0) << "element " << i;
    }
    EXPECT_EQ(fixed.offsets, counted.offsets);
    EXPECT_EQ(fixed.row_slot.size(), counted.row_slot.size());
  }
}

TEST(EpDispatchCuda, OneRankRoundTripEqualsTheDefinitionSingle) {
  SingleCommunicator comm(CommMemory::kDevice);
  check_one_rank(comm, 0);
}

TEST(EpDispatchCuda, OneRankRoundTripEqualsTheDefinitionNccl) {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    std::unique_ptr<NcclCommunicator> comm = NcclCommunicator::single(stream);
    check_one_rank(*comm, stream);
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(EpDispatchCuda, RejectsBadInput) {
  SingleCommunicator comm(CommMemory::kDevice);
  SingleCommunicator host_comm(CommMemory::kHost);
  const ExpertPlacement pl = ExpertPlacement::contiguous(256, 1);
  const EpDispatchShape shape{8, 6, 512, 128};
  EXPECT_THROW(EpDispatcher(host_comm, pl, shape, EpExchange::kCounted, 0), Error);
  EXPECT_THROW(EpDispatcher(comm, ExpertPlacement::contiguous(256, 2), shape,
                            EpExchange::kCounted, 0),
               Error);
  EXPECT_THROW(EpDispatcher(comm, pl, EpDispatchShape{8, 6, 100, 128}, EpExchange::kCounted, 0),
               Error);
  EpDispatcher ep(comm, pl, shape, EpExchange::kCounted, 0);
  EXPECT_THROW(ep.dispatch(nullptr, nullptr, nullptr, nullptr, 9, 9), Error);  // > max tokens
  EXPECT_THROW(ep.set_placement(ExpertPlacement::contiguous(256, 1, 1)), Error);
}

// ---- four ranks on one GPU ----

struct DeviceRank {
  std::vector<void*> mem;
  EpPlacementView pl;
  EpSendTables tab;
  uint8_t *send, *recv, *xq;
  int32_t* recv_slot;
  float *recv_weight, *sx, *y, *out;
  uint16_t *ret, *back;
  MoeAlignBuffers align;
  int64_t rows_cap;
  void* alloc(int64_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<int64_t>(bytes, 16)));
    mem.push_back(p);
    return p;
  }
  ~DeviceRank() {
    for (void* p : mem) cudaFree(p);
  }
};

TEST(EpDispatchCuda, FourEmulatedRanksEqualTheHostPlanAndTheDefinition) {
  const int64_t P = 4, per = 64, slots = per + 2, E = 256;
  std::vector<int32_t> table(P * slots, -1);
  for (int64_t e = 0; e < E; ++e) table[(e / per) * slots + e % per] = static_cast<int32_t>(e);
  table[2 * slots + 64] = 3;
  table[0 * slots + 64] = 200;
  table[3 * slots + 64] = 7;
  table[2 * slots + 65] = 7;
  const ExpertPlacement pl = ExpertPlacement::from_slots(E, P, slots, table);
  std::vector<int32_t> offs(E + 1, 0), cr, cs;
  for (int64_t e = 0; e < E; ++e) {
    for (const ExpertCopy& c : pl.copies(e)) {
      cr.push_back(c.rank);
      cs.push_back(c.slot);
    }
    offs[e + 1] = static_cast<int32_t>(cr.size());
  }
  const Geometry g{6, 256, 128, 300};
  std::mt19937 rng(9);
  std::vector<RankInput> in;
  for (int64_t T : {300, 0, 7, 1}) in.push_back(ep_test::random_input(rng, T, 6, E, g.D, g.n_sb(), 19));

  for (EpExchange ex : {EpExchange::kCounted, EpExchange::kFixedCapacity}) {
    SCOPED_TRACE(ex == EpExchange::kCounted ? "counted" : "fixed capacity");
    const bool fixed = ex == EpExchange::kFixedCapacity;
    const auto host = ep_test::emulate(pl, in, ex, g);
    const int64_t cap = ep_peer_capacity(g.max_tokens, g.k), rec = g.rec();
    const EpMemory m = ep_memory(ex, P, g.max_tokens, g.k, E, slots, g.D, g.scale_block, 64);
    std::vector<DeviceRank> dr(P);
    std::vector<std::unique_ptr<DeviceInput>> din;
    for (int64_t r = 0; r < P; ++r) {
      DeviceRank& d = dr[r];
      auto i32 = [&](int64_t n) { return static_cast<int32_t*>(d.alloc(4 * n)); };
      din.push_back(std::make_unique<DeviceInput>(in[r]));
      d.pl = {upload(offs), upload(cr), upload(cs), static_cast<int32_t>(E)};
      d.mem.insert(d.mem.end(), {(void*)d.pl.copy_offsets, (void*)d.pl.copy_rank, (void*)d.pl.copy_slot});
      d.tab = {i32(cap), i32(cap), i32(cap), i32(cap), i32(P)};
      d.send = static_cast<uint8_t*>(d.alloc(m.send_bytes));
      d.recv = static_cast<uint8_t*>(d.alloc(m.recv_bytes));
      d.rows_cap = m.grouped_rows;
      d.recv_slot = i32(m.recv_rows);
      d.recv_weight = static_cast<float*>(d.alloc(4 * m.recv_rows));
      const int64_t tiles = m.grouped_rows / 64;
      d.align = {i32(slots), i32(slots + 1), i32(d.rows_cap), i32(m.recv_rows), i32(tiles), i32(tiles)};
      d.xq = static_cast<uint8_t*>(d.alloc(d.rows_cap * g.D));
      d.sx = static_cast<float*>(d.alloc(4 * g.n_sb() * d.rows_cap));
      d.y = static_cast<float*>(d.alloc(4 * d.rows_cap * g.D));
      d.ret = static_cast<uint16_t*>(d.alloc(2 * m.recv_rows * g.D));
      d.back = static_cast<uint16_t*>(d.alloc(2 * m.send_rows * g.D));
      d.out = static_cast<float*>(d.alloc(4 * in[r].n_tokens * g.D));
      const int64_t T = in[r].n_tokens;
      ep_plan_send_cuda(0, d.pl, static_cast<int32_t>(r), P, din[r]->ids, T, g.k,
                        fixed ? cap : 0, d.tab, d.send, rec, g.meta());
      ep_scatter_cuda(0, din[r]->xq, din[r]->sx, std::max<int64_t>(T, 1), din[r]->weights, T,
                      g.k, g.D, g.n_sb(), d.tab, d.send, rec, g.meta());
      CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_EQ(download(d.tab.slot_pos, T * g.k), host[r].plan.slot_pos) << "rank " << r;
      const auto send = download(d.send, static_cast<int64_t>(host[r].send.size()));
      for (size_t row = 0; row < host[r].send.size() / rec; ++row) {
        int32_t slot;
        std::memcpy(&slot, &host[r].send[row * rec + g.meta()], 4);
        const size_t n = slot < 0 ? 4 : static_cast<size_t>(g.meta() + 8);
        const size_t at = slot < 0 ? row * rec + g.meta() : row * rec;
        ASSERT_EQ(std::memcmp(&send[at], &host[r].send[at], n), 0) << "rank " << r << " row " << row;
      }
    }
    // The exchange: rank r's piece of every peer, in rank order.
    for (int64_t r = 0; r < P; ++r) {
      int64_t at = 0;
      for (int64_t p = 0; p < P; ++p) {
        const int64_t n = host[r].recv_rows[p];
        int64_t from = fixed ? r * cap : 0;
        if (!fixed) for (int64_t q = 0; q < r; ++q) from += host[p].plan.peer_rows[q];
        CUDA_CHECK(cudaMemcpy(dr[r].recv + at * rec, dr[p].send + from * rec, n * rec,
                              cudaMemcpyDeviceToDevice));
        at += n;
      }
      DeviceRank& d = dr[r];
      ep_group_recv_cuda(0, d.recv, at, rec, g.meta(), g.D, g.n_sb(), slots, d.recv_slot,
                         d.recv_weight, d.align, d.rows_cap, d.xq, d.sx);
      const auto counts = download(d.align.counts, slots);
      const auto offsets = download(d.align.offsets, slots + 1);
      const int64_t rows = offsets[slots];
      const auto row_slot = download(d.align.row_slot, rows);
      const auto xq = download(d.xq, d.rows_cap * g.D);
      const auto sx = download(d.sx, g.n_sb() * d.rows_cap);
      expect_grouping(host[r], counts, offsets, row_slot, xq, sx, d.rows_cap, g);
      run_test_op(pl, r, xq, sx, row_slot, download(d.recv_slot, at), download(d.recv_weight, at),
                  rows, d.rows_cap, g, d.y);
      ep_return_rows_cuda(0, d.y, d.align.slot_row, at, g.D, d.ret);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int64_t r = 0; r < P; ++r) {  // back home, then the combine
      int64_t to = 0;
      for (int64_t p = 0; p < P; ++p) {
        int64_t from = 0;
        for (int64_t q = 0; q < r; ++q) from += host[p].recv_rows[q];
        const int64_t n = fixed ? cap : host[r].plan.peer_rows[p];
        CUDA_CHECK(cudaMemcpy(dr[r].back + to * g.D, dr[p].ret + from * g.D, 2 * n * g.D,
                              cudaMemcpyDeviceToDevice));
        to += n;
      }
      const int64_t T = in[r].n_tokens;
      ep_combine_cuda(0, dr[r].back, dr[r].tab.slot_pos, dr[r].tab.slot_order, din[r]->shared, T,
                      g.k, g.D, dr[r].out);
      const auto out = download(dr[r].out, T * g.D);
      const auto want = ep_test::expected_output(in[r], g.k, g.D, g.scale_block);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(out[i], want[i]) << "rank " << r << " element " << i;
        ASSERT_EQ(host[r].out[i], want[i]) << "rank " << r << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer
