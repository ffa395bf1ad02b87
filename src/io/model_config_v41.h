// The DeepSeek-V4.1 keys of config.json (MODEL_SPEC §C.1): cross-layer sharing, candidate
// blocks, gate temperature, Engram and DSpark; and the DSpark keys alone, which a DeepSeek-V4
// config (V4-Flash-DSpark / 0731, MODEL_SPEC §D) has too. Internal to the config parser.
#pragma once

#include "io/config_keys.h"
#include "io/model_config.h"

namespace deepinfer {

// `k`: the text config; `top`: the whole file (image_token_id lives there).
void parse_v41_keys(const Keys& k, const Keys& top, ModelConfig* c);

// dspark_* keys (none: DsparkConfig stays empty). The stage count: V4.1 num_nextn_predict_layers,
// V4 three (kV4DsparkStages).
void parse_dspark_keys(const Keys& k, ModelConfig* c);
inline constexpr int64_t kV4DsparkStages = 3;

}  // namespace deepinfer
