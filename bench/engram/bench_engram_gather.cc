// bench_engram_gather: Engram table-row gather bandwidth at V4.1-Flash row shapes (head_dim 256:
// 24 rows of 256 e4m3 codes + 8 e8m0 scales per token, packed rows of 272 B,
// engram_packed_row_bytes) for B = 1 .. 256 tokens, from a table in pinned mapped host memory
// (zero-copy over PCIe) and from the same table in HBM:
//   * dequant: engram_dequant_cuda (the plain path of GpuEngram::apply: rows -> fp32 e);
//   * gather:  engram_gather_rows_cuda (raw rows -> an HBM staging buffer; the prefetch);
// next to the ceiling measured in the same run: one contiguous pinned-host -> device
// cudaMemcpyAsync of the same byte count and of 256 MiB.
// Ids are uniform over the table (hash ids are), which is large enough (default 4M rows,
// 1.1 GB) that the rows do not sit in L2; every launch of a measurement has its own fresh ids
// (drawn before the measurement), so no launch re-reads rows an earlier one brought into L2.
// Bytes counted: the 264 useful bytes per row.
// Timing: per configuration, one warm-up and `iters` launches back to back between two
// events, mean.
//
// Usage: bench_engram_gather [--rows N] [--iters N]
// Output: a markdown table on stdout. Reports only; asserts nothing.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device_context.h"
#include "cuda/device_tensor.h"
#include "cuda/event.h"
#include "ops/engram/engram_cuda.h"

namespace deepinfer {
namespace {

constexpr int64_t kHeadDim = 256;
constexpr int kCols = 24;

// fn(i): launch i (0 = the warm-up, 1..iters timed).
template <typename Fn>
double mean_ms(cudaStream_t s, int iters, Fn&& fn) {
  fn(0);
  cuda::Event a, b;
  a.record(s);
  for (int i = 1; i <= iters; ++i) fn(i);
  b.record(s);
  b.synchronize();
  return cuda::Event::elapsed_ms(a, b) / iters;
}

int run(int64_t rows, int iters) {
  const int64_t rb = engram_packed_row_bytes(kHeadDim), table_bytes = rows * rb;
  const int64_t useful = kHeadDim + kHeadDim / 32;
  std::printf("# bench_engram_gather: %lld rows x %lld B (%.2f GB), %d iterations\n\n",
              static_cast<long long>(rows), static_cast<long long>(rb), table_bytes / 1e9, iters);
  void* host = nullptr;
  CUDA_CHECK(cudaHostAlloc(&host, table_bytes, cudaHostAllocMapped));
  std::mt19937_64 rng(1);
  auto* hp = static_cast<uint8_t*>(host);
  for (int64_t i = 0; i < table_bytes; i += 8) {
    uint64_t v = rng() & 0x7e7e7e7e7e7e7e7eull;  // finite e4m3 codes, scales <= 126
    std::memcpy(hp + i, &v, std::min<int64_t>(8, table_bytes - i));
  }
  void* mapped = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&mapped, host, 0));
  Tensor dev = cuda::device_empty(DType::U8, {table_bytes});
  cuda::copy_h2d(dev.raw(), host, table_bytes);

  cuda::DeviceContext ctx;
  cudaStream_t s = ctx.stream();
  const int64_t max_b = 256;
  Tensor ids = cuda::device_empty(DType::I64, {(iters + 1) * max_b * kCols});
  Tensor e = cuda::device_empty(DType::F32, {max_b * kCols * kHeadDim});
  Tensor staged = cuda::device_empty(DType::U8, {max_b * kCols * rb});
  Tensor copy_dst = cuda::device_empty(DType::U8, {int64_t{256} << 20});
  std::uniform_int_distribution<int64_t> pick(0, rows - 1);

  const double big_ms = mean_ms(s, iters, [&](int) {
    CUDA_CHECK(cudaMemcpyAsync(copy_dst.raw(), host, size_t{256} << 20, cudaMemcpyHostToDevice, s));
  });
  std::printf("pinned host -> device copy, 256 MiB contiguous: %.1f GB/s\n\n",
              (256 << 20) / big_ms / 1e6);
  std::printf("| B | bytes | dequant host GB/s | dequant HBM GB/s | gather host GB/s | "
              "gather HBM GB/s | memcpy same bytes GB/s | dequant host us |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int64_t b = 1; b <= max_b; b *= 2) {
    // Fresh ids for every launch of the next measurement.
    auto fresh_ids = [&] {
      std::vector<int64_t> h((iters + 1) * b * kCols);
      for (auto& id : h) id = pick(rng);
      cuda::copy_h2d(ids.raw(), h.data(), h.size() * sizeof(int64_t));
    };
    auto ids_of = [&](int i) { return ids.data<int64_t>() + i * b * kCols; };
    const double bytes = static_cast<double>(b) * kCols * useful;
    auto view = [&](const void* base) {
      const auto* p = static_cast<const uint8_t*>(base);
      return EngramTableView{p, p + kHeadDim, rb, rb, rows, kHeadDim};
    };
    const EngramTableView vh = view(mapped), vd = view(dev.raw());
    fresh_ids();
    const double dq_h = mean_ms(s, iters, [&](int i) {
      engram_dequant_cuda(s, vh, ids_of(i), b, kCols, e.data<float>());
    });
    fresh_ids();
    const double dq_d = mean_ms(s, iters, [&](int i) {
      engram_dequant_cuda(s, vd, ids_of(i), b, kCols, e.data<float>());
    });
    fresh_ids();
    const double g_h = mean_ms(s, iters, [&](int i) {
      engram_gather_rows_cuda(s, static_cast<const uint8_t*>(mapped), rb, ids_of(i), b, kCols,
                              staged.data<uint8_t>());
    });
    fresh_ids();
    const double g_d = mean_ms(s, iters, [&](int i) {
      engram_gather_rows_cuda(s, dev.data<uint8_t>(), rb, ids_of(i), b, kCols,
                              staged.data<uint8_t>());
    });
    const double cp = mean_ms(s, iters, [&](int) {
      CUDA_CHECK(cudaMemcpyAsync(copy_dst.raw(), host, static_cast<size_t>(bytes),
                                 cudaMemcpyHostToDevice, s));
    });
    auto gbs = [&](double ms) { return bytes / ms / 1e6; };
    std::printf("| %lld | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
                static_cast<long long>(b), bytes, gbs(dq_h), gbs(dq_d), gbs(g_h), gbs(g_d), gbs(cp),
                dq_h * 1e3);
  }
  CUDA_CHECK(cudaFreeHost(host));
  return 0;
}

}  // namespace
}  // namespace deepinfer

int main(int argc, char** argv) {
  int64_t rows = int64_t{4} << 20;
  int iters = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc) {
      rows = std::atoll(argv[++i]);
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_engram_gather [--rows N] [--iters N]\n");
      return 2;
    }
  }
  if (rows < 1 || iters < 1) {
    std::fprintf(stderr, "bench_engram_gather: --rows and --iters must be positive\n");
    return 2;
  }
  try {
    return deepinfer::run(rows, iters);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_engram_gather: %s\n", e.what());
    return 1;
  }
}
