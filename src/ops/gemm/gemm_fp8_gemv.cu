// Bandwidth-bound block-scaled FP8 GEMM for decode-sized M (contract: gemm_fp8_gemv_cuda.h).
//
// Tensor cores with swapped operands: the weight is mma's A (16 output columns per m16 tile),
// the activations are B (8 rows per n8 tile), so M <= 64 costs at most 8 n8 tiles and the
// kernel stays bound by the weight stream. A CTA (4 warps) owns 64 weight rows; K is streamed in
// 128-byte chunks through a 4-stage cp.async pipeline (16-byte copies, each weight row chunk is
// one full 128-byte line), the chunk of all M activation rows rides in the same stage (x is
// read from L2 once per 64 weight rows). Fragments are read from shared memory with 8-byte
// loads; the K order inside a 32-byte piece is permuted the same way for A and B (thread t of
// a quad holds bytes t*8 .. t*8+7), which leaves every dot product unchanged, and one mma
// (k = 32) never straddles a 32-aligned K block. Per K block (1 mma for b = 32, 4 for b = 128)
// the fp32 partial is promoted: acc += part * sx * sw, in K-block order.
//
// Small N (few 64-row tiles) would leave SMs idle, so the K chunks are split over the CTAs of a
// cluster (fp8_gemv_split: from N and K only, never from M); each CTA leaves its fp32 partial
// tile in shared memory and the cluster adds them in rank order through distributed shared
// memory: no workspace, no atomics, deterministic.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "base/error.h"
#include "cuda/cluster_launch.h"
#include "cuda/cuda_check.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_fp8_gemv_cuda.h"

namespace deepinfer {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerCta = 16 * kWarps;  // weight rows (output columns) per CTA
constexpr int kChunk = 128;               // K bytes per pipeline stage
constexpr int kStride = kChunk + 32;      // smem row stride: 8-byte fragment reads conflict-free
constexpr int kStages = 4;
constexpr int kMaxSplit = 8;              // portable cluster size
constexpr int64_t kTargetCtas = 264;      // ~2 CTAs per SM of an H200 (132 SMs)

// One launch serves G independent GEMMs of one shape (blockIdx.z = group g; G = 1 for
// gemm_fp8_gemv_cuda): group g reads x columns [g k, g k + k) of rows x_ld apart, its own sx
// run (sx + g sx_group_stride, [n_kb, m]), its own weight and scales, and writes y columns
// [g n, g n + n) of rows y_ld apart.
struct GemvParams {
  const uint8_t* xq;
  const float* sx;  // [n_kb, m] per group
  const uint8_t* wq[kFp8GemvMaxGroups];
  const float* sw[kFp8GemvMaxGroups];  // [n_nb, sw_ld]
  int64_t m, n, k, sw_ld;
  int64_t x_ld, y_ld, sx_group_stride;
  int64_t n_chunks, chunks_per_split;
  void* y;
  bool y_bf16;
};

// The operands of the CTA's group.
struct GroupView {
  const uint8_t* xq;
  const float* sx;
  const uint8_t* wq;
  const float* sw;
  int64_t y_col0;
};

__device__ __forceinline__ GroupView group_view(const GemvParams& p) {
  const int grp = static_cast<int>(blockIdx.z);
  return GroupView{p.xq + grp * p.k, p.sx + grp * p.sx_group_stride, p.wq[grp], p.sw[grp],
                   grp * p.n};
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int kMt>
__host__ __device__ constexpr int stage_bytes() {
  return (kRowsPerCta + kMt * 8) * kStride;
}

// One stage: weight rows [n0, n0 + 64) and activation rows [0, kMt * 8) of K chunk `chunk`;
// rows past N / M and 16-byte pieces past K are zero-filled.
template <int kMt>
__device__ __forceinline__ void load_stage(const GemvParams& p, const GroupView& v, uint8_t* stage,
                                           int64_t n0, int64_t chunk) {
  const int64_t k0 = chunk * kChunk;
  constexpr int kPieces = kChunk / 16;
#pragma unroll
  for (int i = 0; i < kRowsPerCta * kPieces / kThreads; ++i) {
    const int piece = threadIdx.x + i * kThreads;
    const int row = piece / kPieces, col = piece % kPieces;
    const int64_t gk = k0 + col * 16;
    const bool valid = n0 + row < p.n && gk < p.k;
    cp_async16(stage + row * kStride + col * 16, valid ? v.wq + (n0 + row) * p.k + gk : v.wq,
               valid);
  }
  uint8_t* xs = stage + kRowsPerCta * kStride;
  for (int piece = threadIdx.x; piece < kMt * 8 * kPieces; piece += kThreads) {
    const int row = piece / kPieces, col = piece % kPieces;
    const int64_t gk = k0 + col * 16;
    const bool valid = row < p.m && gk < p.k;
    cp_async16(xs + row * kStride + col * 16, valid ? v.xq + row * p.x_ld + gk : v.xq, valid);
  }
}

template <int kMt, int kBlock>
__global__ void __launch_bounds__(kThreads) fp8_gemv_kernel(GemvParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const cg::cluster_group cluster = cg::this_cluster();
  const int split = static_cast<int>(cluster.block_rank());
  const int n_split = static_cast<int>(cluster.num_blocks());
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRowsPerCta;
  const int64_t c_begin = split * p.chunks_per_split;
  const int64_t c_end = min(p.n_chunks, c_begin + p.chunks_per_split);
  const int n_local = static_cast<int>(max(int64_t{0}, c_end - c_begin));
  const GroupView v = group_view(p);

  const int64_t warp_n = n0 + warp * 16;  // 16-aligned: one b x b weight block row
  const float* sw_row = warp_n < p.n ? v.sw + (warp_n / kBlock) * p.sw_ld : nullptr;
  constexpr int kSubs = kBlock / 32;  // k32 mmas per K block

  float acc[kMt][4], part[kMt][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[mt][e] = part[mt][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_local) load_stage<kMt>(p, v, smem + s * stage_bytes<kMt>(), n0, c_begin + s);
    cp_async_commit();
  }
  for (int i = 0; i < n_local; ++i) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage i landed for all threads; stage i - 1 is free to refill
    const int next = i + kStages - 1;
    if (next < n_local)
      load_stage<kMt>(p, v, smem + (next % kStages) * stage_bytes<kMt>(), n0, c_begin + next);
    cp_async_commit();

    const uint8_t* ws = smem + (i % kStages) * stage_bytes<kMt>();
    const uint8_t* xs = ws + kRowsPerCta * kStride;
    const int64_t k0 = (c_begin + i) * kChunk;
#pragma unroll
    for (int j = 0; j < kChunk / 32; ++j) {
      if (k0 + j * 32 < p.k) {
        const uint2 lo = *reinterpret_cast<const uint2*>(ws + (warp * 16 + g) * kStride +
                                                         j * 32 + t * 8);
        const uint2 hi = *reinterpret_cast<const uint2*>(ws + (warp * 16 + g + 8) * kStride +
                                                         j * 32 + t * 8);
        const uint32_t a[4] = {lo.x, hi.x, lo.y, hi.y};
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          const uint2 xv =
              *reinterpret_cast<const uint2*>(xs + (mt * 8 + g) * kStride + j * 32 + t * 8);
          const uint32_t b[2] = {xv.x, xv.y};
          mma_e4m3(part[mt], a, b);
        }
      }
      if ((j + 1) % kSubs == 0) {  // end of a K block: promote
        const int64_t kb_start = k0 + (j + 1 - kSubs) * 32;
        if (kb_start < p.k) {
          const int64_t kb = kb_start / kBlock;
          const float swv = sw_row != nullptr ? __ldg(sw_row + kb) : 0.0f;
#pragma unroll
          for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int64_t col = mt * 8 + t * 2 + (e & 1);
              const float sxv = col < p.m ? __ldg(v.sx + kb * p.m + col) : 0.0f;
              acc[mt][e] += part[mt][e] * sxv * swv;
              part[mt][e] = 0.0f;
            }
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // pipeline drained; its shared memory now holds the partial tile

  // Partial tile red[col][row], col < kMt * 8 (activation row), row < 64 (weight row).
  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = warp * 16 + g + (e >= 2 ? 8 : 0), col = mt * 8 + t * 2 + (e & 1);
      red[col * kRowsPerCta + row] = acc[mt][e];
    }
  cluster.sync();  // every CTA's partial tile is visible cluster-wide
  constexpr int kElems = kMt * 8 * kRowsPerCta;
  for (int e = split * kThreads + threadIdx.x; e < kElems; e += n_split * kThreads) {
    const int64_t col = e / kRowsPerCta, row = n0 + e % kRowsPerCta;
    if (col >= p.m || row >= p.n) continue;
    float sum = 0.0f;
    for (int s = 0; s < n_split; ++s) sum += cluster.map_shared_rank(red, s)[e];  // rank order
    const int64_t idx = col * p.y_ld + v.y_col0 + row;
    if (p.y_bf16) {
      static_cast<__nv_bfloat16*>(p.y)[idx] = __float2bfloat16(sum);
    } else {
      static_cast<float*>(p.y)[idx] = sum;
    }
  }
  cluster.sync();  // keep every partial tile alive until all ranks have read it
}

template <int kMt, int kBlock>
void launch(const GemvParams& p, int n_split, int groups, cudaStream_t stream) {
  constexpr int smem_bytes = kStages * stage_bytes<kMt>();
  static_assert(kMt * 8 * kRowsPerCta * 4 <= smem_bytes, "partial tile must fit the pipeline");
  static const bool attr_set = [] {
    CUDA_CHECK(cudaFuncSetAttribute(fp8_gemv_kernel<kMt, kBlock>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    return true;
  }();
  (void)attr_set;
  const int64_t tiles = ceil_div64(p.n, kRowsPerCta);
  CHECK_KIND(kUnsupported, tiles <= 0x7fffffff) << "fp8 gemv: N=" << p.n << " too large";
  cuda::launch_clustered(fp8_gemv_kernel<kMt, kBlock>,
                         dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(n_split),
                              static_cast<unsigned>(groups)),
                         dim3(kThreads, 1, 1), smem_bytes, stream,
                         dim3(1, static_cast<unsigned>(n_split), 1), p);
}

template <int kBlock>
void launch_rows(const GemvParams& p, int n_split, int groups, cudaStream_t stream) {
  if (p.m <= 8) {
    launch<1, kBlock>(p, n_split, groups, stream);
  } else if (p.m <= 16) {
    launch<2, kBlock>(p, n_split, groups, stream);
  } else if (p.m <= 32) {
    launch<4, kBlock>(p, n_split, groups, stream);
  } else {
    launch<8, kBlock>(p, n_split, groups, stream);
  }
}

// Both entries: checks, then one launch over `groups` GEMMs.
void run_gemv(cudaStream_t stream, const void* xq, int64_t x_ld, const float* sx,
              int64_t sx_group_stride, int groups, const void* const* wq, const float* const* sw,
              int64_t m, int64_t n, int64_t k, void* y, int64_t y_ld, DType y_dtype, int64_t block,
              int n_split) {
  CHECK_KIND(kUnsupported, y_dtype == DType::BF16 || y_dtype == DType::F32)
      << "fp8 gemv: output dtype " << dtype_name(y_dtype) << " (want BF16 or F32)";
  CHECK_KIND(kUnsupported, fp8_gemm_block_ok(block))
      << "fp8 gemv: block " << block << " (want 128 or 32)";
  ICHECK(m >= 0 && n >= 0 && k >= 0) << "fp8 gemv: negative size M=" << m << " N=" << n
                                     << " K=" << k;
  CHECK_KIND(kUnsupported, m <= kFp8GemvMaxM) << "fp8 gemv: M=" << m << " > " << kFp8GemvMaxM;
  ICHECK(groups >= 1 && groups <= kFp8GemvMaxGroups)
      << "fp8 gemv: " << groups << " groups (1.." << kFp8GemvMaxGroups << ")";
  ICHECK(x_ld >= groups * k && y_ld >= groups * n)
      << "fp8 gemv: row strides x " << x_ld << ", y " << y_ld << " below " << groups << " x (K "
      << k << ", N " << n << ")";
  if (m == 0 || n == 0) return;
  if (k == 0) {  // every group's columns of every row are zero
    const size_t es = dtype_size(y_dtype);
    CUDA_CHECK(cudaMemset2DAsync(y, y_ld * es, 0, groups * n * es, m, stream));
    return;
  }
  CHECK_KIND(kUnsupported, k % 16 == 0) << "fp8 gemv: K=" << k << " is not a multiple of 16";
  CHECK_KIND(kUnsupported, reinterpret_cast<uintptr_t>(xq) % 16 == 0 && x_ld % 16 == 0)
      << "fp8 gemv: xq and its row stride must be 16-byte aligned";
  GemvParams p{};
  p.xq = static_cast<const uint8_t*>(xq);
  p.sx = sx;
  for (int g = 0; g < groups; ++g) {
    CHECK_KIND(kUnsupported, reinterpret_cast<uintptr_t>(wq[g]) % 16 == 0)
        << "fp8 gemv: wq must be 16-byte aligned (group " << g << ")";
    p.wq[g] = static_cast<const uint8_t*>(wq[g]);
    p.sw[g] = sw[g];
  }
  p.m = m;
  p.n = n;
  p.k = k;
  p.sw_ld = fp8_weight_scale_ld(k, block);
  p.x_ld = x_ld;
  p.y_ld = y_ld;
  p.sx_group_stride = sx_group_stride;
  p.n_chunks = ceil_div64(k, kChunk);
  p.chunks_per_split = ceil_div64(p.n_chunks, n_split);
  p.y = y;
  p.y_bf16 = y_dtype == DType::BF16;
  if (block == 32) {
    launch_rows<32>(p, n_split, groups, stream);
  } else {
    launch_rows<128>(p, n_split, groups, stream);
  }
}

}  // namespace

int fp8_gemv_split(int64_t n, int64_t k) {
  const int64_t tiles = ceil_div64(n, kRowsPerCta), n_chunks = ceil_div64(k, kChunk);
  int split = 1;
  // Split while the grid is short of ~2 CTAs per SM and each split keeps >= 4 chunks
  // (a full pipeline).
  while (split < kMaxSplit && tiles * split < kTargetCtas && n_chunks >= 4 * 2 * split) split *= 2;
  return split;
}

void gemm_fp8_gemv_cuda(cudaStream_t stream, const void* xq, const float* sx_block_major,
                        const void* wq, const float* sw_padded, int64_t m, int64_t n, int64_t k,
                        void* y, DType y_dtype, int64_t block) {
  const void* w[1] = {wq};
  const float* sw[1] = {sw_padded};
  run_gemv(stream, xq, k, sx_block_major, 0, 1, w, sw, m, n, k, y, n, y_dtype, block,
           fp8_gemv_split(n, k));
}

void gemm_fp8_gemv_grouped_cuda(cudaStream_t stream, const void* xq, const float* sx_block_major,
                                int groups, const void* const* wq, const float* const* sw_padded,
                                int64_t m, int64_t n, int64_t k, void* y, DType y_dtype,
                                int64_t block) {
  CHECK_KIND(kUnsupported, fp8_gemm_block_ok(block) && k % block == 0)
      << "fp8 gemv grouped: K=" << k << " must be whole blocks of " << block
      << " (each group's sx is a run of whole K blocks)";
  run_gemv(stream, xq, groups * k, sx_block_major, (k / block) * m, groups, wq, sw_padded, m, n, k,
           y, groups * n, y_dtype, block, fp8_gemv_split(groups * n, k));
}

}  // namespace deepinfer
