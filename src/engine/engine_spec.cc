// Speculative decoding inside the engine (engine.h EngineArgs::speculative_method; the
// verification rule is spec_decode.h's). Per step: a decoding request with drafts runs the
// chunk [y, d_0 .. d_{k-1}] with logits at every row (prepare()); verify() walks the rows in
// order and commits the accepted drafts plus one token; note_verification() rolls the
// sequence back to the committed positions (ModelRunner::truncate), so the drafter and the
// next step see exactly the state a non-speculative run would have; after update(),
// propose_drafts() drafts from that committed state for the next step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <unordered_map>

#include "base/error.h"
#include "base/logging.h"
#include "engine/engine_impl.h"
#include "engine/spec_decode.h"

namespace deepinfer {

void Engine::Impl::init_speculative() {
  const std::string& method = args.speculative_method;
  CHECK(method == "none" || method == "auto" || method == "dspark" || method == "mtp")
      << "engine: speculative_method must be none, auto, dspark or mtp, got '" << method << "'";
  CHECK(args.spec_scheduling == "fixed" || args.spec_scheduling == "confidence")
      << "engine: spec_scheduling must be fixed or confidence, got '" << args.spec_scheduling << "'";
  CHECK(args.num_speculative_tokens >= 0)
      << "engine: num_speculative_tokens must be >= 0, got " << args.num_speculative_tokens;
  int64_t k = 0;
  if (args.spec_test_drafter) {
    CHECK(args.num_speculative_tokens > 0) << "engine: a test drafter needs num_speculative_tokens";
    k = args.num_speculative_tokens;
  } else if (method != "none") {
    const std::string drafter = runner->drafter();
    if (method == "auto" && drafter == "none") return;
    CHECK(method == "auto" || drafter == method)
        << "engine: speculative_method " << method << ", but the model on " << runner->name() << " has "
        << (drafter == "none" ? std::string("no drafter") : "a " + drafter + " drafter");
    const int64_t natural = runner->draft_length();
    k = args.num_speculative_tokens > 0 ? args.num_speculative_tokens : natural;
    CHECK(drafter != "dspark" || k <= natural)
        << "engine: " << k << " speculative tokens, but the DSpark drafter drafts blocks of " << natural;
  }
  if (k == 0) return;
  CHECK(runner->rollback_depth() > 0) << "engine: speculative decoding is not available on " << runner->name()
                                      << " (it cannot roll a sequence back)";
  CHECK(k <= runner->rollback_depth())
      << "engine: " << k << " speculative tokens, but " << runner->name() << " rolls back at most "
      << runner->rollback_depth() << " positions (ModelOptions::max_rollback)";
  spec_k = k;
  stats.accepted_at.assign(size_t(k), 0);
  stats.verified_at.assign(size_t(k), 0);
  stats.predicted_at.assign(size_t(k), 0.0);
  stats.calibrated_accepted_at.assign(size_t(k), 0);
  LOG(INFO) << "engine: speculative decoding, " << k << " drafts per verification ("
            << (args.spec_test_drafter ? std::string("test drafter") : runner->drafter()) << ", "
            << args.spec_scheduling << ")";
  if (args.spec_scheduling == "confidence" && !args.spec_step_time.empty()) {
    step_curve = StepTimeCurve(args.spec_step_time);  // a test's curve: no profile, no correction
    fixed_curve = true;
  } else if (args.spec_scheduling == "confidence") {
    profile_step_curve();
  }
}

// Forwards of 1, 2, 4, .. N tokens (N: the most a step of verifications can hold), each as
// fresh sequences of spec_k + 1 tokens (a verification's shape) with logits at every row;
// per size one warm-up and the fastest of three runs.
void Engine::Impl::profile_step_curve() {
  const int64_t per_seq = spec_k + 1;
  const RunnerCapacity cap = runner->capacity();
  const int64_t max_seqs = std::min(scheduler->config().max_num_seqs, cap.max_sequences);
  const int64_t top = std::max<int64_t>(
      1, std::min({args.max_num_batched_tokens, cap.max_batch_tokens, max_seqs * per_seq}));
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n < top; n *= 2) sizes.push_back(n);
  sizes.push_back(top);
  const int64_t V = runner->config().vocab_size;
  std::vector<std::pair<int64_t, double>> points;
  for (int64_t n : sizes) {
    std::vector<std::vector<int32_t>> tokens;
    for (int64_t done = 0; done < n; done += per_seq) {
      std::vector<int32_t>& t = tokens.emplace_back(size_t(std::min(per_seq, n - done)));
      for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t((int64_t(done) + int64_t(i)) * 7 + 3) % int32_t(V);
    }
    std::vector<double> times;
    for (int run = 0; run < 4; ++run) {
      std::vector<RunnerChunk> chunks;
      try {
        for (const std::vector<int32_t>& t : tokens) chunks.push_back({runner->new_sequence(), t, true});
        const auto t0 = std::chrono::steady_clock::now();
        runner->forward(chunks);
        if (run > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      } catch (...) {
        for (const RunnerChunk& c : chunks) runner->free_sequence(c.sequence);
        throw;
      }
      for (const RunnerChunk& c : chunks) runner->free_sequence(c.sequence);
    }
    // The fastest run (others were descheduled on a loaded machine), and never below a
    // smaller size's: the work grows with the tokens.
    double t = std::max(*std::min_element(times.begin(), times.end()), 1e-9);
    if (!points.empty()) t = std::max(t, points.back().second);
    points.emplace_back(n, t);
  }
  step_curve = StepTimeCurve(std::move(points));
  busy_offset = runner->busy_seconds();
  std::string curve;
  for (const auto& [n, t] : step_curve.points()) curve += " " + std::to_string(n) + ":" + std::to_string(t * 1e3);
  LOG(INFO) << "engine: step time (tokens:ms) profiled on " << runner->name() << ":" << curve;
}

std::vector<double> Engine::Impl::running_acceptance(size_t n) const {
  std::vector<double> rates;
  double before = 1.0;
  for (size_t j = 0; j < n; ++j) {
    const double a = j < stats.accepted_at.size() ? double(stats.accepted_at[j]) : 0.0;
    const double v = j < stats.verified_at.size() ? double(stats.verified_at[j]) : 0.0;
    // P(drafts 0..j accepted), starting optimistic (as if 4 verifications had accepted every
    // draft): an estimate that started low would never be verified, so never learned.
    const double cum = (a + 4) / (v + 4);
    rates.push_back(std::min(1.0, cum / before));
    before = cum;
  }
  return rates;
}

std::vector<double> Engine::Impl::calibrated(const std::vector<double>& rates) const {
  std::vector<double> out;
  double raw = 1.0, before = 1.0;
  for (size_t j = 0; j < rates.size(); ++j) {
    raw *= std::clamp(rates[j], 0.0, 1.0);
    const double a = j < stats.calibrated_accepted_at.size() ? double(stats.calibrated_accepted_at[j]) : 0.0;
    const double e = j < stats.predicted_at.size() ? stats.predicted_at[j] : 0.0;
    const double cum = std::min({1.0, before, raw * (a + 4) / (e + 4)});
    out.push_back(before > 0 ? cum / before : 0.0);
    before = cum;
  }
  return out;
}

std::vector<int32_t> Engine::Impl::verify(const InFlight& f, size_t i, Live& l, const Request& r) {
  const ScheduledChunk& c = f.sched.scheduled[i];
  const int64_t V = runner->config().vocab_size;
  const std::vector<int32_t>& drafts = c.draft_token_ids;
  const int64_t n = int64_t(drafts.size());
  const bool have_q = !l.draft_q.empty();
  ICHECK(!have_q || int64_t(l.draft_q.size()) >= n * V) << "engine: drafts of " << l.id << " without their q";
  const int64_t position = r.num_output_tokens();
  std::vector<int32_t> history(r.token_ids.begin() + r.num_prompt_tokens, r.token_ids.end());
  std::vector<int32_t> committed;
  for (int64_t j = 0; j <= n; ++j) {
    const int64_t row = f.result.logits_row[size_t(f.out_row[i] + j)];
    ICHECK(row >= 0) << "engine: verification row " << j << " of " << l.id << " has no logits";
    const float* logits = f.result.logits.f32() + row * V;
    const int64_t pos = position + j;
    const std::vector<float>& target = target_row(l, history, logits, pos, nullptr);
    int32_t token;
    bool accepted = false;
    if (j < n) {
      const std::span<const float> q =
          have_q ? std::span<const float>(l.draft_q.data() + j * V, size_t(V)) : std::span<const float>();
      const VerifyDecision d = verify_draft(target, l.params, pos, drafts[size_t(j)], q);
      token = d.token;
      accepted = d.accepted;
    } else {
      token = sample_token(target, l.params, pos);  // the bonus token: a plain sample
    }
    commit_token(l, logits, pos, token);
    committed.push_back(token);
    history.push_back(token);
    // Nothing is decided past a stop token id (the scheduler ends the request there).
    const bool stop = pos + 1 > r.min_tokens &&
                      std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) != r.stop_token_ids.end();
    if (!accepted || stop) break;
  }
  return committed;
}

void Engine::Impl::note_verification(const InFlight& f, size_t i, Live& l,
                                     const std::vector<int32_t>& committed) {
  const ScheduledChunk& c = f.sched.scheduled[i];
  const std::vector<int32_t>& drafts = c.draft_token_ids;
  size_t accepted = 0;
  for (size_t j = 0; j < drafts.size() && j < stats.verified_at.size(); ++j) ++stats.verified_at[j];
  while (accepted < drafts.size() && accepted < committed.size() && committed[accepted] == drafts[accepted]) {
    ++stats.accepted_at[accepted];
    ++accepted;
  }
  if (!l.draft_estimate.empty()) {
    for (size_t j = 0; j < drafts.size() && j < l.draft_estimate.size() && j < stats.predicted_at.size(); ++j) {
      stats.predicted_at[j] += l.draft_estimate[j];
      if (j < accepted) ++stats.calibrated_accepted_at[j];
    }
  }
  ++stats.n_verifications;
  stats.n_drafts_verified += int64_t(drafts.size());
  stats.n_drafts_accepted += int64_t(accepted);
  ICHECK(l.sequence >= 0 && runner->n_tokens(l.sequence) == c.start_position + c.n_tokens)
      << "engine: request " << l.id << " state does not end at its verified chunk";
  // The inputs y and the accepted drafts are committed; the rejected rest is rolled back.
  runner->truncate(l.sequence, c.start_position + int64_t(committed.size()));
}

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

// Drafts every decoding request; with confidence scheduling, then keeps of all those drafts
// the prefixes select_verification() picks (spec_schedule.h).
void Engine::Impl::propose_drafts() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t V = runner->config().vocab_size;
  struct Proposal {
    int64_t num;
    std::vector<int32_t> drafts;
    std::vector<double> rates;  // per draft: its acceptance estimate (empty: none of its own)
  };
  std::vector<Proposal> proposals;
  int64_t n_plain_decodes = 0;  // decoding requests without drafts next step
  // The decoding request `num` (null otherwise) and the drafts it may take (k <= 0: none).
  auto decoding = [&](int64_t num, const Live& l, int64_t* k) -> const Request* {
    const Request* r = scheduler->find(num);
    if (r == nullptr || l.sequence < 0 || r->status != RequestStatus::kRunning ||
        r->num_output_placeholders > 0 || r->num_computed_tokens + 1 != r->num_tokens()) {
      return nullptr;
    }
    *k = std::min(spec_k, r->max_tokens - r->num_output_tokens() - 1);
    if (l.matcher && l.matcher->is_terminated()) *k = 0;
    return r;
  };
  // The runner's drafts of all requests in one call (ModelRunner::draft_batch: CudaRunner
  // drafts them in one batch); if that call fails, each request drafts on its own below.
  std::unordered_map<int64_t, RunnerDraft> batched;
  if (!args.spec_test_drafter) {
    std::vector<DraftRequest> requests;
    std::vector<int64_t> nums;
    for (auto& [num, l] : live) {
      int64_t k = 0;
      const Request* r = decoding(num, l, &k);
      if (r == nullptr || k <= 0) continue;
      ICHECK(runner->n_tokens(l.sequence) == r->num_computed_tokens);
      requests.push_back({l.sequence, r->token_ids.back(), k});
      nums.push_back(num);
    }
    try {
      std::vector<RunnerDraft> out = runner->draft_batch(requests);
      ICHECK(out.size() == requests.size()) << "draft_batch returned " << out.size() << " drafts";
      for (size_t i = 0; i < out.size(); ++i) batched[nums[i]] = std::move(out[i]);
    } catch (const std::exception& e) {
      LOG(WARNING) << "engine: batched drafting failed (" << e.what() << "); drafting one request at a time";
    }
  }
  for (auto& [num, l] : live) {
    l.draft_q.clear();
    l.draft_estimate.clear();
    int64_t k = 0;
    const Request* r = decoding(num, l, &k);
    if (r == nullptr) continue;
    ++n_plain_decodes;
    if (k <= 0) continue;
    std::vector<int32_t> drafts;
    std::vector<double> rates;
    try {
      if (args.spec_test_drafter) {
        EngineArgs::DraftProposal p = args.spec_test_drafter(l.id, r->token_ids, k);
        CHECK(int64_t(p.tokens.size()) <= k) << "engine: the test drafter returned " << p.tokens.size()
                                             << " drafts for " << k;
        CHECK(p.q.empty() || int64_t(p.q.size()) == int64_t(p.tokens.size()) * V)
            << "engine: the test drafter's q has " << p.q.size() << " entries for " << p.tokens.size()
            << " drafts";
        CHECK(p.confidence.empty() || p.confidence.size() == p.tokens.size())
            << "engine: the test drafter gave " << p.confidence.size() << " confidences for " << p.tokens.size()
            << " drafts";
        drafts = std::move(p.tokens);
        // A sampled draft's own q(d) must not decide whether it is verified (spec_schedule.h):
        // such drafts get the running acceptance unless the hook gives confidences.
        for (float c : p.confidence) rates.push_back(sigmoid(c));
        l.draft_q = std::move(p.q);
      } else {
        auto it = batched.find(num);
        RunnerDraft d = it != batched.end() ? std::move(it->second) : runner->draft(l.sequence, r->token_ids.back(), k);
        drafts = std::move(d.tokens);
        if (d.confidence.size() == drafts.size()) {
          for (float c : d.confidence) rates.push_back(sigmoid(c));
        } else if (d.probability.size() == drafts.size()) {
          rates.assign(d.probability.begin(), d.probability.end());
        }
      }
      for (int32_t t : drafts) CHECK(t >= 0 && t < V) << "engine: draft token " << t << " outside the vocabulary";
      if (l.matcher) {
        // Drafts the constraint refuses would be rejected anyway: keep those before the first.
        int32_t ok = 0;
        while (size_t(ok) < drafts.size() && l.matcher->accept_token(drafts[size_t(ok)])) ++ok;
        if (ok > 0) l.matcher->rollback(ok);
        drafts.resize(size_t(ok));
      }
    } catch (const std::exception& e) {
      // A drafter failure costs this request its drafts for one step, never its output.
      LOG(WARNING) << "engine: no drafts for " << l.id << " this step: " << e.what();
      drafts.clear();
      l.draft_q.clear();
    }
    if (drafts.empty()) continue;
    if (!rates.empty()) {
      rates.resize(drafts.size());
      // Nothing is decided past a stop token id (verify()): the drafts after one are worth 0.
      // (Greedy drafts only: a sampled draft's value must not decide what is verified.)
      if (l.draft_q.empty()) {
        for (size_t j = 0; j + 1 < drafts.size(); ++j) {
          const bool stop = r->num_output_tokens() + int64_t(j) + 1 > r->min_tokens &&
                            std::find(r->stop_token_ids.begin(), r->stop_token_ids.end(), drafts[j]) !=
                                r->stop_token_ids.end();
          if (stop) std::fill(rates.begin() + int64_t(j) + 1, rates.end(), 0.0);
          if (stop) break;
        }
      }
    }
    if (!rates.empty() && !step_curve.empty()) {
      double cum = 1.0;
      for (double a : rates) l.draft_estimate.push_back(cum *= std::clamp(a, 0.0, 1.0));
      rates = calibrated(rates);
    }
    proposals.push_back({num, std::move(drafts), std::move(rates)});
  }
  n_plain_decodes -= int64_t(proposals.size());
  if (!step_curve.empty() && !proposals.empty()) {
    std::vector<std::vector<double>> rates;
    for (Proposal& p : proposals) {
      rates.push_back(p.rates.empty() ? running_acceptance(p.drafts.size()) : std::move(p.rates));
    }
    const VerifySelection sel = select_verification(rates, step_curve, n_plain_decodes);
    for (size_t i = 0; i < proposals.size(); ++i) proposals[i].drafts.resize(size_t(sel.n_drafts[i]));
  }
  for (Proposal& p : proposals) {
    if (!p.drafts.empty()) scheduler->set_draft_tokens(p.num, std::move(p.drafts));
  }
  stats.draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace deepinfer
