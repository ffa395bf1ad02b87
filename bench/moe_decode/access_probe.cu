// Read-pattern probe for the W4A8 decode kernels (bench only, no engine code): how fast can 8
// warps per CTA, each owning 16 weight rows, stream those rows' bytes through registers when the
// bytes lie
//   rows:   row-major as today's device format (moe_w4a8.h: row i is kp/2 contiguous bytes), one
//           64-byte chunk of each of the 16 rows per step (two 16-byte loads per lane);
//   rows128: the same rows, 128 bytes of each row per step (four loads per lane);
//   tiled:  tile-major: the 16 rows' chunk c is one contiguous 1 KB (two loads per lane, the
//           warp reading 512 contiguous bytes per load).
// DEPTH steps in flight per warp. Same ld.global.nc.L1::no_allocate loads as the kernels; the
// loaded words are XOR-folded into a sink so nothing is elided. Sizes: the V4.1 up projection of
// 6 experts (T = 1) and of 162 experts (T = 64), and the down projection of 6 experts.
//   nvcc -std=c++20 -O3 -arch=sm_90a -o /tmp/access_probe bench/moe_decode/access_probe.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#define CK(x)                                                                     \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

__device__ __forceinline__ uint4 ldg_na(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

enum Pattern { kRows, kRows128, kTiled };

// grid.x = n_rows / (16 * warps); row_bytes % 128 == 0.
template <int P, int DEPTH>
__global__ void probe(const uint8_t* __restrict__ w, int64_t row_bytes, uint32_t* sink) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t tile16 = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + warp;
  const int64_t step_bytes = P == kRows128 ? 128 : 64;
  const int64_t steps = row_bytes / step_bytes;
  constexpr int kLoads = P == kRows128 ? 4 : 2;
  uint32_t acc = 0;
  for (int64_t s0 = 0; s0 < steps; s0 += DEPTH) {
    uint4 v[DEPTH][kLoads];
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      const int64_t s = s0 + d;
      if (s >= steps) break;
#pragma unroll
      for (int q = 0; q < kLoads; ++q) {
        const uint8_t* p;
        if (P == kRows) {
          const int64_t row = tile16 * 16 + (lane >> 2) + 8 * q;
          p = w + row * row_bytes + s * 64 + (lane & 3) * 16;
        } else if (P == kRows128) {
          const int64_t row = tile16 * 16 + (lane >> 3) + 4 * q;
          p = w + row * row_bytes + s * 128 + (lane & 7) * 16;
        } else {
          p = w + (tile16 * steps + s) * 1024 + q * 512 + lane * 16;
        }
        v[d][q] = ldg_na(p);
      }
    }
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      if (s0 + d >= steps) break;
#pragma unroll
      for (int q = 0; q < kLoads; ++q) acc ^= v[d][q].x ^ v[d][q].y ^ v[d][q].z ^ v[d][q].w;
    }
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

// Launch r reads copy r % copies (stride apart), so no launch finds the previous one's bytes in L2.
template <int P, int DEPTH>
float time_it(const uint8_t* w, int64_t stride, int copies, int64_t n_rows, int64_t row_bytes,
              int warps, uint32_t* sink) {
  const int grid = static_cast<int>(n_rows / (16 * warps));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  probe<P, DEPTH><<<grid, 32 * warps>>>(w, row_bytes, sink);
  cudaEventRecord(a);
  const int reps = 20;
  for (int r = 0; r < reps; ++r)
    probe<P, DEPTH><<<grid, 32 * warps>>>(w + (r % copies) * stride, row_bytes, sink);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / reps;
}

int main() {
  struct Case {
    const char* name;
    int64_t n_rows, row_bytes;
  };
  // V4.1: D 5120, I 2304; codes kp/2 bytes per row (+ kp/32 scale bytes, not probed here).
  const Case cases[] = {{"up   T=1  (6 experts, w1+w3: 27648 rows x 2560 B)", 6 * 4608, 2560},
                        {"down T=1  (6 experts, w2: 30720 rows x 1152 B)", 6 * 5120, 1152},
                        {"up   T=64 (162 experts: 746496 rows x 2560 B)", 162 * 4608, 2560}};
  int64_t max_bytes = 0;
  for (const Case& c : cases) max_bytes = std::max(max_bytes, c.n_rows * c.row_bytes);
  // Several copies, rotated, so that back-to-back launches do not read from L2 (50 MB).
  const int kCopies = 4;
  uint8_t* buf = nullptr;
  CK(cudaMalloc(&buf, kCopies * max_bytes));
  CK(cudaMemset(buf, 0x5a, kCopies * max_bytes));
  uint32_t* sink = nullptr;
  CK(cudaMalloc(&sink, 4));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("GPU: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("| case | warps/CTA | CTAs | pattern | depth | us | GB/s |\n|---|---|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    const int64_t bytes = c.n_rows * c.row_bytes;
    for (int warps : {8, 4}) {
      auto row = [&](const char* pat, int depth, float ms) {
        std::printf("| %s | %d | %lld | %s | %d | %.1f | %.0f |\n", c.name, warps,
                    static_cast<long long>(c.n_rows / (16 * warps)), pat, depth, ms * 1e3,
                    bytes / (ms * 1e-3) / 1e9);
      };
      const uint8_t* w = buf;
      row("rows", 2, time_it<kRows, 2>(w, max_bytes, kCopies, c.n_rows, c.row_bytes, warps, sink));
      row("rows", 4, time_it<kRows, 4>(w, max_bytes, kCopies, c.n_rows, c.row_bytes, warps, sink));
      row("rows", 8, time_it<kRows, 8>(w, max_bytes, kCopies, c.n_rows, c.row_bytes, warps, sink));
      row("rows128", 2, time_it<kRows128, 2>(w, max_bytes, kCopies, c.n_rows, c.row_bytes, warps, sink));
      row("rows128", 4, time_it<kRows128, 4>(w, max_bytes, kCopies, c.n_rows, c.row_bytes, warps, sink));
      row("tiled", 2, time_it<kTiled, 2>(w, max_bytes, kCopies, c.n_rows, c.row_bytes, warps, sink));
      row("tiled", 4, time_it<kTiled, 4>(w, max_bytes, kCopies, c.n_rows, c.row_bytes, warps, sink));
      row("tiled", 8, time_it<kTiled, 8>(w, max_bytes, kCopies, c.n_rows, c.row_bytes, warps, sink));
    }
  }
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return 0;
}
