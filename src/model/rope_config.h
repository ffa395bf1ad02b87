// The RoPE tables of a DeepSeek-V4 model (MODEL_SPEC §A.4): ratio-0 layers use rope_theta
// without YaRN; compressed layers (and their compressors and indexer) use
// compress_rope_theta with the config's YaRN. Shared by every backend.
#pragma once

#include "io/model_config.h"
#include "ops/rope/rope.h"

namespace deepinfer {

RopeParams rope_params(const ModelConfig& config, bool compressed);

}  // namespace deepinfer
