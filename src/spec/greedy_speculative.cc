#include "spec/greedy_speculative.h"

#include <algorithm>

#include "base/error.h"

namespace deepinfer {
namespace {

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

Tensor run(const Model& model, SequenceState& state, std::span<const int32_t> tokens, bool all) {
  SequenceChunk c{&state, tokens, all};
  return model.forward(std::span<const SequenceChunk>(&c, 1));
}

}  // namespace

Drafter model_drafter(const Model& model) {
  CHECK(model.has_drafter()) << "speculative decoding: the model has no drafter";
  return [&model](const SequenceState& state, int32_t next, int64_t k) {
    if (k <= 0) return std::vector<int32_t>();
    const int64_t n = model.drafter_kind() == DrafterKind::kDspark ? std::min(k, model.draft_length()) : k;
    return model.draft(state, next, n).tokens;
  };
}

Drafter dspark_drafter(const Model& model) { return model_drafter(model); }

GreedyOutput greedy_plain(const Model& model, SequenceState& state, std::span<const int32_t> prompt,
                          int64_t max_new_tokens) {
  const int64_t V = model.config().vocab_size;
  GreedyOutput out;
  Tensor logits = run(model, state, prompt, false);
  while (static_cast<int64_t>(out.tokens.size()) < max_new_tokens) {
    const int32_t next = argmax(logits.f32(), V);
    out.tokens.push_back(next);
    out.logits.insert(out.logits.end(), logits.f32(), logits.f32() + V);
    if (static_cast<int64_t>(out.tokens.size()) == max_new_tokens) break;
    logits = run(model, state, std::span<const int32_t>(&out.tokens.back(), 1), false);
  }
  return out;
}

GreedyOutput greedy_speculative(const Model& model, SequenceState& state,
                                std::span<const int32_t> prompt, int64_t max_new_tokens, int64_t k,
                                const Drafter& drafter) {
  CHECK(k >= 1 && k <= model.rollback_depth())
      << "speculative decoding: " << k << " drafts per step, but the model rolls back at most "
      << model.rollback_depth() << " positions";
  const int64_t V = model.config().vocab_size;
  GreedyOutput out;
  out.stats.accepted_at.assign(k, 0);
  Tensor logits = run(model, state, prompt, false);
  int32_t next = argmax(logits.f32(), V);
  out.tokens.push_back(next);
  out.logits.insert(out.logits.end(), logits.f32(), logits.f32() + V);
  while (static_cast<int64_t>(out.tokens.size()) < max_new_tokens) {
    const int64_t room = max_new_tokens - static_cast<int64_t>(out.tokens.size());
    std::vector<int32_t> drafts = drafter(state, next, std::min(k, room));
    CHECK(static_cast<int64_t>(drafts.size()) <= std::min(k, room))
        << "speculative decoding: the drafter returned " << drafts.size() << " drafts";
    std::vector<int32_t> chunk = {next};
    chunk.insert(chunk.end(), drafts.begin(), drafts.end());
    const int64_t committed = state.n_tokens;
    const Tensor verify = run(model, state, chunk, true);  // rows: positions committed ..
    int64_t j = 0;
    while (j < static_cast<int64_t>(drafts.size()) && argmax(verify.f32() + j * V, V) == drafts[j]) {
      ++out.stats.accepted_at[j];
      ++j;
    }
    ++out.stats.steps;
    out.stats.drafted += static_cast<int64_t>(drafts.size());
    out.stats.accepted += j;
    // Inputs `next` and the j accepted drafts are committed; the rest is rolled back.
    model.truncate(state, committed + 1 + j);
    for (int64_t i = 0; i <= j && static_cast<int64_t>(out.tokens.size()) < max_new_tokens; ++i) {
      const float* row = verify.f32() + i * V;
      out.tokens.push_back(i < j ? drafts[i] : argmax(row, V));
      out.logits.insert(out.logits.end(), row, row + V);
    }
    next = out.tokens.back();
  }
  return out;
}

}  // namespace deepinfer
