#include <cmath>

#include "base/error.h"
#include "ops/rope/rope.h"

namespace deepinfer {
namespace {

// YaRN correction dimension (the dimension whose wavelength makes `rotations` turns
// over the original context).
double correction_dim(double rotations, int64_t dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (rotations * 2.0 * M_PI))) / (2.0 * std::log(base));
}

}  // namespace

RopeTable::RopeTable(const RopeParams& params) : rope_dim_(params.rope_dim) {
  CHECK(params.rope_dim > 0 && params.rope_dim % 2 == 0)
      << "rope dims must be positive and even, got " << params.rope_dim;
  const int64_t half = params.rope_dim / 2;
  inv_freq_.resize(half);
  const float base = static_cast<float>(params.theta);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(params.rope_dim);
    const float pos_freq = std::pow(base, exponent);
    inv_freq_[i] = 1.0f / pos_freq;
  }
  if (!params.yarn) return;
  CHECK(params.yarn_original_max_position > 0) << "YaRN needs original_max_position_embeddings";
  double low = std::floor(correction_dim(params.yarn_beta_fast, params.rope_dim, params.theta,
                                         static_cast<double>(params.yarn_original_max_position)));
  double high = std::ceil(correction_dim(params.yarn_beta_slow, params.rope_dim, params.theta,
                                         static_cast<double>(params.yarn_original_max_position)));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(params.rope_dim - 1));
  if (low == high) high += 0.001;
  const float lowf = static_cast<float>(low), highf = static_cast<float>(high);
  const float factor = static_cast<float>(params.yarn_factor);
  for (int64_t i = 0; i < half; ++i) {
    float ramp = (static_cast<float>(i) - lowf) / (highf - lowf);
    ramp = std::min(1.0f, std::max(0.0f, ramp));
    const float extrapolation = 1.0f - ramp;
    const float pos_freq = 1.0f / inv_freq_[i];
    const float interp = 1.0f / (factor * pos_freq);
    inv_freq_[i] = interp * (1.0f - extrapolation) + inv_freq_[i] * extrapolation;
  }
}

void RopeTable::apply(float* x, int64_t pos, bool inverse) const {
  const int64_t half = rope_dim_ / 2;
  const float p = static_cast<float>(pos);
  for (int64_t i = 0; i < half; ++i) {
    const float angle = p * inv_freq_[i];
    const float c = std::cos(angle);
    const float s = inverse ? -std::sin(angle) : std::sin(angle);
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = b * c + a * s;
  }
}

void RopeTable::apply_heads(float* x, int64_t n_heads, int64_t head_dim, int64_t pos,
                            bool inverse) const {
  for (int64_t h = 0; h < n_heads; ++h) apply(x + h * head_dim + head_dim - rope_dim_, pos, inverse);
}

}  // namespace deepinfer
