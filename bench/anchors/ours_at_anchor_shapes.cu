// Issue 22, deliverable 1: OUR kernels at the exact problems of ../shared/anchors/anchor_deepgemm.py
// (DeepGEMM's anchor at V4-Flash shapes), one markdown row per (case, implementation) with the
// anchor's figures of merit, so bench/anchors/side_by_side.sh can join the two tables by case name.
//
//  * dense M x N x K: gemm_fp8_block_cuda (1x128 / 128x128 FP8, bf16 out) with kAuto (cuBLASLt
//    where it has an algorithm, else SIMT), kSimt (M <= 256) and kMma (M >= 64);
//  * contig T=4096/16384 w13 | w2 and masked B=1..256 w13 | w2: our grouped FP8 MoE path
//    (moe_align_cuda + grouped_gemm_fp8_cuda as moe_experts_fp8_cuda calls it: w13 is W1 and W3
//    of N = 2048 each in one launch, A read in place through row_slot; fp32 out), on the same
//    routing as the anchor when --routing DIR holds its top-6 ids (side_by_side.sh dumps them
//    with the anchor's routing_counts() generator), else an own uniform top-6 of 256; plus the
//    whole layer (moe_experts_fp8_cuda: align, quant, 2 GEMMs, SwiGLU, combine), ours only;
//  * mqa prefill S=4096 SK=1024 / S=16384 SK=4096 and mqa decode B=1/64/256 x 8192 keys: the
//    indexer's full scoring over the paged FP8 index cache (indexer_paged_scores_cuda, SIMT, and
//    indexer_paged_scores_mma_cuda), H=64, D=128, the anchor's causal ranges (query i sees keys
//    [0, max(1, (i+1) SK / S)), via positions = max(i, ratio - 1)), blocks of 64 keys at a seeded
//    random block table.
// Every case checks a sub-sample of its output (rows x columns / keys) against a host fp64
// reference (calc_diff as the anchor: BAD above 1e-3). Timing: CUDA events per call, 3 warm-up
// calls, median of NT (20) calls, a 256 MB memset before each (cold L2, as the anchor's bench).
// Built with nvcc from a few sources (side_by_side.sh), independent of the CMake build.
// Usage: ours_at_anchor_shapes [--routing DIR] [--out FILE.md] [--only REGEX] [--budget S]
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "cuda/device_context.h"
#include "ops/gemm/gemm.h"
#include "ops/kv_cache/index_cache.h"
#include "ops/kv_cache/index_cache_cuda.h"
#include "ops/moe/moe_grouped_cuda.h"

using namespace deepinfer;

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace {

// ------------------------------------------------------------------------- device generators
__device__ __forceinline__ uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}
__device__ __forceinline__ float unif(uint64_t seed, uint64_t i) {  // [-1, 1)
  return mix(seed * 0x9e3779b97f4a7c15ull + i) * (2.0f / 4294967296.0f) - 1.0f;
}
__device__ __forceinline__ uint8_t e4m3_code(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}
// Codes of uniform values in [-448, 448) (the range a per-block-quantised tensor spans).
__global__ void fill_e4m3_kernel(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    p[i] = e4m3_code(448.0f * unif(seed, i));
}
// Scales lo * 2^(-j), j in {0, 1, 2} (powers of two like UE8M0 grids), or fp32 values when pow2 is 0.
__global__ void fill_scale_kernel(float* p, size_t n, uint64_t seed, float lo, int pow2) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float u = unif(seed, i);
    p[i] = pow2 ? lo * exp2f(-static_cast<float>(mix(seed + i) % 3u)) : lo * (1.25f + 0.75f * u);
  }
}
// fp32 values that are e4m3 values (the anchor's q is FP8), or plain uniform values.
__global__ void fill_f32_kernel(float* p, size_t n, uint64_t seed, float amp, int e4m3) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float v = amp * unif(seed, i);
    p[i] = e4m3 ? static_cast<float>(__nv_fp8_e4m3(v)) : v;
  }
}
// The paged index cache: per block 64 keys' e4m3 codes, then their fp32 scales (index_cache.h).
__global__ void fill_index_cache_kernel(uint8_t* cache, size_t n_blocks, int block_size, int dim,
                                        uint64_t seed) {
  const size_t bb = size_t(block_size) * (dim + 4), n = n_blocks * bb;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const size_t off = i % bb;
    if (off < size_t(block_size) * dim) {
      cache[i] = e4m3_code(448.0f * unif(seed, i));
    } else if ((off - size_t(block_size) * dim) % 4 == 0) {
      const float s = (1.25f + 0.75f * unif(seed ^ 0x5ca1e, i)) / 448.0f;
      memcpy(cache + i, &s, 4);
    }
  }
}
// Generators run on the legacy stream and synchronise: the ops run on ctx's non-blocking stream.
void grid_fill(size_t n, int* blocks) { *blocks = static_cast<int>(std::min<size_t>((n + 255) / 256, 132 * 16)); }
void fill_e4m3(uint8_t* p, size_t n, uint64_t seed) {
  int b; grid_fill(n, &b); fill_e4m3_kernel<<<b, 256>>>(p, n, seed); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
}
void fill_scale(float* p, size_t n, uint64_t seed, float lo, int pow2) {
  int b; grid_fill(n, &b); fill_scale_kernel<<<b, 256>>>(p, n, seed, lo, pow2); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
}
void fill_f32(float* p, size_t n, uint64_t seed, float amp, int e4m3) {
  int b; grid_fill(n, &b); fill_f32_kernel<<<b, 256>>>(p, n, seed, amp, e4m3); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
}

// ------------------------------------------------------------------------------ host helpers
template <class T>
T* dalloc(size_t n) {
  void* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}
template <class T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> h(n);
  if (n) CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
float e4m3_decode(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return NAN;
  const float v = e == 0 ? std::ldexp(m / 8.0f, -6) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return s ? -v : v;
}
struct E4m3Table {
  float v[256];
  E4m3Table() { for (int i = 0; i < 256; ++i) v[i] = e4m3_decode(static_cast<uint8_t>(i)); }
};
const E4m3Table kE4m3;
inline float e4m3_val(uint8_t c) { return kE4m3.v[c]; }
float bf16_val(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Up to k evenly spaced indices of [0, n) (the anchor's spread()).
std::vector<int64_t> spread(int64_t n, int64_t k) {
  std::vector<int64_t> r;
  const int64_t m = std::min(n, k);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t v = m == 1 ? 0 : std::llround(double(i) * double(n - 1) / double(m - 1));
    if (r.empty() || r.back() != v) r.push_back(v);
  }
  return r;
}
double calc_diff(const std::vector<double>& x, const std::vector<double>& y) {
  double xy = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) xy += x[i] * y[i], den += x[i] * x[i] + y[i] * y[i];
  return den == 0 ? 0.0 : 1.0 - 2.0 * xy / den;
}

struct Row {
  std::string name, impl, shape, note;
  double us = 0, flops = 0, bytes = 0, diff = NAN;
};
FILE* g_out = nullptr;
std::vector<Row> g_rows;
std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, v < 10 ? "%.2f" : v < 100 ? "%.1f" : "%.0f", v);
  return b;
}
void emit(const Row& r) {
  g_rows.push_back(r);
  char d[32];
  std::snprintf(d, sizeof d, "%.1e", r.diff);
  const bool bad = !(r.diff <= 1e-3);
  const std::string line = "| " + r.name + " | " + r.impl + " | " + r.shape + " | " + fmt(r.us) + " | " +
                           fmt(r.flops / r.us / 1e6) + " | " + fmt(r.bytes / r.us / 1e3) + " | " + d +
                           " | " + (bad ? "BAD rel.err; " : "") + r.note + " |";
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (g_out) std::fprintf(g_out, "%s\n", line.c_str()), std::fflush(g_out);
}

struct Env {
  cuda::DeviceContext* ctx = nullptr;
  cudaStream_t st = nullptr;
  void* flush = nullptr;
  size_t flush_bytes = size_t{256} << 20;
  int nt = 20;
  double budget_s = 240;
  std::chrono::steady_clock::time_point t0;
  std::string routing_dir;
  std::regex only{".*"};
  double left() const {
    return budget_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};
Env E;

// Median microseconds of one call, L2 flushed before each.
double time_us(const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  CK(cudaStreamSynchronize(E.st));
  std::vector<cudaEvent_t> ev(2 * E.nt);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < E.nt; ++i) {
    CK(cudaMemsetAsync(E.flush, i & 0xff, E.flush_bytes, E.st));
    CK(cudaEventRecord(ev[2 * i], E.st));
    fn();
    CK(cudaEventRecord(ev[2 * i + 1], E.st));
  }
  CK(cudaStreamSynchronize(E.st));
  std::vector<float> t(E.nt);
  for (int i = 0; i < E.nt; ++i) CK(cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]));
  for (auto& e : ev) CK(cudaEventDestroy(e));
  std::sort(t.begin(), t.end());
  return 1e3 * t[E.nt / 2];
}

bool wanted(const std::string& name) {
  if (!std::regex_search(name, E.only)) return false;
  if (E.left() <= 0) {
    std::printf("| %s | - | - | | | | | skipped: budget |\n", name.c_str());
    return false;
  }
  return true;
}

// Runs one case body; a thrown error becomes an ERROR row; a sticky CUDA error ends the run.
void guarded(const std::string& name, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    Row r;
    r.name = name;
    r.impl = "-";
    r.note = std::string("ERROR ") + e.what();
    std::printf("| %s | - | | | | | | %s |\n", name.c_str(), r.note.c_str());
    if (g_out) std::fprintf(g_out, "| %s | - | | | | | | %s |\n", name.c_str(), r.note.c_str()), std::fflush(g_out);
  }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("sticky CUDA error after %s: %s; stopping\n", name.c_str(), cudaGetErrorString(err));
    std::exit(2);
  }
}

// ------------------------------------------------------------------------------ dense GEMM
void dense_case(const std::string& layer, int64_t m, int64_t n, int64_t k, const uint8_t* w,
                const float* sw) {
  const std::string name = "dense " + layer + " M=" + std::to_string(m);
  if (!wanted(name)) return;
  guarded(name, [&] {
    const int64_t nkb = k / 128, ld = fp8_weight_scale_ld(k);
    uint8_t* a = dalloc<uint8_t>(m * k);
    float* sa = dalloc<float>(nkb * m);
    uint16_t* y = dalloc<uint16_t>(m * n);
    fill_e4m3(a, m * k, 11 + m);
    fill_scale(sa, nkb * m, 12 + m, 1.0f / 448.0f, 0);
    // Host copies for the reference: sampled rows of A, all of sa, sampled columns of W, sw.
    const auto rows = spread(m, 8), cols = spread(n, 64);
    const auto h_sa = to_host(sa, nkb * m);
    const auto h_sw = to_host(sw, (n / 128) * ld);
    std::vector<std::vector<uint8_t>> ha, hw;
    for (int64_t r : rows) ha.push_back(to_host(a + r * k, k));
    for (int64_t c : cols) hw.push_back(to_host(w + c * k, k));
    std::vector<double> ref;
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t j = 0; j < cols.size(); ++j) {
        double acc = 0;
        for (int64_t kb = 0; kb < nkb; ++kb) {
          double s = 0;
          for (int64_t q = kb * 128; q < kb * 128 + 128; ++q) s += double(e4m3_val(ha[i][q])) * e4m3_val(hw[j][q]);
          acc += s * h_sa[kb * m + rows[i]] * h_sw[(cols[j] / 128) * ld + kb];
        }
        ref.push_back(acc);
      }
    const double flops = 2.0 * m * n * k;
    const double bytes = double(m * k + n * k) + 4.0 * (m * nkb + (n / 128) * nkb) + 2.0 * m * n;
    const bool lt = fp8_block_cublaslt_supported(*E.ctx, m, n, k, DType::BF16);
    std::vector<std::pair<Fp8GemmImpl, std::string>> impls = {
        {Fp8GemmImpl::kAuto, std::string("auto=") + fp8_impl_name(fp8_auto_impl(m, n, k, 128, lt))}};
    if (m <= 256) impls.push_back({Fp8GemmImpl::kSimt, "simt"});
    if (m >= 64) impls.push_back({Fp8GemmImpl::kMma, "mma"});
    for (const auto& [impl, label] : impls) {
      CK(cudaMemsetAsync(y, 0xff, m * n * 2, E.st));
      auto fn = [&, impl = impl] {
        gemm_fp8_block_cuda(*E.ctx, a, sa, w, sw, m, n, k, y, DType::BF16, impl, 128);
      };
      fn();
      CK(cudaStreamSynchronize(E.st));
      std::vector<double> got;
      for (int64_t r : rows) {
        const auto hy = to_host(y + r * n, n);
        for (int64_t c : cols) got.push_back(bf16_val(hy[c]));
      }
      Row row;
      row.name = name;
      row.impl = label;
      row.shape = "M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k);
      row.diff = calc_diff(got, ref);
      row.us = time_us(fn);
      row.flops = flops;
      row.bytes = bytes;
      row.note = "bf16 out; checked " + std::to_string(rows.size()) + "x" + std::to_string(cols.size());
      emit(row);
    }
    CK(cudaFree(a));
    CK(cudaFree(sa));
    CK(cudaFree(y));
  });
}

void dense_all() {
  struct L { const char* name; int64_t n, k; };
  const L layers[] = {{"wq_a", 1024, 4096},   {"wq_b", 32768, 1024},  {"wo_b", 4096, 8192},
                      {"sh_w13", 4096, 4096}, {"sh_w2", 4096, 2048}, {"head", 129280, 4096}};
  for (const L& l : layers) {
    bool any = false;
    for (int64_t m : {1, 64, 256, 4096, 16384})
      any |= std::regex_search("dense " + std::string(l.name) + " M=" + std::to_string(m), E.only);
    if (!any) continue;
    uint8_t* w = dalloc<uint8_t>(l.n * l.k);
    const int64_t ns = (l.n / 128) * fp8_weight_scale_ld(l.k);
    float* sw = dalloc<float>(ns);
    fill_e4m3(w, l.n * l.k, 31 * l.n + 7 * l.k);
    fill_scale(sw, ns, 5 + l.n, 1.0f / 512.0f, 1);
    for (int64_t m : {1, 64, 256, 4096, 16384}) dense_case(l.name, m, l.n, l.k, w, sw);
    CK(cudaFree(w));
    CK(cudaFree(sw));
  }
}

// ------------------------------------------------------------------------------ grouped MoE
constexpr int64_t kE = 256, kTopK = 6, kD = 4096, kI = 2048;

// Top-6 ids [T * 6] of the anchor's routing_counts(T) (dumped by side_by_side.sh), else own.
std::vector<int32_t> routing_ids(int64_t t, std::string* how) {
  const std::string path = E.routing_dir + "/routing_T" + std::to_string(t) + ".i32";
  if (!E.routing_dir.empty()) {
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      std::vector<int32_t> ids(t * kTopK);
      const size_t got = std::fread(ids.data(), 4, ids.size(), f);
      std::fclose(f);
      if (got == ids.size()) {
        *how = "anchor routing";
        return ids;
      }
    }
  }
  *how = "own uniform top-6 (counts differ from the anchor's)";
  std::mt19937_64 rng(1000 + t);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<int32_t> ids;
  std::vector<std::pair<float, int>> sc(kE);
  for (int64_t i = 0; i < t; ++i) {
    for (int e = 0; e < kE; ++e) sc[e] = {u(rng), e};
    std::partial_sort(sc.begin(), sc.begin() + kTopK, sc.end(), [](auto& a, auto& b) { return a.first > b.first; });
    for (int j = 0; j < kTopK; ++j) ids.push_back(sc[j].second);
  }
  return ids;
}

struct MoeWeights {
  uint8_t *w1, *w3, *w2;
  float *s1, *s3, *s2;
  int64_t ld1, ld2;  // scale row strides (fp8_weight_scale_ld of D and of I)
};

// Host reference of one padded row r of a grouped GEMM against expert e, at columns cols.
double grouped_ref(const uint8_t* arow, const std::vector<float>& sa, int64_t sa_ld, int64_t arow_i,
                   const std::vector<uint8_t>& wrow, const std::vector<float>& sw_e, int64_t ld,
                   int64_t col, int64_t k) {
  double acc = 0;
  for (int64_t kb = 0; kb < k / 128; ++kb) {
    double s = 0;
    for (int64_t q = kb * 128; q < kb * 128 + 128; ++q) s += double(e4m3_val(arow[q])) * e4m3_val(wrow[q]);
    acc += s * sa[kb * sa_ld + arow_i] * sw_e[(col / 128) * ld + kb];
  }
  return acc;
}

void moe_case(int64_t t, const MoeWeights& W) {
  const bool contig = t >= 4096;
  const std::string base = contig ? "contig T=" + std::to_string(t) : "masked B=" + std::to_string(t);
  const std::string n13 = base + " w13", n2 = base + " w2", nl = "moe layer T=" + std::to_string(t);
  if (!wanted(n13) && !wanted(n2) && !wanted(nl)) return;
  guarded(base, [&] {
    std::string how;
    const auto ids = routing_ids(t, &how);
    std::vector<int64_t> cnt(kE, 0);
    for (int32_t e : ids) cnt[e]++;
    const int64_t act = std::count_if(cnt.begin(), cnt.end(), [](int64_t c) { return c > 0; });
    MoeExpertsShape s;
    s.n_tokens = t, s.top_k = kTopK, s.n_experts = kE, s.dim = kD, s.inter = kI, s.swiglu_limit = 10.0f;
    const int64_t cap = moe_rows_cap(t, kTopK, kE), tiles = moe_tiles_cap(t, kTopK, kE);
    int32_t* d_ids = dalloc<int32_t>(t * kTopK);
    float* d_wt = dalloc<float>(t * kTopK);
    float* x = dalloc<float>(t * kD);
    float* out = dalloc<float>(t * kD);
    void* ws_mem = dalloc<uint8_t>(moe_experts_fp8_workspace_bytes(s));
    CK(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    fill_scale(d_wt, t * kTopK, 77 + t, 1.0f / 6.0f, 0);
    fill_f32(x, t * kD, 78 + t, 2.0f, 0);
    MoeExpertsFp8Weights w{W.w1, W.s1, W.w3, W.s3, W.w2, W.s2};
    auto layer = [&] { moe_experts_fp8_cuda(E.st, s, x, d_ids, d_wt, w, nullptr, ws_mem, out); };
    layer();  // leaves the intermediates (align, xq, g, u, hq, ...) in the workspace
    CK(cudaStreamSynchronize(E.st));
    const MoeExpertsWorkspace ws = moe_experts_fp8_workspace(s, ws_mem);
    GroupedGemmFp8Params up;
    up.a = ws.xq, up.sa = ws.sx, up.sa_ld = t, up.a_rows = ws.align.row_slot;
    up.a_rows_div = static_cast<int32_t>(kTopK), up.n = kI, up.k = kD, up.ldc = kI;
    up.tile_expert = ws.align.tile_expert, up.tile_row0 = ws.align.tile_row0, up.n_tiles_cap = tiles;
    up.w = W.w1, up.sw = W.s1, up.c = ws.g, up.w_b = W.w3, up.sw_b = W.s3, up.c_b = ws.u;
    GroupedGemmFp8Params down;
    down.a = ws.hq, down.sa = ws.sh, down.sa_ld = cap, down.w = W.w2, down.sw = W.s2, down.c = ws.y;
    down.ldc = kD, down.n = kD, down.k = kI;
    down.tile_expert = ws.align.tile_expert, down.tile_row0 = ws.align.tile_row0, down.n_tiles_cap = tiles;

    // Reference on 8 experts x up to 4 rows x 32 columns (of g, u, and y).
    const auto offs = to_host(ws.align.offsets, kE + 1);
    const auto cnts = to_host(ws.align.counts, kE);
    std::vector<int64_t> live;
    for (int64_t e = 0; e < kE; ++e) if (cnts[e] > 0) live.push_back(e);
    std::vector<int64_t> pick;
    for (int64_t i : spread(int64_t(live.size()), 8)) pick.push_back(live[i]);
    const auto slot = to_host(ws.align.row_slot, offs[kE]);
    const auto h_sx = to_host(ws.sx, (kD / 128) * t);
    const auto h_sh = to_host(ws.sh, (kI / 128) * cap);
    const auto c13 = spread(kI, 32), c2 = spread(kD, 32);
    std::vector<double> g_got, g_ref, y_got, y_ref;
    for (int64_t e : pick) {
      const auto s1 = to_host(W.s1 + e * (kI / 128) * W.ld1, (kI / 128) * W.ld1);
      const auto s3 = to_host(W.s3 + e * (kI / 128) * W.ld1, (kI / 128) * W.ld1);
      const auto s2 = to_host(W.s2 + e * (kD / 128) * W.ld2, (kD / 128) * W.ld2);
      for (int64_t r : spread(cnts[e], 4)) {
        const int64_t pr = offs[e] + r, tok = slot[pr] / kTopK;
        const auto xa = to_host(ws.xq + tok * kD, kD);
        const auto ha = to_host(ws.hq + pr * kI, kI);
        const auto g = to_host(ws.g + pr * kI, kI), u = to_host(ws.u + pr * kI, kI);
        const auto y = to_host(ws.y + pr * kD, kD);
        for (int64_t c : c13) {
          const auto w1r = to_host(W.w1 + (e * kI + c) * kD, kD), w3r = to_host(W.w3 + (e * kI + c) * kD, kD);
          g_ref.push_back(grouped_ref(xa.data(), h_sx, t, tok, w1r, s1, W.ld1, c, kD));
          g_ref.push_back(grouped_ref(xa.data(), h_sx, t, tok, w3r, s3, W.ld1, c, kD));
          g_got.push_back(g[c]);
          g_got.push_back(u[c]);
        }
        for (int64_t c : c2) {
          const auto w2r = to_host(W.w2 + (e * kD + c) * kI, kI);
          y_ref.push_back(grouped_ref(ha.data(), h_sh, cap, pr, w2r, s2, W.ld2, c, kI));
          y_got.push_back(y[c]);
        }
      }
    }
    const double rows = double(t * kTopK);
    auto wbytes = [&](int64_t n, int64_t k) { return double(act) * (n * k + 4.0 * (n / 128) * (k / 128)); };
    const std::string shape = (contig ? "T=" : "B=") + std::to_string(t) + " top6/256 ";
    const std::string note = how + "; experts=" + std::to_string(act) + " tiles<=" + std::to_string(tiles) +
                             " (64-row); fp32 out";
    Row r13, r2;
    if (std::regex_search(n13, E.only)) {
      r13.name = n13, r13.impl = "grouped w1+w3", r13.shape = shape + "N=4096 K=4096";
      r13.diff = calc_diff(g_got, g_ref);
      r13.us = time_us([&] { grouped_gemm_fp8_cuda(E.st, up); });
      r13.flops = 2.0 * rows * 2 * kI * kD;
      r13.bytes = contig ? rows * (kD + 4.0 * kD / 128) + wbytes(2 * kI, kD) + 2.0 * rows * 2 * kI
                         : wbytes(2 * kI, kD);
      r13.note = (contig ? "" : "GB/s=touched weights; ") + note;
      emit(r13);
    }
    if (std::regex_search(n2, E.only)) {
      r2.name = n2, r2.impl = "grouped", r2.shape = shape + "N=4096 K=2048";
      r2.diff = calc_diff(y_got, y_ref);
      r2.us = time_us([&] { grouped_gemm_fp8_cuda(E.st, down); });
      r2.flops = 2.0 * rows * kD * kI;
      r2.bytes = contig ? rows * (kI + 4.0 * kI / 128) + wbytes(kD, kI) + 2.0 * rows * kD : wbytes(kD, kI);
      r2.note = (contig ? "" : "GB/s=touched weights; ") + note;
      emit(r2);
    }
    if (r13.us > 0 && r2.us > 0) {
      Row sum;
      sum.name = base + " w13+w2", sum.impl = "grouped", sum.shape = "sum of both GEMMs";
      sum.us = r13.us + r2.us, sum.flops = r13.flops + r2.flops, sum.bytes = r13.bytes + r2.bytes;
      sum.diff = std::max(r13.diff, r2.diff), sum.note = "sum";
      emit(sum);
    }
    if (std::regex_search(nl, E.only)) {
      Row rl;
      rl.name = nl, rl.impl = "moe_experts_fp8", rl.shape = shape + "D=4096 I=2048";
      rl.diff = std::max(calc_diff(g_got, g_ref), calc_diff(y_got, y_ref));
      rl.us = time_us(layer);
      rl.flops = r13.flops > 0 ? r13.flops + r2.flops : 2.0 * rows * 3 * kI * kD;
      rl.bytes = wbytes(2 * kI, kD) + wbytes(kD, kI);
      rl.note = "whole layer (align, act quant, 2 GEMMs, SwiGLU+quant, combine); GB/s=touched weights; ours only";
      emit(rl);
    }
    CK(cudaFree(d_ids));
    CK(cudaFree(d_wt));
    CK(cudaFree(x));
    CK(cudaFree(out));
    CK(cudaFree(ws_mem));
  });
}

void moe_all() {
  bool any = false;
  for (const char* p : {"contig T=4096 w", "contig T=16384 w", "masked B=1 w", "masked B=16 w",
                        "masked B=64 w", "masked B=256 w", "moe layer T=4096"})
    any |= std::regex_search(std::string(p) + "13", E.only) || std::regex_search(std::string(p) + "2", E.only) ||
           std::regex_search(std::string(p), E.only);
  if (!any) return;
  MoeWeights W;
  W.ld1 = fp8_weight_scale_ld(kD), W.ld2 = fp8_weight_scale_ld(kI);
  const size_t n13 = size_t(kE) * kI * kD, n2 = size_t(kE) * kD * kI;
  W.w1 = dalloc<uint8_t>(n13), W.w3 = dalloc<uint8_t>(n13), W.w2 = dalloc<uint8_t>(n2);
  W.s1 = dalloc<float>(kE * (kI / 128) * W.ld1), W.s3 = dalloc<float>(kE * (kI / 128) * W.ld1);
  W.s2 = dalloc<float>(kE * (kD / 128) * W.ld2);
  fill_e4m3(W.w1, n13, 101), fill_e4m3(W.w3, n13, 102), fill_e4m3(W.w2, n2, 103);
  fill_scale(W.s1, kE * (kI / 128) * W.ld1, 104, 1.0f / 512.0f, 1);
  fill_scale(W.s3, kE * (kI / 128) * W.ld1, 105, 1.0f / 512.0f, 1);
  fill_scale(W.s2, kE * (kD / 128) * W.ld2, 106, 1.0f / 512.0f, 1);
  for (int64_t t : {4096, 16384, 1, 16, 64, 256}) moe_case(t, W);
  for (void* p : {(void*)W.w1, (void*)W.w3, (void*)W.w2, (void*)W.s1, (void*)W.s3, (void*)W.s2}) CK(cudaFree(p));
}

// ------------------------------------------------------------------------------ indexer
constexpr int64_t kH = 64, kHd = 128, kBlk = 64;

// rows: query rows; ratio: keys per query position (prefill S/SK, decode 1); per row n_keys =
// (positions[r] + 1) / ratio keys of sequence seq[r] through a random block table.
void indexer_case(const std::string& name, const std::string& shape, int64_t rows, int64_t n_seqs,
                  int64_t keys_per_seq, int64_t ratio, bool prefill) {
  if (!wanted(name)) return;
  guarded(name, [&] {
    IndexCacheLayout lay;
    lay.head_dim = kHd, lay.block_size = kBlk, lay.format = IndexKeyFormat::kE4m3Fp32Scale;
    const int64_t mb = keys_per_seq / kBlk, nb = n_seqs * mb, bb = lay.block_bytes();
    uint8_t* cache = dalloc<uint8_t>(nb * bb);
    { int b; grid_fill(nb * bb, &b); fill_index_cache_kernel<<<b, 256>>>(cache, nb, kBlk, kHd, 41 + rows); CK(cudaGetLastError()); CK(cudaDeviceSynchronize()); }
    float* q = dalloc<float>(rows * kH * kHd);
    float* g = dalloc<float>(rows * kH);
    fill_f32(q, rows * kH * kHd, 42 + rows, 448.0f, 1);
    fill_f32(g, rows * kH, 43 + rows, 1.0f, 0);
    std::vector<int32_t> bt(nb), pos(rows), seq(rows);
    for (int64_t i = 0; i < nb; ++i) bt[i] = static_cast<int32_t>(i);
    std::shuffle(bt.begin(), bt.end(), std::mt19937_64(rows));
    for (int64_t r = 0; r < rows; ++r) {
      pos[r] = static_cast<int32_t>(prefill ? std::max<int64_t>(r, ratio - 1) : keys_per_seq * ratio - 1);
      seq[r] = static_cast<int32_t>(prefill ? 0 : r);
    }
    int32_t* d_bt = dalloc<int32_t>(nb);
    int32_t* d_pos = dalloc<int32_t>(rows);
    int32_t* d_seq = dalloc<int32_t>(rows);
    float* sc = dalloc<float>(rows * keys_per_seq);
    CK(cudaMemcpy(d_bt, bt.data(), nb * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_pos, pos.data(), rows * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_seq, seq.data(), rows * 4, cudaMemcpyHostToDevice));
    IndexerPagedScoresParams p;
    p.q = q, p.g = g, p.n_rows = rows, p.n_heads = kH, p.head_scale = 1.0f, p.scale = 1.0f;
    p.positions = d_pos, p.seq = d_seq, p.ratio = ratio, p.cache = cache, p.layout = lay;
    p.block_table = d_bt, p.max_blocks = mb, p.scores = sc, p.score_stride = keys_per_seq;
    // Reference rows / keys.
    int64_t cost = 0;
    for (int64_t r = 0; r < rows; ++r) cost += (pos[r] + 1) / ratio;
    const auto rs = prefill ? spread(rows, 8) : spread(std::min<int64_t>(rows, 4), 4);
    std::vector<double> ref;
    std::vector<std::pair<int64_t, int64_t>> at;
    for (int64_t r : rs) {
      const auto hq = to_host(q + r * kH * kHd, kH * kHd);
      const auto hg = to_host(g + r * kH, kH);
      const int64_t nk = (pos[r] + 1) / ratio;
      for (int64_t s : spread(nk, prefill ? 128 : 256)) {
        const int64_t blk = bt[seq[r] * mb + s / kBlk];
        const auto codes = to_host(cache + blk * bb + (s % kBlk) * kHd, kHd);
        float ks;
        CK(cudaMemcpy(&ks, cache + blk * bb + kBlk * kHd + (s % kBlk) * 4, 4, cudaMemcpyDeviceToHost));
        double acc = 0;
        for (int64_t h = 0; h < kH; ++h) {
          double d = 0;
          for (int64_t i = 0; i < kHd; ++i) d += double(hq[h * kHd + i]) * e4m3_val(codes[i]);
          acc += hg[h] * std::max(0.0, d * ks);
        }
        ref.push_back(acc);
        at.push_back({r, s});
      }
    }
    const double flops = 2.0 * cost * kH * kHd;
    const double bytes = prefill ? double(rows * kH * kHd + keys_per_seq * kHd) + 4.0 * (keys_per_seq + rows * kH + cost)
                                 : double(rows) * keys_per_seq * (kHd + 4);
    struct Impl { const char* label; void (*fn)(cudaStream_t, const IndexerPagedScoresParams&); };
    std::vector<Impl> impls = {{"simt", indexer_paged_scores_cuda}};
    if (indexer_paged_scores_mma_supported(p)) impls.push_back({"mma", indexer_paged_scores_mma_cuda});
    for (const Impl& im : impls) {
      CK(cudaMemsetAsync(sc, 0xff, rows * keys_per_seq * 4, E.st));
      im.fn(E.st, p);
      CK(cudaStreamSynchronize(E.st));
      std::vector<double> got;
      for (auto [r, s] : at) {
        float v;
        CK(cudaMemcpy(&v, sc + r * keys_per_seq + s, 4, cudaMemcpyDeviceToHost));
        got.push_back(v);
      }
      Row row;
      row.name = name;
      row.impl = std::string(im.label) + (indexer_paged_scores_mma_preferred(p) == (im.fn == indexer_paged_scores_mma_cuda) ? " (auto)" : "");
      row.shape = shape;
      row.diff = calc_diff(got, ref);
      row.us = time_us([&] { im.fn(E.st, p); });
      row.flops = flops, row.bytes = bytes;
      row.note = std::string(prefill ? "causal, sum(n_keys)=" + std::to_string(cost) + "; TFLOP/s=2*sum*H*D"
                                     : "GB/s=keys read (fp8+scale)") +
                 "; fp32 q (e4m3 values), fp32 scores; checked " + std::to_string(at.size());
      emit(row);
    }
    for (void* ptr : {(void*)cache, (void*)q, (void*)g, (void*)d_bt, (void*)d_pos, (void*)d_seq, (void*)sc}) CK(cudaFree(ptr));
  });
}

void indexer_all() {
  for (auto [s, sk] : {std::pair<int64_t, int64_t>{4096, 1024}, {16384, 4096}})
    indexer_case("mqa prefill S=" + std::to_string(s) + " SK=" + std::to_string(sk),
                 "q=" + std::to_string(s) + " k=" + std::to_string(sk) + " H=64 D=128", s, 1, sk, s / sk, true);
  for (int64_t b : {1, 64, 256})
    indexer_case("mqa decode B=" + std::to_string(b), "B=" + std::to_string(b) + " x 8192 keys, H=64 D=128", b, b,
                 8192, 1, false);
}

double copy_gbps() {
  const size_t n = size_t{2} << 30;
  void *a = dalloc<uint8_t>(n), *b = dalloc<uint8_t>(n);
  CK(cudaMemsetAsync(a, 1, n, E.st));
  for (int i = 0; i < 3; ++i) CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, E.st));
  cudaEvent_t s, e;
  CK(cudaEventCreate(&s));
  CK(cudaEventCreate(&e));
  CK(cudaEventRecord(s, E.st));
  for (int i = 0; i < 10; ++i) CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, E.st));
  CK(cudaEventRecord(e, E.st));
  CK(cudaEventSynchronize(e));
  float ms;
  CK(cudaEventElapsedTime(&ms, s, e));
  CK(cudaFree(a));
  CK(cudaFree(b));
  return 2.0 * n * 10 / (ms / 1e3) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  E.t0 = std::chrono::steady_clock::now();
  std::string out_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--routing") E.routing_dir = argv[i + 1];
    else if (a == "--out") out_path = argv[i + 1];
    else if (a == "--only") E.only = std::regex(argv[i + 1]);
    else if (a == "--budget") E.budget_s = std::atof(argv[i + 1]);
    else if (a == "--nt") E.nt = std::max(10, std::atoi(argv[i + 1]));
    else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); return 1; }
  }
  if (!out_path.empty()) g_out = std::fopen(out_path.c_str(), "w");
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  cuda::DeviceContext ctx;
  E.ctx = &ctx;
  E.st = ctx.stream();
  E.flush = dalloc<uint8_t>(E.flush_bytes);
  const double bw = copy_gbps();
  char hdr[512];
  std::snprintf(hdr, sizeof hdr,
                "# Ours at the DeepGEMM anchor's shapes\n\ndevice=%s, D2D copy 2 GiB (read+write)=%.0f GB/s, "
                "median of %d calls, L2 flushed (256 MB memset) before each\n\n"
                "| case | impl | shape | us | TFLOP/s | GB/s | rel.err | note |\n|---|---|---|---|---|---|---|---|",
                prop.name, bw, E.nt);
  std::printf("%s\n", hdr);
  if (g_out) std::fprintf(g_out, "%s\n", hdr);
  dense_all();
  moe_all();
  indexer_all();
  std::printf("done in %.0f s\n", E.budget_s - E.left());
  if (g_out) std::fclose(g_out);
  return 0;
}
