#include "model/rope_config.h"

namespace deepinfer {

RopeParams rope_params(const ModelConfig& cfg, bool compressed) {
  RopeParams p;
  p.rope_dim = cfg.rope_dim;
  p.theta = compressed ? cfg.compress_rope_theta : cfg.rope_theta;
  if (compressed && cfg.yarn.enabled) {
    p.yarn = true;
    p.yarn_factor = cfg.yarn.factor;
    p.yarn_original_max_position = cfg.yarn.original_max_position;
    p.yarn_beta_fast = cfg.yarn.beta_fast;
    p.yarn_beta_slow = cfg.yarn.beta_slow;
  }
  return p;
}

}  // namespace deepinfer
