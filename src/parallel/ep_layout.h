// Expert-parallel layouts on the host: the plain planner of MoE dispatch / combine (issue 19
// deliverable 3). The device path (parallel/ep_dispatch_cuda.h) builds the same layouts with
// kernels; this file is its oracle and the place where the formats and capacities are defined.
//
// Dispatch sends one row per routing slot s = t * top_k + j (token t, choice j) to the rank that
// holds the chosen copy of expert ids[s] (ExpertPlacement::choose with ordinal = the number of
// earlier slots s' < s of this rank routed to the same expert). The row is a record of
// ep_record_bytes(dim, scale_block) bytes:
//   [0, dim)                       e4m3 codes of x_t (the MoE's quantised input)
//   [dim, dim + 4 n_sb)            fp32 scales of x_t, n_sb = ceil(dim / scale_block)
//   [meta, meta + 4)               int32 slot of the expert on the receiving rank (-1: no row)
//   [meta + 4, meta + 8)           fp32 routing weight of the slot
//   padding to a multiple of 16 bytes.
// Rows for one peer are ordered by ascending slot s. Two exchange layouts of the send buffer:
//   kCounted        rows of peer p packed back to back in rank order (row index
//                   peer_offset[p] + i); needs the per-peer counts exchanged first (host sync).
//   kFixedCapacity  peer p owns rows [p * cap, (p + 1) * cap), cap = ep_peer_capacity(max tokens,
//                   top_k); the unused rows carry slot -1. Every exchange has the same sizes, so
//                   the step needs no host sync (CUDA-graph capturable) at the price of sending
//                   cap rows to every peer.
// The receiver sees the peers' rows in rank order (the same two layouts) and groups the valid
// ones by local slot (ascending receive row inside a slot; each slot's block padded to
// row_tile rows: what the grouped FP8 GEMM consumes). Combine sends every expert output row
// (already weighted, bf16) back to the position it came from, and the home rank sums token t's
// rows in ascending (expert id, j) order, then adds the shared expert: the CPU MoE's order
// (model/block_parts.cc moe_forward).
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/expert_placement.h"

namespace deepinfer {

enum class EpExchange : uint8_t { kCounted, kFixedCapacity };

int64_t ep_scale_blocks(int64_t dim, int64_t scale_block);
// Bytes of one dispatched record, and the byte offset of its metadata (slot, weight).
int64_t ep_record_bytes(int64_t dim, int64_t scale_block);
int64_t ep_record_meta_offset(int64_t dim, int64_t scale_block);
// Rows per peer in the fixed-capacity layout: every slot of every token may go to one peer.
int64_t ep_peer_capacity(int64_t max_tokens, int64_t top_k);
// moe_rows_cap's formula (ops/moe/moe_grouped_cuda.h) for n_rows rows with one choice each over
// n_slots experts: n_rows + min(n_slots, n_rows) * (row_tile - 1).
int64_t ep_grouped_rows_cap(int64_t n_rows, int64_t n_slots, int64_t row_tile);

// The send side of one rank for one step.
struct EpSendPlan {
  std::vector<int32_t> slot_peer;   // [T*k] destination rank, -1 for an id outside [0, E)
  std::vector<int32_t> slot_local;  // [T*k] expert slot on that rank (-1 with slot_peer)
  std::vector<int32_t> slot_pos;    // [T*k] row of the send buffer (-1 with slot_peer)
  std::vector<int32_t> slot_order;  // [T*k] token t's j's in ascending (ids[t*k+j], j)
  std::vector<int64_t> peer_rows;   // [P] rows sent to each peer
};
// ids [n_tokens, top_k]; peer_capacity 0 gives the counted layout, else the fixed-capacity one
// (throws kInvalidInput when a peer would get more rows than that).
EpSendPlan ep_plan_send(const ExpertPlacement& placement, int64_t rank, const int32_t* ids,
                        int64_t n_tokens, int64_t top_k, int64_t peer_capacity);

// The receive side: received rows grouped by local expert slot.
struct EpRecvGrouping {
  std::vector<int64_t> counts;    // [n_slots] valid rows per slot
  std::vector<int64_t> offsets;   // [n_slots + 1] exclusive prefix of round_up(counts, row_tile)
  std::vector<int32_t> row_recv;  // [offsets.back()] receive row of padded row r, -1 = padding
  std::vector<int32_t> recv_row;  // [n_recv] padded row of receive row i, -1 = invalid row
};
// recv_slot [n_recv]: the slot field of every received row (-1 for an unused row).
EpRecvGrouping ep_group_recv(const int32_t* recv_slot, int64_t n_recv, int64_t n_slots,
                             int64_t row_tile);

// Device memory the dispatcher of one rank holds (parallel/ep_dispatch_cuda.h), by buffer.
struct EpMemory {
  int64_t send_rows = 0, recv_rows = 0, grouped_rows = 0;
  int64_t send_bytes = 0;      // dispatch records out
  int64_t recv_bytes = 0;      // dispatch records in
  int64_t grouped_bytes = 0;   // grouped codes + scales + the caller's fp32 expert output
  int64_t combine_bytes = 0;   // bf16 rows back out and in
  int64_t index_bytes = 0;     // slot tables, receive tables, alignment metadata
  int64_t total() const {
    return send_bytes + recv_bytes + grouped_bytes + combine_bytes + index_bytes;
  }
};
EpMemory ep_memory(EpExchange exchange, int64_t world, int64_t max_tokens, int64_t top_k,
                   int64_t n_experts, int64_t n_slots, int64_t dim, int64_t scale_block,
                   int64_t row_tile);

}  // namespace deepinfer
