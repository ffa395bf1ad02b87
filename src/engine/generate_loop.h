// The single-sequence generation loop: prefill the prompt, then decode one token at a
// time until max_tokens, EOS (unless ignored) or a stop token id. Used by the CLI; the
// batched Engine serves many requests.
#pragma once

#include <functional>
#include <vector>

#include "engine/sampler.h"
#include "model/model.h"

namespace deepinfer {

struct GenerateResult {
  std::vector<int32_t> tokens;   // generated ids (stop/EOS token included when it ended the run)
  std::string finish_reason;     // "length" or "stop"
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
};

// `on_token` (optional) sees each sampled token as it is produced.
GenerateResult generate_tokens(const Model& model, const std::vector<int32_t>& prompt,
                               const SamplingParams& params,
                               const std::function<void(int32_t)>& on_token = {});

}  // namespace deepinfer
