// The host planner of expert-parallel dispatch / combine (see ep_layout.h): plain loops in slot
// order, the reference the device kernels of ep_dispatch_cuda.cu are tested against.
#include "parallel/ep_layout.h"

#include <algorithm>
#include <numeric>

#include "base/error.h"

namespace deepinfer {

namespace {
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
}  // namespace

int64_t ep_scale_blocks(int64_t dim, int64_t scale_block) {
  CHECK(dim > 0 && scale_block > 0) << "ep layout: dim " << dim << ", scale block "
                                    << scale_block;
  return (dim + scale_block - 1) / scale_block;
}

int64_t ep_record_meta_offset(int64_t dim, int64_t scale_block) {
  return dim + 4 * ep_scale_blocks(dim, scale_block);
}

int64_t ep_record_bytes(int64_t dim, int64_t scale_block) {
  CHECK(dim % 16 == 0) << "ep layout: the hidden size " << dim
                       << " must be a multiple of 16 (16-byte row copies, FP8 GEMM K)";
  return round_up(ep_record_meta_offset(dim, scale_block) + 8, 16);
}

int64_t ep_peer_capacity(int64_t max_tokens, int64_t top_k) {
  CHECK(max_tokens >= 0 && top_k >= 1) << "ep layout: max tokens " << max_tokens << ", top_k "
                                       << top_k;
  return max_tokens * top_k;
}

int64_t ep_grouped_rows_cap(int64_t n_rows, int64_t n_slots, int64_t row_tile) {
  return n_rows + std::min(n_slots, n_rows) * (row_tile - 1);
}

EpSendPlan ep_plan_send(const ExpertPlacement& placement, int64_t rank, const int32_t* ids,
                        int64_t n_tokens, int64_t top_k, int64_t peer_capacity) {
  const int64_t P = placement.ep_size(), E = placement.n_experts(), S = n_tokens * top_k;
  CHECK(rank >= 0 && rank < P) << "ep dispatch: rank " << rank << " of " << P;
  CHECK(n_tokens >= 0 && top_k >= 1) << "ep dispatch: " << n_tokens << " tokens, top_k "
                                     << top_k;
  EpSendPlan plan;
  plan.slot_peer.assign(S, -1);
  plan.slot_local.assign(S, -1);
  plan.slot_pos.assign(S, -1);
  plan.slot_order.resize(S);
  plan.peer_rows.assign(P, 0);
  std::vector<int64_t> ordinal(E, 0), index(S, -1);
  for (int64_t s = 0; s < S; ++s) {
    const int32_t e = ids[s];
    if (e < 0 || e >= E) continue;
    const ExpertCopy& c = placement.choose(e, rank, ordinal[e]++);
    plan.slot_peer[s] = c.rank;
    plan.slot_local[s] = c.slot;
    index[s] = plan.peer_rows[c.rank]++;
  }
  if (peer_capacity > 0) {
    for (int64_t p = 0; p < P; ++p) {
      CHECK(plan.peer_rows[p] <= peer_capacity)
          << "ep dispatch: " << plan.peer_rows[p] << " rows for rank " << p
          << " exceed the fixed capacity of " << peer_capacity;
    }
  }
  std::vector<int64_t> base(P, 0);
  for (int64_t p = 0; p < P; ++p) {
    base[p] = peer_capacity > 0 ? p * peer_capacity
                                : (p == 0 ? 0 : base[p - 1] + plan.peer_rows[p - 1]);
  }
  for (int64_t s = 0; s < S; ++s) {
    if (plan.slot_peer[s] >= 0) {
      plan.slot_pos[s] = static_cast<int32_t>(base[plan.slot_peer[s]] + index[s]);
    }
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    int32_t* order = plan.slot_order.data() + t * top_k;
    std::iota(order, order + top_k, 0);
    std::stable_sort(order, order + top_k,
                     [&](int32_t a, int32_t b) { return ids[t * top_k + a] < ids[t * top_k + b]; });
  }
  return plan;
}

EpRecvGrouping ep_group_recv(const int32_t* recv_slot, int64_t n_recv, int64_t n_slots,
                             int64_t row_tile) {
  CHECK(n_slots >= 1 && row_tile >= 1 && n_recv >= 0)
      << "ep grouping: " << n_recv << " rows, " << n_slots << " slots, tile " << row_tile;
  EpRecvGrouping g;
  g.counts.assign(n_slots, 0);
  for (int64_t i = 0; i < n_recv; ++i) {
    const int32_t l = recv_slot[i];
    CHECK(l >= -1 && l < n_slots) << "ep grouping: received row " << i << " names slot " << l
                                  << " of " << n_slots;
    if (l >= 0) ++g.counts[l];
  }
  g.offsets.assign(n_slots + 1, 0);
  for (int64_t l = 0; l < n_slots; ++l) {
    g.offsets[l + 1] = g.offsets[l] + round_up(g.counts[l], row_tile);
  }
  g.row_recv.assign(g.offsets[n_slots], -1);
  g.recv_row.assign(n_recv, -1);
  std::vector<int64_t> cursor(g.offsets.begin(), g.offsets.end() - 1);
  for (int64_t i = 0; i < n_recv; ++i) {
    const int32_t l = recv_slot[i];
    if (l < 0) continue;
    const int64_t r = cursor[l]++;
    g.row_recv[r] = static_cast<int32_t>(i);
    g.recv_row[i] = static_cast<int32_t>(r);
  }
  return g;
}

EpMemory ep_memory(EpExchange exchange, int64_t world, int64_t max_tokens, int64_t top_k,
                   int64_t n_experts, int64_t n_slots, int64_t dim, int64_t scale_block,
                   int64_t row_tile) {
  CHECK(world >= 1 && n_slots >= 1) << "ep memory: world " << world << ", " << n_slots
                                    << " slots";
  const int64_t cap = ep_peer_capacity(max_tokens, top_k);
  const int64_t rec = ep_record_bytes(dim, scale_block);
  EpMemory m;
  // Counted: this rank sends at most T*k rows in all; it may receive T*k from every peer.
  m.send_rows = exchange == EpExchange::kCounted ? cap : world * cap;
  m.recv_rows = world * cap;
  m.grouped_rows = ep_grouped_rows_cap(m.recv_rows, n_slots, row_tile);
  m.send_bytes = m.send_rows * rec;
  m.recv_bytes = m.recv_rows * rec;
  m.grouped_bytes = m.grouped_rows * (dim + 4 * ep_scale_blocks(dim, scale_block) + 4 * dim);
  m.combine_bytes = (m.recv_rows + m.send_rows) * dim * 2;
  // Slot tables [T*k] x 4 and peer counts; received slot, weight and grouped row per received
  // row; counts, offsets, row_slot and the tile lists of the alignment; the placement's copy
  // tables (at most world * n_slots copies).
  const int64_t S = max_tokens * top_k, tiles = m.grouped_rows / row_tile;
  m.index_bytes = 4 * (4 * S + world + 3 * m.recv_rows + 2 * n_slots + 1 + m.grouped_rows +
                       2 * tiles + (n_experts + 1) + 2 * world * n_slots);
  return m;
}

}  // namespace deepinfer
