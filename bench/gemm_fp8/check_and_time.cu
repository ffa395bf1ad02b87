// Standalone check + timing of the block-scaled FP8 GEMM kernels (ops/gemm/gemm_fp8_kernels.h):
// the tensor-core kernel (kMma) against a plain CPU reference (the arithmetic of gemm_ref.cc's
// gemm_fp8_block_ref, rewritten here on the CUDA scale layouts so no BLAS is linked) at awkward
// sizes, kMma against the SIMT kernel at V4.1-Flash shapes, then times at M = 4096 and 64
// (TFLOP/s = 2 M N K / t) for SIMT and kMma, block 32, plus block 128 kMma vs cuBLASLt.
// Build and run: bench/gemm_fp8/run_h200.sh. Exit status 1 when a check fails.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "base/error.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/gemm_fp8_kernels.h"

namespace {

using deepinfer::ceil_div64;
using deepinfer::fp8_weight_scale_ld;
namespace gd = deepinfer::gemm_detail;

#define CK(call)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
      std::exit(2);                                                                  \
    }                                                                                \
  } while (0)

float e4m3_to_f32(uint8_t c) {  // e4m3fn: bias 7, no infinities, 0x7f / 0xff NaN
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                         : std::ldexp(1.0f + m / 8.0f, e - 7);
  return s ? -v : v;
}

float bf16_round(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
  std::memcpy(&v, &u, 4);
  return v;
}

struct Problem {
  int64_t m, n, k, block;
  std::vector<uint8_t> xq, wq;
  std::vector<float> sx, sw;  // CUDA layouts: sx [n_kb, m], sw [n_nb, ld]
};

Problem make(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, int64_t block) {
  Problem p{m, n, k, block, {}, {}, {}, {}};
  std::uniform_int_distribution<int> code(0, 255);
  auto fill = [&](std::vector<uint8_t>& v, int64_t count) {
    v.resize(count);
    for (auto& c : v) {
      int x = code(rng);
      while ((x & 0x7f) == 0x7f) x = code(rng);  // NaN codes
      c = static_cast<uint8_t>(x);
    }
  };
  fill(p.xq, m * k);
  fill(p.wq, n * k);
  const int64_t n_kb = ceil_div64(k, block), ld = fp8_weight_scale_ld(k, block);
  std::uniform_int_distribution<int> ex(-10, -2), ew(-12, -4);
  p.sx.resize(n_kb * m);
  for (auto& s : p.sx) s = std::ldexp(1.0f, ex(rng));  // a wrong scale is off by up to 2^8
  p.sw.assign(ceil_div64(n, block) * ld, 1.0f);
  for (int64_t i = 0; i < ceil_div64(n, block); ++i)
    for (int64_t j = 0; j < n_kb; ++j) p.sw[i * ld + j] = std::ldexp(1.0f, ew(rng));
  return p;
}

// y = Σ_kb (Σ_{k ∈ kb} x w) · sx · sw in fp32, as gemm_fp8_block_ref does.
std::vector<float> reference(const Problem& p) {
  std::vector<float> xf(p.m * p.k), wf(p.n * p.k), y(p.m * p.n);
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = e4m3_to_f32(p.xq[i]);
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = e4m3_to_f32(p.wq[i]);
  const int64_t n_kb = ceil_div64(p.k, p.block), ld = fp8_weight_scale_ld(p.k, p.block);
  const int n_thr = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int t = 0; t < n_thr; ++t) {
    pool.emplace_back([&, t] {
      for (int64_t row = t; row < p.m; row += n_thr) {
        for (int64_t col = 0; col < p.n; ++col) {
          float acc = 0.0f;
          for (int64_t kb = 0; kb < n_kb; ++kb) {
            const int64_t k0 = kb * p.block, k1 = std::min(p.k, k0 + p.block);
            float part = 0.0f;
            for (int64_t i = k0; i < k1; ++i) part += xf[row * p.k + i] * wf[col * p.k + i];
            acc += part * p.sx[kb * p.m + row] * p.sw[(col / p.block) * ld + kb];
          }
          y[row * p.n + col] = acc;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  return y;
}

struct Dev {
  uint8_t *xq = nullptr, *wq = nullptr;
  float *sx = nullptr, *sw = nullptr;
  void* y = nullptr;
  explicit Dev(const Problem& p) {
    CK(cudaMalloc(&xq, p.xq.size()));
    CK(cudaMalloc(&wq, p.wq.size()));
    CK(cudaMalloc(&sx, p.sx.size() * 4));
    CK(cudaMalloc(&sw, p.sw.size() * 4));
    CK(cudaMalloc(&y, p.m * p.n * 4));
    CK(cudaMemcpy(xq, p.xq.data(), p.xq.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(wq, p.wq.data(), p.wq.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(sx, p.sx.data(), p.sx.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(sw, p.sw.data(), p.sw.size() * 4, cudaMemcpyHostToDevice));
  }
  ~Dev() {
    cudaFree(xq);
    cudaFree(wq);
    cudaFree(sx);
    cudaFree(sw);
    cudaFree(y);
  }
};

enum class Impl { kSimt, kMma, kCublasLt };
const char* impl_name(Impl i) {
  return i == Impl::kSimt ? "simt" : i == Impl::kMma ? "mma" : "cublaslt";
}

// cuBLASLt block-128 (VEC128 activations, BLK128x128 weights) as ops/gemm/gemm.cu plans it.
struct Lt {
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void* ws = nullptr;
  size_t ws_bytes = 64 << 20;
  bool ok = false;
  Lt(const Dev& d, int64_t m, int64_t n, int64_t k, bool y_bf16) {
    if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) return;
    CK(cudaMalloc(&ws, ws_bytes));
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    const int32_t ma = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t mb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof(ma));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof(mb));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &d.sw, sizeof(d.sw));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &d.sx, sizeof(d.sx));
    cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, k, n, k);
    cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, k, m, k);
    cublasLtMatrixLayoutCreate(&c, y_bf16 ? CUDA_R_16BF : CUDA_R_32F, n, m, n);
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &ws_bytes, sizeof(ws_bytes));
    cublasLtMatmulHeuristicResult_t r{};
    int nr = 0;
    ok = cublasLtMatmulAlgoGetHeuristic(h, op, a, b, c, c, pref, 1, &r, &nr) ==
             CUBLAS_STATUS_SUCCESS && nr > 0;
    algo = r.algo;
    cublasLtMatmulPreferenceDestroy(pref);
  }
  void run(const Dev& d) {
    const float alpha = 1.0f, beta = 0.0f;
    cublasLtMatmul(h, op, &alpha, d.wq, a, d.xq, b, &beta, d.y, c, d.y, c, &algo, ws, ws_bytes,
                   nullptr);
  }
  ~Lt() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
    if (ws) cudaFree(ws);
    if (h) cublasLtDestroy(h);
  }
};

void launch(Impl impl, const Problem& p, const Dev& d, bool y_bf16) {
  if (impl == Impl::kSimt)
    gd::fp8_block_simt(nullptr, d.xq, d.sx, d.wq, d.sw, p.m, p.n, p.k, d.y, y_bf16, p.block);
  else
    gd::fp8_block_mma(nullptr, d.xq, d.sx, d.wq, d.sw, p.m, p.n, p.k, d.y, y_bf16, p.block);
}

std::vector<float> run(Impl impl, const Problem& p, const Dev& d, bool y_bf16) {
  CK(cudaMemset(d.y, 0xff, p.m * p.n * 4));  // NaN poison
  launch(impl, p, d, y_bf16);
  CK(cudaDeviceSynchronize());
  std::vector<float> out(p.m * p.n);
  if (y_bf16) {
    std::vector<uint16_t> h(p.m * p.n);
    CK(cudaMemcpy(h.data(), d.y, h.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < h.size(); ++i) {
      const uint32_t u = static_cast<uint32_t>(h[i]) << 16;
      std::memcpy(&out[i], &u, 4);
    }
  } else {
    CK(cudaMemcpy(out.data(), d.y, out.size() * 4, cudaMemcpyDeviceToHost));
  }
  return out;
}

// NMSE (NaN counts as a failure) and max |error| / max |ref|.
struct Err {
  double nmse, rel_max;
};
Err compare(const std::vector<float>& y, const std::vector<float>& ref) {
  double num = 0, den = 0, emax = 0, rmax = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double e = static_cast<double>(y[i]) - ref[i];
    if (!std::isfinite(y[i])) return {INFINITY, INFINITY};
    num += e * e;
    den += static_cast<double>(ref[i]) * ref[i];
    emax = std::max(emax, std::fabs(e));
    rmax = std::max(rmax, std::fabs(static_cast<double>(ref[i])));
  }
  return {num / std::max(den, 1e-300), emax / std::max(rmax, 1e-300)};
}

int g_fail = 0;

// Bounds: e4m3 products are exact in fp32, so an F32 output differs from the reference only by
// fp32 summation order: relative error per sum ~ K * 2^-24 at worst, NMSE ~1e-13 in practice;
// 1e-9 leaves room and still fails any wrong scale / fragment (NMSE ~1). BF16 output: rounding
// (2^-9 relative) -> NMSE ~1e-6; bound 1e-5 against the bf16-rounded reference.
void check_ref(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, int64_t block) {
  const Problem p = make(rng, m, n, k, block);
  const Dev d(p);
  const auto ref = reference(p);
  const Err ef = compare(run(Impl::kMma, p, d, false), ref);
  std::vector<float> ref_b = ref;
  for (auto& v : ref_b) v = bf16_round(v);
  const Err eb = compare(run(Impl::kMma, p, d, true), ref_b);
  const bool ok = ef.nmse < 1e-9 && eb.nmse < 1e-5;
  g_fail += !ok;
  std::printf("check mma vs ref  b%-3lld M=%-5lld N=%-6lld K=%-5lld f32 nmse %.2e max %.2e | "
              "bf16 nmse %.2e  %s\n",
              (long long)block, (long long)m, (long long)n, (long long)k, ef.nmse, ef.rel_max,
              eb.nmse, ok ? "PASS" : "FAIL");
}

void check_simt(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, int64_t block) {
  const Problem p = make(rng, m, n, k, block);
  const Dev d(p);
  const Err e = compare(run(Impl::kMma, p, d, false), run(Impl::kSimt, p, d, false));
  const bool ok = e.nmse < 1e-9;
  g_fail += !ok;
  std::printf("check mma vs simt b%-3lld M=%-5lld N=%-6lld K=%-5lld f32 nmse %.2e max %.2e  %s\n",
              (long long)block, (long long)m, (long long)n, (long long)k, e.nmse, e.rel_max,
              ok ? "PASS" : "FAIL");
}

double time_ms(Impl impl, const Problem& p, const Dev& d, Lt* lt) {
  auto go = [&] {
    if (impl == Impl::kCublasLt)
      lt->run(d);
    else
      launch(impl, p, d, true);
  };
  go();
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  go();
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float first = 0;
  CK(cudaEventElapsedTime(&first, e0, e1));
  const int iters = std::max(2, std::min(50, static_cast<int>(200.0 / std::max(first, 1e-3f))));
  CK(cudaEventRecord(e0));
  for (int i = 0; i < iters; ++i) go();
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaGetLastError());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / iters;
}

struct Shape {
  const char* name;
  int64_t n, k;
};

void time_shape(std::mt19937_64& rng, const Shape& s, int64_t m, int64_t block) {
  const Problem p = make(rng, m, s.n, s.k, block);
  const Dev d(p);
  const double flop = 2.0 * m * s.n * s.k;
  const double t_mma = time_ms(Impl::kMma, p, d, nullptr);
  double t_other = 0;
  Impl other = Impl::kSimt;
  if (block == 128) {
    Lt lt(d, m, s.n, s.k, true);
    if (lt.ok) {
      other = Impl::kCublasLt;
      t_other = time_ms(other, p, d, &lt);
    }
  }
  if (other == Impl::kSimt) t_other = time_ms(other, p, d, nullptr);
  std::printf("time b%-3lld %-10s M=%-5lld N=%-6lld K=%-5lld  %-8s %9.3f ms %7.1f TFLOP/s | "
              "mma %9.3f ms %7.1f TFLOP/s | speedup %.2fx\n",
              (long long)block, s.name, (long long)m, (long long)s.n, (long long)s.k,
              impl_name(other), t_other, flop / t_other * 1e-9, t_mma, flop / t_mma * 1e-9,
              t_other / t_mma);
}

}  // namespace

int main(int argc, char** argv) {
  const bool only_check = argc > 1 && std::strcmp(argv[1], "check") == 0;
  std::mt19937_64 rng(20261202);
  try {
    // Awkward sizes (the reference costs M N K on the CPU: kept small).
    for (int64_t block : {32, 128}) {
      check_ref(rng, 16, 8, 32, block);
      check_ref(rng, 17, 100, 48, block);     // partial (half / 3/8) last K block
      check_ref(rng, 100, 1280, 1280, block);
      check_ref(rng, 300, 77, 336, block);
      check_ref(rng, 65, 1000, 2064, block);  // M just past the 64-row tile, ragged N and K
      check_ref(rng, 64, 256, 5120, block);   // the 64 x 256 tile
      check_ref(rng, 129, 333, 8192, block);
    }
    // V4.1 shapes at M = 4096 against the SIMT kernel (both on the device).
    const Shape shapes[] = {{"wq_a", 1280, 5120},  {"wq_b", 32768, 1280}, {"wkv", 512, 5120},
                            {"wo_a_grp", 1024, 4096}, {"wo_b", 5120, 8192}, {"sh_w1", 2304, 5120},
                            {"sh_w2", 5120, 2304}};
    for (const Shape& s : shapes) check_simt(rng, 4096, s.n, s.k, 32);
    check_simt(rng, 1024, 5120, 5120, 128);
    std::printf("checks: %s (%d failed)\n", g_fail ? "FAIL" : "PASS", g_fail);
    if (!only_check) {
      for (int64_t m : {4096, 64})
        for (const Shape& s : shapes) time_shape(rng, s, m, 32);
      for (int64_t m : {4096, 64})
        for (const Shape& s : {shapes[0], shapes[4]}) time_shape(rng, s, m, 128);
    }
  } catch (const deepinfer::Error& e) {
    std::printf("error: %s\n", e.what());
    return 2;
  }
  return g_fail ? 1 : 0;
}
