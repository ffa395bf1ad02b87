// Engram CUDA kernels (contracts in engram_cuda.h): n-gram hash, table-row dequantisation
// and raw gather (device or mapped pinned host tables), gate + stream update.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/engram/engram_cuda.h"

namespace deepinfer {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t total, const char* who) {
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  CHECK_KIND(kUnsupported, blocks < (int64_t{1} << 31)) << who << ": problem too large";
  return static_cast<unsigned>(blocks);
}

// ---- hash ----------------------------------------------------------------------------------

// One thread per (row, column): column c of n-gram index g = c / n_heads hashes shifts
// 0..g+1; rho = XOR of s_k * mu_k (uint64 products cannot overflow: s < C, mu bounded).
__global__ void hash_kernel(EngramHashCudaParams p, const int32_t* history, int64_t n,
                            int64_t* ids) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * p.n_cols) return;
  const int64_t r = idx / p.n_cols;
  const int c = static_cast<int>(idx % p.n_cols);
  const int g = c / p.n_heads;
  const int32_t* row = history + r * p.max_ngram;
  bool dead = false;
  uint64_t rho = 0;
  for (int k = 0; k <= g + 1; ++k) {
    const int32_t t = row[k];
    dead = dead || t < 0 || t >= p.n_tokens;
    const int64_t s = dead ? p.pad : p.token_map[t];
    rho ^= static_cast<uint64_t>(s) * static_cast<uint64_t>(p.multipliers[k]);
  }
  ids[idx] = static_cast<int64_t>(rho % static_cast<uint64_t>(p.primes[c])) + p.offsets[c];
}

// ---- dequantisation and gather -------------------------------------------------------------

// 2^(s - 127) as std::ldexp(1.0f, s - 127) gives it: s = 0 is the subnormal 2^-127, 255 is inf.
__device__ __forceinline__ float e8m0_scale(uint32_t s) {
  if (s == 0) return __uint_as_float(0x00400000u);
  if (s == 255) return __uint_as_float(0x7f800000u);
  return __uint_as_float(s << 23);
}

// Two e4m3 codes (low byte first) -> exact values (e4m3 -> f16 -> f32 is exact; 0x7f NaN).
__device__ __forceinline__ float2 e4m3x2(uint32_t two) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// One thread per 16 consecutive codes of one (row, column): they share one scale (16 | 32).
template <bool kVector>
__global__ void dequant_kernel(EngramTableView t, const int64_t* ids, int64_t n, int n_cols,
                               float* e) {
  const int64_t chunks = t.head_dim / 16;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * n_cols * chunks) return;
  const int64_t rc = idx / chunks, j = idx % chunks;
  const int64_t id = ids != nullptr ? ids[rc] : rc;
  const uint8_t* codes = t.codes + id * t.code_stride + j * 16;
  const float scale = e8m0_scale(t.scales[id * t.scale_stride + j * 16 / 32]);
  uint32_t words[4];
  if constexpr (kVector) {
    const uint4 v = *reinterpret_cast<const uint4*>(codes);
    words[0] = v.x;
    words[1] = v.y;
    words[2] = v.z;
    words[3] = v.w;
  } else {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      words[w] = static_cast<uint32_t>(codes[4 * w]) | (static_cast<uint32_t>(codes[4 * w + 1]) << 8) |
                 (static_cast<uint32_t>(codes[4 * w + 2]) << 16) |
                 (static_cast<uint32_t>(codes[4 * w + 3]) << 24);
    }
  }
  float4* out = reinterpret_cast<float4*>(e + rc * t.head_dim + j * 16);
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const float2 a = e4m3x2(words[w]), b = e4m3x2(words[w] >> 16);
    out[w] = make_float4(__fmul_rn(a.x, scale), __fmul_rn(a.y, scale), __fmul_rn(b.x, scale),
                         __fmul_rn(b.y, scale));
  }
}

// One thread per 16 bytes of one gathered row.
__global__ void gather_rows_kernel(const uint8_t* table, int64_t row_bytes, const int64_t* ids,
                                   int64_t n_out_rows, uint8_t* out) {
  const int64_t chunks = row_bytes / 16;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_out_rows * chunks) return;
  const int64_t rc = idx / chunks, j = idx % chunks;
  const uint4 v = *reinterpret_cast<const uint4*>(table + ids[rc] * row_bytes + j * 16);
  *reinterpret_cast<uint4*>(out + rc * row_bytes + j * 16) = v;
}

// ---- gate + update -------------------------------------------------------------------------

// Same bits as base/dtype.h round_bf16 (RNE; NaN keeps its payload with the quiet bit set).
__device__ __forceinline__ float round_bf16_dev(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float((((u >> 16) | 0x40u) & 0xffffu) << 16);
  u += 0x7fffu + ((u >> 16) & 1u);
  return __uint_as_float((u >> 16) << 16);
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One block per (row, stream): three double sums (x.w.key, x.x, key.key) over strided
// elements, a fixed warp tree, then warp partials in warp order; gamma by thread 0.
__global__ void __launch_bounds__(kThreads) gate_kernel(EngramGateCudaParams p) {
  const int64_t r = blockIdx.x / p.n_hc;
  const int s = static_cast<int>(blockIdx.x % p.n_hc);
  if (p.history != nullptr && p.history[r * p.history_stride] < 0) return;  // gamma = 0
  float* x = p.x + (r * p.n_hc + s) * p.dim;
  const float* key = p.kv + r * p.kv_stride + s * p.dim;
  const float* value = p.kv + r * p.kv_stride + p.n_hc * p.dim;
  const float* w = p.w + s * p.dim;
  double dot = 0.0, xx = 0.0, kk = 0.0;
  for (int64_t i = threadIdx.x; i < p.dim; i += kThreads) {
    const float xi = x[i], ki = key[i];
    dot += static_cast<double>(__fmul_rn(xi, w[i])) * ki;
    xx += static_cast<double>(xi) * xi;
    kk += static_cast<double>(ki) * ki;
  }
  dot = warp_sum(dot);
  xx = warp_sum(xx);
  kk = warp_sum(kk);
  __shared__ double part[3][kThreads / 32];
  __shared__ float gamma_s;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    part[0][warp] = dot;
    part[1][warp] = xx;
    part[2][warp] = kk;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double sd = 0.0, sx = 0.0, sk = 0.0;
    for (int i = 0; i < kThreads / 32; ++i) {
      sd += part[0][i];
      sx += part[1][i];
      sk += part[2][i];
    }
    const double nd = static_cast<double>(p.dim);
    const float rx = static_cast<float>(1.0 / sqrt(sx / nd + p.eps));
    const float rk = static_cast<float>(1.0 / sqrt(sk / nd + p.eps));
    const float delta = __fdiv_rn(__fmul_rn(__fmul_rn(static_cast<float>(sd), rx), rk),
                                  sqrtf(static_cast<float>(p.dim)));
    const float sign = delta > 0.0f ? 1.0f : (delta < 0.0f ? -1.0f : 0.0f);
    const float v = sign * sqrtf(fmaxf(fabsf(delta), p.clamp));
    gamma_s = 1.0f / (1.0f + expf(-v));
  }
  __syncthreads();
  const float gamma = gamma_s;
  for (int64_t i = threadIdx.x; i < p.dim; i += kThreads) {
    const float y = __fadd_rn(x[i], __fmul_rn(gamma, value[i]));
    x[i] = p.round_bf16 ? round_bf16_dev(y) : y;
  }
}

}  // namespace

EngramHashCudaParams engram_hash_cuda_params(const EngramHashParams& host,
                                             const int32_t* device_token_map) {
  CHECK(host.layer != nullptr && host.token_map != nullptr && device_token_map != nullptr)
      << "engram_hash_cuda_params: layer tables or a token map is null";
  const EngramLayerTables& t = *host.layer;
  CHECK(host.compressed_vocab_size == t.compressed_vocab_size)
      << "Engram token map has compressed vocab size " << host.compressed_vocab_size
      << " but layer " << t.layer_id << "'s multipliers are for " << t.compressed_vocab_size;
  CHECK(host.pad_token_id >= 0 && host.pad_token_id < host.n_tokens)
      << "engram_pad_token_id " << host.pad_token_id << " outside the token map (" << host.n_tokens
      << ")";
  CHECK(t.max_ngram >= 2 && t.max_ngram <= kEngramMaxNgram && t.n_heads > 0 &&
        t.n_cols == (t.max_ngram - 1) * t.n_heads)
      << "engram layer " << t.layer_id << ": inconsistent tables (max n-gram " << t.max_ngram
      << ", " << t.n_heads << " heads, " << t.n_cols << " columns)";
  CHECK_KIND(kUnsupported, t.n_cols <= kEngramCudaMaxCols)
      << "engram layer " << t.layer_id << ": " << t.n_cols << " hash columns (the CUDA hash takes at most "
      << kEngramCudaMaxCols << ")";
  for (int64_t i = 0; i < host.n_tokens; ++i) {
    CHECK(host.token_map[i] >= 0 && host.token_map[i] < host.compressed_vocab_size)
        << "Engram token map value " << host.token_map[i] << " of token " << i << " outside [0, "
        << host.compressed_vocab_size << ")";
  }
  EngramHashCudaParams p;
  p.max_ngram = t.max_ngram;
  p.n_heads = t.n_heads;
  p.n_cols = t.n_cols;
  for (int c = 0; c < t.n_cols; ++c) {
    p.primes[c] = t.primes[c];
    p.offsets[c] = t.offsets[c];
  }
  for (int k = 0; k < t.max_ngram; ++k) p.multipliers[k] = t.multipliers[k];
  p.token_map = device_token_map;
  p.n_tokens = host.n_tokens;
  p.pad = host.token_map[host.pad_token_id];
  return p;
}

void engram_hash_cuda(cudaStream_t stream, const EngramHashCudaParams& p, const int32_t* history,
                      int64_t n, int64_t* ids) {
  if (n == 0) return;
  ICHECK(p.token_map != nullptr && p.n_cols > 0 && p.n_cols <= kEngramCudaMaxCols && history &&
         ids);
  hash_kernel<<<grid_for(n * p.n_cols, "engram_hash_cuda"), kThreads, 0, stream>>>(p, history, n,
                                                                                   ids);
  CUDA_CHECK_LAUNCH();
}

void engram_dequant_cuda(cudaStream_t stream, const EngramTableView& table, const int64_t* ids,
                         int64_t n, int n_cols, float* e) {
  if (n == 0 || n_cols == 0) return;
  CHECK(table.codes != nullptr && table.scales != nullptr && e != nullptr)
      << "engram_dequant_cuda: null table or output";
  CHECK(table.head_dim > 0 && table.head_dim % 32 == 0 && table.code_stride >= table.head_dim &&
        table.scale_stride >= table.head_dim / 32)
      << "engram_dequant_cuda: head_dim " << table.head_dim << " (a positive multiple of 32), "
      << "code stride " << table.code_stride << ", scale stride " << table.scale_stride;
  CHECK(ids != nullptr || n * n_cols <= table.n_rows)
      << "engram_dequant_cuda: " << n * n_cols << " staged rows, the table has " << table.n_rows;
  CHECK(reinterpret_cast<uintptr_t>(e) % 16 == 0) << "engram_dequant_cuda: output not 16-byte aligned";
  const bool vector = reinterpret_cast<uintptr_t>(table.codes) % 16 == 0 && table.code_stride % 16 == 0;
  const int64_t total = n * n_cols * (table.head_dim / 16);
  const unsigned grid = grid_for(total, "engram_dequant_cuda");
  if (vector) {
    dequant_kernel<true><<<grid, kThreads, 0, stream>>>(table, ids, n, n_cols, e);
  } else {
    dequant_kernel<false><<<grid, kThreads, 0, stream>>>(table, ids, n, n_cols, e);
  }
  CUDA_CHECK_LAUNCH();
}

void engram_gather_rows_cuda(cudaStream_t stream, const uint8_t* table, int64_t row_bytes,
                             const int64_t* ids, int64_t n, int n_cols, uint8_t* out) {
  if (n == 0 || n_cols == 0) return;
  CHECK(table != nullptr && ids != nullptr && out != nullptr)
      << "engram_gather_rows_cuda: null pointer";
  CHECK(row_bytes > 0 && row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(table) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(out) % 16 == 0)
      << "engram_gather_rows_cuda: rows of " << row_bytes
      << " bytes (a multiple of 16) and 16-byte aligned table and output";
  const int64_t rows = n * n_cols;
  gather_rows_kernel<<<grid_for(rows * (row_bytes / 16), "engram_gather_rows_cuda"), kThreads, 0,
                       stream>>>(table, row_bytes, ids, rows, out);
  CUDA_CHECK_LAUNCH();
}

void engram_gate_cuda(cudaStream_t stream, const EngramGateCudaParams& p) {
  if (p.n == 0) return;
  CHECK(p.x != nullptr && p.kv != nullptr && p.w != nullptr) << "engram_gate_cuda: null pointer";
  CHECK(p.n_hc > 0 && p.dim > 0 && p.kv_stride >= (p.n_hc + 1) * p.dim)
      << "engram_gate_cuda: " << p.n_hc << " streams of " << p.dim << ", kv stride " << p.kv_stride;
  CHECK(p.history == nullptr || p.history_stride > 0)
      << "engram_gate_cuda: history without a positive stride";
  const int64_t blocks = p.n * p.n_hc;
  CHECK_KIND(kUnsupported, blocks < (int64_t{1} << 31)) << "engram_gate_cuda: problem too large";
  gate_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
