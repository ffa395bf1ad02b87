// Partial interleaved RoPE (MODEL_SPEC §A.4). The last `r` values of a head are r/2
// complex pairs (x[2i], x[2i+1]) rotated by angle pos * inv_freq[i].
// inv_freq and angles are computed in fp32 exactly as the reference does
// (inv_freq = 1 / theta^(2i/r), YaRN-blended on compressed layers; angle = float(pos) *
// inv_freq in fp32), so tables agree bit for bit with transformers.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

struct RopeParams {
  int64_t rope_dim = 64;  // r (even)
  double theta = 10000.0;
  bool yarn = false;
  double yarn_factor = 1.0;
  int64_t yarn_original_max_position = 0;
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
};

class RopeTable {
 public:
  RopeTable() = default;
  explicit RopeTable(const RopeParams& params);

  int64_t rope_dim() const { return rope_dim_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }

  // Rotates x[0..r) in place (x points at the rope part of one head) by +pos, or by
  // -pos when `inverse` (the conjugate rotation applied to attention outputs).
  void apply(float* x, int64_t pos, bool inverse = false) const;
  // Applies `apply` to n_heads heads of width head_dim whose rope part is the trailing
  // r values.
  void apply_heads(float* x, int64_t n_heads, int64_t head_dim, int64_t pos,
                   bool inverse = false) const;

 private:
  int64_t rope_dim_ = 0;
  std::vector<float> inv_freq_;
};

}  // namespace deepinfer
