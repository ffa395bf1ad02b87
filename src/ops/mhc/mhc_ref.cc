#include <cmath>
#include <vector>

#include "base/parallel.h"
#include "ops/mhc/mhc.h"
#include "ops/rms_norm/rms_norm.h"

namespace deepinfer {
namespace {

inline float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// mixes[n, m] = (fn . x[n]) * rms_inv(x[n]) : one RMS statistic over all n_hc*D values.
std::vector<float> mix_logits(const float* x, int64_t n_rows, const float* fn, int64_t n_mix,
                              const HcMixParams& p, GemmMode mode) {
  const int64_t width = p.n_hc * p.dim;
  std::vector<float> mixes(n_rows * n_mix);
  linear_ref(x, n_rows, width, fn, n_mix, mixes.data(), mode);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float inv = rms_inv(x + r * width, width, p.norm_eps);
    for (int64_t m = 0; m < n_mix; ++m) mixes[r * n_mix + m] *= inv;
  }
  return mixes;
}

}  // namespace

void hc_mix_ref(const float* x, int64_t n_rows, const float* fn, const float* base,
                const float* scale, const HcMixParams& p, float* pre, float* post, float* comb,
                GemmMode mode) {
  const int64_t hc = p.n_hc, n_mix = (2 + hc) * hc;
  std::vector<float> mixes = mix_logits(x, n_rows, fn, n_mix, p, mode);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* m = mixes.data() + r * n_mix;
    for (int64_t j = 0; j < hc; ++j) {
      pre[r * hc + j] = sigmoid(m[j] * scale[0] + base[j]) + p.hc_eps;
      post[r * hc + j] = 2.0f * sigmoid(m[hc + j] * scale[1] + base[hc + j]);
    }
    float* c = comb + r * hc * hc;
    // Row softmax of the logits, plus eps.
    for (int64_t j = 0; j < hc; ++j) {
      float row_max = -INFINITY;
      for (int64_t k = 0; k < hc; ++k) {
        c[j * hc + k] = m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
        row_max = std::max(row_max, c[j * hc + k]);
      }
      float sum = 0.0f;
      for (int64_t k = 0; k < hc; ++k) {
        c[j * hc + k] = std::exp(c[j * hc + k] - row_max);
        sum += c[j * hc + k];
      }
      for (int64_t k = 0; k < hc; ++k) c[j * hc + k] = c[j * hc + k] / sum + p.hc_eps;
    }
    auto normalise_cols = [&] {
      for (int64_t k = 0; k < hc; ++k) {
        float sum = 0.0f;
        for (int64_t j = 0; j < hc; ++j) sum += c[j * hc + k];
        for (int64_t j = 0; j < hc; ++j) c[j * hc + k] /= sum + p.hc_eps;
      }
    };
    auto normalise_rows = [&] {
      for (int64_t j = 0; j < hc; ++j) {
        float sum = 0.0f;
        for (int64_t k = 0; k < hc; ++k) sum += c[j * hc + k];
        for (int64_t k = 0; k < hc; ++k) c[j * hc + k] /= sum + p.hc_eps;
      }
    };
    normalise_cols();
    for (int64_t it = 1; it < p.sinkhorn_iters; ++it) {
      normalise_rows();
      normalise_cols();
    }
  }
}

void hc_collapse_ref(const float* x, const float* pre, int64_t n_rows, int64_t n_hc, int64_t dim,
                     float* u) {
  parallel_for(n_rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* ur = u + r * dim;
      const float* xr = x + r * n_hc * dim;
      for (int64_t i = 0; i < dim; ++i) {
        float acc = 0.0f;
        for (int64_t j = 0; j < n_hc; ++j) acc += pre[r * n_hc + j] * xr[j * dim + i];
        ur[i] = acc;
      }
    }
  }, 4);
}

void hc_expand_ref(const float* x, const float* y, const float* post, const float* comb,
                   int64_t n_rows, int64_t n_hc, int64_t dim, float* x_out) {
  parallel_for(n_rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * n_hc * dim;
      const float* yr = y + r * dim;
      const float* c = comb + r * n_hc * n_hc;
      for (int64_t k = 0; k < n_hc; ++k) {
        float* out = x_out + (r * n_hc + k) * dim;
        const float pk = post[r * n_hc + k];
        for (int64_t i = 0; i < dim; ++i) {
          float acc = pk * yr[i];
          for (int64_t j = 0; j < n_hc; ++j) acc += c[j * n_hc + k] * xr[j * dim + i];
          out[i] = acc;
        }
      }
    }
  }, 4);
}

void hc_head_ref(const float* x, int64_t n_rows, const float* fn, const float* base,
                 const float* scale, const HcMixParams& p, float* h, GemmMode mode) {
  const int64_t hc = p.n_hc;
  std::vector<float> mixes = mix_logits(x, n_rows, fn, hc, p, mode);
  std::vector<float> pre(n_rows * hc);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t j = 0; j < hc; ++j) {
      pre[r * hc + j] = sigmoid(mixes[r * hc + j] * scale[0] + base[j]) + p.hc_eps;
    }
  }
  hc_collapse_ref(x, pre.data(), n_rows, hc, p.dim, h);
}

}  // namespace deepinfer
