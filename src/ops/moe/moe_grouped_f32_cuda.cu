// The routed experts of one layer with fp32 weights on the device (contract in
// moe_grouped_f32_cuda.h): align -> grouped W1 and W3 GEMMs in one launch (x rows read in
// place through row_slot) -> SwiGLU x weight in place -> grouped W2 GEMM -> combine in slot
// order.
//
// Grouped GEMM: SIMT, CTA tile 64 rows (one tile of the alignment) x 64 columns, K in steps
// of 32, 256 threads as 16 x 16; thread (ty, tx) owns rows ty + 16 i and columns tx + 16 j
// (i, j < 4), one fp32 FMA chain per output element in ascending k. Tiles of A and W are
// staged transposed in shared memory ([k][row], padded to 65 so the transposing stores are
// conflict-free); the next K step is loaded into registers while the current one is used.
// Elements past K, rows past N and zero rows of A are staged as 0 (an FMA with 0 * 0 leaves
// the chain's value unchanged, except that -0 becomes +0).
#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/moe/moe_grouped_f32_cuda.h"

namespace deepinfer {
namespace {

constexpr int kBm = static_cast<int>(kMoeRowTile);  // 64
constexpr int kBn = 64;
constexpr int kBk = 32;
constexpr int kThreads = 256;
constexpr int kLd = kBm + 1;  // smem row stride (kBm == kBn)
constexpr int kLoads = kBm * kBk / kThreads;  // 8 elements of each tile per thread
static_assert(kBm == 64 && kBn == 64, "the thread layout is built for 64 x 64 tiles");
static_assert(kBk == 32, "a warp stages one 32-wide row segment per load");

__global__ void __launch_bounds__(kThreads) grouped_gemm_f32_kernel(GroupedGemmF32Params p) {
  const int expert = p.tile_expert[blockIdx.x];
  if (expert < 0) return;
  const int64_t r0 = p.tile_row0[blockIdx.x];
  const int64_t n_col_blocks = (p.n + kBn - 1) / kBn;
  const bool second = blockIdx.y >= n_col_blocks;  // only with w_b
  const int64_t n0 = static_cast<int64_t>(second ? blockIdx.y - n_col_blocks : blockIdx.y) * kBn;
  const float* w = (second ? p.w_b : p.w) + static_cast<int64_t>(expert) * p.n * p.k;
  float* c_out = second ? p.c_b : p.c;

  __shared__ float smem_a[kBk][kLd];
  __shared__ float smem_b[kBk][kLd];

  const int tid = threadIdx.x;
  // Loader: warp wp stages rows wp + 8 l (l < 8) of both tiles, lane = k offset in the step:
  // each load instruction of a warp reads 32 consecutive floats of one row.
  const int lane = tid % 32, wp = tid / 32;
  const float* a_src[kLoads];
  const float* b_src[kLoads];
#pragma unroll
  for (int l = 0; l < kLoads; ++l) {
    const int row = wp + 8 * l;
    int64_t arow = r0 + row;
    if (p.a_rows != nullptr) {
      const int32_t v = p.a_rows[arow];
      arow = v < 0 ? -1 : v / p.a_rows_div;
    }
    a_src[l] = arow < 0 ? nullptr : p.a + arow * p.lda;
    b_src[l] = n0 + row < p.n ? w + (n0 + row) * p.k : nullptr;
  }
  float ra[kLoads], rb[kLoads];
  auto load_regs = [&](int64_t k0) {
    const int64_t k = k0 + lane;
    const bool k_ok = k < p.k;
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      ra[l] = k_ok && a_src[l] != nullptr ? a_src[l][k] : 0.0f;
      rb[l] = k_ok && b_src[l] != nullptr ? b_src[l][k] : 0.0f;
    }
  };

  const int ty = tid / 16, tx = tid % 16;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  load_regs(0);
  for (int64_t k0 = 0; k0 < p.k; k0 += kBk) {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      smem_a[lane][wp + 8 * l] = ra[l];
      smem_b[lane][wp + 8 * l] = rb[l];
    }
    __syncthreads();
    if (k0 + kBk < p.k) load_regs(k0 + kBk);  // in flight while this step computes
#pragma unroll
    for (int kk = 0; kk < kBk; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = smem_a[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = smem_b[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();  // the next step overwrites the tiles
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float* crow = c_out + (r0 + ty + 16 * i) * p.ldc;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + tx + 16 * j;
      if (n < p.n) crow[n] = acc[i][j];
    }
  }
}

struct SwigluF32Params {
  float* g;
  const float* u;
  const float* weights;
  const int32_t* row_slot;
  const int32_t* offsets;  // offsets[n_experts] = padded total
  int64_t n_experts, rows_cap, inter;
  float limit;
};

__global__ void swiglu_f32_kernel(SwigluF32Params p) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= p.rows_cap * p.inter) return;
  const int64_t row = idx / p.inter;
  if (row >= p.offsets[p.n_experts]) return;
  const int32_t slot = p.row_slot[row];
  if (slot < 0) {
    p.g[idx] = 0.0f;
    return;
  }
  float gate = p.g[idx], up = p.u[idx];
  if (p.limit > 0.0f) {
    gate = fminf(gate, p.limit);
    up = fminf(p.limit, fmaxf(-p.limit, up));
  }
  const float silu = gate / (1.0f + expf(-gate));
  float out = silu * up;
  out *= p.weights[slot];
  p.g[idx] = out;
}

unsigned grid_for(int64_t threads_total, int block) {
  const int64_t b = (threads_total + block - 1) / block;
  CHECK_KIND(kUnsupported, b < (int64_t{1} << 31)) << "moe experts (fp32): problem too large";
  return static_cast<unsigned>(b);
}

int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

constexpr int kRegions = 9;

// Byte sizes of the workspace regions, in carve-up order.
struct Layout {
  int64_t sizes[kRegions];
};

Layout layout_of(const MoeExpertsShape& s) {
  const int64_t cap = moe_rows_cap(s.n_tokens, s.top_k, s.n_experts);
  const int64_t tiles = moe_tiles_cap(s.n_tokens, s.top_k, s.n_experts);
  return Layout{{4 * s.n_experts, 4 * (s.n_experts + 1), 4 * cap, 4 * s.n_tokens * s.top_k,
                 4 * tiles, 4 * tiles, 4 * cap * s.inter, 4 * cap * s.inter, 4 * cap * s.dim}};
}

void check_shape(const MoeExpertsShape& s) {
  CHECK(s.n_tokens >= 0 && s.top_k >= 1 && s.n_experts >= 1 && s.dim >= 1 && s.inter >= 1)
      << "moe experts (fp32): T=" << s.n_tokens << " k=" << s.top_k << " E=" << s.n_experts
      << " D=" << s.dim << " I=" << s.inter;
  CHECK_KIND(kUnsupported, s.n_experts <= kMoeAlignMaxExperts)
      << "moe experts (fp32): " << s.n_experts << " experts (at most " << kMoeAlignMaxExperts
      << ")";
}

}  // namespace

void grouped_gemm_f32_cuda(cudaStream_t stream, const GroupedGemmF32Params& p) {
  CHECK(p.n >= 1 && p.k >= 1) << "grouped_gemm_f32: N=" << p.n << " K=" << p.k;
  CHECK(p.a != nullptr && p.w != nullptr && p.c != nullptr && p.tile_expert != nullptr &&
        p.tile_row0 != nullptr)
      << "grouped_gemm_f32: null A, W, C or tile list";
  CHECK(p.a_rows_div >= 1 && p.lda >= p.k && p.ldc >= p.n)
      << "grouped_gemm_f32: a_rows_div " << p.a_rows_div << ", lda " << p.lda << " (K " << p.k
      << "), ldc " << p.ldc << " (N " << p.n << ")";
  CHECK(p.w_b == nullptr || p.c_b != nullptr)
      << "grouped_gemm_f32: the second weight needs an output";
  if (p.n_tiles_cap == 0) return;
  const int64_t n_blocks = (p.n + kBn - 1) / kBn * (p.w_b != nullptr ? 2 : 1);
  CHECK_KIND(kUnsupported, p.n_tiles_cap < (int64_t{1} << 31) && n_blocks <= 65535)
      << "grouped_gemm_f32: " << p.n_tiles_cap << " tiles x " << n_blocks << " column blocks";
  const dim3 grid(static_cast<unsigned>(p.n_tiles_cap), static_cast<unsigned>(n_blocks));
  grouped_gemm_f32_kernel<<<grid, kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void moe_swiglu_f32_cuda(cudaStream_t stream, float* g, const float* u, const float* weights,
                         const int32_t* row_slot, const int32_t* offsets, int64_t n_experts,
                         int64_t rows_cap, int64_t inter, float limit) {
  if (rows_cap == 0 || inter == 0) return;
  const SwigluF32Params p{g, u, weights, row_slot, offsets, n_experts, rows_cap, inter, limit};
  constexpr int kBlock = 256;
  swiglu_f32_kernel<<<grid_for(rows_cap * inter, kBlock), kBlock, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

size_t moe_experts_f32_workspace_bytes(const MoeExpertsShape& s) {
  check_shape(s);
  const Layout l = layout_of(s);
  int64_t total = 0;
  for (int64_t b : l.sizes) total += round_up(b, 256);
  return static_cast<size_t>(total);
}

MoeExpertsF32Workspace moe_experts_f32_workspace(const MoeExpertsShape& s, void* workspace) {
  check_shape(s);
  CHECK(reinterpret_cast<uintptr_t>(workspace) % 256 == 0)
      << "moe experts (fp32): workspace must be 256-byte aligned";
  const Layout l = layout_of(s);
  uint8_t* at = static_cast<uint8_t*>(workspace);
  void* region[kRegions];
  for (int i = 0; i < kRegions; ++i) {
    region[i] = at;
    at += round_up(l.sizes[i], 256);
  }
  MoeExpertsF32Workspace ws;
  ws.align.counts = static_cast<int32_t*>(region[0]);
  ws.align.offsets = static_cast<int32_t*>(region[1]);
  ws.align.row_slot = static_cast<int32_t*>(region[2]);
  ws.align.slot_row = static_cast<int32_t*>(region[3]);
  ws.align.tile_expert = static_cast<int32_t*>(region[4]);
  ws.align.tile_row0 = static_cast<int32_t*>(region[5]);
  ws.g = static_cast<float*>(region[6]);
  ws.u = static_cast<float*>(region[7]);
  ws.y = static_cast<float*>(region[8]);
  return ws;
}

void moe_experts_f32_cuda(cudaStream_t stream, const MoeExpertsShape& s, const float* x,
                          const int32_t* ids, const float* weights, const MoeExpertsF32Weights& w,
                          const float* y_shared, void* workspace, float* out) {
  const MoeExpertsF32Workspace ws = moe_experts_f32_workspace(s, workspace);
  if (s.n_tokens == 0) return;
  CHECK(w.w1 != nullptr && w.w3 != nullptr && w.w2 != nullptr)
      << "moe experts (fp32): null expert weights";
  const int64_t T = s.n_tokens, k = s.top_k, E = s.n_experts, D = s.dim, I = s.inter;
  const int64_t cap = moe_rows_cap(T, k, E), tiles = moe_tiles_cap(T, k, E);
  moe_align_cuda(stream, ids, T, k, E, ws.align);

  GroupedGemmF32Params up;
  up.a = x;
  up.lda = D;
  up.a_rows = ws.align.row_slot;
  up.a_rows_div = static_cast<int32_t>(k);
  up.w = w.w1;
  up.c = ws.g;
  up.ldc = I;
  up.n = I;
  up.k = D;
  up.tile_expert = ws.align.tile_expert;
  up.tile_row0 = ws.align.tile_row0;
  up.n_tiles_cap = tiles;
  up.w_b = w.w3;
  up.c_b = ws.u;
  grouped_gemm_f32_cuda(stream, up);

  moe_swiglu_f32_cuda(stream, ws.g, ws.u, weights, ws.align.row_slot, ws.align.offsets, E, cap,
                      I, s.swiglu_limit);

  GroupedGemmF32Params down;
  down.a = ws.g;  // h; padding rows are +0
  down.lda = I;
  down.w = w.w2;
  down.c = ws.y;
  down.ldc = D;
  down.n = D;
  down.k = I;
  down.tile_expert = ws.align.tile_expert;
  down.tile_row0 = ws.align.tile_row0;
  down.n_tiles_cap = tiles;
  grouped_gemm_f32_cuda(stream, down);

  moe_combine_slots_cuda(stream, ws.y, ws.align.slot_row, y_shared, T, k, D, out);
}

}  // namespace deepinfer
