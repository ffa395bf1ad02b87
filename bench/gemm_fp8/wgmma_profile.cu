// One block-scaled FP8 GEMM kernel at one shape, called `reps` times with random operands:
// the target for ncu (bench/gemm_fp8/ncu_wgmma_h200.sh), and a quick event timing. Why: the two
// wgmma kernels' decode tiles take nearly the same time at M 1 and M 64 (wo_b ~90-100 us for
// 42 MB, 420-480 GB/s; gemv streams 1.2 TB/s at M 1: bench/results/gemm-fp8-wgmma-*-2026-12-04-*),
// so something other than bytes bounds them; ncu's warp-state and memory sections say what.
//   wgmma_profile <wgmma|wgmma-f16|wgmma-f16-lean|mma-split> M N K [reps]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_fp8_kernels.h"

namespace gd = deepinfer::gemm_detail;

#define CK(call)                                                                               \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__);    \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s <wgmma|wgmma-f16|wgmma-f16-lean|mma-split> M N K [reps]\n", argv[0]);
    return 2;
  }
  const std::string impl = argv[1];
  const int64_t m = std::atoll(argv[2]), n = std::atoll(argv[3]), k = std::atoll(argv[4]);
  const int reps = argc > 5 ? std::atoi(argv[5]) : 5;
  const int64_t b = 32, n_kb = deepinfer::ceil_div64(k, b);
  const int64_t sw_count = deepinfer::fp8_weight_scale_count(n, k, b);
  std::mt19937 rng(7);
  std::vector<uint8_t> xq(m * k), wq(n * k);
  for (auto& c : xq) c = static_cast<uint8_t>(rng() % 0x7e);  // positive, no NaN
  for (auto& c : wq) c = static_cast<uint8_t>(rng() % 0x7e);
  std::vector<float> sx(n_kb * m, 1.0f / 64), sw(sw_count, 1.0f / 64);
  uint8_t *dx, *dw;
  float *dsx, *dsw, *dy;
  CK(cudaMalloc(&dx, xq.size()));
  CK(cudaMalloc(&dw, wq.size()));
  CK(cudaMalloc(&dsx, sx.size() * 4));
  CK(cudaMalloc(&dsw, sw.size() * 4));
  CK(cudaMalloc(&dy, m * n * 4));
  CK(cudaMemcpy(dx, xq.data(), xq.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, wq.data(), wq.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dsx, sx.data(), sx.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dsw, sw.data(), sw.size() * 4, cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(e0));
    if (impl == "wgmma") {
      gd::fp8_block_wgmma(nullptr, dx, dsx, dw, dsw, m, n, k, dy, false, b);
    } else if (impl == "wgmma-f16" || impl == "wgmma-f16-lean") {
      gd::fp8_wgmma_f16_set_lean(impl == "wgmma-f16-lean");
      gd::fp8_block_wgmma_f16(nullptr, dx, dsx, dw, dsw, m, n, k, dy, false);
    } else if (impl == "mma-split") {
      gd::fp8_block_mma_decode(nullptr, dx, dsx, dw, dsw, m, n, k, dy, false);
    } else {
      std::fprintf(stderr, "unknown kernel %s\n", impl.c_str());
      return 2;
    }
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const double bytes = double(n) * k + 4.0 * sw_count;
    std::printf("%s M=%lld N=%lld K=%lld rep %d: %.1f us, %.0f GB/s of weights\n", impl.c_str(),
                (long long)m, (long long)n, (long long)k, r, ms * 1e3, bytes / (ms * 1e-3) * 1e-9);
  }
  return 0;
}
