#include "runtime/model_runner.h"

#include "base/error.h"

namespace deepinfer {

// A backend without speculative decoding refuses rollback and drafting; the engine checks
// rollback_depth() and drafter() first, so this is reached only by a direct caller.
void ModelRunner::truncate(int64_t, int64_t) {
  CHECK(false) << name() << " cannot roll a sequence back (no speculative decoding on this backend)";
}

RunnerDraft ModelRunner::draft(int64_t, int32_t, int64_t) {
  CHECK(false) << name() << " has no speculative drafter";
  return {};
}

std::vector<RunnerDraft> ModelRunner::draft_batch(std::span<const DraftRequest> requests) {
  std::vector<RunnerDraft> out;
  out.reserve(requests.size());
  for (const DraftRequest& r : requests) out.push_back(draft(r.sequence, r.next, r.n_drafts));
  return out;
}

std::shared_ptr<const PrefixState> ModelRunner::export_prefix(int64_t, const PrefixState*) {
  CHECK(false) << name() << " has no prefix caching";
  return {};
}

int64_t ModelRunner::import_prefix(std::span<const PrefixState* const>) {
  CHECK(false) << name() << " has no prefix caching";
  return -1;
}

}  // namespace deepinfer
