// The scheduler's idea is stated once, at the top of scheduler.h: every request's
// num_computed_tokens catches up with its token count; a step hands out chunks of the
// difference within a token budget, preempting the latest request when state runs out.
#include "scheduler/scheduler.h"

#include <algorithm>

#include "base/error.h"

namespace deepinfer {

Scheduler::Scheduler(SchedulerConfig config, CacheLayout layout, const PoolPlan& plan)
    : config_(config), cache_(std::move(layout), plan) {
  CHECK(config_.max_num_batched_tokens > 0)
      << "Scheduler: max_num_batched_tokens must be positive, got " << config_.max_num_batched_tokens;
  CHECK(config_.max_num_seqs > 0) << "Scheduler: max_num_seqs must be positive, got "
                                  << config_.max_num_seqs;
  CHECK(config_.max_model_len >= 0) << "Scheduler: negative max_model_len";
  CHECK(config_.max_prefill_tokens_with_decodes >= 0 && config_.long_prefill_token_threshold >= 0)
      << "Scheduler: max_prefill_tokens_with_decodes and long_prefill_token_threshold must be >= 0, got "
      << config_.max_prefill_tokens_with_decodes << " and " << config_.long_prefill_token_threshold;
}

Scheduler::Key Scheduler::key(const Request& r) const {
  return {config_.priority ? r.priority : 0, r.arrival, r.id};
}

int64_t Scheduler::remaining(const Request& r) const {
  if (!r.wants_more_outputs()) return 0;
  return r.num_tokens_with_drafts() - r.num_computed_tokens;
}

int64_t Scheduler::set_draft_tokens(int64_t id, std::vector<int32_t> draft_token_ids) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return 0;
  Request& r = *it->second;
  if (r.status != RequestStatus::kRunning || r.num_output_placeholders > 0 ||
      r.num_computed_tokens + 1 != r.num_tokens()) {
    return 0;
  }
  // A verified step yields accepted drafts + 1 outputs.
  const int64_t room = std::max<int64_t>(0, r.max_tokens - r.num_output_tokens() - 1);
  if (int64_t(draft_token_ids.size()) > room) draft_token_ids.resize(size_t(room));
  r.draft_token_ids = std::move(draft_token_ids);
  return int64_t(r.draft_token_ids.size());
}

void Scheduler::add_request(RequestSpec spec) {
  CHECK(requests_.count(spec.id) == 0) << "Scheduler: request id " << spec.id << " is already live";
  CHECK(!spec.prompt_token_ids.empty()) << "Scheduler: request " << spec.id << " has an empty prompt";
  CHECK(spec.max_tokens >= 1) << "Scheduler: request " << spec.id << " has max_tokens "
                              << spec.max_tokens;
  CHECK(spec.min_tokens >= 0 && spec.min_tokens <= spec.max_tokens)
      << "Scheduler: request " << spec.id << " has min_tokens " << spec.min_tokens
      << " outside [0, max_tokens=" << spec.max_tokens << "]";
  const int64_t total = int64_t(spec.prompt_token_ids.size()) + spec.max_tokens;
  CHECK(config_.max_model_len == 0 || total <= config_.max_model_len)
      << "Scheduler: request " << spec.id << " needs " << total << " tokens (prompt "
      << spec.prompt_token_ids.size() << " + max_tokens " << spec.max_tokens
      << "), more than max_model_len " << config_.max_model_len;
  CHECK_KIND(kResourceExhausted, cache_.fits_alone(total))
      << "Scheduler: request " << spec.id << " of " << total
      << " tokens cannot fit the state cache even alone";

  auto r = std::make_unique<Request>();
  r->id = spec.id;
  r->priority = spec.priority;
  r->arrival = next_arrival_++;
  r->num_prompt_tokens = int64_t(spec.prompt_token_ids.size());
  r->token_ids = std::move(spec.prompt_token_ids);
  r->token_ids.reserve(size_t(total));
  r->max_tokens = spec.max_tokens;
  r->min_tokens = spec.min_tokens;
  r->stop_token_ids = std::move(spec.stop_token_ids);
  waiting_.insert(key(*r));
  requests_.emplace(r->id, std::move(r));
}

void Scheduler::add_chunk(Request& r, int64_t n_tokens, SchedulerOutput& out, int64_t& budget) {
  const int64_t B = config_.prefix_block_tokens;
  if (B > 0 && n_tokens > 1 && r.draft_token_ids.empty()) {
    // The boundary before the last known token too: a hit leaves that one to compute.
    const int64_t end = r.num_computed_tokens + n_tokens;
    const int64_t limit = end >= r.num_tokens_with_placeholders() ? end - 1 : end;
    const int64_t aligned = limit / B * B;
    if (aligned > r.num_computed_tokens) n_tokens = aligned - r.num_computed_tokens;
  }
  cache_.allocate(r.id, r.num_computed_tokens, n_tokens);
  ScheduledChunk chunk;
  chunk.request_id = r.id;
  chunk.start_position = r.num_computed_tokens;
  chunk.n_tokens = n_tokens;
  const int64_t end = r.num_computed_tokens + n_tokens;
  chunk.samples = end >= r.num_tokens_with_placeholders();
  if (chunk.samples && end > r.num_tokens_with_placeholders()) {
    const int64_t n_draft = end - r.num_tokens_with_placeholders();
    chunk.draft_token_ids.assign(r.draft_token_ids.begin(), r.draft_token_ids.begin() + n_draft);
  }
  r.draft_token_ids.clear();  // proposed for this step only
  r.num_computed_tokens = end;
  if (chunk.samples) ++r.num_output_placeholders;
  budget -= n_tokens;
  out.n_scheduled_tokens += n_tokens;
  out.scheduled.push_back(chunk);
}

void Scheduler::preempt(Request& r, SchedulerOutput& out, int64_t& budget) {
  ICHECK(r.status == RequestStatus::kRunning) << "Scheduler: preempting request " << r.id
                                              << " in state " << request_status_name(r.status);
  // A chunk given to it earlier in this schedule() is withdrawn.
  auto it = std::find_if(out.scheduled.begin(), out.scheduled.end(),
                         [&](const ScheduledChunk& c) { return c.request_id == r.id; });
  if (it != out.scheduled.end()) {
    budget += it->n_tokens;
    out.n_scheduled_tokens -= it->n_tokens;
    if (it->samples) --r.num_output_placeholders;
    out.scheduled.erase(it);
  }
  cache_.free_request(r.id);
  r.draft_token_ids.clear();
  r.status = RequestStatus::kPreempted;
  r.num_computed_tokens = 0;
  ++r.num_preemptions;
  ++num_preemptions_total_;
  running_.erase(std::find(running_.begin(), running_.end(), &r));
  waiting_.insert(key(r));
  out.preempted_ids.push_back(r.id);
}

bool Scheduler::preempt_one_after(const Request& r, SchedulerOutput& out, int64_t& budget) {
  Request* victim = nullptr;
  for (Request* other : running_) {
    if (other != &r && key(*other) > key(r) && (victim == nullptr || key(*other) > key(*victim))) {
      victim = other;
    }
  }
  if (victim == nullptr) return false;
  preempt(*victim, out, budget);
  return true;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  out.step = next_step_++;
  out.finished_ids = std::move(finished_since_schedule_);
  finished_since_schedule_.clear();
  int64_t budget = config_.max_num_batched_tokens;

  for (Request* r : running_) cache_.release_slid_out(r->id, r->num_computed_tokens);
  std::sort(running_.begin(), running_.end(),
            [&](const Request* a, const Request* b) { return key(*a) < key(*b); });

  // (1) Running requests: decodes (one known token left, maybe drafts) first, then prefill
  // chunks, each pass in policy order.
  auto is_decode = [](const Request* r) {
    return r->num_tokens_with_placeholders() - r->num_computed_tokens == 1;
  };
  std::vector<Request*> order;
  for (Request* r : running_) if (remaining(*r) > 0 && is_decode(r)) order.push_back(r);
  const size_t n_decodes = order.size();
  for (Request* r : running_) if (remaining(*r) > 0 && !is_decode(r)) order.push_back(r);
  // Prefill limits (top of scheduler.h), fixed once the decodes are placed: the prefill
  // budget of a step with decodes, and the chunk cap while a prefill shares its step.
  const int64_t unlimited = config_.max_num_batched_tokens;
  int64_t prefill_left = unlimited, chunk_cap = unlimited;
  auto set_prefill_limits = [&] {
    const bool decodes = !out.scheduled.empty();
    if (decodes && config_.max_prefill_tokens_with_decodes > 0) {
      prefill_left = config_.max_prefill_tokens_with_decodes;
    }
    // Requests that want prefill tokens: running prefills, and waiting requests that could
    // be admitted (counted up to two, all the rule needs).
    size_t n_prefills = order.size() - n_decodes;
    if (int64_t(running_.size()) < config_.max_num_seqs) {
      for (auto it = waiting_.begin(); it != waiting_.end() && n_prefills < 2; ++it) {
        if (requests_.at(std::get<2>(*it))->num_output_placeholders == 0) ++n_prefills;
      }
    }
    if (config_.long_prefill_token_threshold > 0 && (decodes || n_prefills > 1)) {
      chunk_cap = config_.long_prefill_token_threshold;
    }
  };
  for (size_t i = 0; i < order.size(); ++i) {
    Request* r = order[i];
    if (i == n_decodes) set_prefill_limits();
    if (budget == 0 || (i >= n_decodes && prefill_left == 0)) break;
    if (r->status != RequestStatus::kRunning) continue;  // preempted by an earlier request
    int64_t n = std::min(remaining(*r), budget);
    if (i >= n_decodes) n = std::min({n, prefill_left, chunk_cap});
    while (!cache_.can_allocate(r->id, r->num_computed_tokens, n)) {
      if (preempt_one_after(*r, out, budget)) continue;
      n = cache_.max_allocatable(r->id, r->num_computed_tokens, n);
      if (n == 0) preempt(*r, out, budget);
      break;
    }
    if (r->status == RequestStatus::kRunning) {
      add_chunk(*r, n, out, budget);
      if (i >= n_decodes) prefill_left -= n;
    }
  }
  if (order.size() == n_decodes) set_prefill_limits();

  // (2) Admission, only when the pools did not force a preemption.
  if (out.preempted_ids.empty()) {
    for (auto it = waiting_.begin(); it != waiting_.end() && budget > 0 && prefill_left > 0 &&
                                     int64_t(running_.size()) < config_.max_num_seqs;) {
      Request& r = *requests_.at(std::get<2>(*it));
      // Outputs still in flight from before a preemption must land before recomputing.
      if (r.num_output_placeholders > 0) {
        ++it;
        continue;
      }
      ICHECK(r.num_computed_tokens == 0);
      const int64_t hit = config_.cached_prefix ? config_.cached_prefix(r) : 0;
      ICHECK(hit >= 0 && hit < r.num_tokens()) << "Scheduler: cached prefix of " << hit << " tokens for "
                                               << r.num_tokens();
      r.num_computed_tokens = hit;
      int64_t n = std::min({remaining(r), budget, prefill_left, chunk_cap});
      if (!cache_.can_allocate(r.id, hit, n)) {
        r.num_computed_tokens = 0;
        // With empty pools a smaller first chunk always fits (add_request checked it).
        if (cache_.num_requests() > 0) break;
        n = cache_.max_allocatable(r.id, hit, n);
        if (n == 0) break;
        r.num_computed_tokens = hit;
      }
      it = waiting_.erase(it);
      r.status = RequestStatus::kRunning;
      running_.push_back(&r);
      add_chunk(r, n, out, budget);
      prefill_left -= n;
    }
  }
  return out;
}

FinishedRequest Scheduler::finish_request(Request& r, FinishReason reason) {
  cache_.free_request(r.id);
  if (r.status == RequestStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), &r));
  } else {
    waiting_.erase(key(r));
  }
  r.status = finished_status(reason);
  FinishedRequest done;
  done.id = r.id;
  done.reason = reason;
  done.output_token_ids = r.output_token_ids();
  done.num_preemptions = r.num_preemptions;
  finished_since_schedule_.push_back(r.id);
  requests_.erase(r.id);  // destroys r
  return done;
}

std::vector<FinishedRequest> Scheduler::update(const SchedulerOutput& output,
                                               const std::vector<std::vector<int32_t>>& sampled) {
  CHECK(sampled.size() == output.scheduled.size())
      << "Scheduler::update: " << sampled.size() << " sample lists for "
      << output.scheduled.size() << " scheduled chunks of step " << output.step;
  std::vector<FinishedRequest> finished;
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    const ScheduledChunk& chunk = output.scheduled[i];
    auto it = requests_.find(chunk.request_id);
    if (it == requests_.end()) continue;  // finished meanwhile: its samples are dropped
    CHECK(chunk.samples != sampled[i].empty())
        << "Scheduler::update: request " << chunk.request_id << " got " << sampled[i].size()
        << " tokens for a chunk that " << (chunk.samples ? "samples" : "does not sample");
    if (!chunk.samples) continue;
    Request& r = *it->second;
    CHECK(r.num_output_placeholders > 0)
        << "Scheduler::update: request " << r.id << " has no sample in flight (step "
        << output.step << " updated twice, or out of order?)";
    // Validate before changing anything, so a bad call leaves the request as it was.
    const std::vector<int32_t>& drafts = chunk.draft_token_ids;
    size_t accepted = 0;
    if (!drafts.empty()) {
      CHECK(sampled[i].size() <= drafts.size() + 1)
          << "Scheduler::update: request " << r.id << " got " << sampled[i].size()
          << " tokens for " << drafts.size() << " drafts";
      ICHECK(r.num_output_placeholders == 1 &&
             r.num_computed_tokens == r.num_tokens() + int64_t(drafts.size()));
      while (accepted + 1 < sampled[i].size() && sampled[i][accepted] == drafts[accepted]) {
        ++accepted;
      }
      CHECK(accepted + 1 == sampled[i].size())
          << "Scheduler::update: request " << r.id << " sampled token " << accepted
          << " differs from its draft but is not the last";
      // Positions up to the last accepted draft had the right inputs; the rest recompute.
      r.num_computed_tokens = r.num_tokens() + int64_t(accepted);
    }
    --r.num_output_placeholders;
    std::optional<FinishReason> reason;
    for (int32_t token : sampled[i]) {
      r.token_ids.push_back(token);
      const bool stop_allowed = r.num_output_tokens() > r.min_tokens;
      if (stop_allowed && std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) !=
                              r.stop_token_ids.end()) {
        reason = FinishReason::kStop;
      } else if (r.num_output_tokens() >= r.max_tokens) {
        reason = FinishReason::kLength;
      }
      if (reason) break;
    }
    if (reason) finished.push_back(finish_request(r, *reason));
  }
  return finished;
}

std::optional<FinishedRequest> Scheduler::finish(int64_t id, FinishReason reason) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return std::nullopt;
  return finish_request(*it->second, reason);
}

const Request* Scheduler::find(int64_t id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

}  // namespace deepinfer
