// MoE routing and elementwise pieces. Routing: one warp per token; the top-k is k rounds
// of a warp arg-max (ties to the lower index), so the result matches topk_indices.
#include <cmath>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/moe/moe_cuda.h"

namespace deepinfer {
namespace {

constexpr int kMaxTopK = 16;

__device__ __forceinline__ float softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

__global__ void route_kernel(const float* logits, int64_t n_rows, int64_t n_exp, const float* bias,
                             const int32_t* tid2eid, const int32_t* tokens, int64_t k,
                             float routed_scale, float inv_temp, float sum_eps, bool normalize,
                             int32_t* ids, float* weights) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n_rows) return;
  const float* lr = logits + row * n_exp;
  // Scaled logits as route_ref computes them (no multiply when inv_temp is 1, so V4 is
  // unchanged bit for bit).
  auto score = [&](int64_t e) {
    return sqrtf(softplus(inv_temp == 1.0f ? lr[e] : lr[e] * inv_temp));
  };
  int32_t sel[kMaxTopK];
  if (tid2eid != nullptr) {
    for (int64_t j = 0; j < k; ++j) sel[j] = tid2eid[static_cast<int64_t>(tokens[row]) * k + j];
  } else {
    // k rounds of arg-max over biased scores, excluding picked experts.
    for (int64_t j = 0; j < k; ++j) {
      float best = -INFINITY;
      int best_e = 0x7fffffff;
      for (int64_t e = lane; e < n_exp; e += 32) {
        bool taken = false;
        for (int64_t t = 0; t < j; ++t) taken |= sel[t] == e;
        if (taken) continue;
        const float v = score(e) + (bias != nullptr ? bias[e] : 0.0f);
        if (v > best || (v == best && e < best_e)) {
          best = v;
          best_e = static_cast<int>(e);
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, o);
        const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
        if (ob > best || (ob == best && oe < best_e)) {
          best = ob;
          best_e = oe;
        }
      }
      sel[j] = best_e;
    }
    // ascending expert ids (topk_indices sorts its result)
    for (int64_t a = 1; a < k; ++a) {
      const int32_t v = sel[a];
      int64_t b = a - 1;
      for (; b >= 0 && sel[b] > v; --b) sel[b + 1] = sel[b];
      sel[b + 1] = v;
    }
  }
  if (lane != 0) return;
  float s[kMaxTopK];
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    s[j] = score(sel[j]);
    sum += s[j];
  }
  sum += sum_eps;
  for (int64_t j = 0; j < k; ++j) {
    ids[row * k + j] = sel[j];
    weights[row * k + j] = (normalize ? s[j] / sum : s[j]) * routed_scale;
  }
}

__global__ void swiglu_kernel(float* g, const float* v, const float* row_weight, int64_t n_rows,
                              int64_t inter, float limit) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * inter) return;
  float gate = g[idx], up = v[idx];
  if (limit > 0.0f) {
    gate = fminf(gate, limit);
    up = fminf(limit, fmaxf(-limit, up));
  }
  const float silu = gate / (1.0f + expf(-gate));
  float out = silu * up;
  if (row_weight != nullptr) out *= row_weight[idx / inter];
  g[idx] = out;
}

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int64_t n_rows,
                                   int64_t width, float* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * width) return;
  const int64_t r = idx / width, c = idx % width;
  out[idx] = x[static_cast<int64_t>(rows[r]) * width + c];
}

__global__ void combine_kernel(const float* y_routed, const int32_t* slot_of, const float* y_shared,
                               int64_t n_rows, int64_t k, int64_t dim, float* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n_rows * dim) return;
  const int64_t r = idx / dim, c = idx % dim;
  float acc = 0.0f;
  for (int64_t j = 0; j < k; ++j) acc += y_routed[static_cast<int64_t>(slot_of[r * k + j]) * dim + c];
  if (y_shared != nullptr) acc += y_shared[idx];
  out[idx] = acc;
}

unsigned blocks_for(int64_t total, int threads) {
  const int64_t b = (total + threads - 1) / threads;
  CHECK_KIND(kUnsupported, b < (int64_t{1} << 31)) << "moe: problem too large";
  return static_cast<unsigned>(b);
}

}  // namespace

void route_cuda(cudaStream_t stream, const float* logits, int64_t n_rows, const float* bias,
                const int32_t* tid2eid, const int32_t* tokens, const RouterParams& p,
                int32_t* expert_ids, float* weights) {
  CHECK_KIND(kUnsupported, p.top_k > 0 && p.top_k <= kMaxTopK && p.top_k <= p.n_experts)
      << "route: top_k " << p.top_k << " (at most " << kMaxTopK << ") of " << p.n_experts;
  if (n_rows == 0) return;
  constexpr int kWarpsPerBlock = 4;
  route_kernel<<<blocks_for(n_rows, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(
      logits, n_rows, p.n_experts, bias, tid2eid, tokens, p.top_k, p.routed_scale, p.inv_temp,
      p.sum_eps, p.normalize, expert_ids, weights);
  CUDA_CHECK_LAUNCH();
}

void swiglu_cuda(cudaStream_t stream, float* g, const float* v, const float* row_weight,
                 int64_t n_rows, int64_t inter, float limit) {
  if (n_rows * inter == 0) return;
  swiglu_kernel<<<blocks_for(n_rows * inter, 256), 256, 0, stream>>>(g, v, row_weight, n_rows,
                                                                     inter, limit);
  CUDA_CHECK_LAUNCH();
}

void gather_rows_cuda(cudaStream_t stream, const float* x, const int32_t* rows, int64_t n_rows,
                      int64_t width, float* out) {
  if (n_rows * width == 0) return;
  gather_rows_kernel<<<blocks_for(n_rows * width, 256), 256, 0, stream>>>(x, rows, n_rows, width,
                                                                          out);
  CUDA_CHECK_LAUNCH();
}

void moe_combine_cuda(cudaStream_t stream, const float* y_routed, const int32_t* slot_of,
                      const float* y_shared, int64_t n_rows, int64_t top_k, int64_t dim,
                      float* out) {
  if (n_rows * dim == 0) return;
  combine_kernel<<<blocks_for(n_rows * dim, 256), 256, 0, stream>>>(y_routed, slot_of, y_shared,
                                                                    n_rows, top_k, dim, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
