// The DeepSeek-V4.1 keys of config.json (MODEL_SPEC §C.1): cross-layer sharing, candidate
// blocks, gate temperature, Engram and DSpark. Internal to the config parser.
#pragma once

#include "io/config_keys.h"
#include "io/model_config.h"

namespace deepinfer {

// `k`: the text config; `top`: the whole file (image_token_id lives there).
void parse_v41_keys(const Keys& k, const Keys& top, ModelConfig* c);

}  // namespace deepinfer
