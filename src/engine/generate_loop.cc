#include "engine/generate_loop.h"

#include <algorithm>
#include <cmath>
#include <chrono>

namespace deepinfer {

GenerateResult generate_tokens(const Model& model, const std::vector<int32_t>& prompt,
                               const SamplingParams& params,
                               const std::function<void(int32_t)>& on_token) {
  params.validate();
  CHECK(!prompt.empty()) << "the prompt is empty";
  const ModelConfig& cfg = model.config();
  const int64_t limit = cfg.max_position_embeddings;
  CHECK(limit <= 0 || static_cast<int64_t>(prompt.size()) < limit)
      << "prompt of " << prompt.size() << " tokens exceeds the context limit of " << limit;
  auto state = model.new_state();
  GenerateResult result;
  result.finish_reason = "length";
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  SequenceChunk chunk{state.get(), prompt, false};
  Tensor logits = model.forward(std::span<const SequenceChunk>(&chunk, 1));
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  std::vector<float> row(cfg.vocab_size);
  for (int64_t i = 0; i < params.max_tokens; ++i) {
    std::copy(logits.f32(), logits.f32() + cfg.vocab_size, row.begin());
    apply_penalties(row, params, result.tokens);
    const bool may_stop = i >= params.min_tokens;
    if (!may_stop || params.ignore_eos) {
      for (int64_t eos : cfg.eos_token_ids) row[eos] = -INFINITY;
    }
    const int32_t token = sample_token(row, params, i);
    result.tokens.push_back(token);
    if (on_token) on_token(token);
    const bool is_eos = std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), token) !=
                        cfg.eos_token_ids.end();
    const bool is_stop = std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) !=
                         params.stop_token_ids.end();
    if (may_stop && ((is_eos && !params.ignore_eos) || is_stop)) {
      result.finish_reason = "stop";
      break;
    }
    if (i + 1 == params.max_tokens) break;
    if (limit > 0 && state->n_tokens + 1 > limit) break;
    const int32_t next[1] = {token};
    SequenceChunk step{state.get(), std::span<const int32_t>(next, 1), false};
    logits = model.forward(std::span<const SequenceChunk>(&step, 1));
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return result;
}

}  // namespace deepinfer
