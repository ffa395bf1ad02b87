#include "cache/pool_plan.h"

#include <algorithm>
#include <sstream>

#include "base/error.h"
#include "base/logging.h"

namespace deepinfer {

int64_t blocks_spanned(int64_t n_positions, int64_t block_size) {
  if (n_positions <= 0) return 0;
  return (n_positions - 1 + block_size - 1) / block_size + 1;
}

std::string PoolPlan::summary(const CacheLayout& layout) const {
  const std::vector<StateGroup> groups = layout.groups();
  std::ostringstream os;
  os << "state cache: " << double(used_bytes) / (1024.0 * 1024.0) << " MiB, max tokens ";
  if (max_tokens < 0) {
    os << "unbounded (window only)";
  } else {
    os << max_tokens;
  }
  os << ", max concurrent requests " << max_concurrent_requests << "; blocks of "
     << layout.block_size << ":";
  for (size_t g = 0; g < groups.size() && g < n_blocks.size(); ++g) {
    os << " " << groups[g].name() << "=" << n_blocks[g];
  }
  os << ", state slots " << n_state_slots << " x " << layout.state_slot_bytes() << " B";
  return os.str();
}

PoolPlan plan_pools(const CacheLayout& layout, int64_t budget_bytes,
                    const PoolPlanOptions& options) {
  const std::vector<StateGroup> groups = layout.groups();
  CHECK(options.max_num_seqs > 0) << "plan_pools: max_num_seqs must be positive";
  CHECK(options.max_num_batched_tokens > 0) << "plan_pools: max_num_batched_tokens must be positive";
  CHECK(options.max_model_len >= 0) << "plan_pools: negative max_model_len";
  const int64_t bs = layout.block_size;
  const StateGroup& window = groups[0];
  ICHECK(window.kind == StateKind::kWindow);

  // Part 1 per request and per step.
  const int64_t window_blocks_per_seq = blocks_spanned(layout.window, bs) + 1;
  const int64_t window_blocks_step = (options.max_num_batched_tokens + bs - 1) / bs;
  const int64_t per_seq_bytes =
      window_blocks_per_seq * window.block_bytes + layout.state_slot_bytes();
  const int64_t step_bytes = window_blocks_step * window.block_bytes;

  // One request of max_model_len in the compressed groups.
  int64_t one_request_bytes = 0;
  for (size_t g = 1; g < groups.size(); ++g) {
    const int64_t entries = groups[g].n_entries(options.max_model_len);
    one_request_bytes += (entries + bs - 1) / bs * groups[g].block_bytes;
  }
  const int64_t fixed_min = step_bytes + per_seq_bytes + one_request_bytes;
  CHECK_KIND(kResourceExhausted, budget_bytes >= fixed_min)
      << "plan_pools: budget of " << budget_bytes << " bytes cannot hold one request of "
      << options.max_model_len << " tokens (needs " << fixed_min << " bytes: " << step_bytes
      << " for prefill window blocks, " << per_seq_bytes << " per request, "
      << one_request_bytes << " compressed)";
  const int64_t n_seqs = std::min(
      options.max_num_seqs, (budget_bytes - step_bytes - one_request_bytes) / per_seq_bytes);
  if (n_seqs < options.max_num_seqs) {
    LOG(WARNING) << "plan_pools: budget fits " << n_seqs << " concurrent requests, not "
                 << options.max_num_seqs;
  }

  PoolPlan plan;
  plan.n_blocks.assign(groups.size(), 0);
  plan.n_blocks[0] = n_seqs * window_blocks_per_seq + window_blocks_step;
  plan.n_state_slots = n_seqs;
  plan.max_concurrent_requests = n_seqs;
  plan.used_bytes = plan.n_blocks[0] * window.block_bytes + n_seqs * layout.state_slot_bytes();

  if (groups.size() > 1) {
    // First the blocks of one max_model_len request (reserved above, so they fit), then
    // equal tokens in every compressed/indexer group: tokens = left / sum(bytes per token).
    for (size_t g = 1; g < groups.size(); ++g) {
      plan.n_blocks[g] = (groups[g].n_entries(options.max_model_len) + bs - 1) / bs;
      plan.used_bytes += plan.n_blocks[g] * groups[g].block_bytes;
    }
    ICHECK(plan.used_bytes <= budget_bytes);
    const int64_t left = budget_bytes - plan.used_bytes;
    double bytes_per_token = 0;
    for (size_t g = 1; g < groups.size(); ++g) {
      bytes_per_token += double(groups[g].block_bytes) / double(bs * groups[g].ratio);
    }
    const double tokens = double(left) / bytes_per_token * (1.0 - 1e-12);
    for (size_t g = 1; g < groups.size(); ++g) {
      const int64_t n = int64_t(tokens / double(bs * groups[g].ratio));
      plan.n_blocks[g] += n;
      plan.used_bytes += n * groups[g].block_bytes;
      const int64_t held = plan.n_blocks[g] * bs * groups[g].ratio;
      plan.max_tokens = g == 1 ? held : std::min(plan.max_tokens, held);
    }
    ICHECK(plan.used_bytes <= budget_bytes)
        << "plan_pools: planned " << plan.used_bytes << " bytes for a budget of " << budget_bytes;
  }
  LOG(INFO) << plan.summary(layout);
  return plan;
}

}  // namespace deepinfer
