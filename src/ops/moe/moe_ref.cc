#include <cmath>
#include <vector>

#include "base/error.h"
#include "ops/indexer/indexer.h"
#include "ops/moe/moe.h"

namespace deepinfer {
namespace {

// torch.nn.functional.softplus with its default threshold of 20.
inline float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }
inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

}  // namespace

void route_ref(const float* x, int64_t n_rows, int64_t dim, const float* gate_w,
               const float* bias, const int32_t* tid2eid, const int32_t* token_ids,
               const RouterParams& p, int32_t* expert_ids, float* weights, GemmMode mode) {
  const int64_t n_exp = p.n_experts, k = p.top_k;
  std::vector<float> scores(n_rows * n_exp);
  linear_ref(x, n_rows, dim, gate_w, n_exp, scores.data(), mode);
  std::vector<float> biased(n_exp);
  for (int64_t r = 0; r < n_rows; ++r) {
    float* s = scores.data() + r * n_exp;
    for (int64_t e = 0; e < n_exp; ++e) {
      s[e] = std::sqrt(softplus(p.inv_temp == 1.0f ? s[e] : s[e] * p.inv_temp));
    }
    int32_t* ids = expert_ids + r * k;
    if (tid2eid != nullptr) {
      for (int64_t j = 0; j < k; ++j) {
        ids[j] = tid2eid[static_cast<int64_t>(token_ids[r]) * k + j];
        ICHECK(ids[j] >= 0 && ids[j] < n_exp) << "tid2eid entry out of range";
      }
    } else {
      for (int64_t e = 0; e < n_exp; ++e) biased[e] = s[e] + (bias ? bias[e] : 0.0f);
      std::vector<int64_t> top = topk_indices(biased.data(), n_exp, k);
      for (int64_t j = 0; j < k; ++j) ids[j] = static_cast<int32_t>(top[j]);
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += s[ids[j]];
    sum += p.sum_eps;
    for (int64_t j = 0; j < k; ++j) {
      weights[r * k + j] = (p.normalize ? s[ids[j]] / sum : s[ids[j]]) * p.routed_scale;
    }
  }
}

void expert_ffn_accumulate_ref(const float* x, int64_t dim, const std::vector<int64_t>& rows,
                               const std::vector<float>& row_weights, const ExpertWeights& w,
                               int64_t inter, float limit, float* y, GemmMode mode) {
  const int64_t n = static_cast<int64_t>(rows.size());
  if (n == 0) return;
  std::vector<float> xs(n * dim), g(n * inter), v(n * inter), out(n * dim);
  for (int64_t i = 0; i < n; ++i) {
    std::copy(x + rows[i] * dim, x + (rows[i] + 1) * dim, xs.data() + i * dim);
  }
  linear_ref(xs.data(), n, dim, w.w1, inter, g.data(), mode);
  linear_ref(xs.data(), n, dim, w.w3, inter, v.data(), mode);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < inter; ++j) {
      float gate = g[i * inter + j], up = v[i * inter + j];
      if (limit > 0.0f) {
        gate = std::min(gate, limit);
        up = std::min(limit, std::max(-limit, up));
      }
      g[i * inter + j] = silu(gate) * up * row_weights[i];
    }
  }
  linear_ref(g.data(), n, inter, w.w2, dim, out.data(), mode);
  for (int64_t i = 0; i < n; ++i) {
    float* yr = y + rows[i] * dim;
    for (int64_t d = 0; d < dim; ++d) yr[d] += out[i * dim + d];
  }
}

}  // namespace deepinfer
