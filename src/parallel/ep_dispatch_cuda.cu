// Expert-parallel dispatch / combine kernels and their chaining (contract in ep_dispatch_cuda.h;
// the host planner parallel/ep_layout.cc is the reference).
//
// The send plan is made by one warp walking the routing slots in order, 32 at a time (as
// moe_align_cuda places rows): lanes routed to the same expert find each other with
// __match_any_sync and take consecutive copy ordinals, lanes going to the same peer take
// consecutive rows; so the layout is the planner's, whatever the thread timing. The copies of
// rows are warp-per-row 16-byte moves.
#include "parallel/ep_dispatch_cuda.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <numeric>

#include "base/error.h"
#include "cuda/cuda_check.h"

namespace deepinfer {
namespace {

constexpr int kPlanThreads = 1024;
constexpr int kMaxWorld = 1024;
constexpr int kMaxExperts = 4096;
constexpr int kMaxTopK = 32;
constexpr int kRowThreads = 256;  // 8 warps, one row each

struct PlanParams {
  EpPlacementView pl;
  int32_t rank, world;
  const int32_t* ids;
  int64_t n_tokens, top_k, cap;
  EpSendTables out;
  uint8_t* send;
  int64_t record_bytes, meta_offset;
};

__global__ void __launch_bounds__(kPlanThreads) ep_plan_kernel(PlanParams p) {
  __shared__ int32_t ordinal[kMaxExperts];
  __shared__ int32_t cursor[kMaxWorld];
  __shared__ int32_t base[kMaxWorld];
  const int tid = threadIdx.x;
  const int64_t S = p.n_tokens * p.top_k;
  const int32_t E = p.pl.n_experts;
  for (int e = tid; e < E; e += kPlanThreads) ordinal[e] = 0;
  for (int q = tid; q < p.world; q += kPlanThreads) cursor[q] = 0;
  // Combine order of every token: its j's sorted by (id, j) (stable insertion sort).
  for (int64_t t = tid; t < p.n_tokens; t += kPlanThreads) {
    int32_t order[kMaxTopK];
    const int32_t* id = p.ids + t * p.top_k;
    for (int j = 0; j < p.top_k; ++j) {
      int m = j;
      while (m > 0 && id[order[m - 1]] > id[j]) {
        order[m] = order[m - 1];
        --m;
      }
      order[m] = j;
    }
    for (int j = 0; j < p.top_k; ++j) p.out.slot_order[t * p.top_k + j] = order[j];
  }
  __syncthreads();
  if (tid < 32) {
    const int lane = tid;
    const unsigned below = (1u << lane) - 1u;
    for (int64_t b = 0; b < S; b += 32) {
      const int64_t s = b + lane;
      int32_t e = s < S ? p.ids[s] : -1;
      if (e < 0 || e >= E) e = -1;
      const unsigned ge = __match_any_sync(0xffffffffu, e);
      int32_t ord = 0;
      if (e >= 0) ord = ordinal[e] + __popc(ge & below);
      __syncwarp();
      if (e >= 0 && lane == 31 - __clz(ge)) ordinal[e] += __popc(ge);
      __syncwarp();
      int32_t peer = -1, local = -1;
      if (e >= 0) {
        const int32_t c0 = p.pl.copy_offsets[e], n = p.pl.copy_offsets[e + 1] - c0;
        const int32_t c = c0 + static_cast<int32_t>((static_cast<int64_t>(ord) + p.rank) % n);
        peer = p.pl.copy_rank[c];
        local = p.pl.copy_slot[c];
      }
      const unsigned gp = __match_any_sync(0xffffffffu, peer);
      int32_t idx = -1;
      if (peer >= 0) idx = cursor[peer] + __popc(gp & below);
      __syncwarp();
      if (peer >= 0 && lane == 31 - __clz(gp)) cursor[peer] += __popc(gp);
      __syncwarp();
      if (s < S) {
        p.out.slot_peer[s] = peer;
        p.out.slot_local[s] = local;
        p.out.slot_pos[s] = idx;  // the index among the peer's rows; the base is added below
      }
    }
  }
  __syncthreads();
  if (tid == 0) {
    int32_t acc = 0;
    for (int q = 0; q < p.world; ++q) {
      base[q] = p.cap > 0 ? static_cast<int32_t>(q * p.cap) : acc;
      acc += cursor[q];
    }
  }
  __syncthreads();
  for (int q = tid; q < p.world; q += kPlanThreads) p.out.peer_rows[q] = cursor[q];
  for (int64_t s = tid; s < S; s += kPlanThreads) {
    const int32_t peer = p.out.slot_peer[s];
    if (peer >= 0) p.out.slot_pos[s] += base[peer];
  }
  if (p.cap > 0) {  // fixed capacity: the unused rows of every peer carry slot -1
    for (int64_t q = tid; q < p.world * p.cap; q += kPlanThreads) {
      const int64_t peer = q / p.cap, i = q % p.cap;
      if (i >= cursor[peer]) {
        *reinterpret_cast<int32_t*>(p.send + q * p.record_bytes + p.meta_offset) = -1;
      }
    }
  }
}

struct ScatterParams {
  const uint8_t* xq;
  const float* sx;
  int64_t sx_ld;
  const float* weights;
  int64_t n_slots, top_k, dim, n_sb;
  const int32_t* slot_pos;
  const int32_t* slot_local;
  uint8_t* send;
  int64_t record_bytes, meta_offset;
};

__global__ void ep_scatter_kernel(ScatterParams p) {
  const int64_t s = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (s >= p.n_slots) return;
  const int32_t pos = p.slot_pos[s];
  if (pos < 0) return;
  const int64_t t = s / p.top_k;
  uint8_t* rec = p.send + pos * p.record_bytes;
  const uint4* src = reinterpret_cast<const uint4*>(p.xq + t * p.dim);
  uint4* dst = reinterpret_cast<uint4*>(rec);
  for (int64_t i = lane; i < p.dim / 16; i += 32) dst[i] = src[i];
  float* scales = reinterpret_cast<float*>(rec + p.dim);
  for (int64_t b = lane; b < p.n_sb; b += 32) scales[b] = p.sx[b * p.sx_ld + t];
  if (lane == 0) {
    *reinterpret_cast<int32_t*>(rec + p.meta_offset) = p.slot_local[s];
    *reinterpret_cast<float*>(rec + p.meta_offset + 4) = p.weights[s];
  }
}

__global__ void ep_recv_meta_kernel(const uint8_t* recv, int64_t n_recv, int64_t record_bytes,
                                    int64_t meta_offset, int32_t n_slots, int32_t* recv_slot,
                                    float* recv_weight) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_recv) return;
  const uint8_t* meta = recv + i * record_bytes + meta_offset;
  int32_t l = *reinterpret_cast<const int32_t*>(meta);
  if (l < 0 || l >= n_slots) l = -1;
  recv_slot[i] = l;
  recv_weight[i] = l >= 0 ? *reinterpret_cast<const float*>(meta + 4) : 0.0f;
}

struct GatherParams {
  const uint8_t* recv;
  int64_t record_bytes, dim, n_sb, n_rows, rows_cap;
  int32_t n_slots;
  const int32_t* offsets;
  const int32_t* row_slot;
  uint8_t* xq;
  float* sx;
};

__global__ void ep_gather_kernel(GatherParams p) {
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= p.n_rows || r >= p.offsets[p.n_slots]) return;
  const int32_t src = p.row_slot[r];
  uint4* dst = reinterpret_cast<uint4*>(p.xq + r * p.dim);
  if (src < 0) {
    for (int64_t i = lane; i < p.dim / 16; i += 32) dst[i] = make_uint4(0, 0, 0, 0);
    for (int64_t b = lane; b < p.n_sb; b += 32) p.sx[b * p.rows_cap + r] = 1.0f;
    return;
  }
  const uint8_t* rec = p.recv + src * p.record_bytes;
  const uint4* s = reinterpret_cast<const uint4*>(rec);
  for (int64_t i = lane; i < p.dim / 16; i += 32) dst[i] = s[i];
  const float* scales = reinterpret_cast<const float*>(rec + p.dim);
  for (int64_t b = lane; b < p.n_sb; b += 32) p.sx[b * p.rows_cap + r] = scales[b];
}

// Four elements per thread (dim % 16 == 0).
__global__ void ep_return_kernel(const float* y, const int32_t* slot_row, int64_t n_recv,
                                 int64_t dim, uint16_t* ret) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_row = dim / 4;
  if (q >= n_recv * per_row) return;
  const int64_t i = q / per_row, d = (q % per_row) * 4;
  const int32_t g = slot_row[i];
  if (g < 0) return;
  const float4 v = *reinterpret_cast<const float4*>(y + g * dim + d);
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 out;
  out.x = *reinterpret_cast<unsigned*>(&lo);
  out.y = *reinterpret_cast<unsigned*>(&hi);
  *reinterpret_cast<uint2*>(ret + i * dim + d) = out;
}

__device__ __forceinline__ float bf16_bits_to_f32(unsigned bits16) {
  return __uint_as_float(bits16 << 16);
}

__global__ void ep_combine_kernel(const uint16_t* back, const int32_t* slot_pos,
                                  const int32_t* slot_order, const float* y_shared,
                                  int64_t n_tokens, int64_t top_k, int64_t dim, float* out) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_row = dim / 4;
  if (q >= n_tokens * per_row) return;
  const int64_t t = q / per_row, d = (q % per_row) * 4;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t m = 0; m < top_k; ++m) {
    const int32_t j = slot_order[t * top_k + m];
    const int32_t pos = slot_pos[t * top_k + j];
    if (pos < 0) continue;
    const uint2 v = *reinterpret_cast<const uint2*>(back + pos * dim + d);
    acc[0] += bf16_bits_to_f32(v.x & 0xffffu);
    acc[1] += bf16_bits_to_f32(v.x >> 16);
    acc[2] += bf16_bits_to_f32(v.y & 0xffffu);
    acc[3] += bf16_bits_to_f32(v.y >> 16);
  }
  if (y_shared != nullptr) {
    const float4 sh = *reinterpret_cast<const float4*>(y_shared + t * dim + d);
    acc[0] += sh.x;
    acc[1] += sh.y;
    acc[2] += sh.z;
    acc[3] += sh.w;
  }
  *reinterpret_cast<float4*>(out + t * dim + d) = make_float4(acc[0], acc[1], acc[2], acc[3]);
}

int64_t blocks_for(int64_t threads, int64_t per_block) {
  return (threads + per_block - 1) / per_block;
}

}  // namespace

void ep_plan_send_cuda(cudaStream_t stream, const EpPlacementView& placement, int32_t rank,
                       int32_t world, const int32_t* ids, int64_t n_tokens, int64_t top_k,
                       int64_t peer_capacity, const EpSendTables& out, uint8_t* send,
                       int64_t record_bytes, int64_t meta_offset) {
  CHECK_KIND(kUnsupported, world >= 1 && world <= kMaxWorld)
      << "ep dispatch: EP size " << world << " (at most " << kMaxWorld << ")";
  CHECK_KIND(kUnsupported, placement.n_experts >= 1 && placement.n_experts <= kMaxExperts)
      << "ep dispatch: " << placement.n_experts << " experts (at most " << kMaxExperts << ")";
  CHECK_KIND(kUnsupported, top_k >= 1 && top_k <= kMaxTopK)
      << "ep dispatch: top_k " << top_k << " (at most " << kMaxTopK << ")";
  CHECK(rank >= 0 && rank < world && n_tokens >= 0 && peer_capacity >= 0)
      << "ep dispatch: rank " << rank << " of " << world << ", " << n_tokens << " tokens";
  CHECK(peer_capacity == 0 || send != nullptr) << "ep dispatch: fixed capacity needs `send`";
  const PlanParams p{placement, rank, world, ids, n_tokens, top_k, peer_capacity, out, send,
                     record_bytes, meta_offset};
  ep_plan_kernel<<<1, kPlanThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void ep_scatter_cuda(cudaStream_t stream, const uint8_t* xq, const float* sx, int64_t sx_ld,
                     const float* weights, int64_t n_tokens, int64_t top_k, int64_t dim,
                     int64_t n_sb, const EpSendTables& tables, uint8_t* send,
                     int64_t record_bytes, int64_t meta_offset) {
  const int64_t S = n_tokens * top_k;
  if (S == 0) return;
  CHECK(dim % 16 == 0 && record_bytes % 16 == 0) << "ep scatter: dim " << dim << ", record "
                                                 << record_bytes << " bytes";
  CHECK(reinterpret_cast<uintptr_t>(xq) % 16 == 0) << "ep scatter: xq must be 16-byte aligned";
  const ScatterParams p{xq, sx, sx_ld, weights, S, top_k, dim, n_sb, tables.slot_pos,
                        tables.slot_local, send, record_bytes, meta_offset};
  ep_scatter_kernel<<<blocks_for(S * 32, kRowThreads), kRowThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void ep_group_recv_cuda(cudaStream_t stream, const uint8_t* recv, int64_t n_recv,
                        int64_t record_bytes, int64_t meta_offset, int64_t dim, int64_t n_sb,
                        int64_t n_slots, int32_t* recv_slot, float* recv_weight,
                        const MoeAlignBuffers& align, int64_t rows_cap, uint8_t* xq,
                        float* sx) {
  const int64_t n_rows = moe_rows_cap(n_recv, 1, n_slots);
  CHECK(n_rows <= rows_cap) << "ep grouping: " << n_rows << " grouped rows exceed the capacity "
                            << rows_cap;
  if (n_recv > 0) {
    ep_recv_meta_kernel<<<blocks_for(n_recv, 256), 256, 0, stream>>>(
        recv, n_recv, record_bytes, meta_offset, static_cast<int32_t>(n_slots), recv_slot,
        recv_weight);
    CUDA_CHECK_LAUNCH();
  }
  moe_align_cuda(stream, recv_slot, n_recv, 1, n_slots, align);
  if (n_rows == 0) return;
  const GatherParams p{recv, record_bytes, dim, n_sb, n_rows, rows_cap,
                       static_cast<int32_t>(n_slots), align.offsets, align.row_slot, xq, sx};
  ep_gather_kernel<<<blocks_for(n_rows * 32, kRowThreads), kRowThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void ep_return_rows_cuda(cudaStream_t stream, const float* y, const int32_t* slot_row,
                         int64_t n_recv, int64_t dim, uint16_t* ret) {
  if (n_recv == 0) return;
  CHECK(dim % 4 == 0) << "ep return: dim " << dim;
  ep_return_kernel<<<blocks_for(n_recv * dim / 4, 256), 256, 0, stream>>>(y, slot_row, n_recv,
                                                                          dim, ret);
  CUDA_CHECK_LAUNCH();
}

void ep_combine_cuda(cudaStream_t stream, const uint16_t* back, const int32_t* slot_pos,
                     const int32_t* slot_order, const float* y_shared, int64_t n_tokens,
                     int64_t top_k, int64_t dim, float* out) {
  if (n_tokens == 0) return;
  CHECK(dim % 4 == 0) << "ep combine: dim " << dim;
  ep_combine_kernel<<<blocks_for(n_tokens * dim / 4, 256), 256, 0, stream>>>(
      back, slot_pos, slot_order, y_shared, n_tokens, top_k, dim, out);
  CUDA_CHECK_LAUNCH();
}

// ---- EpDispatcher ----

EpDispatcher::EpDispatcher(Communicator& comm, const ExpertPlacement& placement,
                           const EpDispatchShape& shape, EpExchange exchange,
                           cudaStream_t stream)
    : comm_(comm), shape_(shape), exchange_(exchange), stream_(stream) {
  CHECK(comm.memory() == CommMemory::kDevice)
      << "ep dispatch: the communicator (" << comm.backend() << ") must use device memory";
  CHECK(comm.size() == placement.ep_size())
      << "ep dispatch: a placement over " << placement.ep_size() << " ranks for an EP group of "
      << comm.size();
  CHECK(shape.max_tokens >= 1 && shape.top_k >= 1) << "ep dispatch: max tokens "
                                                   << shape.max_tokens << ", top_k "
                                                   << shape.top_k;
  rank_ = comm.rank();
  world_ = comm.size();
  n_experts_ = placement.n_experts();
  n_slots_ = placement.slots_per_rank();
  CHECK_KIND(kUnsupported, n_slots_ <= kMoeAlignMaxExperts)
      << "ep dispatch: " << n_slots_ << " expert slots per rank (at most "
      << kMoeAlignMaxExperts << ")";
  n_sb_ = ep_scale_blocks(shape.dim, shape.scale_block);
  record_bytes_ = ep_record_bytes(shape.dim, shape.scale_block);
  meta_offset_ = ep_record_meta_offset(shape.dim, shape.scale_block);
  cap_ = ep_peer_capacity(shape.max_tokens, shape.top_k);
  memory_ = ep_memory(exchange, world_, shape.max_tokens, shape.top_k, n_experts_, n_slots_,
                      shape.dim, shape.scale_block, kMoeRowTile);
  ICHECK(memory_.grouped_rows == moe_rows_cap(memory_.recv_rows, 1, n_slots_));
  const int64_t S = cap_, D = shape.dim, rows = memory_.grouped_rows;
  const int64_t tiles = moe_tiles_cap(memory_.recv_rows, 1, n_slots_);

  auto i32 = [&](int64_t n) { return static_cast<int32_t*>(alloc(4 * n)); };
  placement_.copy_offsets = i32(n_experts_ + 1);
  placement_.copy_rank = i32(world_ * n_slots_);
  placement_.copy_slot = i32(world_ * n_slots_);
  placement_.n_experts = static_cast<int32_t>(n_experts_);
  tables_ = {i32(S), i32(S), i32(S), i32(S), i32(world_)};
  send_ = static_cast<uint8_t*>(alloc(memory_.send_bytes));
  recv_ = static_cast<uint8_t*>(alloc(memory_.recv_bytes));
  recv_slot_ = i32(memory_.recv_rows);
  recv_weight_ = static_cast<float*>(alloc(4 * memory_.recv_rows));
  MoeAlignBuffers& a = input_.align;
  a.counts = i32(n_slots_);
  a.offsets = i32(n_slots_ + 1);
  a.row_slot = i32(rows);
  a.slot_row = i32(memory_.recv_rows);
  a.tile_expert = i32(tiles);
  a.tile_row0 = i32(tiles);
  xq_ = static_cast<uint8_t*>(alloc(rows * D));
  sx_ = static_cast<float*>(alloc(4 * n_sb_ * rows));
  y_ = static_cast<float*>(alloc(4 * rows * D));
  ret_send_ = static_cast<uint16_t*>(alloc(2 * memory_.recv_rows * D));
  ret_recv_ = static_cast<uint16_t*>(alloc(2 * memory_.send_rows * D));
  CUDA_CHECK(cudaMallocHost(&peer_rows_host_, sizeof(int32_t) * world_));
  input_.xq = xq_;
  input_.sx = sx_;
  input_.rows_cap = rows;
  input_.weight = recv_weight_;
  input_.n_slots = n_slots_;
  sent_rows_.assign(world_, 0);
  recv_rows_.assign(world_, 0);
  set_placement(placement);
}

EpDispatcher::~EpDispatcher() {
  for (void* p : allocations_) cudaFree(p);
  if (peer_rows_host_ != nullptr) cudaFreeHost(peer_rows_host_);
}

void* EpDispatcher::alloc(int64_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 16))));
  allocations_.push_back(p);
  return p;
}

void EpDispatcher::set_placement(const ExpertPlacement& placement) {
  CHECK(placement.n_experts() == n_experts_ && placement.ep_size() == world_ &&
        placement.slots_per_rank() == n_slots_)
      << "ep dispatch: a new placement must keep " << n_experts_ << " experts over " << world_
      << " ranks of " << n_slots_ << " slots";
  std::vector<int32_t> offsets(n_experts_ + 1, 0), ranks, slots;
  for (int64_t e = 0; e < n_experts_; ++e) {
    for (const ExpertCopy& c : placement.copies(e)) {
      ranks.push_back(c.rank);
      slots.push_back(c.slot);
    }
    offsets[e + 1] = static_cast<int32_t>(ranks.size());
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  CUDA_CHECK(cudaMemcpy(const_cast<int32_t*>(placement_.copy_offsets), offsets.data(),
                        4 * offsets.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(const_cast<int32_t*>(placement_.copy_rank), ranks.data(),
                        4 * ranks.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(const_cast<int32_t*>(placement_.copy_slot), slots.data(),
                        4 * slots.size(), cudaMemcpyHostToDevice));
}

void EpDispatcher::dispatch(const int32_t* ids, const float* weights, const uint8_t* xq,
                            const float* sx, int64_t sx_ld, int64_t n_tokens) {
  CHECK(n_tokens >= 0 && n_tokens <= shape_.max_tokens)
      << "ep dispatch: " << n_tokens << " tokens (the dispatcher holds " << shape_.max_tokens
      << ")";
  CHECK(n_tokens == 0 || sx_ld >= n_tokens) << "ep dispatch: scale ld " << sx_ld << " < "
                                            << n_tokens << " tokens";
  n_tokens_ = n_tokens;
  const bool fixed = exchange_ == EpExchange::kFixedCapacity;
  ep_plan_send_cuda(stream_, placement_, rank_, world_, ids, n_tokens, shape_.top_k,
                    fixed ? cap_ : 0, tables_, send_, record_bytes_, meta_offset_);
  ep_scatter_cuda(stream_, xq, sx, sx_ld, weights, n_tokens, shape_.top_k, shape_.dim, n_sb_,
                  tables_, send_, record_bytes_, meta_offset_);
  if (fixed) {
    std::fill(sent_rows_.begin(), sent_rows_.end(), cap_);
    std::fill(recv_rows_.begin(), recv_rows_.end(), cap_);
  } else {
    CUDA_CHECK(cudaMemcpyAsync(peer_rows_host_, tables_.peer_rows, sizeof(int32_t) * world_,
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (int32_t p = 0; p < world_; ++p) sent_rows_[p] = peer_rows_host_[p];
    comm_.all_to_all_counts(sent_rows_, recv_rows_);
  }
  const int64_t n_recv = std::accumulate(recv_rows_.begin(), recv_rows_.end(), int64_t{0});
  CHECK(n_recv <= memory_.recv_rows)
      << "ep dispatch: rank " << rank_ << " receives " << n_recv << " rows, more than the "
      << memory_.recv_rows << " it holds (a peer has more than " << shape_.max_tokens
      << " tokens?)";
  std::vector<int64_t> send_bytes(world_), recv_bytes(world_);
  for (int32_t p = 0; p < world_; ++p) {
    send_bytes[p] = sent_rows_[p] * record_bytes_;
    recv_bytes[p] = recv_rows_[p] * record_bytes_;
  }
  comm_.all_to_all_v(send_, send_bytes, recv_, recv_bytes);
  ep_group_recv_cuda(stream_, recv_, n_recv, record_bytes_, meta_offset_, shape_.dim, n_sb_,
                     n_slots_, recv_slot_, recv_weight_, input_.align, input_.rows_cap, xq_,
                     sx_);
  input_.n_recv = n_recv;
  input_.n_tiles = moe_tiles_cap(n_recv, 1, n_slots_);
}

void EpDispatcher::combine(const float* y_shared, float* out) {
  const int64_t D = shape_.dim;
  ep_return_rows_cuda(stream_, y_, input_.align.slot_row, input_.n_recv, D, ret_send_);
  std::vector<int64_t> send_bytes(world_), recv_bytes(world_);
  for (int32_t p = 0; p < world_; ++p) {
    send_bytes[p] = recv_rows_[p] * D * 2;
    recv_bytes[p] = sent_rows_[p] * D * 2;
  }
  comm_.all_to_all_v(ret_send_, send_bytes, ret_recv_, recv_bytes);
  ep_combine_cuda(stream_, ret_recv_, tables_.slot_pos, tables_.slot_order, y_shared, n_tokens_,
                  shape_.top_k, D, out);
}

}  // namespace deepinfer
