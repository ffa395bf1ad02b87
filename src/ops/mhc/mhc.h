// Manifold-constrained hyper-connections (MODEL_SPEC §A.2). Streams X are [N, n_hc, D]
// fp32 (stream-major per token). All math fp32.
#pragma once

#include <cstdint>

#include "ops/linear/linear.h"

namespace deepinfer {

struct HcMixParams {
  int64_t n_hc = 4;
  int64_t dim = 0;             // D
  int64_t sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-6f;
};

// fn [(2+n_hc)*n_hc, n_hc*D], base [(2+n_hc)*n_hc], scale [3] ->
// pre [N, n_hc], post [N, n_hc], comb [N, n_hc, n_hc] (entry (j,k) at j*n_hc+k, columns
// sum to 1 after Sinkhorn).
void hc_mix_ref(const float* x, int64_t n_rows, const float* fn, const float* base,
                const float* scale, const HcMixParams& p, float* pre, float* post, float* comb,
                GemmMode mode = GemmMode::kBlas);

// u[n, :] = sum_j pre[n, j] * X[n, j, :]
void hc_collapse_ref(const float* x, const float* pre, int64_t n_rows, int64_t n_hc, int64_t dim,
                     float* u);

// X'[n, k, :] = post[n, k] * y[n, :] + sum_j comb[n, j, k] * X[n, j, :]   (x_out may not alias x)
void hc_expand_ref(const float* x, const float* y, const float* post, const float* comb,
                   int64_t n_rows, int64_t n_hc, int64_t dim, float* x_out);

// Final head collapse: fn [n_hc, n_hc*D], base [n_hc], scale [1] -> h [N, D].
void hc_head_ref(const float* x, int64_t n_rows, const float* fn, const float* base,
                 const float* scale, const HcMixParams& p, float* h,
                 GemmMode mode = GemmMode::kBlas);

}  // namespace deepinfer
