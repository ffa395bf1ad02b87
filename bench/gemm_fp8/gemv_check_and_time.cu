// Standalone check + timing of the decode FP8 GEMM (ops/gemm/gemm_fp8_gemv_cuda.h) against a
// plain CPU reference (gemm_ref.cc's arithmetic, rewritten on the CUDA scale layouts so no BLAS
// is linked) at awkward sizes, then GB/s at V4.1-Flash / V4-Flash decode shapes (M 1, 4, 16,
// 64) for the gemv and the SIMT kernel (gemm_fp8_kernels.h), as % of the copy bandwidth
// (cudaMemcpy d2d of 1 GiB, bytes read + written) measured in the same process. Bytes counted:
// weights N K + weight scales + activations M K + their scales + output. Weights rotate over
// copies totalling >= 512 MB so every call streams them from HBM, not L2.
// Build and run: bench/gemm_fp8/gemv_run_h200.sh. Exit status 1 when a check fails.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_fp8_gemv_cuda.h"
#include "ops/gemm/gemm_fp8_kernels.h"

namespace {

using deepinfer::ceil_div64;
using deepinfer::fp8_weight_scale_ld;

#define CK(call)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

float e4m3_value(uint8_t c) {  // e4m3fn: bias 7, no infinities, 0x7f / 0xff NaN
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return s ? -v : v;
}

struct Host {
  int64_t m, n, k, b;
  std::vector<uint8_t> xq, wq;
  std::vector<float> sx, sw;  // sx [n_kb, m], sw [n_nb, ld]
};

Host make(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, int64_t b) {
  Host h{m, n, k, b, {}, {}, {}, {}};
  std::uniform_int_distribution<int> code(0, 255);
  auto fill = [&](std::vector<uint8_t>& v, int64_t count) {
    v.resize(count);
    for (auto& c : v) {
      int x = code(rng);
      while ((x & 0x7f) == 0x7f) x = code(rng);
      c = static_cast<uint8_t>(x);
    }
  };
  fill(h.xq, m * k);
  fill(h.wq, n * k);
  const int64_t n_kb = ceil_div64(k, b), ld = fp8_weight_scale_ld(k, b);
  std::uniform_int_distribution<int> ex(-10, -2), ew(-12, -4);
  h.sx.resize(n_kb * m);
  for (auto& s : h.sx) s = std::ldexp(1.0f, ex(rng));
  h.sw.assign(ceil_div64(n, b) * ld, 1.0f);
  for (int64_t i = 0; i < ceil_div64(n, b); ++i)
    for (int64_t j = 0; j < n_kb; ++j) h.sw[i * ld + j] = std::ldexp(1.0f, ew(rng));
  return h;
}

std::vector<float> reference(const Host& h) {
  const int64_t n_kb = ceil_div64(h.k, h.b), ld = fp8_weight_scale_ld(h.k, h.b);
  std::vector<float> y(h.m * h.n);
  for (int64_t r = 0; r < h.m; ++r)
    for (int64_t c = 0; c < h.n; ++c) {
      float acc = 0.0f;
      for (int64_t kb = 0; kb < n_kb; ++kb) {
        float part = 0.0f;
        for (int64_t i = kb * h.b; i < std::min(h.k, (kb + 1) * h.b); ++i)
          part += e4m3_value(h.xq[r * h.k + i]) * e4m3_value(h.wq[c * h.k + i]);
        acc += part * h.sx[kb * h.m + r] * h.sw[(c / h.b) * ld + kb];
      }
      y[r * h.n + c] = acc;
    }
  return y;
}

template <typename T>
T* to_device(const std::vector<T>& v) {
  T* d = nullptr;
  CK(cudaMalloc(&d, std::max<size_t>(v.size() * sizeof(T), 16)));
  CK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

bool check(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, int64_t b) {
  const Host h = make(rng, m, n, k, b);
  uint8_t *xq = to_device(h.xq), *wq = to_device(h.wq);
  float *sx = to_device(h.sx), *sw = to_device(h.sw), *y = nullptr;
  CK(cudaMalloc(&y, m * n * sizeof(float)));
  CK(cudaMemset(y, 0xff, m * n * sizeof(float)));  // NaN poison
  deepinfer::gemm_fp8_gemv_cuda(nullptr, xq, sx, wq, sw, m, n, k, y, deepinfer::DType::F32, b);
  CK(cudaDeviceSynchronize());
  std::vector<float> got(m * n);
  CK(cudaMemcpy(got.data(), y, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  const std::vector<float> ref = reference(h);
  double err = 0, norm = 0, max_rel = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::isfinite(got[i]) ? static_cast<double>(got[i]) - ref[i] : INFINITY;
    err += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
    max_rel = std::max(max_rel, std::fabs(d) / (std::fabs(ref[i]) + 1e-30));
  }
  const double nmse = norm > 0 ? err / norm : err;
  const bool ok = nmse < 1e-9;
  std::printf("check block %3lld M %2lld N %5lld K %5lld split %d: nmse %.2e max_rel %.2e %s\n",
              (long long)b, (long long)m, (long long)n, (long long)k, deepinfer::fp8_gemv_split(n, k),
              nmse, max_rel, ok ? "PASS" : "FAIL");
  cudaFree(xq); cudaFree(wq); cudaFree(sx); cudaFree(sw); cudaFree(y);
  return ok;
}

double copy_gbps() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e0));
  const int iters = 10;
  for (int i = 0; i < iters; ++i) CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  cudaFree(a); cudaFree(b);
  return 2.0 * bytes * iters / (ms * 1e-3) / 1e9;
}

void time_shape(const char* name, int64_t n, int64_t k, int64_t b, double copy) {
  const int64_t w_bytes = n * k, n_copies = std::clamp<int64_t>((512ll << 20) / w_bytes + 1, 2, 256);
  const int64_t ld = fp8_weight_scale_ld(k, b), sw_count = ceil_div64(n, b) * ld;
  std::vector<uint8_t*> wq(n_copies);
  std::vector<float*> sw(n_copies);
  for (auto& p : wq) { CK(cudaMalloc(&p, w_bytes)); CK(cudaMemset(p, 0x38, w_bytes)); }
  for (auto& p : sw) { CK(cudaMalloc(&p, sw_count * 4)); CK(cudaMemset(p, 0, sw_count * 4)); }
  uint8_t* xq = nullptr;
  float *sx = nullptr, *y = nullptr;
  CK(cudaMalloc(&xq, 64 * k));
  CK(cudaMemset(xq, 0x38, 64 * k));
  CK(cudaMalloc(&sx, ceil_div64(k, b) * 64 * 4));
  CK(cudaMemset(sx, 0, ceil_div64(k, b) * 64 * 4));
  CK(cudaMalloc(&y, 64 * n * 2));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int64_t m : {1, 4, 16, 64}) {
    const double bytes = double(w_bytes) + sw_count * 4.0 + m * k + ceil_div64(k, b) * m * 4.0 + m * n * 2.0;
    double us[2];
    for (int impl = 0; impl < 2; ++impl) {
      auto call = [&](int64_t i) {
        const int64_t c = i % n_copies;
        if (impl == 0) {
          deepinfer::gemm_fp8_gemv_cuda(nullptr, xq, sx, wq[c], sw[c], m, n, k, y, deepinfer::DType::BF16, b);
        } else {
          deepinfer::gemm_detail::fp8_block_simt(nullptr, xq, sx, wq[c], sw[c], m, n, k, y, true, b);
        }
      };
      for (int64_t i = 0; i < n_copies; ++i) call(i);  // warm-up
      const int64_t iters = std::max<int64_t>(2 * n_copies, 20);
      CK(cudaEventRecord(e0));
      for (int64_t i = 0; i < iters; ++i) call(i);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      us[impl] = ms * 1e3 / iters;
    }
    const double g0 = bytes / (us[0] * 1e-6) / 1e9, g1 = bytes / (us[1] * 1e-6) / 1e9;
    std::printf("%-22s b%-3lld N %5lld K %5lld M %2lld | gemv %8.1f us %6.0f GB/s %5.1f%% | simt %8.1f us "
                "%6.0f GB/s %5.1f%% | x%.2f\n",
                name, (long long)b, (long long)n, (long long)k, (long long)m, us[0], g0,
                100 * g0 / copy, us[1], g1, 100 * g1 / copy, us[1] / us[0]);
  }
  for (auto p : wq) cudaFree(p);
  for (auto p : sw) cudaFree(p);
  cudaFree(xq); cudaFree(sx); cudaFree(y);
}

}  // namespace

int main(int argc, char** argv) {
  const bool check_only = argc > 1 && std::strcmp(argv[1], "check") == 0;
  std::mt19937_64 rng(57);
  bool ok = true;
  for (int64_t b : {32, 128})
    for (int64_t m : {1, 3, 17, 64}) {
      ok &= check(rng, m, 7, 48, b);
      ok &= check(rng, m, 100, 1008, b);
      ok &= check(rng, m, 100, 5120, b);   // split-K over a cluster
      ok &= check(rng, m, 1280, 1008, b);
    }
  std::printf("checks: %s\n", ok ? "ALL PASS" : "SOME FAILED");
  if (check_only) return ok ? 0 : 1;
  const double copy = copy_gbps();
  std::printf("copy bandwidth (d2d 1 GiB, read + write): %.0f GB/s\n", copy);
  struct S { const char* name; int64_t n, k, b; };
  const S shapes[] = {{"v41 wq_b", 32768, 1280, 32}, {"v41 wo_b", 5120, 8192, 32},
                      {"v41 wq_a", 1280, 5120, 32},  {"v41 wo_a group", 1024, 4096, 32},
                      {"v41 shared w1", 2304, 5120, 32}, {"v41 shared w2", 5120, 2304, 32},
                      {"v4 wq_b", 32768, 1024, 128}, {"v4 wo_b", 4096, 8192, 128},
                      {"v4 wq_a", 1024, 4096, 128}};
  for (const auto& s : shapes) time_shape(s.name, s.n, s.k, s.b, copy);
  return ok ? 0 : 1;
}
