// The built-in tiny model: a small DeepSeek-V4 configuration (every layer type: sliding,
// CSA ratio 4 with indexer, HCA ratio 128; hash and top-k MoE) with the real 129,280-token
// vocabulary, whose weights are generated deterministically from kTinySeed. Used by
// `deepinfer generate` without --model, the server's default, tests and benchmarks.
#pragma once

#include <cstdint>

#include "io/model_config.h"

namespace deepinfer {

constexpr uint64_t kTinySeed = 20261129;

ModelConfig tiny_model_config();

}  // namespace deepinfer
