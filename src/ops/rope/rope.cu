// RoPE: one thread per complex pair (token, head, i).
#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/rope/rope_cuda.h"

namespace deepinfer {
namespace {

struct Params {
  float* x;
  const int32_t* positions;
  int64_t n_tokens, n_heads, head_dim, half;
  const float* inv_freq;
  bool inverse;
};

__global__ void rope_kernel(Params p) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= p.n_tokens * p.n_heads * p.half) return;
  const int64_t i = idx % p.half;
  const int64_t head = idx / p.half;  // token * n_heads + h
  const int64_t token = head / p.n_heads;
  const float angle = static_cast<float>(p.positions[token]) * p.inv_freq[i];
  float s, c;
  sincosf(angle, &s, &c);
  if (p.inverse) s = -s;
  float* v = p.x + head * p.head_dim + p.head_dim - 2 * p.half + 2 * i;
  const float a = v[0], b = v[1];
  v[0] = a * c - b * s;
  v[1] = b * c + a * s;
}

}  // namespace

void rope_cuda(cudaStream_t stream, float* x, const int32_t* positions, int64_t n_tokens,
               int64_t n_heads, int64_t head_dim, int64_t rope_dim, const float* inv_freq,
               bool inverse) {
  CHECK(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= head_dim)
      << "rope: rope_dim " << rope_dim << ", head_dim " << head_dim;
  const int64_t total = n_tokens * n_heads * (rope_dim / 2);
  if (total == 0) return;
  const Params p{x, positions, n_tokens, n_heads, head_dim, rope_dim / 2, inv_freq, inverse};
  constexpr int kThreads = 256;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  CHECK_KIND(kUnsupported, blocks < (int64_t{1} << 31)) << "rope: problem too large";
  rope_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
