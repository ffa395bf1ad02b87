// Speculative decoding on device cuda (issue 15, CUDA backend): rollback and verification
// rows of CudaRunner over GpuModel (GpuModelOptions::max_rollback), on the small random-weight
// config of the engine tests (sliding window 8, compress ratios 0 / 4 / 128 / 4: window pool,
// both compressor rings and the indexer exercised).
//  * Rollback: forward [prompt], then k extra tokens, truncate k, forward k' other tokens: the
//    logits of that last forward are bitwise those of a fresh sequence given [prompt], then the
//    same k' tokens in the same shapes (the same kernels see the same rows; only the state
//    can differ). Prompt lengths put the rolled-back positions across ratio-4 and ratio-128
//    emissions and past the window; reference numerics (bf16 KV) and official (FP8 weights,
//    FP8 KV). Then a decode loop of 12 sequences in one batch, each step verifying random
//    drafts and rolling back a random number of them, against fresh sequences fed the
//    committed tokens (batch-invariant: bitwise regardless of the chunking).
//  * Engine: speculative greedy (an oracle test drafter, about one draft in four wrong, so
//    every acceptance length occurs) over 24 concurrent requests equals plain greedy on the
//    same CUDA runner settings token for token, and every committed token's logits row is
//    bitwise the same (batch-invariant), overlap on and off, and with CUDA graphs.
//  * Engine with the device MTP-1 drafter (CudaRunnerOptions::mtp, runtime/gpu_mtp.cc; the
//    small config with a random mtp.0): 64 greedy requests submitted at once (penalties,
//    logit_bias, logprobs, stop ids, min_tokens) with a state budget small enough to preempt
//    and four aborts give token for token the outputs of plain greedy on a runner without the
//    drafter, with every committed token's logits row bitwise the same (batch-invariant):
//    fixed scheduling (3 drafts) overlap on and off, confidence scheduling, and CUDA graphs.
//  * Engine with the device DSpark drafter (CudaRunnerOptions::dspark, runtime/gpu_dspark.cc; the
//    V4.1 DSpark golden checkpoint tests/data/golden_v41/dspark_quant/bf16): the same 64-request
//    check against plain greedy on a runner without the drafter, drafts of the whole block (5),
//    fixed scheduling overlap on and off, confidence scheduling (the drafter's own c_i), CUDA
//    graphs. The same with V4-Flash-DSpark / 0731's drafter (the V4 golden
//    tests/data/golden_v4_dspark/model: taps after the blocks, V4 stages, hc_head); its layers
//    are window-only, so a state stops growing at the window and no budget forces preemption
//    (as in the CPU test V4DsparkGreedyEqualsPlainWithAborts): admission is bounded instead;
//    and again with FP8 weights (fp8_weights: the backbone and the drafter in 128x128-block FP8,
//    plain greedy on an FP8 runner without the drafter the oracle).
// Label cuda: needs a GPU. On a failure each test prints the first differing row and its max
// |difference|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "engine_test_util.h"
#include "io/config_parser.h"
#include "model/weight_source.h"
#include "model/weights.h"
#include "runtime/cuda_runner.h"
#include "runtime/runner_factory.h"

namespace deepinfer::testing {
namespace {

struct RunnerKind {
  const char* name;
  Numerics numerics;
  bool fp8_weights;
  bool batch_invariant;
};

std::unique_ptr<CudaRunner> runner(const RunnerKind& k, int64_t max_rollback, int64_t max_sequences = 32,
                                   bool cuda_graphs = false) {
  auto source = random_weights(small_config(), kEngineTestSeed);
  const ModelWeights weights = load_model_weights(small_config(), *source);
  CudaRunnerOptions o;
  o.max_sequences = max_sequences;
  o.max_context = 256;
  o.max_batch_tokens = 256;
  o.numerics = k.numerics;
  o.fp8_weights = k.fp8_weights;
  o.batch_invariant = k.batch_invariant;
  o.max_rollback = max_rollback;
  o.cuda_graphs = cuda_graphs;
  return std::make_unique<CudaRunner>(small_config(), weights, o);
}

// Max |a - b| over two logits tensors of the same shape; `row` gets the first differing row.
double max_diff(const Tensor& a, const Tensor& b, int64_t* row) {
  EXPECT_EQ(a.numel(), b.numel());
  const int64_t V = small_config().vocab_size;
  double m = 0;
  *row = -1;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    const double d = std::fabs(double(a.f32()[i]) - double(b.f32()[i]));
    if (!(d == 0.0) && *row < 0) *row = i / V;
    if (!(d <= m)) m = d;  // NaN sticks
  }
  return m;
}

Tensor run(CudaRunner& r, int64_t seq, const std::vector<int32_t>& tokens, bool all_logits = true) {
  const RunnerChunk c{seq, tokens, all_logits};
  return r.forward(std::span<const RunnerChunk>(&c, 1));
}

const RunnerKind kKinds[] = {
    {"reference fp32, bf16 kv", Numerics::kReference, false, false},
    {"official fp8 weights, fp8 kv", Numerics::kOfficial, true, false},
    {"official fp32, batch-invariant", Numerics::kOfficial, false, true},
};

TEST(EngineSpeculativeCuda, TruncateThenForwardEqualsAFreshSequence) {
  constexpr int64_t kDepth = 5;
  for (const RunnerKind& kind : kKinds) {
    auto r = runner(kind, kDepth);
    EXPECT_EQ(r->rollback_depth(), kDepth);
    std::printf("[%s] %s\n", kind.name, r->name().c_str());
    int failures = 0;
    // (prompt, k rolled back, k' then forwarded): rolled-back positions across ratio-4
    // emissions (every 4th position), the ratio-128 emission at position 127, the window (8).
    const int64_t cases[][3] = {{1, 1, 1},  {3, 2, 3},   {6, 5, 2},    {9, 4, 4},    {12, 3, 1},
                                {17, 5, 5}, {30, 2, 2},  {63, 5, 3},   {124, 5, 5},  {126, 4, 2},
                                {127, 1, 3}, {128, 5, 1}, {131, 3, 4}, {200, 5, 5}};
    for (const auto& c : cases) {
      const int64_t P = c[0], k = c[1], k2 = c[2];
      const auto seed = uint32_t(P * 131 + k * 7 + k2);
      const std::vector<int32_t> prompt = random_tokens(P, small_config().vocab_size, seed);
      const std::vector<int32_t> extra = random_tokens(k, small_config().vocab_size, seed + 1);
      const std::vector<int32_t> other = random_tokens(k2, small_config().vocab_size, seed + 2);
      const int64_t a = r->new_sequence(), b = r->new_sequence();
      run(*r, a, prompt, false);
      run(*r, a, extra);
      r->truncate(a, P);
      EXPECT_EQ(r->n_tokens(a), P);
      const Tensor got = run(*r, a, other);
      run(*r, b, prompt, false);
      const Tensor want = run(*r, b, other);
      int64_t row = -1;
      const double d = max_diff(got, want, &row);
      std::printf("  prompt %3lld, %lld back, %lld forward: max |diff| %.3g%s\n", (long long)P, (long long)k,
                  (long long)k2, d, row >= 0 ? (" (first at row " + std::to_string(row) + ")").c_str() : "");
      EXPECT_EQ(d, 0.0) << kind.name << ": prompt " << P << ", rolled back " << k << ", then " << k2
                        << " tokens: first differing row " << row;
      failures += d != 0.0;
      r->free_sequence(a);
      r->free_sequence(b);
    }
    std::printf("[%s] %d of %zu cases differ\n", kind.name, failures, std::size(cases));
  }
}

TEST(EngineSpeculativeCuda, TruncateRefusesWhatItCannotUndo) {
  auto r = runner(kKinds[0], 2);
  const int64_t s = r->new_sequence();
  run(*r, s, random_tokens(10, small_config().vocab_size, 3), false);
  EXPECT_THROW(r->truncate(s, 7), Error);   // 3 back > max_rollback 2
  EXPECT_THROW(r->truncate(s, 11), Error);  // past the end
  EXPECT_THROW(r->truncate(s + 1, 0), Error);  // not live
  r->truncate(s, 8);
  EXPECT_EQ(r->n_tokens(s), 8);
  auto none = runner(kKinds[0], 0);
  EXPECT_EQ(none->rollback_depth(), 0);
  const int64_t t = none->new_sequence();
  run(*none, t, random_tokens(4, small_config().vocab_size, 4), false);
  EXPECT_THROW(none->truncate(t, 3), Error);
}

// 12 sequences decode in one batch (20 steps): each step a sequence forwards [y, d_1..d_k] (k random in
// 0..4, logits at every row), then rolls back a random number of its drafts; its committed
// tokens are what stays. Every verified row's logits are checked against fresh sequences
// fed the committed tokens one chunk (batch-invariant: bitwise).
TEST(EngineSpeculativeCuda, BatchedVerifyAndRollbackLoopEqualsFreshSequences) {
  constexpr int64_t kDepth = 4, kSeqs = 12, kSteps = 20;  // contexts stay < 256
  auto r = runner(kKinds[2], kDepth, 2 * kSeqs);
  const int64_t V = small_config().vocab_size;
  std::mt19937 gen(77);
  std::vector<int64_t> ids(kSeqs);
  std::vector<std::vector<int32_t>> committed(kSeqs);
  // (sequence, position) -> logits row the batched loop computed there for the committed token.
  std::map<std::pair<int64_t, int64_t>, std::vector<float>> seen;
  for (int64_t i = 0; i < kSeqs; ++i) {
    ids[size_t(i)] = r->new_sequence();
    committed[size_t(i)] = random_tokens(1 + (i * 37) % 140, V, 900 + uint32_t(i));
    run(*r, ids[size_t(i)], committed[size_t(i)], false);
  }
  int64_t rolled_back = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    std::vector<std::vector<int32_t>> chunk(kSeqs);
    std::vector<RunnerChunk> chunks;
    for (int64_t i = 0; i < kSeqs; ++i) {
      const int64_t k = int64_t(gen() % (kDepth + 1));
      chunk[size_t(i)] = random_tokens(1 + k, V, uint32_t(step * 1000 + i));
      chunks.push_back({ids[size_t(i)], chunk[size_t(i)], true});
    }
    const Tensor logits = r->forward(chunks);
    int64_t row = 0;
    for (int64_t i = 0; i < kSeqs; ++i) {
      const auto n = int64_t(chunk[size_t(i)].size());
      const int64_t keep = 1 + int64_t(gen() % uint32_t(n));  // y and keep - 1 drafts stay
      const auto base = int64_t(committed[size_t(i)].size());
      for (int64_t j = 0; j < keep; ++j) {
        const float* p = logits.f32() + (row + j) * V;
        seen[{i, base + j}] = std::vector<float>(p, p + V);
        committed[size_t(i)].push_back(chunk[size_t(i)][size_t(j)]);
      }
      r->truncate(ids[size_t(i)], base + keep);
      rolled_back += n - keep;
      row += n;
    }
  }
  std::printf("%lld positions rolled back over %lld steps of %lld sequences\n", (long long)rolled_back,
              (long long)kSteps, (long long)kSeqs);
  EXPECT_GT(rolled_back, 0);
  int64_t differing = 0;
  for (int64_t i = 0; i < kSeqs; ++i) {
    const int64_t f = r->new_sequence();
    const Tensor want = run(*r, f, committed[size_t(i)]);
    double worst = 0;
    int64_t first = -1;
    for (const auto& [key, got] : seen) {
      if (key.first != i) continue;
      const float* w = want.f32() + key.second * V;
      for (int64_t t = 0; t < V; ++t) {
        const double d = std::fabs(double(got[size_t(t)]) - double(w[t]));
        if (!(d <= worst)) worst = d;
        if (!(d == 0.0) && first < 0) first = key.second;
      }
    }
    std::printf("  sequence %lld (%zu tokens): max |diff| %.3g, first differing position %lld\n", (long long)i,
                committed[size_t(i)].size(), worst, (long long)first);
    EXPECT_EQ(worst, 0.0) << "sequence " << i << ", first differing position " << first;
    differing += worst != 0.0;
    r->free_sequence(f);
  }
  std::printf("%lld of %lld sequences differ\n", (long long)differing, (long long)kSeqs);
}

// The true continuation with about one draft in four wrong (by a hash of index and id).
EngineArgs::DraftProposal oracle_draft(const std::map<std::string, std::vector<int32_t>>& truth,
                                       const std::map<std::string, size_t>& prompt_len, const std::string& id,
                                       std::span<const int32_t> tokens, int64_t k) {
  EngineArgs::DraftProposal p;
  const std::vector<int32_t>& t = truth.at(id);
  const size_t first = tokens.size() - prompt_len.at(id);
  const size_t salt = std::hash<std::string>()(id);
  for (size_t o = first; o < first + size_t(k) && o < t.size(); ++o) {
    const bool wrong = ((o * 2654435761u + salt) >> 5) % 4 == 3;
    p.tokens.push_back(wrong ? int32_t((t[o] + 1) % small_config().vocab_size) : t[o]);
  }
  return p;
}

struct EngineRun {
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, std::string> finish;
  std::map<std::pair<std::string, int64_t>, std::vector<float>> logits;
  EngineStats stats;
};

EngineRun run_engine(EngineArgs args, const std::vector<EngineRequest>& jobs, bool cuda_graphs = false) {
  EngineRun out;
  args.on_logits = [&out](const std::string& id, int64_t i, std::span<const float> row) {
    out.logits.try_emplace({id, i}, row.begin(), row.end());
  };
  Engine engine(args, runner(kKinds[2], 4, 32, cuda_graphs), nullptr);
  for (const EngineRequest& r : jobs) engine.add_request(r);
  while (engine.has_unfinished()) {
    for (RequestOutput& o : engine.step()) {
      auto& t = out.tokens[o.id];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (o.finished) out.finish[o.id] = o.finish_reason;
    }
  }
  out.stats = engine.stats();
  return out;
}

TEST(EngineSpeculativeCuda, GreedyEqualsPlainGreedy) {
  const int64_t V = small_config().vocab_size;
  std::vector<EngineRequest> jobs;
  for (int i = 0; i < 24; ++i) {
    EngineRequest r;
    r.id = "s" + std::to_string(i);
    r.prompt = random_tokens(1 + (i * 29) % 133, V, 700 + uint32_t(i));
    r.params.temperature = 0.0f;
    r.params.max_tokens = 6 + (i * 5) % 19;
    r.params.ignore_eos = i % 3 != 1;
    jobs.push_back(std::move(r));
  }
  EngineArgs base;
  base.max_num_seqs = 24;
  base.max_num_batched_tokens = 256;
  base.max_model_len = 160;
  base.block_size = 8;
  base.state_budget_bytes = 64 << 20;
  const EngineRun plain = run_engine(base, jobs);
  std::map<std::string, std::vector<int32_t>> truth = plain.tokens;
  std::map<std::string, size_t> prompt_len;
  for (const EngineRequest& r : jobs) prompt_len[r.id] = r.prompt.size();
  // (overlap, CUDA graphs): graph-replayed decode steps (all chunks one token: verifications
  // with no drafts) are bitwise the eager ones with batch_invariant (gpu_model.h).
  const std::pair<bool, bool> settings[] = {{true, false}, {false, false}, {true, true}};
  for (const auto& [overlap, graphs] : settings) {
    SCOPED_TRACE(std::string(overlap ? "overlap on" : "overlap off") + (graphs ? ", cuda graphs" : ""));
    EngineArgs a = base;
    a.overlap = overlap;
    a.num_speculative_tokens = 4;
    a.spec_test_drafter = [&](const std::string& id, std::span<const int32_t> tokens, int64_t k) {
      return oracle_draft(truth, prompt_len, id, tokens, k);
    };
    const EngineRun spec = run_engine(a, jobs, graphs);
    const EngineStats& s = spec.stats;
    std::printf("overlap %s%s: %lld steps (plain %lld), %lld verifications, %lld/%lld drafts accepted\n",
                overlap ? "on" : "off", graphs ? ", cuda graphs" : "", (long long)s.n_steps,
                (long long)plain.stats.n_steps,
                (long long)s.n_verifications, (long long)s.n_drafts_accepted, (long long)s.n_drafts_verified);
    EXPECT_GT(s.n_drafts_accepted, 0);
    EXPECT_LT(s.n_drafts_accepted, s.n_drafts_verified);
    EXPECT_LT(s.n_steps, plain.stats.n_steps);
    int64_t bad_tokens = 0, bad_rows = 0;
    for (const EngineRequest& r : jobs) {
      const std::vector<int32_t>& want = plain.tokens.at(r.id);
      const std::vector<int32_t>& got = spec.tokens.at(r.id);
      EXPECT_EQ(got, want) << r.id;
      EXPECT_EQ(spec.finish.at(r.id), plain.finish.at(r.id)) << r.id;
      bad_tokens += got != want;
      for (size_t o = 0; o < std::min(got.size(), want.size()); ++o) {
        auto x = plain.logits.find({r.id, int64_t(o)});
        auto y = spec.logits.find({r.id, int64_t(o)});
        if (x == plain.logits.end() || y == spec.logits.end()) {
          ADD_FAILURE() << r.id << ": no logits row at output " << o;
          ++bad_rows;
          break;
        }
        double d = 0;
        for (size_t t = 0; t < x->second.size(); ++t) {
          const double e = std::fabs(double(x->second[t]) - double(y->second[t]));
          if (!(e <= d)) d = e;
        }
        if (d != 0.0) {
          ++bad_rows;
          ADD_FAILURE() << r.id << ": logits row of output " << o << " differs, max |diff| " << d;
          break;
        }
      }
    }
    std::printf("  %lld requests with other tokens, %lld with a differing logits row\n", (long long)bad_tokens,
                (long long)bad_rows);
  }
}

ModelConfig mtp_config() {
  ModelConfig c = small_config();
  c.num_nextn_predict_layers = 1;
  c.mtp_compress_ratios = {0};
  return c;
}

std::unique_ptr<CudaRunner> mtp_runner(bool mtp, bool cuda_graphs) {
  auto source = random_weights(mtp_config(), kEngineTestSeed, /*with_mtp=*/true);
  const ModelWeights weights = load_model_weights(mtp_config(), *source);
  CudaRunnerOptions o;
  o.max_sequences = 64;
  o.max_context = 256;
  o.max_batch_tokens = 256;
  o.numerics = Numerics::kOfficial;
  o.batch_invariant = true;
  o.max_rollback = 3;
  o.cuda_graphs = cuda_graphs;
  o.mtp = mtp;
  return std::make_unique<CudaRunner>(mtp_config(), weights, o);
}

constexpr const char* kDsparkGolden = "tests/data/golden_v41/dspark_quant/bf16";
constexpr const char* kV4DsparkGolden = "tests/data/golden_v4_dspark/model";

struct HostCheckpoint {
  ModelConfig config;
  ModelWeights weights;
};

// A golden checkpoint's host weights, loaded once per directory.
const HostCheckpoint& host_checkpoint(const std::string& dir) {
  static std::map<std::string, HostCheckpoint> loaded;
  auto it = loaded.find(dir);
  if (it == loaded.end()) {
    HostCheckpoint h;
    h.config = load_model_config(dir + "/config.json");
    auto src = open_checkpoint_weights(dir, h.config);
    h.weights = load_model_weights(h.config, *src);
    it = loaded.emplace(dir, std::move(h)).first;
  }
  return it->second;
}

// A DSpark golden checkpoint on the device, official numerics, batch-invariant, rollback of a
// whole block; with or without its drafter; fp32 or (fp8) FP8 weights.
std::unique_ptr<CudaRunner> dspark_runner(const std::string& dir, bool dspark, bool cuda_graphs, bool fp8 = false) {
  const HostCheckpoint& h = host_checkpoint(dir);
  const ModelConfig& config = h.config;
  const ModelWeights& weights = h.weights;
  CudaRunnerOptions o;
  o.max_sequences = 64;
  o.max_context = 256;
  o.max_batch_tokens = 512;
  o.numerics = Numerics::kOfficial;
  o.batch_invariant = true;
  o.kv_cache_dtype = "bf16";
  o.max_rollback = 5;
  o.cuda_graphs = cuda_graphs;
  o.dspark = dspark;
  o.fp8_weights = fp8;
  return std::make_unique<CudaRunner>(config, weights, o);
}

struct DrafterRun {
  std::map<std::string, std::vector<RequestOutput>> outputs;
  std::map<std::pair<std::string, int64_t>, std::vector<float>> logits;
  EngineStats stats;
};

// dspark_dir: a DSpark golden checkpoint's runner (empty: the MTP runner); fp8: its FP8-weights form.
DrafterRun run_drafter_engine(EngineArgs args, const std::vector<EngineRequest>& jobs, bool mtp, bool cuda_graphs,
                      const std::vector<std::string>& aborts, int abort_step, const std::string& dspark_dir = "",
                      bool fp8 = false) {
  const bool dspark = !dspark_dir.empty();
  DrafterRun run;
  args.on_logits = [&run](const std::string& id, int64_t index, std::span<const float> row) {
    auto [it, fresh] = run.logits.try_emplace({id, index}, row.begin(), row.end());
    if (!fresh) {  // seen again after a preemption: the same row
      ASSERT_TRUE(std::equal(row.begin(), row.end(), it->second.begin())) << id << " output " << index;
    }
  };
  std::unique_ptr<CudaRunner> r =
      dspark ? dspark_runner(dspark_dir, mtp, cuda_graphs, fp8) : mtp_runner(mtp, cuda_graphs);
  if (mtp) {
    EXPECT_EQ(r->drafter(), dspark ? "dspark" : "mtp");
    EXPECT_EQ(r->draft_length(), dspark ? 5 : 1);
  } else {
    EXPECT_EQ(r->drafter(), "none");
  }
  Engine engine(args, std::move(r), nullptr);
  for (const EngineRequest& q : jobs) engine.add_request(q);
  for (int s = 0; engine.has_unfinished(); ++s) {
    if (s == abort_step) {
      for (const std::string& id : aborts) engine.abort(id);
    }
    for (RequestOutput& o : engine.step()) run.outputs[o.id].push_back(std::move(o));
  }
  run.stats = engine.stats();
  return run;
}

// 64 greedy requests with every per-request feature the verification must honour.
std::vector<EngineRequest> drafter_jobs(int64_t V) {
  std::vector<EngineRequest> jobs;
  for (int i = 0; i < 64; ++i) {
    EngineRequest r;
    r.id = "m" + std::to_string(i);
    r.prompt = random_tokens(1 + (i * 7) % 41, V, 300 + uint32_t(i));
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

// A device drafter's speculative greedy runs (fixed overlap on / off, confidence, CUDA graphs)
// against plain greedy on a runner without it: token for token, logprobs and every committed
// token's logits row bitwise; preemption forced (when `preempts`), four requests aborted.
// dspark_dir: the DSpark golden checkpoint (empty: the MTP runner); fp8: both runners with FP8 weights.
void expect_drafter_lossless(const EngineArgs& base, const char* method, int64_t k, const std::string& dspark_dir,
                             bool preempts = true, bool fp8 = false) {
  const bool dspark = !dspark_dir.empty();
  // The DSpark golden checkpoints have their own vocabulary (64); the MTP runner uses the small config's.
  const int64_t V = dspark ? host_checkpoint(dspark_dir).config.vocab_size : small_config().vocab_size;
  const std::vector<EngineRequest> jobs = drafter_jobs(V);
  const std::vector<std::string> aborted = {"m3", "m20", "m41", "m62"};
  const DrafterRun plain = run_drafter_engine(base, jobs, false, false, aborted, 6, dspark_dir, fp8);
  struct Setting {
    const char* name;
    bool overlap, graphs;
    const char* scheduling;
  };
  const Setting settings[] = {{"fixed, overlap on", true, false, "fixed"},
                              {"fixed, overlap off", false, false, "fixed"},
                              {"confidence, overlap on", true, false, "confidence"},
                              {"fixed, overlap on, cuda graphs", true, true, "fixed"}};
  for (const Setting& st : settings) {
    SCOPED_TRACE(st.name);
    EngineArgs a = base;
    a.overlap = st.overlap;
    a.speculative_method = method;
    a.num_speculative_tokens = k;
    a.spec_scheduling = st.scheduling;
    const DrafterRun spec = run_drafter_engine(a, jobs, true, st.graphs, aborted, 6, dspark_dir, fp8);
    const EngineStats& s = spec.stats;
    std::printf("%s drafter%s, %s: %lld steps (plain %lld), %lld verifications, %lld/%lld drafts accepted, "
                "%lld preemptions (plain %lld)\n",
                method, fp8 ? " (fp8 weights)" : "", st.name, (long long)s.n_steps, (long long)plain.stats.n_steps, (long long)s.n_verifications,
                (long long)s.n_drafts_accepted, (long long)s.n_drafts_verified, (long long)s.n_preemptions,
                (long long)plain.stats.n_preemptions);
    if (std::string(st.scheduling) == "fixed") {
      EXPECT_GT(s.n_verifications, 0);
    }
    if (preempts) EXPECT_GT(s.n_preemptions, 0) << "the state budget was meant to force preemption";
    ASSERT_EQ(spec.outputs.size(), plain.outputs.size());
    int64_t bad = 0;
    for (const auto& [id, outs] : plain.outputs) {
      SCOPED_TRACE(id);
      const std::vector<int32_t> want = all_tokens(outs);
      const std::vector<int32_t> got = all_tokens(spec.outputs.at(id));
      const RequestOutput& last = spec.outputs.at(id).back();
      ASSERT_TRUE(last.finished);
      const bool was_aborted = std::find(aborted.begin(), aborted.end(), id) != aborted.end();
      if (was_aborted && (last.finish_reason == "abort" || outs.back().finish_reason == "abort")) {
        // Aborted at the same step, but a speculative run may be further along.
        const size_t n = std::min(got.size(), want.size());
        EXPECT_TRUE(std::equal(got.begin(), got.begin() + int64_t(n), want.begin()));
      } else {
        EXPECT_EQ(got, want);
        EXPECT_EQ(last.finish_reason, outs.back().finish_reason);
        bad += got != want;
      }
      std::vector<TokenLogprob> lp_want, lp_got;
      for (const RequestOutput& o : outs) lp_want.insert(lp_want.end(), o.logprobs.begin(), o.logprobs.end());
      for (const RequestOutput& o : spec.outputs.at(id)) lp_got.insert(lp_got.end(), o.logprobs.begin(), o.logprobs.end());
      for (size_t i = 0; i < std::min(lp_got.size(), lp_want.size()); ++i) {
        EXPECT_EQ(lp_got[i].token, lp_want[i].token);
        EXPECT_EQ(lp_got[i].logprob, lp_want[i].logprob);
      }
      for (size_t o = 0; o < std::min(got.size(), want.size()); ++o) {
        auto x = plain.logits.find({id, int64_t(o)});
        auto y = spec.logits.find({id, int64_t(o)});
        ASSERT_TRUE(x != plain.logits.end() && y != spec.logits.end()) << "no logits row at output " << o;
        ASSERT_EQ(x->second, y->second) << "logits row of output " << o << " differs";
      }
    }
    std::printf("  %lld requests with other tokens\n", (long long)bad);
  }
}


TEST(EngineSpeculativeCuda, MtpDrafterGreedyEqualsPlainWithPreemptionAndAborts) {
  EngineArgs base;
  base.max_num_seqs = 64;
  base.max_num_batched_tokens = 128;
  base.max_model_len = 160;
  base.block_size = 8;
  base.state_budget_bytes = 5 << 19;  // 2.5 MiB (the engine's accounting): forces preemption
  expect_drafter_lossless(base, "mtp", 3, /*dspark_dir=*/"");
}

// The DSpark golden checkpoint (vocabulary 64), whole blocks of 5 drafts;
// the engine settings (and the state budget that preempts) of the CPU test of the same
// checkpoint, test_engine_speculative.cc.
TEST(EngineSpeculativeCuda, DsparkDrafterGreedyEqualsPlainWithPreemptionAndAborts) {
  EngineArgs base;
  base.max_num_seqs = 64;
  base.max_num_batched_tokens = 96;
  base.max_model_len = 96;
  base.block_size = 8;
  base.state_budget_bytes = 3 << 19;  // 1.5 MiB (the engine's accounting): forces preemption
  expect_drafter_lossless(base, "dspark", 5, kDsparkGolden);
}

// The runner factory (make_model_runner, device cuda; the checkpoint streamed to the device)
// builds V4-Flash-DSpark / 0731's drafter on the device when asked for by name or by auto, none
// under "none", with fp32 and with fp8 weights; V4.1's DSpark with fp8 weights is refused by
// name (dspark; under auto it is off).
TEST(EngineSpeculativeCuda, RunnerFactoryBuildsTheV4DsparkDrafterOnTheDevice) {
  RunnerArgs a;
  a.device = "cuda";
  a.model_dir = kV4DsparkGolden;
  a.max_sequences = 4;
  a.max_context = 128;
  a.max_batch_tokens = 64;
  a.gpu_memory_utilization = 0.2;
  for (const char* format : {"fp32", "fp8"}) {
    a.weight_format = format;
    for (const char* method : {"dspark", "auto", "none"}) {
      SCOPED_TRACE(std::string(method) + ", " + format);
      a.speculative_method = method;
      const std::unique_ptr<ModelRunner> r = make_model_runner(a);
      const bool on = std::string(method) != "none";
      EXPECT_EQ(r->drafter(), on ? "dspark" : "none");
      EXPECT_EQ(r->draft_length(), on ? 5 : 0);
    }
  }
  RunnerArgs v41 = a;
  v41.model_dir = kDsparkGolden;
  v41.weight_format = "fp8";
  v41.speculative_method = "dspark";
  EXPECT_THROW(make_model_runner(v41), Error);  // before anything is loaded
}

// V4-Flash-DSpark / 0731's drafter (the V4 golden, vocabulary 64, window-only layers: no
// preemption, a state budget that bounds admission as the CPU test's 512 KiB does).
EngineArgs v4_dspark_engine_args() {
  EngineArgs base;
  base.max_num_seqs = 64;
  base.max_num_batched_tokens = 96;
  base.max_model_len = 96;
  base.block_size = 8;
  base.state_budget_bytes = 1 << 19;
  return base;
}

TEST(EngineSpeculativeCuda, V4DsparkDrafterGreedyEqualsPlainWithAborts) {
  expect_drafter_lossless(v4_dspark_engine_args(), "dspark", 5, kV4DsparkGolden, /*preempts=*/false);
}

// The same with FP8 weights (GpuModelOptions::weight_format kFp8: the backbone's and the
// drafter's projections and routed experts in 128x128-block FP8, batch-invariant SIMT GEMMs):
// speculative greedy against plain greedy on an FP8 runner without the drafter.
TEST(EngineSpeculativeCuda, V4DsparkDrafterFp8GreedyEqualsPlainWithAborts) {
  expect_drafter_lossless(v4_dspark_engine_args(), "dspark", 5, kV4DsparkGolden, /*preempts=*/false,
                          /*fp8=*/true);
}

}  // namespace
}  // namespace deepinfer::testing
