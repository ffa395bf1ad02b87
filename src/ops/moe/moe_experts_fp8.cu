// The routed experts of one layer on the device (contract in moe_grouped_cuda.h):
// align -> quantise x -> grouped W1 and W3 GEMMs in one launch (x rows read in place through
// row_slot) -> SwiGLU x weight + quantisation -> grouped W2 GEMM -> combine in slot order.
#include <cuda_fp8.h>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/gemm/gemm.h"
#include "ops/moe/moe_grouped_cuda.h"
#include "ops/quant/act_quant.h"

namespace deepinfer {
namespace {

constexpr int64_t kQuantBlock = 128;

// 2^ceil(log2(amax / 448)) from the fp32 bits of the IEEE quotient (act_quant's rule).
__device__ __forceinline__ int pow2_scale_exponent(float amax) {
  const float ratio = __fdiv_rn(amax, 448.0f);
  const unsigned bits = __float_as_uint(ratio);
  return static_cast<int>((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
}

struct SwigluQuantParams {
  const float* g;
  const float* u;
  int64_t ldg;
  const float* weights;
  const int32_t* row_slot;
  const int32_t* offsets;  // offsets[n_experts] = padded total
  int64_t n_experts, rows_cap, inter, n_kb;
  float limit;
  uint8_t* hq;
  float* sh;
};

// One warp per (padded row, 128-wide block); lane l holds elements l, l + 32, l + 64, l + 96.
__global__ void swiglu_quant_kernel(SwigluQuantParams p) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t row = warp / p.n_kb, kb = warp % p.n_kb;
  if (row >= p.rows_cap || row >= p.offsets[p.n_experts]) return;
  const int64_t k0 = kb * kQuantBlock;
  const int64_t k1 = min(p.inter, k0 + kQuantBlock);
  uint8_t* q = p.hq + row * p.inter;
  float* scale = p.sh + kb * p.rows_cap + row;
  const int32_t slot = p.row_slot[row];
  if (slot < 0) {
    for (int64_t i = k0 + lane; i < k1; i += 32) q[i] = 0;
    if (lane == 0) *scale = 1.0f;
    return;
  }
  const float rw = p.weights[slot];
  float v[kQuantBlock / 32];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kQuantBlock / 32; ++j) {
    const int64_t i = k0 + lane + 32 * j;
    v[j] = 0.0f;
    if (i < k1) {
      float gate = p.g[row * p.ldg + i], up = p.u[row * p.ldg + i];
      if (p.limit > 0.0f) {
        gate = fminf(gate, p.limit);
        up = fminf(p.limit, fmaxf(-p.limit, up));
      }
      v[j] = gate / (1.0f + expf(-gate)) * up * rw;
      amax = fmaxf(amax, fabsf(v[j]));
    }
  }
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  amax = fmaxf(amax, 1e-4f);
  const int e = pow2_scale_exponent(amax);
  const float inv_s = __uint_as_float(static_cast<unsigned>(127 - e) << 23);
#pragma unroll
  for (int j = 0; j < kQuantBlock / 32; ++j) {
    const int64_t i = k0 + lane + 32 * j;
    if (i < k1) {
      const float c = fminf(448.0f, fmaxf(-448.0f, v[j] * inv_s));
      q[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(c, __NV_SATFINITE, __NV_E4M3));
    }
  }
  if (lane == 0) *scale = __uint_as_float(static_cast<unsigned>(e + 127) << 23);
}

// out[t, d] = sum_j y[slot_row[t k + j], d] (j ascending; a slot without a row adds nothing)
// + y_shared[t, d] (if given).
__global__ void combine_slots_kernel(const float* y, const int32_t* slot_row,
                                     const float* y_shared, int64_t n_tokens, int64_t k,
                                     int64_t dim, float* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_tokens * dim) return;
  const int64_t t = idx / dim, d = idx % dim;
  float acc = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    const int32_t r = slot_row[t * k + j];
    if (r >= 0) acc += y[static_cast<int64_t>(r) * dim + d];
  }
  if (y_shared != nullptr) acc += y_shared[idx];
  out[idx] = acc;
}

unsigned grid_for(int64_t threads_total, int block) {
  const int64_t b = (threads_total + block - 1) / block;
  CHECK_KIND(kUnsupported, b < (int64_t{1} << 31)) << "moe experts: problem too large";
  return static_cast<unsigned>(b);
}

int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// Byte sizes of the workspace regions, in carve-up order.
struct Layout {
  int64_t sizes[12];
};

Layout layout_of(const MoeExpertsShape& s) {
  const int64_t cap = moe_rows_cap(s.n_tokens, s.top_k, s.n_experts);
  const int64_t tiles = moe_tiles_cap(s.n_tokens, s.top_k, s.n_experts);
  const int64_t kb_d = ceil_div64(s.dim, kQuantBlock), kb_i = ceil_div64(s.inter, kQuantBlock);
  return Layout{{4 * s.n_experts, 4 * (s.n_experts + 1), 4 * cap, 4 * s.n_tokens * s.top_k,
                 4 * tiles, 4 * tiles, s.n_tokens * s.dim, 4 * kb_d * s.n_tokens,
                 4 * cap * s.inter, 4 * cap * s.inter, cap * s.inter, 4 * kb_i * cap}};
}

void check_shape(const MoeExpertsShape& s) {
  CHECK(s.n_tokens >= 0 && s.top_k >= 1 && s.n_experts >= 1 && s.dim >= 1 && s.inter >= 1)
      << "moe experts: T=" << s.n_tokens << " k=" << s.top_k << " E=" << s.n_experts
      << " D=" << s.dim << " I=" << s.inter;
  CHECK_KIND(kUnsupported, s.dim % 16 == 0 && s.inter % 16 == 0)
      << "moe experts (FP8): D=" << s.dim << " and I=" << s.inter << " must be multiples of 16";
}

}  // namespace

void moe_combine_slots_cuda(cudaStream_t stream, const float* y, const int32_t* slot_row,
                            const float* y_shared, int64_t n_tokens, int64_t top_k, int64_t dim,
                            float* out) {
  if (n_tokens * dim == 0) return;
  constexpr int kBlock = 256;
  combine_slots_kernel<<<grid_for(n_tokens * dim, kBlock), kBlock, 0, stream>>>(
      y, slot_row, y_shared, n_tokens, top_k, dim, out);
  CUDA_CHECK_LAUNCH();
}

void moe_swiglu_quant_cuda(cudaStream_t stream, const float* g, const float* u, int64_t ldg,
                           const float* weights, const int32_t* row_slot, const int32_t* offsets,
                           int64_t n_experts, int64_t rows_cap, int64_t inter, float limit,
                           uint8_t* hq, float* sh) {
  if (rows_cap == 0 || inter == 0) return;
  const SwigluQuantParams p{g, u, ldg, weights, row_slot, offsets, n_experts, rows_cap,
                            inter, ceil_div64(inter, kQuantBlock), limit, hq, sh};
  constexpr int kBlock = 256;
  swiglu_quant_kernel<<<grid_for(rows_cap * p.n_kb * 32, kBlock), kBlock, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

size_t moe_experts_fp8_workspace_bytes(const MoeExpertsShape& s) {
  check_shape(s);
  const Layout l = layout_of(s);
  int64_t total = 0;
  for (int64_t b : l.sizes) total += round_up(b, 256);
  // y [rows_cap, D] after the other regions.
  total += round_up(4 * moe_rows_cap(s.n_tokens, s.top_k, s.n_experts) * s.dim, 256);
  return static_cast<size_t>(total);
}

MoeExpertsWorkspace moe_experts_fp8_workspace(const MoeExpertsShape& s, void* workspace) {
  check_shape(s);
  CHECK(reinterpret_cast<uintptr_t>(workspace) % 256 == 0)
      << "moe experts: workspace must be 256-byte aligned";
  const Layout l = layout_of(s);
  uint8_t* at = static_cast<uint8_t*>(workspace);
  void* region[12];
  for (int i = 0; i < 12; ++i) {
    region[i] = at;
    at += round_up(l.sizes[i], 256);
  }
  MoeExpertsWorkspace ws;
  ws.align.counts = static_cast<int32_t*>(region[0]);
  ws.align.offsets = static_cast<int32_t*>(region[1]);
  ws.align.row_slot = static_cast<int32_t*>(region[2]);
  ws.align.slot_row = static_cast<int32_t*>(region[3]);
  ws.align.tile_expert = static_cast<int32_t*>(region[4]);
  ws.align.tile_row0 = static_cast<int32_t*>(region[5]);
  ws.xq = static_cast<uint8_t*>(region[6]);
  ws.sx = static_cast<float*>(region[7]);
  ws.g = static_cast<float*>(region[8]);
  ws.u = static_cast<float*>(region[9]);
  ws.hq = static_cast<uint8_t*>(region[10]);
  ws.sh = static_cast<float*>(region[11]);
  ws.y = reinterpret_cast<float*>(at);
  return ws;
}

void moe_experts_fp8_cuda(cudaStream_t stream, const MoeExpertsShape& s, const float* x,
                          const int32_t* ids, const float* weights, const MoeExpertsFp8Weights& w,
                          const float* y_shared, void* workspace, float* out) {
  const MoeExpertsWorkspace ws = moe_experts_fp8_workspace(s, workspace);
  if (s.n_tokens == 0) return;
  const int64_t T = s.n_tokens, k = s.top_k, E = s.n_experts, D = s.dim, I = s.inter;
  const int64_t cap = moe_rows_cap(T, k, E), tiles = moe_tiles_cap(T, k, E);
  moe_align_cuda(stream, ids, T, k, E, ws.align);
  act_quant_cuda(stream, x, DType::F32, T, D, kQuantBlock, ws.xq, ws.sx, ScaleLayout::kBlockMajor);

  GroupedGemmFp8Params up;
  up.a = ws.xq;
  up.sa = ws.sx;
  up.sa_ld = T;
  up.a_rows = ws.align.row_slot;
  up.a_rows_div = static_cast<int32_t>(k);
  up.n = I;
  up.k = D;
  up.ldc = I;
  up.tile_expert = ws.align.tile_expert;
  up.tile_row0 = ws.align.tile_row0;
  up.n_tiles_cap = tiles;
  up.w = w.w1;
  up.sw = w.s1;
  up.c = ws.g;
  up.w_b = w.w3;
  up.sw_b = w.s3;
  up.c_b = ws.u;
  grouped_gemm_fp8_cuda(stream, up);

  moe_swiglu_quant_cuda(stream, ws.g, ws.u, I, weights, ws.align.row_slot, ws.align.offsets, E,
                        cap, I, s.swiglu_limit, ws.hq, ws.sh);

  GroupedGemmFp8Params down;
  down.a = ws.hq;
  down.sa = ws.sh;
  down.sa_ld = cap;
  down.w = w.w2;
  down.sw = w.s2;
  down.c = ws.y;
  down.ldc = D;
  down.n = D;
  down.k = I;
  down.tile_expert = ws.align.tile_expert;
  down.tile_row0 = ws.align.tile_row0;
  down.n_tiles_cap = tiles;
  grouped_gemm_fp8_cuda(stream, down);

  moe_combine_slots_cuda(stream, ws.y, ws.align.slot_row, y_shared, T, k, D, out);
}

}  // namespace deepinfer
