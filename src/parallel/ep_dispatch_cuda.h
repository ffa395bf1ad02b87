// Expert-parallel dispatch and combine of the MoE's FP8 tokens on the device (issue 19
// deliverable 3; CUDA builds only). The formats, orders and capacities are those of the host
// planner parallel/ep_layout.h, which is the oracle of every kernel here.
//
// One MoE layer of one step on every rank of an EP group (collective, same order everywhere):
//   dispatch(ids, weights, xq, sx)   routing slots -> per-peer send rows (plan kernel: one warp
//                                    walks the slots in order; scatter kernel: records), the
//                                    exchange (all_to_all_v), then the received rows grouped by
//                                    local expert slot (moe_align_cuda over the received slot
//                                    ids, then a gather into the grouped GEMM's layout)
//   <the caller's local experts>     over expert_input(): grouped FP8 GEMMs etc. writing the
//                                    weighted fp32 output row of every grouped row into
//                                    expert_output()
//   combine(y_shared, out)           every output row back to its home as bf16 (all_to_all_v),
//                                    then out[t] = sum over t's slots in ascending (expert id,
//                                    j) order + y_shared[t] (fp32 sums, the CPU MoE's order)
//
// Exchanges (EpExchange):
//   kCounted        the per-peer row counts go device -> host (one stream synchronisation per
//                   layer) and through all_to_all_counts; then only the rows that exist move.
//   kFixedCapacity  the low-latency decode variant: every peer owns cap = max_tokens * top_k rows
//                   of the send and receive buffers, unused rows are marked (slot -1), and every
//                   exchange moves exactly cap rows per peer. No count exchange, no host sync,
//                   fixed sizes: the step can live in a CUDA graph as far as this class goes
//                   (the Communicator must then only enqueue: NcclCommunicator::set_wait(false)). The
//                   price is bytes: world * cap records each way instead of the live rows (see
//                   ep_memory() for the buffers and bench/results/scaleout-paper-*.md for the
//                   traffic). For V4-Flash (D 4096) at 64 tokens and EP 8: 13 MB send + 13 MB
//                   receive records, 25 MB + 25 MB bf16 combine rows.
// Both exchanges give the same grouped rows in the same order and bitwise the same output.
//
// Streams: every kernel runs on `stream`, and the communicator must order its collectives
// after the work already queued there (NcclCommunicator built on the same stream; a
// SingleCommunicator of device memory copies with cudaMemcpy, which is ordered only with the
// legacy default stream, i.e. stream 0).
//
// Not thread-safe; one instance per (rank, layer shape). Buffers are allocated once, in the
// constructor, for max_tokens tokens per rank.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "ops/moe/moe_grouped_cuda.h"
#include "parallel/communicator.h"
#include "parallel/ep_layout.h"

namespace deepinfer {

struct EpDispatchShape {
  int64_t max_tokens = 0;   // per rank and step
  int64_t top_k = 0;
  int64_t dim = 0;          // hidden size; multiple of 16
  int64_t scale_block = 128;  // columns per fp32 scale of xq (the grouped GEMM needs 128)
};

// What the local experts consume after dispatch (device pointers into the dispatcher).
//   xq      [rows_cap, dim] e4m3, grouped rows (slot l's rows at align.offsets[l]..); padding
//           rows are zero codes
//   sx      [n_sb, rows_cap] fp32, block-major (GroupedGemmFp8Params::sa with sa_ld = rows_cap);
//           padding rows have scale 1
//   weight  [n_recv] fp32 routing weight per received row (index with align.row_slot[r]:
//           moe_swiglu_quant_cuda's `weights`)
//   align   moe_align_cuda's output over the received rows (T = n_recv, top_k = 1, E = n_slots):
//           counts, offsets, row_slot (grouped row -> received row), slot_row (received row ->
//           grouped row), tile_expert (the local slot), tile_row0
//   n_recv, n_tiles  received rows (the layout's, valid or not) and moe_tiles_cap(n_recv, 1,
//           n_slots): the GEMMs' n_tiles_cap for this step
struct EpExpertInput {
  const uint8_t* xq = nullptr;
  const float* sx = nullptr;
  int64_t rows_cap = 0;
  const float* weight = nullptr;
  MoeAlignBuffers align;
  int64_t n_recv = 0, n_tiles = 0, n_slots = 0;
};

// The ExpertPlacement on the device: copies of expert e are copy_rank/slot[copy_offsets[e] ..
// copy_offsets[e + 1]) in ExpertPlacement::copies order.
struct EpPlacementView {
  const int32_t* copy_offsets = nullptr;
  const int32_t* copy_rank = nullptr;
  const int32_t* copy_slot = nullptr;
  int32_t n_experts = 0;
};

// ---- the stages (free functions, device pointers, `stream`; used by EpDispatcher and by the
// tests, which also chain them across emulated ranks) ----

// The send plan of ep_plan_send: slot_peer / slot_local / slot_pos / slot_order [T*k] and
// peer_rows [world] (int32). peer_capacity 0: counted layout; else fixed, and the rows
// [peer_rows[p], cap) of every peer get slot -1 in `send` (the records; may be null when
// peer_capacity is 0). A peer over capacity is not detected here (the caller sizes cap for
// the worst case).
struct EpSendTables {
  int32_t* slot_peer = nullptr;
  int32_t* slot_local = nullptr;
  int32_t* slot_pos = nullptr;
  int32_t* slot_order = nullptr;
  int32_t* peer_rows = nullptr;
};
void ep_plan_send_cuda(cudaStream_t stream, const EpPlacementView& placement, int32_t rank,
                       int32_t world, const int32_t* ids, int64_t n_tokens, int64_t top_k,
                       int64_t peer_capacity, const EpSendTables& out, uint8_t* send,
                       int64_t record_bytes, int64_t meta_offset);

// Records of the slots with slot_pos >= 0: codes of row t = s / k (xq [T, dim]), scales
// sx[b * sx_ld + t] (block-major, b < n_sb), slot_local[s], weights[s].
void ep_scatter_cuda(cudaStream_t stream, const uint8_t* xq, const float* sx, int64_t sx_ld,
                     const float* weights, int64_t n_tokens, int64_t top_k, int64_t dim,
                     int64_t n_sb, const EpSendTables& tables, uint8_t* send,
                     int64_t record_bytes, int64_t meta_offset);

// Received records [n_recv] -> recv_slot / recv_weight [n_recv], moe_align_cuda over recv_slot
// (n_slots experts), and the grouped codes / scales (layout of EpExpertInput; rows_cap is the
// buffers' row capacity and the scales' ld).
void ep_group_recv_cuda(cudaStream_t stream, const uint8_t* recv, int64_t n_recv,
                        int64_t record_bytes, int64_t meta_offset, int64_t dim, int64_t n_sb,
                        int64_t n_slots, int32_t* recv_slot, float* recv_weight,
                        const MoeAlignBuffers& align, int64_t rows_cap, uint8_t* xq, float* sx);

// ret[i, :] = bf16(y[align.slot_row[i], :]) for the received rows i < n_recv with a grouped row
// (others untouched); y fp32 [rows, dim].
void ep_return_rows_cuda(cudaStream_t stream, const float* y, const int32_t* slot_row,
                         int64_t n_recv, int64_t dim, uint16_t* ret);

// out[t, d] = sum_{m < k} bf16->f32(back[slot_pos[t*k + j_m], d]) with j_m = slot_order[t*k + m]
// (slots with slot_pos < 0 add nothing), + y_shared[t, d] when y_shared is not null; fp32.
void ep_combine_cuda(cudaStream_t stream, const uint16_t* back, const int32_t* slot_pos,
                     const int32_t* slot_order, const float* y_shared, int64_t n_tokens,
                     int64_t top_k, int64_t dim, float* out);

// ---- the chained layer ----

class EpDispatcher {
 public:
  // `comm` is the EP group (memory() == kDevice; size() == placement.ep_size()); kept by
  // reference. The placement is uploaded; replace it with set_placement between steps.
  EpDispatcher(Communicator& comm, const ExpertPlacement& placement, const EpDispatchShape& shape,
               EpExchange exchange, cudaStream_t stream);
  ~EpDispatcher();
  EpDispatcher(const EpDispatcher&) = delete;
  EpDispatcher& operator=(const EpDispatcher&) = delete;

  // Same E, ep_size and slots_per_rank as the constructor's (throws kInvalidInput otherwise).
  void set_placement(const ExpertPlacement& placement);

  // ids / weights [n_tokens, top_k] (route_cuda's outputs; ids outside [0, E) dispatch no row),
  // xq [n_tokens, dim] e4m3 and sx [n_sb, sx_ld] (act_quant_cuda kBlockMajor with m = sx_ld >=
  // n_tokens). n_tokens <= max_tokens (may be 0: the rank still takes part).
  void dispatch(const int32_t* ids, const float* weights, const uint8_t* xq, const float* sx,
                int64_t sx_ld, int64_t n_tokens);
  const EpExpertInput& expert_input() const { return input_; }
  // [rows_cap, dim] fp32: the local experts write row r's weighted output here.
  float* expert_output() const { return y_; }
  // out [n_tokens, dim] fp32 (the last dispatch's tokens); y_shared [n_tokens, dim] or null.
  void combine(const float* y_shared, float* out);

  // The send tables of the last dispatch (device), for tests and debugging.
  const EpSendTables& send_tables() const { return tables_; }
  // Rows sent to / received from every peer in the last dispatch (host; fixed capacity: cap).
  const std::vector<int64_t>& sent_rows() const { return sent_rows_; }
  const std::vector<int64_t>& received_rows() const { return recv_rows_; }
  const EpMemory& memory() const { return memory_; }

 private:
  Communicator& comm_;
  EpDispatchShape shape_;
  EpExchange exchange_;
  cudaStream_t stream_;
  int32_t rank_ = 0, world_ = 1;
  int64_t n_experts_ = 0, n_slots_ = 0, n_sb_ = 0, record_bytes_ = 0, meta_offset_ = 0;
  int64_t cap_ = 0, n_tokens_ = 0;
  EpMemory memory_;
  std::vector<void*> allocations_;
  EpPlacementView placement_;
  EpSendTables tables_;
  uint8_t* send_ = nullptr;
  uint8_t* recv_ = nullptr;
  int32_t* recv_slot_ = nullptr;
  float* recv_weight_ = nullptr;
  uint8_t* xq_ = nullptr;
  float* sx_ = nullptr;
  float* y_ = nullptr;
  uint16_t* ret_send_ = nullptr;
  uint16_t* ret_recv_ = nullptr;
  int32_t* peer_rows_host_ = nullptr;  // pinned
  EpExpertInput input_;
  std::vector<int64_t> sent_rows_, recv_rows_;

  void* alloc(int64_t bytes);
};

}  // namespace deepinfer
