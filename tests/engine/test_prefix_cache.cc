// Automatic prefix caching (engine/prefix_cache_state.h, cache/prefix_cache.h, model/
// state_segment.h): a request served from the cache gives bitwise the logits of a cold run
// (batch-invariant), for hits ending at every kind of alignment; a re-sent prompt hits every
// full block; eviction under a small budget never changes a running request; the key
// changes with the model's numerics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "engine/prefix_cache_state.h"
#include "engine_test_util.h"
#include "model/state_segment.h"

namespace deepinfer {
namespace {

using testing::all_tokens;
using testing::cache_args;
using testing::greedy;
using testing::LogitsLog;
using testing::drain;
using testing::kEngineTestSeed;

std::unique_ptr<Model> make_model(bool v41, bool batch_invariant = true) {
  const ModelConfig cfg = v41 ? testing::small_v41_config() : testing::small_config();
  auto source = random_weights(cfg, kEngineTestSeed);
  return Model::from_source(cfg, *source, {Numerics::kOfficial, batch_invariant});
}

// Cold run of each prompt alone (no cache), logits per output.
std::vector<std::vector<float>> cold(bool v41, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  LogitsLog log;
  EngineArgs a = cache_args(false, 1);
  log.attach(a);
  Engine e(a, make_model(v41), nullptr);
  e.generate({greedy("c", prompt, max_tokens)});
  return log.rows["c"];
}

struct Case {
  bool v41;
  int64_t block_tokens;
  int64_t prompt_len;
  bool overlap;
};

// A prompt, then the same prompt (hit on its full blocks), then prompt + its outputs + more
// (hit on blocks cached while decoding), each checked bitwise against a cold run.
void check_exact(const Case& c) {
  SCOPED_TRACE("v41=" + std::to_string(c.v41) + " block=" + std::to_string(c.block_tokens) +
               " prompt=" + std::to_string(c.prompt_len) + " overlap=" + std::to_string(c.overlap));
  const ModelConfig cfg = c.v41 ? testing::small_v41_config() : testing::small_config();
  const std::vector<int32_t> prompt = testing::random_tokens(c.prompt_len, cfg.vocab_size, 11);
  const int64_t n_out = 2 * c.block_tokens + 3;  // decoding crosses block boundaries
  LogitsLog log;
  EngineArgs a = cache_args(true, c.block_tokens, c.overlap);
  log.attach(a);
  Engine e(a, make_model(c.v41), nullptr);
  const RequestOutput first = e.generate({greedy("first", prompt, n_out)})[0];
  EXPECT_EQ(first.n_cached_tokens, 0);
  const auto reference = cold(c.v41, prompt, n_out);
  EXPECT_EQ(log.rows["first"], reference) << "block-aligned chunks changed a cold run";

  const RequestOutput again = e.generate({greedy("again", prompt, n_out)})[0];
  const int64_t ideal = (c.prompt_len - 1) / c.block_tokens * c.block_tokens;
  EXPECT_EQ(again.n_cached_tokens, ideal);
  EXPECT_EQ(again.new_tokens, first.new_tokens);
  EXPECT_EQ(log.rows["again"], reference) << "hit at " << ideal;

  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), first.new_tokens.begin(), first.new_tokens.end());
  const std::vector<int32_t> extra = testing::random_tokens(5, cfg.vocab_size, 12);
  longer.insert(longer.end(), extra.begin(), extra.end());
  const RequestOutput next = e.generate({greedy("next", longer, 4)})[0];
  // Boundaries inside the outputs were cached while decoding: states are offered when a
  // chunk starts, and "first"'s last chunk starts at prompt + outputs - 2.
  const int64_t last_start = c.prompt_len + n_out - 2;
  EXPECT_EQ(next.n_cached_tokens, last_start / c.block_tokens * c.block_tokens);
  EXPECT_EQ(log.rows["next"], cold(c.v41, longer, 4)) << "hit at " << next.n_cached_tokens;
}

// V4 small model: window 8, ratios 4 (with indexer) and 128. The hits end at: 256 (a ratio-128
// and ratio-4 group boundary), 296 (ratio-4 boundary, mid ratio-128 group), 294 (mid both),
// 133 (block 7, mid everything); every one mid-window or at a window multiple.
TEST(PrefixCache, V4HitsAreExactAtEveryAlignment) {
  check_exact({false, 128, 300, true});
  check_exact({false, 8, 300, true});
  check_exact({false, 6, 300, false});
  check_exact({false, 7, 140, true});
}

// V4.1 small model: ratio-2 and ratio-1 sources, reuse layers, Engram's recent tokens.
TEST(PrefixCache, V41HitsAreExactAtEveryAlignment) {
  check_exact({true, 4, 150, true});
  check_exact({true, 3, 150, false});
  check_exact({true, 5, 77, true});
}

TEST(PrefixCache, ResentPromptHitsEveryFullBlock) {
  Engine e(cache_args(true, 16), make_model(false), nullptr);
  const std::vector<int32_t> prompt = testing::random_tokens(300, testing::small_config().vocab_size, 3);
  e.generate({greedy("a", prompt, 1)});
  const EngineStats s1 = e.stats();
  EXPECT_EQ(s1.prefix_cache_queries, 1);
  EXPECT_EQ(s1.prefix_cache_hits, 0);
  EXPECT_EQ(s1.prefix_cache_query_tokens, 288);
  EXPECT_GE(s1.prefix_cache_blocks, 1);
  e.generate({greedy("b", prompt, 1)});
  const EngineStats s2 = e.stats();
  EXPECT_EQ(s2.prefix_cache_queries, 2);
  EXPECT_EQ(s2.prefix_cache_hits, 1);
  EXPECT_EQ(s2.prefix_cache_hit_tokens, 288);  // (300 - 1) / 16 full blocks: the ideal
  EXPECT_EQ(s2.prefix_cache_query_tokens, 2 * 288);
  EXPECT_EQ(s2.n_scheduled_tokens - s1.n_scheduled_tokens, 300 - 288);
  EXPECT_TRUE(e.state_cache().all_free());
}

// Each request's RequestOutput::n_cached_tokens (the server's cached_tokens) is the hit the
// prefix-cache state served it: run one at a time, every request's count equals the engine's
// hit-token counter's step over it, and the tokens looked up (vLLM's queries) are its prompt.
// Prompts: cold, re-sent, extended by its outputs, a shorter prefix, an unrelated one, and
// a batch admitted together (their hits sum to the counter's step). Caching off: all zero.
TEST(PrefixCache, PerRequestCachedTokensAreTheCacheHits) {
  const int64_t V = testing::small_config().vocab_size;
  const int64_t B = 16;
  Engine e(cache_args(true, B), make_model(false), nullptr);
  EXPECT_EQ(e.stats().prefix_cache_block_tokens, B);
  const std::vector<int32_t> base = testing::random_tokens(200, V, 21);
  const RequestOutput cold_out = e.generate({greedy("cold", base, 5)})[0];
  std::vector<int32_t> extended = base;
  extended.insert(extended.end(), cold_out.new_tokens.begin(), cold_out.new_tokens.end());
  const auto more = testing::random_tokens(40, V, 22);
  extended.insert(extended.end(), more.begin(), more.end());
  const std::vector<std::pair<std::string, std::vector<int32_t>>> prompts = {
      {"resent", base},
      {"extended", extended},
      {"shorter", std::vector<int32_t>(base.begin(), base.begin() + 70)},
      {"unrelated", testing::random_tokens(90, V, 23)},
  };
  int64_t n_hit = 0;
  for (const auto& [id, prompt] : prompts) {
    SCOPED_TRACE(id);
    const EngineStats before = e.stats();
    const RequestOutput out = e.generate({greedy(id, prompt, 3)})[0];
    const EngineStats after = e.stats();
    EXPECT_EQ(out.n_cached_tokens, after.prefix_cache_hit_tokens - before.prefix_cache_hit_tokens);
    EXPECT_EQ(after.prefix_cache_lookup_tokens - before.prefix_cache_lookup_tokens, int64_t(prompt.size()));
    EXPECT_EQ(out.n_cached_tokens % B, 0);
    EXPECT_LE(out.n_cached_tokens, after.prefix_cache_query_tokens - before.prefix_cache_query_tokens);
    n_hit += out.n_cached_tokens > 0;
  }
  EXPECT_EQ(n_hit, 3);  // all but the unrelated prompt

  std::vector<EngineRequest> batch;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p(base.begin(), base.begin() + 40 + 30 * i);
    const auto tail = testing::random_tokens(3, V, 30 + uint32_t(i));
    p.insert(p.end(), tail.begin(), tail.end());
    batch.push_back(greedy("batch" + std::to_string(i), p, 2));
  }
  const EngineStats before = e.stats();
  int64_t sum = 0, lookups = 0;
  for (const EngineRequest& r : batch) lookups += int64_t(r.prompt.size());
  for (const RequestOutput& o : e.generate(batch)) sum += o.n_cached_tokens;
  const EngineStats after = e.stats();
  EXPECT_GT(sum, 0);
  EXPECT_EQ(sum, after.prefix_cache_hit_tokens - before.prefix_cache_hit_tokens);
  EXPECT_EQ(after.prefix_cache_lookup_tokens - before.prefix_cache_lookup_tokens, lookups);

  Engine off(cache_args(false, B), make_model(false), nullptr);
  off.generate({greedy("a", base, 1)});
  const RequestOutput again = off.generate({greedy("b", base, 1)})[0];
  EXPECT_EQ(again.n_cached_tokens, 0);
  EXPECT_EQ(off.stats().prefix_cache_block_tokens, 0);
  EXPECT_EQ(off.stats().prefix_cache_lookup_tokens, 0);
  EXPECT_EQ(off.stats().prefix_cache_hit_tokens, 0);
}

// Many concurrent requests sharing prefixes, tiny state pools (preemption) and a prefix
// budget of a few entries (eviction while hits are pinned): every output equals the
// cache-off engine's, and the cache stays within its budget.
TEST(PrefixCache, EvictionAndPreemptionNeverChangeOutputs) {
  const int64_t V = testing::small_config().vocab_size;
  const std::vector<int32_t> shared = testing::random_tokens(90, V, 5);
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> p(shared.begin(), shared.begin() + 20 + 6 * i);
    const auto tail = testing::random_tokens(1 + i % 5, V, 100 + uint32_t(i));
    p.insert(p.end(), tail.begin(), tail.end());
    EngineRequest r = greedy("r" + std::to_string(i), p, 3 + i % 4);
    r.params.temperature = i % 2 ? 0.8f : 0.0f;
    r.params.seed = uint64_t(i);
    reqs.push_back(r);
  }
  auto run = [&](bool enable, bool overlap) {
    EngineArgs a = testing::tiny_pool_args(overlap);
    a.enable_prefix_caching = enable;
    a.prefix_cache_block_tokens = 8;
    // About three boundaries of this model (~150 KB of rings and compressor rows each).
    a.prefix_cache_bytes = 500000;
    Engine e(a, make_model(false), nullptr);
    // Two waves: the second arrives while the first still runs, so some of it hits.
    std::map<std::string, std::vector<int32_t>> tokens;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (i == reqs.size() / 3) {
        for (int s = 0; s < 12; ++s) {
          for (const RequestOutput& o : e.step()) {
            tokens[o.id].insert(tokens[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
          }
        }
      }
      e.add_request(reqs[i]);
    }
    for (auto& [id, outs] : drain(e)) {
      const std::vector<int32_t> t = all_tokens(outs);
      tokens[id].insert(tokens[id].end(), t.begin(), t.end());
    }
    EXPECT_TRUE(e.state_cache().all_free());
    return std::make_pair(tokens, e.stats());
  };
  const auto [off, s_off] = run(false, true);
  for (bool overlap : {true, false}) {
    const auto [on, s_on] = run(true, overlap);
    EXPECT_EQ(on, off) << "overlap " << overlap;
    EXPECT_GT(s_on.prefix_cache_hits, 0);
    EXPECT_GT(s_on.prefix_cache_evictions, 0);
    EXPECT_LE(s_on.prefix_cache_bytes, 500000);
    EXPECT_GT(s_on.n_preemptions, 0);
  }
}

// Aborts at every point of a request's life (waiting, admitted on a hit, prefilling,
// decoding) leave no pinned entry and no state behind, and the other requests' outputs are
// those of the cache-off engine.
TEST(PrefixCache, AbortsReleaseEverything) {
  const int64_t V = testing::small_config().vocab_size;
  const std::vector<int32_t> shared = testing::random_tokens(200, V, 8);
  auto run = [&](bool enable) {
    EngineArgs a = cache_args(enable, 16);
    Engine e(a, make_model(false), nullptr);
    e.generate({greedy("warm", shared, 2)});
    std::map<std::string, std::vector<int32_t>> tokens;
    for (int i = 0; i < 8; ++i) {
      std::vector<int32_t> p(shared.begin(), shared.begin() + 100 + 12 * i);
      p.push_back(int32_t(i));
      e.add_request(greedy("r" + std::to_string(i), p, 6));
    }
    for (int s = 0; e.has_unfinished(); ++s) {
      if (s < 8) e.abort("r" + std::to_string(s % 2 ? 7 - s / 2 : s));  // 0, 7, 2, 6, 4, 5, 6, 4
      for (const RequestOutput& o : e.step()) {
        tokens[o.id].insert(tokens[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
      }
    }
    EXPECT_TRUE(e.state_cache().all_free());
    EXPECT_EQ(e.stats().prefix_cache_pinned, 0);
    if (enable) EXPECT_GT(e.stats().prefix_cache_hits, 0);
    return tokens;
  };
  auto on = run(true), off = run(false);
  // The survivors agree; an aborted request got further where its prefix hit (fewer steps
  // before the abort), so of the two outputs one is a prefix of the other.
  EXPECT_EQ(on["r1"], off["r1"]);
  EXPECT_EQ(on["r3"], off["r3"]);
  EXPECT_EQ(on["r1"].size(), 6u);
  for (const auto& [id, t] : off) {
    const std::vector<int32_t>& u = on[id];
    const size_t n = std::min(t.size(), u.size());
    EXPECT_TRUE(std::equal(t.begin(), t.begin() + std::ptrdiff_t(n), u.begin())) << id;
  }
}

// Speculative decoding with the cache: states cached after verifications rolled rejected
// drafts back serve hits, and every output is plain greedy decoding's.
TEST(PrefixCache, SpeculativeDecodingStaysExact) {
  const ModelConfig cfg = testing::small_config();
  auto model = [&] {
    auto src = random_weights(cfg, kEngineTestSeed);
    return Model::from_source(cfg, *src, {Numerics::kOfficial, true, /*max_rollback=*/4});
  };
  const std::vector<int32_t> prompt = testing::random_tokens(150, cfg.vocab_size, 21);
  auto run = [&](bool spec, const std::vector<std::vector<int32_t>>& prompts) {
    EngineArgs a = cache_args(spec, 8, false);
    if (spec) {
      a.num_speculative_tokens = 3;
      // Drafts: the last token repeated (some accepted, most rejected).
      a.spec_test_drafter = [](const std::string&, std::span<const int32_t> t, int64_t k) {
        EngineArgs::DraftProposal p;
        p.tokens.assign(size_t(k), t.back());
        return p;
      };
    }
    Engine e(a, model(), nullptr);
    std::vector<RequestOutput> outs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      outs.push_back(e.generate({greedy("p" + std::to_string(i), prompts[i], 20)})[0]);
    }
    if (spec) {
      EXPECT_GT(e.stats().n_verifications, 0);
      EXPECT_GT(e.stats().prefix_cache_hits, 0);
    }
    return outs;
  };
  const auto first = run(false, {prompt})[0];
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), first.new_tokens.begin(), first.new_tokens.begin() + 17);
  const auto plain = run(false, {prompt, prompt, longer});
  const auto spec = run(true, {prompt, prompt, longer});
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(spec[i].new_tokens, plain[i].new_tokens) << i;
  EXPECT_EQ(spec[1].n_cached_tokens, 144);
  EXPECT_GT(spec[2].n_cached_tokens, 150);
}

// The cache key follows the model's numerics and batch-invariance: another engine's cached
// state never matches.
TEST(PrefixCache, KeyChangesWithNumerics) {
  CpuRunner a(make_model(false, true)), b(make_model(false, false));
  auto source = random_weights(testing::small_config(), kEngineTestSeed);
  CpuRunner c(Model::from_source(testing::small_config(), *source, {Numerics::kReference, true}));
  EXPECT_NE(prefix_cache_salt(a, "", 0), prefix_cache_salt(b, "", 0));
  EXPECT_NE(prefix_cache_salt(a, "", 0), prefix_cache_salt(c, "", 0));
  EXPECT_NE(prefix_cache_salt(a, "", 0), prefix_cache_salt(a, "other/model", 0));
  EXPECT_EQ(prefix_cache_salt(a, "", 0), prefix_cache_salt(CpuRunner(make_model(false, true)), "", 0));
}

// Export/import round trip on the model's state: the imported state equals the original in
// every array, and a chain shares the append-only rows.
TEST(PrefixCache, SegmentsRebuildTheState) {
  auto model = make_model(false);
  auto state = model->new_state();
  const auto tokens = testing::random_tokens(270, testing::small_config().vocab_size, 9);
  std::vector<std::shared_ptr<const StateSegment>> chain;
  for (int64_t end : {100, 260, 270}) {
    std::span<const int32_t> part(tokens.data() + state->n_tokens, size_t(end - state->n_tokens));
    SequenceChunk ch{state.get(), part, false};
    model->forward(std::span<const SequenceChunk>(&ch, 1));
    chain.push_back(export_segment(*state, chain.empty() ? nullptr : chain.back().get()));
  }
  std::vector<const StateSegment*> ptrs;
  for (const auto& s : chain) ptrs.push_back(s.get());
  auto back = import_segments(ptrs);
  ASSERT_EQ(back->n_tokens, 270);
  for (size_t l = 0; l < state->layers.size(); ++l) {
    EXPECT_EQ(back->layers[l].ring, state->layers[l].ring);
    EXPECT_EQ(back->layers[l].compressor.entries, state->layers[l].compressor.entries);
    EXPECT_EQ(back->layers[l].compressor.rows_a, state->layers[l].compressor.rows_a);
    EXPECT_EQ(back->layers[l].compressor.n_entries, state->layers[l].compressor.n_entries);
    EXPECT_EQ(back->layers[l].index_keys, state->layers[l].index_keys);
  }
  EXPECT_EQ(back->recent_tokens, state->recent_tokens);
  // Layer 2 (ratio 128): entries 0 and 1 (positions 0..255) are in the second segment only.
  EXPECT_TRUE(chain[0]->appended[2][0].empty());
  EXPECT_EQ(chain[1]->appended[2][0].size(), 2 * size_t(testing::small_config().head_dim));
  EXPECT_TRUE(chain[2]->appended[2][0].empty());
  EXPECT_ANY_THROW(import_segments(std::vector<const StateSegment*>{chain[1].get()}));
  // What a cached boundary costs (reported, not asserted): the per-position copy vs the
  // shared append-only rows.
  const StateSegment& s = *chain[1];
  int64_t appended = 0;
  for (const auto& arrays : s.appended) {
    for (const auto& v : arrays) appended += int64_t(v.size() * sizeof(float));
  }
  std::printf("segment [%lld, %lld): %lld bytes, of which %lld appended rows, %lld per-position copy\n",
              (long long)s.begin, (long long)s.end, (long long)s.bytes(), (long long)appended,
              (long long)(s.bytes() - appended));
}

}  // namespace
}  // namespace deepinfer
