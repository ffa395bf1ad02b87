// bench_ceilings: measures the two ceilings of the device (device-to-device copy bandwidth,
// counting bytes read + written; cuBLASLt bf16 and fp8 block-scaled peak on large squares,
// random data) and then times our GEMM entries (ops/gemm) at V4-Flash shapes for several M,
// each as a percentage of its roofline: max(bytes / copy BW, FLOPs / peak) / measured time.
//
// Timing: a CUDA graph of `kReps` back-to-back calls, rotating over enough weight copies that
// the weights never sit in L2 (as in a real forward); each replay timed with events; median.
//
// Usage: bench_ceilings [--quick]   (--quick: fewer repetitions, for smoke runs)
// Output: a markdown table on stdout.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/device_context.h"
#include "cuda/event.h"
#include "ops/gemm/gemm.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/quant/act_quant.h"
#include "ops/rms_norm/rms_norm_cuda.h"
#include "ops/rope/rope_cuda.h"
#include "runtime/gpu_kernels.h"

namespace deepinfer {
namespace {

bool g_quick = false;

__device__ __forceinline__ uint32_t hash32(uint64_t i, uint32_t seed) {
  uint64_t x = i * 0x9e3779b97f4a7c15ull + seed;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return static_cast<uint32_t>(x);
}

// Roughly uniform in [-scale, scale).
__global__ void fill_bf16(__nv_bfloat16* p, int64_t n, float scale, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float u = (hash32(i, seed) >> 8) * (1.0f / 16777216.0f);
    p[i] = __float2bfloat16((2.0f * u - 1.0f) * scale);
  }
}

// Random finite e4m3 codes (never the NaN codes 0x7f / 0xff).
__global__ void fill_e4m3(uint8_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint8_t c = static_cast<uint8_t>(hash32(i, seed));
    if ((c & 0x7f) == 0x7f) c ^= 0x01;
    p[i] = c;
  }
}

// Powers of two in [2^-12, 2^-5].
__global__ void fill_pow2(float* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __uint_as_float(static_cast<uint32_t>(127 - 12 + hash32(i, seed) % 8) << 23);
}

constexpr int kFillBlocks = 1024, kFillThreads = 256;

void* alloc_bf16(std::vector<cuda::DeviceBuffer>& keep, int64_t n, float scale, uint32_t seed) {
  keep.emplace_back(n * 2);
  fill_bf16<<<kFillBlocks, kFillThreads>>>(static_cast<__nv_bfloat16*>(keep.back().data()), n,
                                           scale, seed);
  CUDA_CHECK_LAUNCH();
  return keep.back().data();
}
void* alloc_e4m3(std::vector<cuda::DeviceBuffer>& keep, int64_t n, uint32_t seed) {
  keep.emplace_back(n);
  fill_e4m3<<<kFillBlocks, kFillThreads>>>(static_cast<uint8_t*>(keep.back().data()), n, seed);
  CUDA_CHECK_LAUNCH();
  return keep.back().data();
}
float* alloc_pow2(std::vector<cuda::DeviceBuffer>& keep, int64_t n, uint32_t seed) {
  keep.emplace_back(n * 4);
  fill_pow2<<<kFillBlocks, kFillThreads>>>(static_cast<float*>(keep.back().data()), n, seed);
  CUDA_CHECK_LAUNCH();
  return static_cast<float*>(keep.back().data());
}

// Median milliseconds of one call of fn(rep) (rep = 0..reps-1), from graph replays.
double time_ms(cuda::DeviceContext& ctx, int reps, const std::function<void(int)>& fn) {
  cudaStream_t s = ctx.stream();
  CUDA_CHECK(cudaDeviceSynchronize());  // the fills ran on the legacy stream
  for (int r = 0; r < std::min(reps, 3); ++r) fn(r);  // warm-up: plans, module loads
  CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int r = 0; r < reps; ++r) fn(r);
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm replay
  const int iters = g_quick ? 3 : 9;
  std::vector<double> ms;
  cuda::Event a, b;
  for (int it = 0; it < iters; ++it) {
    a.record(s);
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    b.record(s);
    b.synchronize();
    ms.push_back(cuda::Event::elapsed_ms(a, b) / reps);
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Ceilings {
  double copy_gbs = 0, copy_memcpy_gbs = 0, copy_kernel_gbs = 0;
  double bf16_tflops = 0, fp8_tflops = 0;
};

Ceilings measure_ceilings(cuda::DeviceContext& ctx) {
  Ceilings c;
  const size_t bytes = size_t{2} << 30;  // 2 GiB each way, far beyond the 60 MB L2
  cuda::DeviceBuffer src(bytes), dst(bytes);
  CUDA_CHECK(cudaMemsetAsync(src.data(), 0x5a, bytes, ctx.stream()));
  const double ms_memcpy = time_ms(ctx, 4, [&](int) {
    CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice,
                               ctx.stream()));
  });
  // runtime/gpu_kernels.h's copy kernel (8 blocks of 512 threads per SM; the SM count is
  // queried on its first call, one of time_ms's uncaptured warm-ups).
  const double ms_kernel = time_ms(ctx, 4, [&](int) {
    copy_uint4(ctx.stream(), src.data(), dst.data(), static_cast<int64_t>(bytes));
  });
  c.copy_memcpy_gbs = 2.0 * bytes / (ms_memcpy * 1e6);
  c.copy_kernel_gbs = 2.0 * bytes / (ms_kernel * 1e6);
  c.copy_gbs = std::max(c.copy_memcpy_gbs, c.copy_kernel_gbs);
  std::printf("| copy d2d cudaMemcpy (2 GiB) | %.0f GB/s |\n", c.copy_memcpy_gbs);
  std::printf("| copy d2d uint4 kernel (2 GiB) | %.0f GB/s |\n", c.copy_kernel_gbs);

  for (int64_t n : {4096, 8192, 16384}) {
    std::vector<cuda::DeviceBuffer> keep;
    void* x = alloc_bf16(keep, n * n, 1.0f, 1);
    void* w = alloc_bf16(keep, n * n, 1.0f, 2);
    cuda::DeviceBuffer y(n * n * 2);
    const int reps = n >= 16384 ? 2 : 5;
    const double ms = time_ms(ctx, reps, [&](int) {
      gemm_bf16_cuda(ctx, x, w, n, n, n, y.data(), DType::BF16);
    });
    const double tf = 2.0 * n * n * n / (ms * 1e9);
    c.bf16_tflops = std::max(c.bf16_tflops, tf);
    std::printf("| cuBLASLt bf16 %lld^3 | %.0f TFLOP/s |\n", static_cast<long long>(n), tf);
  }
  for (int64_t n : {4096, 8192, 16384}) {
    std::vector<cuda::DeviceBuffer> keep;
    void* x = alloc_e4m3(keep, n * n, 3);
    void* w = alloc_e4m3(keep, n * n, 4);
    float* sx = alloc_pow2(keep, n / 128 * n, 5);
    float* sw = alloc_pow2(keep, n / 128 * fp8_weight_scale_ld(n), 6);
    cuda::DeviceBuffer y(n * n * 2);
    const int reps = n >= 16384 ? 2 : 5;
    const double ms = time_ms(ctx, reps, [&](int) {
      gemm_fp8_block_cuda(ctx, x, sx, w, sw, n, n, n, y.data(), DType::BF16);
    });
    const double tf = 2.0 * n * n * n / (ms * 1e9);
    c.fp8_tflops = std::max(c.fp8_tflops, tf);
    std::printf("| cuBLASLt fp8 1x128/128x128 block-scaled %lld^3 | %.0f TFLOP/s |\n",
                static_cast<long long>(n), tf);
  }
  return c;
}

struct Linear {
  const char* name;
  int64_t n, k;
};

void bench_shapes(cuda::DeviceContext& ctx, const Ceilings& c) {
  const Linear shapes[] = {{"wq_a", 1024, 4096},          {"wq_b", 32768, 1024},
                           {"wkv", 512, 4096},            {"wo_b", 4096, 8192},
                           {"shared w1/w3", 2048, 4096},  {"shared w2", 4096, 2048},
                           {"indexer wq_b", 8192, 1024}};
  const int64_t ms_list[] = {1, 4, 16, 64, 256, 4096};
  std::printf("\n| GEMM (N x K) | M | bf16 us | bf16 %% roof | fp8 cuBLASLt us | %% roof | "
              "fp8 SIMT us | %% roof | quant+fp8 auto us | bound |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Linear& L : shapes) {
    const int64_t n = L.n, k = L.k, n_kb = ceil_div64(k, 128), n_nb = ceil_div64(n, 128);
    const int64_t ld = fp8_weight_scale_ld(k);
    // Enough weight copies to keep the weights out of L2 (>= 512 MB of bf16 weights).
    const int copies = static_cast<int>(std::clamp<int64_t>((int64_t{512} << 20) / (2 * n * k), 2, 64));
    std::vector<cuda::DeviceBuffer> keep;
    std::vector<void*> w_bf16, w_fp8;
    std::vector<float*> w_scale;
    for (int i = 0; i < copies; ++i) {
      w_bf16.push_back(alloc_bf16(keep, n * k, 0.05f, 100 + i));
      w_fp8.push_back(alloc_e4m3(keep, n * k, 200 + i));
      w_scale.push_back(alloc_pow2(keep, n_nb * ld, 300 + i));
    }
    for (int64_t m : ms_list) {
      std::vector<cuda::DeviceBuffer> act;
      void* x = alloc_bf16(act, m * k, 2.0f, 7);
      uint8_t* xq = static_cast<uint8_t*>(alloc_e4m3(act, m * k, 8));
      float* sx = alloc_pow2(act, n_kb * m, 9);
      cuda::DeviceBuffer y(m * n * 2);
      const int reps = m >= 4096 ? 4 : 2 * copies;
      const double t_bf16 = time_ms(ctx, reps, [&](int r) {
        gemm_bf16_cuda(ctx, x, w_bf16[r % copies], m, n, k, y.data(), DType::BF16);
      });
      auto fp8 = [&](Fp8GemmImpl impl) {
        return time_ms(ctx, reps, [&](int r) {
          gemm_fp8_block_cuda(ctx, xq, sx, w_fp8[r % copies], w_scale[r % copies], m, n, k,
                              y.data(), DType::BF16, impl);
        });
      };
      const bool has_lt = fp8_block_cublaslt_supported(ctx, m, n, k, DType::BF16);
      const double t_fp8 = has_lt ? fp8(Fp8GemmImpl::kCublasLt) : 0.0;
      const double t_simt = m <= 16 ? fp8(Fp8GemmImpl::kSimt) : 0.0;
      const double t_qfp8 = time_ms(ctx, reps, [&](int r) {
        act_quant_cuda(ctx.stream(), x, DType::BF16, m, k, 128, xq, sx, ScaleLayout::kBlockMajor);
        gemm_fp8_block_cuda(ctx, xq, sx, w_fp8[r % copies], w_scale[r % copies], m, n, k,
                            y.data(), DType::BF16);
      });
      const double flops = 2.0 * m * n * k;
      const double bytes_bf16 = 2.0 * (n * k + m * k + m * n);
      const double bytes_fp8 = n * k + 4.0 * n_nb * ld + m * k + 4.0 * n_kb * m + 2.0 * m * n;
      // Floors in ms: bytes / (GB/s * 1e6), FLOPs / (TFLOP/s * 1e9).
      const double floor_bf16 = std::max(bytes_bf16 / (c.copy_gbs * 1e6),
                                         flops / (c.bf16_tflops * 1e9));
      const double floor_fp8 = std::max(bytes_fp8 / (c.copy_gbs * 1e6), flops / (c.fp8_tflops * 1e9));
      const bool mem_bound = bytes_fp8 / (c.copy_gbs * 1e6) > flops / (c.fp8_tflops * 1e9);
      auto cell = [](double t, double floor) {
        char buf[64];
        if (t <= 0) return std::string("n/a | -");
        std::snprintf(buf, sizeof(buf), "%.1f | %.0f%%", t * 1e3, 100.0 * floor / t);
        return std::string(buf);
      };
      std::printf("| %s (%lld x %lld) | %lld | %s | %s | %s | %.1f | %.1f | %s |\n", L.name,
                  static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(m),
                  cell(t_bf16, floor_bf16).c_str(), cell(t_fp8, floor_fp8).c_str(),
                  cell(t_simt, floor_fp8).c_str(), t_qfp8 * 1e3, floor_fp8 * 1e3,
                  mem_bound ? "memory" : "compute");
      std::fflush(stdout);
    }
  }
}

// Memory-bound ops at prefill-sized inputs (far beyond L2): achieved GB/s (bytes each op
// must read + write once) as a share of the measured copy bandwidth.
void bench_memory_ops(cuda::DeviceContext& ctx, const Ceilings& c) {
  std::printf("\n| op | shape | us | GB/s | %% of copy |\n|---|---|---|---|---|\n");
  auto report = [&](const char* op, const char* shape, double ms, double bytes) {
    const double gbs = bytes / (ms * 1e6);
    std::printf("| %s | %s | %.1f | %.0f | %.0f%% |\n", op, shape, ms * 1e3, gbs,
                100.0 * gbs / c.copy_gbs);
    std::fflush(stdout);
  };
  std::vector<cuda::DeviceBuffer> keep;
  const int64_t tokens = 4096, dim = 4096, hc = 4;
  // Activation quantisation: bf16 [4096, 4096] -> e4m3 + fp32 scales.
  {
    void* x = alloc_bf16(keep, tokens * dim, 3.0f, 11);
    keep.emplace_back(tokens * dim);
    uint8_t* q = static_cast<uint8_t*>(keep.back().data());
    keep.emplace_back(tokens * dim / 128 * 4);
    float* sc = static_cast<float*>(keep.back().data());
    const double ms = time_ms(ctx, 10, [&](int) {
      act_quant_cuda(ctx.stream(), x, DType::BF16, tokens, dim, 128, q, sc,
                     ScaleLayout::kBlockMajor);
    });
    report("act_quant bf16->e4m3", "4096 x 4096", ms, tokens * dim * 3.0 + tokens * dim / 32.0);
  }
  // fp32 buffers filled with the byte 0x3c (every word 0x3c3c3c3c ~ 0.0115: finite, non-zero).
  auto f32 = [&](int64_t n) {
    keep.emplace_back(n * 4);
    CUDA_CHECK(cudaMemsetAsync(keep.back().data(), 0x3c, n * 4, ctx.stream()));
    return static_cast<float*>(keep.back().data());
  };
  {
    float* x = f32(tokens * dim);
    float* y = f32(tokens * dim);
    float* w = f32(dim);
    const double ms = time_ms(ctx, 10, [&](int) {
      rms_norm_cuda(ctx.stream(), x, w, tokens, dim, dim, 1e-6f, y);
    });
    report("rms_norm fp32", "4096 x 4096", ms, 8.0 * tokens * dim);
    const double ms_h = time_ms(ctx, 10, [&](int) {
      rms_norm_cuda(ctx.stream(), x, nullptr, tokens * dim / 512, 512, 512, 1e-6f, y);
    });
    report("rms_norm fp32 per head", "32768 x 512", ms_h, 8.0 * tokens * dim);
  }
  {
    const int64_t heads = 64, head_dim = 512, n_tok = 1024;
    float* q = f32(n_tok * heads * head_dim);
    float* inv = f32(32);
    keep.emplace_back(n_tok * 4);
    CUDA_CHECK(cudaMemsetAsync(keep.back().data(), 0, n_tok * 4, ctx.stream()));
    const int32_t* pos = static_cast<const int32_t*>(keep.back().data());
    const double ms = time_ms(ctx, 10, [&](int) {
      rope_cuda(ctx.stream(), q, pos, n_tok, heads, head_dim, 64, inv, false);
    });
    report("rope (64 of 512 dims)", "1024 tok x 64 heads", ms, 8.0 * n_tok * heads * 64);
  }
  {
    float* x = f32(tokens * hc * dim);
    float* fn = f32(24 * hc * dim);
    float* base = f32(24);
    float* scale = f32(3);
    float* pre = f32(tokens * hc);
    float* post = f32(tokens * hc);
    float* comb = f32(tokens * hc * hc);
    float* y = f32(tokens * dim);
    float* x_out = f32(tokens * hc * dim);
    HcMixParams p;
    p.dim = dim;
    float* mix = f32(hc_mix_scratch_floats(tokens, p));
    for (HcMixImpl impl : {HcMixImpl::kSplitK, HcMixImpl::kGemm}) {
      const bool split = impl == HcMixImpl::kSplitK;
      const double ms_mix = time_ms(ctx, 10, [&](int) {
        hc_mix_cuda(ctx, x, tokens, fn, base, scale, p, mix, pre, post, comb, impl);
      });
      report(split ? "hc_mix split-K (+Sinkhorn)" : "hc_mix fp32 GEMM (+Sinkhorn)",
             "4096 tok x 4 x 4096", ms_mix, 4.0 * tokens * hc * dim);
      for (int64_t n_tok : {1, 64}) {
        const double ms_mix1 = time_ms(ctx, 20, [&](int) {
          hc_mix_cuda(ctx, x, n_tok, fn, base, scale, p, mix, pre, post, comb, impl);
        });
        report(split ? "hc_mix split-K decode" : "hc_mix fp32 GEMM decode",
               n_tok == 1 ? "1 tok (fn 1.5 MB)" : "64 tok (fn 1.5 MB)", ms_mix1,
               4.0 * (24 + n_tok) * hc * dim);
      }
    }
    const double ms_col = time_ms(ctx, 10, [&](int) {
      hc_collapse_cuda(ctx.stream(), x, pre, tokens, hc, dim, y);
    });
    report("hc_collapse", "4096 tok x 4 x 4096", ms_col, 4.0 * tokens * (hc + 1) * dim);
    const double ms_exp = time_ms(ctx, 10, [&](int) {
      hc_expand_cuda(ctx.stream(), x, y, post, comb, tokens, hc, dim, x_out);
    });
    report("hc_expand", "4096 tok x 4 x 4096", ms_exp, 4.0 * tokens * (2 * hc + 1) * dim);
  }
}

int run(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) g_quick |= std::strcmp(argv[i], "--quick") == 0;
  cudaDeviceProp prop{};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  int driver = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  std::printf("| device | %s, %d SMs, %.0f MB L2, driver API %d |\n|---|---|\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize / 1e6, driver);
  cuda::DeviceContext ctx;
  const Ceilings c = measure_ceilings(ctx);
  std::printf("| ceilings used | copy %.0f GB/s, bf16 %.0f TFLOP/s, fp8 %.0f TFLOP/s |\n",
              c.copy_gbs, c.bf16_tflops, c.fp8_tflops);
  bench_shapes(ctx, c);
  bench_memory_ops(ctx, c);
  return 0;
}

}  // namespace
}  // namespace deepinfer

int main(int argc, char** argv) {
  try {
    return deepinfer::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ceilings: %s\n", e.what());
    return 1;
  }
}
