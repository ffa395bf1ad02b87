// Speculative decoding in the batching engine (engine/spec_decode.h, EngineArgs::
// speculative_method; issue 15 deliverables 2 and 5, CPU backend), on the V4.1 golden
// checkpoint with its DSpark drafter (vocabulary 64; the greedy case also on the V4-DSpark / 0731
// golden checkpoint tests/data/golden_v4_dspark), in batch-invariant mode:
//  * greedy: 64 requests submitted at once (penalties, logit_bias, logprobs, stop ids, min_tokens,
//    EOS) with a state budget small enough to preempt and with aborts give token for token
//    the outputs of the non-speculative engine, and every committed token's logits row is
//    bitwise the same; drafts from the DSpark drafter and from an oracle test drafter that
//    proposes the true continuation with some tokens wrong (acceptance strictly between 0 and
//    all);
//  * sampled: over 10^4 seeds the distribution of the first verified output tokens matches the
//    target's exact distribution (computed from the model's own logits, no engine) within a
//    chi-square bound, for a drafter with a full q != p and for greedy drafters (q one-hot);
//    the drafts themselves (what accepting everything would give) fail that bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include "constrained_test_util.h"
#include "engine/spec_decode.h"
#include "engine_test_util.h"

namespace deepinfer {
namespace {

const char* kGolden = "tests/data/golden_v41/dspark_quant/bf16";

std::unique_ptr<Model> golden_model() {
  return Model::load(kGolden, {Numerics::kOfficial, /*batch_invariant=*/true});
}

EngineArgs spec_args(bool overlap) {
  EngineArgs a;
  a.overlap = overlap;
  a.max_num_seqs = 64;
  a.max_num_batched_tokens = 96;
  a.max_model_len = 96;
  a.block_size = 8;
  return a;
}

// 64 greedy jobs with every per-request feature the verification must honour.
std::vector<EngineRequest> greedy_jobs(int64_t vocab) {
  std::vector<EngineRequest> jobs;
  for (int i = 0; i < 64; ++i) {
    EngineRequest r;
    r.id = "g" + std::to_string(i);
    r.prompt = testing::random_tokens(1 + (i * 7) % 23, vocab, 500 + uint32_t(i));
    for (int32_t& t : r.prompt) t = t == 1 ? 2 : t;  // no EOS inside prompts
    r.params.temperature = 0.0f;
    r.params.max_tokens = 8 + (i * 5) % 29;
    r.params.ignore_eos = i % 4 == 0;
    if (i % 5 == 1) r.params.repetition_penalty = 1.4f, r.params.frequency_penalty = 0.3f;
    if (i % 7 == 3) r.params.logit_bias = {{5, 3.0f}, {9, -2.0f}};
    if (i % 6 == 2) r.n_logprobs = 3;
    if (i % 9 == 4) r.params.stop_token_ids = {7, 11};
    if (i % 8 == 5) r.params.min_tokens = 4;
    jobs.push_back(std::move(r));
  }
  return jobs;
}

struct EngineRun {
  std::map<std::string, std::vector<RequestOutput>> outputs;
  std::map<std::pair<std::string, int64_t>, std::vector<float>> logits;  // (id, output index)
  EngineStats stats;
  bool all_free = false;
};

// Runs the jobs on a fresh engine; aborts the ids in `aborts` after step `abort_step`.
EngineRun run_engine(EngineArgs args, const std::vector<EngineRequest>& jobs,
                     const std::vector<std::string>& aborts = {}, int abort_step = 0,
                     std::unique_ptr<Model> (*make_model)() = golden_model) {
  EngineRun run;
  args.on_logits = [&run](const std::string& id, int64_t index, std::span<const float> row) {
    auto [it, fresh] = run.logits.try_emplace({id, index}, row.begin(), row.end());
    if (!fresh) {  // seen again after a preemption: the same row
      ASSERT_TRUE(std::equal(row.begin(), row.end(), it->second.begin())) << id << " output " << index;
    }
  };
  Engine engine(args, make_model(), nullptr);
  for (const EngineRequest& r : jobs) engine.add_request(r);
  for (int s = 0; engine.has_unfinished(); ++s) {
    if (s == abort_step) {
      for (const std::string& id : aborts) engine.abort(id);
    }
    for (RequestOutput& o : engine.step()) run.outputs[o.id].push_back(std::move(o));
  }
  run.stats = engine.stats();
  run.all_free = engine.state_cache().all_free();
  return run;
}

// The true continuation per id with about one draft in four wrong (a hash of the output index
// and the id decides which), so every acceptance length occurs.
EngineArgs::DraftProposal oracle_draft(const std::map<std::string, std::vector<int32_t>>& truth,
                                       const std::map<std::string, size_t>& prompt_len,
                                       const std::string& id, std::span<const int32_t> tokens, int64_t k) {
  EngineArgs::DraftProposal p;
  const std::vector<int32_t>& t = truth.at(id);
  const size_t first = tokens.size() - prompt_len.at(id);  // output index of the first draft
  const size_t salt = std::hash<std::string>()(id);
  for (size_t o = first; o < first + size_t(k) && o < t.size(); ++o) {
    const bool wrong = ((o * 2654435761u + salt) >> 5) % 4 == 3;
    p.tokens.push_back(wrong ? (t[o] + 1) % 64 : t[o]);
  }
  return p;
}

void expect_same_greedy(const EngineRun& plain, const EngineRun& spec, const std::vector<std::string>& aborted) {
  ASSERT_EQ(plain.outputs.size(), spec.outputs.size());
  for (const auto& [id, outs] : plain.outputs) {
    SCOPED_TRACE(id);
    const std::vector<int32_t> want = testing::all_tokens(outs);
    const std::vector<int32_t> got = testing::all_tokens(spec.outputs.at(id));
    const RequestOutput& last = spec.outputs.at(id).back();
    ASSERT_TRUE(last.finished);
    if (std::find(aborted.begin(), aborted.end(), id) != aborted.end() && last.finish_reason == "abort") {
      ASSERT_LE(got.size(), want.size());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin()));
    } else {
      EXPECT_EQ(got, want);
      EXPECT_EQ(last.finish_reason, outs.back().finish_reason);
    }
    std::vector<TokenLogprob> lp_want, lp_got;
    for (const RequestOutput& o : outs) lp_want.insert(lp_want.end(), o.logprobs.begin(), o.logprobs.end());
    for (const RequestOutput& o : spec.outputs.at(id)) lp_got.insert(lp_got.end(), o.logprobs.begin(), o.logprobs.end());
    ASSERT_LE(lp_got.size(), lp_want.size());
    for (size_t i = 0; i < lp_got.size(); ++i) {
      EXPECT_EQ(lp_got[i].token, lp_want[i].token);
      EXPECT_EQ(lp_got[i].logprob, lp_want[i].logprob);
      EXPECT_EQ(lp_got[i].top, lp_want[i].top);
    }
    for (size_t o = 0; o < got.size(); ++o) {
      auto a = plain.logits.find({id, int64_t(o)});
      auto b = spec.logits.find({id, int64_t(o)});
      ASSERT_TRUE(a != plain.logits.end() && b != spec.logits.end()) << "output " << o;
      ASSERT_EQ(a->second, b->second) << "logits of output " << o << " differ";
    }
  }
  EXPECT_TRUE(spec.all_free);
}

void print_stats(const char* what, const EngineStats& s) {
  std::printf("%s: %lld steps, %lld verifications, %lld/%lld drafts accepted, mean acceptance length %.2f, "
              "%.1f verified tokens per step, draft time share %.2f, %lld preemptions; accepted at",
              what, (long long)s.n_steps, (long long)s.n_verifications, (long long)s.n_drafts_accepted,
              (long long)s.n_drafts_verified, s.mean_acceptance_length(), s.verified_tokens_per_step(),
              s.draft_time_share(), (long long)s.n_preemptions);
  for (int64_t a : s.accepted_at) std::printf(" %lld", (long long)a);
  std::printf("\n");
}

TEST(EngineSpeculative, GreedyEqualsPlainWithPreemptionAndAborts) {
  const std::vector<EngineRequest> jobs = greedy_jobs(64);
  EngineArgs small = spec_args(true);
  small.state_budget_bytes = 3 << 19;  // 1.5 MiB: forces preemption
  const EngineRun plain = run_engine(small, jobs);
  std::map<std::string, std::vector<int32_t>> truth;
  std::map<std::string, size_t> prompt_len;
  for (const EngineRequest& r : jobs) {
    truth[r.id] = testing::all_tokens(plain.outputs.at(r.id));
    prompt_len[r.id] = r.prompt.size();
  }
  const std::vector<std::string> aborted = {"g3", "g20", "g41", "g62"};
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap on" : "overlap off");
    EngineArgs a = small;
    a.overlap = overlap;
    a.num_speculative_tokens = 4;
    a.spec_test_drafter = [&](const std::string& id, std::span<const int32_t> tokens, int64_t k) {
      return oracle_draft(truth, prompt_len, id, tokens, k);
    };
    const EngineRun spec = run_engine(a, jobs, aborted, 6);
    print_stats("oracle drafter", spec.stats);
    expect_same_greedy(plain, spec, aborted);
    EXPECT_GT(spec.stats.n_preemptions, 0);
    EXPECT_GT(spec.stats.n_drafts_accepted, 0);
    EXPECT_LT(spec.stats.n_drafts_accepted, spec.stats.n_drafts_verified);
    EXPECT_LT(spec.stats.n_steps, plain.stats.n_steps);
  }
  // Confidence scheduling (spec_schedule.h): the oracle's confidences say which drafts are
  // right (high) or wrong (low), so the schedule keeps some drafts and cuts others; any cut
  // leaves the output that of plain decoding, overlap on or off.
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "confidence, overlap on" : "confidence, overlap off");
    EngineArgs a = small;
    a.overlap = overlap;
    a.num_speculative_tokens = 4;
    a.spec_scheduling = "confidence";
    a.spec_test_drafter = [&](const std::string& id, std::span<const int32_t> tokens, int64_t k) {
      EngineArgs::DraftProposal p = oracle_draft(truth, prompt_len, id, tokens, k);
      const std::vector<int32_t>& t = truth.at(id);
      const size_t first = tokens.size() - prompt_len.at(id);
      for (size_t j = 0; j < p.tokens.size(); ++j) p.confidence.push_back(p.tokens[j] == t[first + j] ? 3.0f : -3.0f);
      return p;
    };
    const EngineRun spec = run_engine(a, jobs, aborted, 6);
    print_stats("oracle drafter, confidence scheduling", spec.stats);
    expect_same_greedy(plain, spec, aborted);
    EXPECT_GT(spec.stats.n_drafts_accepted, 0);
    EXPECT_LT(spec.stats.n_steps, plain.stats.n_steps);
  }
  // The checkpoint's own DSpark drafter (its acceptance is whatever the random weights give),
  // fixed and confidence-scheduled.
  for (const char* scheduling : {"fixed", "confidence"}) {
    SCOPED_TRACE(scheduling);
    EngineArgs d = small;
    d.speculative_method = "dspark";
    d.spec_scheduling = scheduling;
    const EngineRun dspark = run_engine(d, jobs, aborted, 6);
    print_stats((std::string("dspark drafter, ") + scheduling).c_str(), dspark.stats);
    expect_same_greedy(plain, dspark, aborted);
    if (std::string(scheduling) == "fixed") EXPECT_GT(dspark.stats.n_verifications, 0);
  }
}

// Structured output: every verified row gets the grammar mask of the output before it (drafts
// included), drafts the constraint refuses are dropped or rejected, and the output equals the
// non-speculative constrained output (regex and JSON schema, greedy, some with a penalty).
TEST(EngineSpeculative, ConstrainedGreedyEqualsPlain) {
  auto model = [] {
    auto src = random_weights(testing::small_config(), testing::kEngineTestSeed);
    return Model::from_source(testing::small_config(), *src, {Numerics::kOfficial, true, /*max_rollback=*/4});
  };
  const std::vector<EngineRequest> jobs = testing::constrained_requests(12, 0.0f, true, 3);
  auto run = [&](EngineArgs a) {
    Engine engine(a, model(), testing::constrained_test_tokenizer());
    std::map<std::string, RequestOutput> out;
    for (RequestOutput& o : engine.generate(jobs)) out[o.id] = std::move(o);
    return std::make_pair(out, engine.stats());
  };
  EngineArgs base = spec_args(false);
  base.max_model_len = 128;
  const auto [plain, plain_stats] = run(base);
  std::map<std::string, std::vector<int32_t>> truth;
  std::map<std::string, size_t> prompt_len;
  for (const EngineRequest& r : jobs) {
    truth[r.id] = plain.at(r.id).new_tokens;
    prompt_len[r.id] = r.prompt.size();
  }
  EngineArgs a = base;
  a.num_speculative_tokens = 4;
  a.spec_test_drafter = [&](const std::string& id, std::span<const int32_t> tokens, int64_t k) {
    return oracle_draft(truth, prompt_len, id, tokens, k);
  };
  const auto [spec, spec_stats] = run(a);
  print_stats("constrained, oracle drafter", spec_stats);
  for (const auto& [id, o] : plain) {
    SCOPED_TRACE(id);
    EXPECT_EQ(spec.at(id).new_tokens, o.new_tokens);
    EXPECT_EQ(spec.at(id).new_text, o.new_text);
    EXPECT_EQ(spec.at(id).finish_reason, o.finish_reason);
  }
  EXPECT_GT(spec_stats.n_drafts_accepted, 0);
  EXPECT_LT(spec_stats.n_steps, plain_stats.n_steps);
}

// V4's MTP-1 drafter (small V4 config with mtp.0, random weights), 2 chained drafts.
std::unique_ptr<Model> small_mtp_model() {
  ModelConfig cfg = testing::small_config();
  cfg.num_nextn_predict_layers = 1;
  cfg.mtp_compress_ratios = {0};
  auto src = random_weights(cfg, 11, /*with_mtp=*/true);
  return Model::from_source(cfg, *src, {Numerics::kOfficial, true, /*max_rollback=*/2});
}

TEST(EngineSpeculative, MtpGreedyEqualsPlain) {
  std::vector<EngineRequest> jobs;
  for (const testing::Job& j : testing::random_jobs(24, 20, 30, 9, 0.0f)) jobs.push_back(testing::to_request(j));
  EngineArgs a = spec_args(false);
  const EngineRun plain = run_engine(a, jobs, {}, 0, small_mtp_model);
  a.speculative_method = "mtp";
  a.num_speculative_tokens = 2;
  const EngineRun spec = run_engine(a, jobs, {}, 0, small_mtp_model);
  print_stats("mtp drafter", spec.stats);
  expect_same_greedy(plain, spec, {});
  EXPECT_GT(spec.stats.n_verifications, 0);
  // Confidence scheduling with MTP's estimates (the drafter's softmax probability of its draft).
  a.spec_scheduling = "confidence";
  const EngineRun conf = run_engine(a, jobs, {}, 0, small_mtp_model);
  print_stats("mtp drafter, confidence scheduling", conf.stats);
  expect_same_greedy(plain, conf, {});
}

// The DSpark drafter of V4-Flash-DSpark / 0731 (tests/data/golden_v4_dspark: a tiny V4 checkpoint
// with the V4-DSpark keys and tensors, vocabulary 64; model/dspark.cc with the V4 traits): the 64
// greedy jobs with a state budget that bounds admission and with aborts give the non-speculative
// engine's tokens and bitwise logits rows, fixed and confidence-scheduled, overlap on and off;
// "auto" picks the drafter.
std::unique_ptr<Model> v4_dspark_model() {
  return Model::load("tests/data/golden_v4_dspark/model", {Numerics::kOfficial, /*batch_invariant=*/true});
}

TEST(EngineSpeculative, V4DsparkGreedyEqualsPlainWithAborts) {
  ASSERT_EQ(v4_dspark_model()->drafter_kind(), DrafterKind::kDspark);
  const std::vector<EngineRequest> jobs = greedy_jobs(64);
  EngineArgs small = spec_args(true);
  // 512 KiB: admission waits for states to free (about a third of the steps of an unbounded
  // budget). This checkpoint's layers are window-only, so a state stops growing once it holds
  // the window and the scheduler never has to preempt (tried: block sizes 2 / 8, budgets
  // 32 KiB .. 1.5 MiB, chunks of 12 .. 96 tokens); preemption with the same drafter code is the
  // V4.1 case above (GreedyEqualsPlainWithPreemptionAndAborts).
  small.state_budget_bytes = 1 << 19;
  const EngineRun plain = run_engine(small, jobs, {}, 0, v4_dspark_model);
  const std::vector<std::string> aborted = {"g3", "g20", "g41", "g62"};
  const struct {
    const char* method;
    const char* scheduling;
    bool overlap;
  } cases[] = {{"dspark", "fixed", true}, {"dspark", "confidence", false}, {"auto", "fixed", false}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.method) + ", " + c.scheduling + (c.overlap ? ", overlap on" : ", overlap off"));
    EngineArgs d = small;
    d.overlap = c.overlap;
    d.speculative_method = c.method;
    d.spec_scheduling = c.scheduling;
    const EngineRun spec = run_engine(d, jobs, aborted, 6, v4_dspark_model);
    print_stats((std::string("v4 dspark drafter, ") + c.method + ", " + c.scheduling).c_str(), spec.stats);
    expect_same_greedy(plain, spec, aborted);
    if (std::string(c.scheduling) == "fixed") {
      EXPECT_GT(spec.stats.n_verifications, 0);
      EXPECT_EQ(spec.stats.accepted_at.size(), 5u);  // the checkpoint's block
    }
  }
}

TEST(EngineSpeculative, RefusesWhatItCannotDo) {
  auto make = [](EngineArgs a) { Engine e(a, testing::small_model(), nullptr); };
  EngineArgs a = spec_args(false);
  a.speculative_method = "dspark";  // the small model has no drafter
  EXPECT_THROW(make(a), Error);
  a.speculative_method = "auto";  // no drafter: off
  EXPECT_NO_THROW(make(a));
  a.speculative_method = "eagle";
  EXPECT_THROW(make(a), Error);
  EngineArgs h = spec_args(false);
  h.spec_test_drafter = [](const std::string&, std::span<const int32_t>, int64_t) {
    return EngineArgs::DraftProposal{};
  };
  EXPECT_THROW(make(h), Error);  // no num_speculative_tokens; and no rollback depth:
  h.num_speculative_tokens = 2;
  EXPECT_THROW(make(h), Error);
  EngineArgs g = spec_args(false);
  g.speculative_method = "dspark";
  g.num_speculative_tokens = 6;  // more than the block of 5
  EXPECT_THROW(Engine(g, golden_model(), nullptr), Error);
  g.num_speculative_tokens = 0;
  g.spec_scheduling = "adaptive";
  EXPECT_THROW(Engine(g, golden_model(), nullptr), Error);
  g.spec_scheduling = "confidence";
  EXPECT_NO_THROW(Engine(g, golden_model(), nullptr));
  EngineArgs c = spec_args(false);  // a test drafter's confidences must match its drafts
  c.num_speculative_tokens = 2;
  c.spec_scheduling = "confidence";
  c.spec_test_drafter = [](const std::string&, std::span<const int32_t>, int64_t) {
    return EngineArgs::DraftProposal{{3, 4}, {}, {0.5f}};
  };
  EngineRequest r;
  r.id = "c";
  r.prompt = {5, 6};
  r.params.max_tokens = 6;
  Engine e(c, golden_model(), nullptr);
  const std::vector<RequestOutput> out = e.generate({r});  // no drafts, plain decoding
  EXPECT_EQ(out[0].new_tokens.size(), 6u);
  EXPECT_EQ(e.stats().n_verifications, 0);
}

// ---- sampled verification is lossless --------------------------------------------------

constexpr int64_t kV = 64;
constexpr int kSeeds = 10000;
constexpr float kTemperature = 0.9f;

// softmax(l / T) with EOS (id 1) masked, in double: the target's distribution (ignore_eos).
std::vector<double> target_probs(const float* logits) {
  std::vector<double> p(kV);
  double mx = -INFINITY, total = 0;
  for (int64_t t = 0; t < kV; ++t) if (t != 1) mx = std::max(mx, double(logits[t]));
  for (int64_t t = 0; t < kV; ++t) total += p[t] = t == 1 ? 0.0 : std::exp((logits[t] - mx) / kTemperature);
  for (double& x : p) x /= total;
  return p;
}

const std::vector<int32_t> kPrompt = {5, 17, 42};

// What the model alone says after kPrompt (no engine): the exact marginals of output tokens 1
// and 2, and the most likely output 1 after each output 0 and output 2 after each pair.
struct Exact {
  std::vector<double> m1, m2;
  std::vector<int32_t> mode1, mode2;  // [a], [a * V + b]
};

void exact_marginals(const Model& model, const std::vector<int32_t>& prompt, Exact& x) {
  std::vector<double>& m1 = x.m1;
  std::vector<double>& m2 = x.m2;
  x.mode1.assign(kV, 0);
  x.mode2.assign(kV * kV, 0);
  auto mode = [](const std::vector<double>& p) { return int32_t(std::max_element(p.begin(), p.end()) - p.begin()); };
  auto logits_after = [&](const std::vector<int32_t>& toks) {
    auto st = model.new_state();
    SequenceChunk c{st.get(), toks, false};
    Tensor l = model.forward(std::span<const SequenceChunk>(&c, 1));
    return target_probs(l.f32());
  };
  m1.assign(kV, 0.0);
  m2.assign(kV, 0.0);
  const std::vector<double> p0 = logits_after(prompt);
  for (int32_t a = 0; a < kV; ++a) {
    if (p0[a] == 0) continue;
    std::vector<int32_t> t = prompt;
    t.push_back(a);
    const std::vector<double> p1 = logits_after(t);
    x.mode1[a] = mode(p1);
    for (int32_t b = 0; b < kV; ++b) {
      if (p1[b] == 0) continue;
      m1[b] += p0[a] * p1[b];
      std::vector<int32_t> u = t;
      u.push_back(b);
      const std::vector<double> p2 = logits_after(u);
      x.mode2[a * kV + b] = mode(p2);
      for (int32_t c = 0; c < kV; ++c) m2[c] += p0[a] * p1[b] * p2[c];
    }
  }
}

// Pearson chi-square of `counts` against `probs` (cells with expectation < 5 pooled), and
// its degrees of freedom.
std::pair<double, int> chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n) {
  double chi = 0, pooled_e = 0, pooled_o = 0;
  int cells = 0;
  for (size_t t = 0; t < probs.size(); ++t) {
    const double e = probs[t] * double(n);
    if (e < 5) {
      pooled_e += e;
      pooled_o += double(counts[t]);
      continue;
    }
    chi += (counts[t] - e) * (counts[t] - e) / e;
    ++cells;
  }
  if (pooled_e > 0) {
    chi += (pooled_o - pooled_e) * (pooled_o - pooled_e) / std::max(pooled_e, 1e-9);
    ++cells;
  }
  return {chi, cells - 1};
}

// A bound the statistic of a correct sampler exceeds with probability ~1e-6 (Wilson-Hilferty).
double chi_bound(int df) {
  const double z = 4.75, k = df;
  return k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
}

// A fixed draft distribution per output index, far from the target's: softmax of random logits.
std::vector<float> fixed_q(int64_t index) {
  std::vector<float> q(kV);
  std::vector<int32_t> r = testing::random_tokens(kV, 1000, 77 + uint32_t(index));
  double total = 0;
  for (int64_t t = 0; t < kV; ++t) total += q[t] = float(std::exp(r[t] / 250.0));
  for (float& x : q) x = float(x / total);
  return q;
}

int32_t draw(const std::vector<float>& q, double u) {
  double acc = 0;
  for (int64_t t = 0; t < kV; ++t) {
    acc += q[t];
    if (u < acc) return int32_t(t);
  }
  return int32_t(kV - 1);
}

const Exact& exact() {
  static const Exact x = [] {
    Exact e;
    exact_marginals(*golden_model(), kPrompt, e);
    return e;
  }();
  return x;
}

// A drafter for the tests below: drafts for output indices first.. given the request's seed
// and its tokens so far (kPrompt + outputs).
using TestDrafter = EngineArgs::DraftProposal (*)(uint64_t seed, std::span<const int32_t> tokens,
                                                  int64_t first, int64_t k);

// Returns the engine's stats and the number of drafts the test drafter proposed.
std::pair<EngineStats, int64_t> check_lossless(const char* what, const std::string& method, TestDrafter drafter,
                                               int n_seeds = kSeeds,
                                               const std::function<void(EngineArgs&)>& configure = {}) {
  SCOPED_TRACE(what);
  const std::vector<int32_t>& prompt = kPrompt;
  const std::vector<double>& m1 = exact().m1;
  const std::vector<double>& m2 = exact().m2;
  EngineArgs a = spec_args(false);
  a.max_num_seqs = 256;
  a.max_num_batched_tokens = 1024;
  std::vector<int64_t> c1(kV), c2(kV), d1(kV);
  std::map<std::string, uint64_t> seed_of;
  int64_t proposed = 0;
  if (drafter != nullptr) {
    a.num_speculative_tokens = 2;
    a.spec_test_drafter = [&, drafter](const std::string& id, std::span<const int32_t> tokens, int64_t k) {
      const int64_t first = int64_t(tokens.size() - prompt.size());
      EngineArgs::DraftProposal p = drafter(seed_of.at(id), tokens, first, k);
      if (first == 1 && !p.tokens.empty()) ++d1[size_t(p.tokens[0])];
      proposed += int64_t(p.tokens.size());
      return p;
    };
  } else {
    a.speculative_method = method;
  }
  if (configure) configure(a);
  Engine engine(a, golden_model(), nullptr);
  std::vector<EngineRequest> reqs;
  for (int s = 0; s < n_seeds; ++s) {
    EngineRequest r;
    r.id = std::to_string(s);
    r.prompt = prompt;
    r.params.temperature = kTemperature;
    r.params.seed = uint64_t(s) * 7919 + 13;
    r.params.max_tokens = 4;  // the first verification carries two drafts (outputs 1 and 2)
    r.params.ignore_eos = true;
    seed_of[r.id] = r.params.seed;
    reqs.push_back(std::move(r));
  }
  for (const RequestOutput& o : engine.generate(std::move(reqs))) {
    EXPECT_EQ(o.new_tokens.size(), 4u);
    if (o.new_tokens.size() != 4u) return {};
    ++c1[size_t(o.new_tokens[1])];
    ++c2[size_t(o.new_tokens[2])];
  }
  print_stats(what, engine.stats());
  EXPECT_GT(engine.stats().n_drafts_accepted, 0);
  EXPECT_LT(engine.stats().n_drafts_accepted, engine.stats().n_drafts_verified);
  const auto [x1, df1] = chi_square(c1, m1, n_seeds);
  const auto [x2, df2] = chi_square(c2, m2, n_seeds);
  std::printf("%s: chi-square output 1: %.1f (df %d, bound %.1f); output 2: %.1f (df %d, bound %.1f)\n", what, x1,
              df1, chi_bound(df1), x2, df2, chi_bound(df2));
  EXPECT_LT(x1, chi_bound(df1));
  EXPECT_LT(x2, chi_bound(df2));
  if (drafter != nullptr) {  // the drafts alone are far from the target: the test can fail
    int64_t n = 0;
    for (int64_t v : d1) n += v;
    const auto [xd, dfd] = chi_square(d1, m1, n);
    std::printf("%s: chi-square of the drafts for output 1: %.1f (df %d)\n", what, xd, dfd);
    EXPECT_GT(xd, 10 * chi_bound(dfd));
  }
  return {engine.stats(), proposed};
}

// Drafts drawn from fixed_q with the drafter's own random stream (SpecPurpose::kDraft).
EngineArgs::DraftProposal sampling_drafter(uint64_t seed, std::span<const int32_t>, int64_t first, int64_t k) {
  EngineArgs::DraftProposal p;
  for (int64_t o = first; o < first + k; ++o) {
    const std::vector<float> q = fixed_q(o);
    p.tokens.push_back(draw(q, spec_uniform(seed, o, SpecPurpose::kDraft)));
    p.q.insert(p.q.end(), q.begin(), q.end());
  }
  return p;
}

// A greedy drafter (q one-hot) that knows the target: its most likely next tokens (drafts for
// outputs 1 and 2 only; later outputs are not looked at).
EngineArgs::DraftProposal greedy_drafter(uint64_t, std::span<const int32_t> tokens, int64_t first, int64_t k) {
  EngineArgs::DraftProposal p;
  const size_t n = kPrompt.size();
  if (first == 1) {
    const int32_t a = tokens[n];
    p.tokens.push_back(exact().mode1[a]);
    if (k > 1) p.tokens.push_back(exact().mode2[a * kV + p.tokens[0]]);
  } else if (first == 2) {
    p.tokens.push_back(exact().mode2[tokens[n] * kV + tokens[n + 1]]);
  }
  return p;
}

TEST(EngineSpeculative, SampledVerificationIsLosslessWithAFullQ) {
  check_lossless("sampling drafter", "", sampling_drafter);
}

TEST(EngineSpeculative, SampledVerificationIsLosslessWithOneHotQ) {
  check_lossless("greedy drafter", "", greedy_drafter);
}

// Confidence scheduling on a fixed step-time curve (EngineArgs::spec_step_time), sloped so
// that some drafts are verified and others cut: still lossless.
void confidence_schedule(EngineArgs& a) {
  a.spec_scheduling = "confidence";
  a.spec_step_time = {{1, 1.0}, {2048, 1.0 + 2047 * 0.01}};
}

// The greedy drafter with confidences that are a function of its (greedy) drafts.
EngineArgs::DraftProposal confident_greedy_drafter(uint64_t seed, std::span<const int32_t> tokens, int64_t first,
                                                   int64_t k) {
  EngineArgs::DraftProposal p = greedy_drafter(seed, tokens, first, k);
  for (size_t j = 0; j < p.tokens.size(); ++j) p.confidence.push_back(float((p.tokens[j] * 37 + int(j) * 11) % 5 - 2));
  return p;
}

TEST(EngineSpeculative, ConfidenceScheduledVerificationIsLossless) {
  // Greedy drafts with their confidences; then sampled drafts (full q), scheduled by the
  // running per-position acceptance, not by their own q.
  for (TestDrafter d : {confident_greedy_drafter, sampling_drafter}) {
    const auto [stats, proposed] = check_lossless(d == sampling_drafter ? "sampling drafter, confidence scheduling"
                                                                        : "greedy drafter, confidence scheduling",
                                                  "", d, 4000, confidence_schedule);
    // The schedule verified some of the proposed drafts and cut others.
    EXPECT_GT(stats.n_drafts_verified, 0);
    EXPECT_LT(stats.n_drafts_verified, proposed);
  }
}

TEST(EngineSpeculative, SampledVerificationIsLosslessWithTheDsparkDrafter) {
  // Fewer seeds: the drafter's block costs about as much as the verification here.
  check_lossless("dspark drafter", "dspark", nullptr, 4000);
}

}  // namespace
}  // namespace deepinfer
