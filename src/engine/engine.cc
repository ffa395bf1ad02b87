#include "engine/engine.h"
#include "engine/engine_impl.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <mutex>
#include <unordered_map>

#include "base/error.h"
#include "base/parallel.h"
#include "base/logging.h"
#include "cache/cache_layout.h"
#include "cache/pool_plan.h"
#include "engine/logprobs.h"
#include "engine/model_cache_layout.h"
#include "engine/step_worker.h"
#include "engine/text_stream.h"
#include "io/config_parser.h"
#include "model/tiny_model.h"
#include "ops/sampling/token_bitmask.h"
#include "recipe/tokenizer.h"
#include "recipe/v41_tokenizer.h"
#include "runtime/cpu_runner.h"
#include "runtime/runner_factory.h"
#include "scheduler/scheduler.h"

namespace deepinfer {
namespace {

// The CPU state pools are accounting only (the model keeps each sequence's state in host
// memory); this default bounds concurrency like a modest device budget would.
constexpr int64_t kDefaultCpuStateBudget = int64_t(1) << 30;

// State-cache budget that holds `n_seqs` requests of `max_model_len` tokens each plus one
// step of prefill (with a quarter to spare for block rounding).
int64_t accounting_budget(const CacheLayout& layout, int64_t n_seqs, int64_t max_model_len,
                          int64_t max_num_batched_tokens) {
  const int64_t bs = layout.block_size;
  int64_t per_request = layout.state_slot_bytes(), window_block = 0;
  for (const StateGroup& g : layout.groups()) {
    const int64_t entries = g.kind == StateKind::kWindow ? std::min(max_model_len, layout.window + bs)
                                                         : g.n_entries(max_model_len);
    per_request += (entries / bs + 2) * g.block_bytes;
    if (g.kind == StateKind::kWindow) window_block = g.block_bytes;
  }
  return (n_seqs + 1) * per_request / 4 * 5 + (max_num_batched_tokens / bs + 2) * window_block;
}

std::unique_ptr<ModelRunner> make_engine_runner(const EngineArgs& args) {
  CHECK(args.max_num_seqs > 0 && args.max_num_batched_tokens > 0)
      << "engine: max_num_seqs and max_num_batched_tokens must be positive";
  RunnerArgs r;
  r.device = args.device;
  r.model_dir = args.model_dir;
  r.dummy_weights = args.dummy_weights;
  r.dummy_seed = args.dummy_seed;
  r.model_options = args.model_options;
  r.max_sequences = args.max_num_seqs;
  r.max_context = args.max_model_len;
  r.max_batch_tokens = args.max_num_batched_tokens;
  r.gpu_memory_utilization = args.gpu_memory_utilization;
  r.weight_format = args.weight_format;
  r.kv_cache_dtype = args.kv_cache_dtype;
  r.expert_format = args.expert_format;
  r.cuda_graphs = args.cuda_graphs;
  r.speculative_method = args.speculative_method;
  r.num_speculative_tokens = args.num_speculative_tokens;
  r.cpu_step_driver = args.cpu_step_driver;
  return make_model_runner(r);
}

std::shared_ptr<const recipe::Tokenizer> load_engine_tokenizer(const EngineArgs& args) {
  std::string path = args.tokenizer_path;
  if (path.empty()) {
    if (!selects_builtin_model(args.model_dir)) {
      path = args.model_dir + "/tokenizer.json";
    } else if (const char* env = std::getenv("DEEPINFER_TINY_TOKENIZER")) {
      path = env;
    } else {
      path = std::string(DEEPINFER_SOURCE_DIR) + "/models/tiny/tokenizer.json";
    }
    if (!std::filesystem::exists(path)) {
      LOG(INFO) << "engine: no tokenizer at " << path << " (token ids only)";
      return nullptr;
    }
  }
  if (builtin_model_uses_v41_tokenizer(args.model_dir) && args.tokenizer_path.empty()) {
    return std::make_shared<const recipe::Tokenizer>(
        recipe::Tokenizer::from_json(recipe::v41_tokenizer_json_from_v4(path)));
  }
  return std::make_shared<const recipe::Tokenizer>(recipe::Tokenizer::from_file(path));
}

}  // namespace

namespace engine_detail {

// A row's grammar mask must allow something (a token, or the end where the output may end):
// a constraint the vocabulary cannot continue is that request's failure, not a token to guess.
void check_mask_allows_something(const uint32_t* mask, size_t n_words) {
  bool any = false;
  for (size_t w = 0; w < n_words && !any; ++w) any = mask[w] != 0;
  CHECK(any) << "the structured-output constraint cannot be continued: no token of the model's "
                "vocabulary (nor the end of the output) is allowed after the output so far";
}

// The message a failed request ends with; the log also gets where it was thrown.
std::string row_failure(const std::string& id) {
  std::string what = "unknown failure", where;
  try {
    throw;
  } catch (const Error& e) {
    what = e.what();
    where = e.where();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  LOG(WARNING) << "engine: request " << id << " failed: " << what << (where.empty() ? "" : " [" + where + "]");
  return what;
}

}  // namespace engine_detail

using engine_detail::check_mask_allows_something;
using engine_detail::row_failure;

void Engine::Impl::init() {
  const ModelConfig& cfg = runner->config();
  const RunnerCapacity cap = runner->capacity();
  const int64_t limit = cfg.max_position_embeddings;
  const int64_t max_model_len =
      args.max_model_len > 0 ? args.max_model_len : (limit > 0 ? std::min(limit, cap.max_context) : cap.max_context);
  CHECK(max_model_len > 0) << "engine: max_model_len is unknown (set it, or the config's "
                              "max_position_embeddings)";
  CHECK(limit <= 0 || max_model_len <= limit)
      << "engine: max_model_len " << max_model_len << " exceeds the model's " << limit;
  CHECK(max_model_len <= cap.max_context)
      << "engine: max_model_len " << max_model_len << " exceeds what " << runner->name() << " holds ("
      << cap.max_context << " tokens per sequence)";
  CHECK(args.max_num_batched_tokens <= cap.max_batch_tokens)
      << "engine: max_num_batched_tokens " << args.max_num_batched_tokens << " exceeds what "
      << runner->name() << " runs in one step (" << cap.max_batch_tokens << ")";
  CHECK(args.max_num_seqs > 0 && args.max_num_batched_tokens > 0 && args.block_size > 0)
      << "engine: max_num_seqs, max_num_batched_tokens and block_size must be positive";
  const int64_t f32 = int64_t(sizeof(float));
  CacheLayout layout = model_cache_layout(cfg, args.block_size, cfg.head_dim * f32,
                                         cfg.head_dim * f32, cfg.index_head_dim * f32);
  PoolPlanOptions po;
  po.max_num_seqs = std::min(args.max_num_seqs, cap.max_sequences);
  po.max_num_batched_tokens = args.max_num_batched_tokens;
  po.max_model_len = max_model_len;
  int64_t budget = args.state_budget_bytes;
  if (budget <= 0) {
    // A device runner's own pools bound concurrency; the accounting must not bind first.
    const bool on_cpu = dynamic_cast<const CpuRunner*>(runner.get()) != nullptr;
    budget = on_cpu ? kDefaultCpuStateBudget
                    : accounting_budget(layout, po.max_num_seqs, max_model_len, args.max_num_batched_tokens);
  }
  const PoolPlan plan = plan_pools(layout, budget, po);
  SchedulerConfig sc;
  sc.max_num_batched_tokens = args.max_num_batched_tokens;
  sc.max_prefill_tokens_with_decodes = args.max_prefill_tokens_with_decodes;
  sc.long_prefill_token_threshold = args.long_prefill_token_threshold;
  sc.max_num_seqs = std::min({args.max_num_seqs, plan.max_concurrent_requests, cap.max_sequences});
  sc.max_model_len = max_model_len;
  this->max_model_len = max_model_len;
  sc.priority = args.priority;
  if (args.enable_prefix_caching && runner->supports_prefix_state()) {
    CHECK(args.prefix_cache_block_tokens >= 1 && args.prefix_cache_bytes >= 0)
        << "engine: prefix_cache_block_tokens must be >= 1 and prefix_cache_bytes >= 0";
    prefix = std::make_unique<PrefixStateCache>(
        *runner, PrefixCacheOptions{args.prefix_cache_block_tokens, args.prefix_cache_bytes,
                                    prefix_cache_salt(*runner, args.model_dir, args.dummy_seed)});
    sc.cached_prefix = [this](const Request& r) { return prefix->cached_prefix(r); };
    sc.prefix_block_tokens = args.prefix_cache_block_tokens;
  }
  scheduler = std::make_unique<Scheduler>(sc, std::move(layout), plan);
  LOG(INFO) << "engine: " << runner->name() << ", up to " << sc.max_num_seqs << " requests of "
            << max_model_len << " tokens, " << sc.max_num_batched_tokens << " tokens per step";
  init_speculative();
  CHECK_KIND(kUnsupported, !args.collective_steps || spec_k == 0)
      << "engine: speculative decoding (--speculative-method / --num-speculative-tokens) is not supported with "
         "attention data parallel or expert parallel (--data-parallel-size / --expert-parallel-size): drafting runs "
         "forwards of its own, which the ranks of an expert-parallel group would not run together";
  if (args.overlap && !args.collective_steps) worker = std::make_unique<StepWorker>();
  if (auto* cpu = dynamic_cast<CpuRunner*>(runner.get())) {
    cpu->set_sampler(sample_row_request);
    // The CPU forwards (OpenMP) now run on the worker: this thread's team from loading would
    // slow every one of them (base/parallel.h). With sample()'s rows kept off OpenMP too, on 2
    // cores (trained-v41, 32 requests, `deepinfer bench` overlap table, 2026-12-03): 52-58 ->
    // 27 ms per decode step with overlap on (24 ms with it off).
    if (worker != nullptr && !release_idle_threads()) {
      LOG(WARNING) << "engine: could not release this thread's idle OpenMP threads; CPU forwards on the "
                      "overlap worker may run slower";
    }
  }
}

void Engine::Impl::note_preempted(const SchedulerOutput& so) {
  for (int64_t num : so.preempted_ids) {
    ++stats.n_preemptions;
    auto it = live.find(num);
    if (it != live.end()) release(it->second);
  }
}

void Engine::Impl::sync_prefix_stats() {
  if (!prefix) return;
  const PrefixCache& c = prefix->index();
  stats.prefix_cache_queries = c.stats().n_queries;
  stats.prefix_cache_hits = c.stats().n_hits;
  stats.prefix_cache_query_tokens = c.stats().n_query_tokens;
  stats.prefix_cache_hit_tokens = c.stats().n_hit_tokens;
  stats.prefix_cache_lookup_tokens = prefix->lookup_tokens();
  stats.prefix_cache_block_tokens = c.block_tokens();
  stats.prefix_cache_evictions = c.stats().n_evicted;
  stats.prefix_cache_blocks = c.n_entries();
  stats.prefix_cache_bytes = c.n_bytes();
  stats.prefix_cache_pinned = c.n_pinned();
}

void Engine::Impl::release(Live& l) {
  if (prefix) prefix->forget(ids.count(l.id) ? ids.at(l.id) : -1);
  if (l.sequence >= 0) deferred_frees.push_back(l.sequence);
  l.sequence = -1;
}

void Engine::Impl::free_deferred() {
  for (int64_t s : deferred_frees) runner->free_sequence(s);
  deferred_frees.clear();
}

// A sampling row goes to the backend's sampler unless it needs what only the host path does:
// the raw logits (on_logits hook, logprobs), penalties or logit_bias. EOS masking (min_tokens,
// ignore_eos) the backend does too, and grammar masks (prepare() points the row at its
// bitmask): for a constrained row the grammar alone decides whether EOS may come, as in
// sample_one. A terminated matcher (nothing allowed) stays on the host path, as before.
RowRequest Engine::Impl::row_request(const Live& l, const Request& r, const ScheduledChunk& c) const {
  RowRequest row;
  if (!c.samples) return row;
  const SamplingParams& p = l.params;
  row.position = c.start_position + c.n_tokens - r.num_prompt_tokens;
  const bool host = args.on_logits || l.n_logprobs >= 0 || (l.matcher && l.matcher->is_terminated()) ||
                    !p.logit_bias.empty() || (l.matcher && p.closing_bias != 0.0f) ||
                    p.repetition_penalty != 1.0f ||
                    p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  row.mask_eos = !l.matcher && (row.position < p.min_tokens || p.ignore_eos);
  row.mode = host ? RowMode::kHost : RowMode::kSample;
  row.temperature = p.temperature;
  row.top_k = p.top_k;
  row.top_p = p.top_p;
  row.min_p = p.min_p;
  row.seed = p.seed;
  return row;
}

// A step with a constrained request is never chained, nor launched chained: a constrained
// row's next mask needs this step's token accepted by its matcher first.
bool Engine::Impl::can_chain(const InFlight& f, const SchedulerOutput& next) const {
  auto constrained = [&](int64_t request_id) {
    auto it = live.find(request_id);
    return it != live.end() && it->second.matcher != nullptr;
  };
  for (const ScheduledChunk& c : f.sched.scheduled) {
    if (constrained(c.request_id)) return false;
  }
  for (const ScheduledChunk& c : next.scheduled) {
    if (constrained(c.request_id)) return false;
  }
  std::unordered_map<int64_t, RowMode> mode;
  for (size_t i = 0; i < f.sched.scheduled.size(); ++i) {
    if (f.sched.scheduled[i].samples) mode[f.sched.scheduled[i].request_id] = f.rows[i].mode;
  }
  for (const ScheduledChunk& c : next.scheduled) {
    const Request* r = scheduler->find(c.request_id);
    if (r == nullptr || c.start_position + c.n_tokens <= r->num_tokens()) continue;
    auto it = mode.find(c.request_id);
    if (it == mode.end() || it->second != RowMode::kSample) return false;
  }
  return true;
}

// `in_flight_samples`: per request, the input token of the step not yet updated (a token, or
// a sample_ref to the previous launch's row when it is still on the device).
std::unique_ptr<Engine::Impl::InFlight> Engine::Impl::prepare(
    SchedulerOutput so, const std::unordered_map<int64_t, int32_t>& in_flight_samples) {
  // No forward runs on the host here, and every earlier step is ordered before this one on
  // the device: sequences freed so far (preempted ones included) go back to the runner
  // before this step takes new ones.
  note_preempted(so);
  free_deferred();
  auto f = std::make_unique<InFlight>();
  f->sched = std::move(so);
  const size_t n = f->sched.scheduled.size();
  f->tokens.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const ScheduledChunk& c = f->sched.scheduled[i];
    const Request* r = scheduler->find(c.request_id);
    ICHECK(r != nullptr) << "engine: scheduled request " << c.request_id << " is not live";
    Live& l = live.at(c.request_id);
    if (c.start_position == 0) {
      if (l.sequence >= 0) runner->free_sequence(l.sequence);
      l.sequence = runner->new_sequence();
      if (prefix) prefix->forget(c.request_id);
      if (l.n_cached < 0) l.n_cached = 0;
    } else if (l.sequence < 0 && prefix) {  // admitted on a prefix-cache hit
      l.sequence = prefix->take_hit(c.request_id, c.start_position);
      if (l.n_cached < 0) l.n_cached = std::min(c.start_position, l.n_prompt);
    }
    ICHECK(l.sequence >= 0 && runner->n_tokens(l.sequence) == c.start_position)
        << "engine: request " << l.id << " state at " << (l.sequence >= 0 ? runner->n_tokens(l.sequence) : -1)
        << ", chunk starts at " << c.start_position;
    if (prefix) prefix->offer(l.sequence, r->token_ids, c.start_position);
    std::vector<int32_t>& t = f->tokens[i];
    t.reserve(size_t(c.n_tokens));
    const int64_t n_drafts = int64_t(c.draft_token_ids.size());
    ICHECK(n_drafts == 0 || (c.samples && c.start_position + 1 + n_drafts == c.start_position + c.n_tokens &&
                             c.start_position + 1 == r->num_tokens()))
        << "engine: request " << l.id << " has drafts in a chunk that is not [last token, drafts]";
    for (int64_t p = c.start_position; p < c.start_position + c.n_tokens; ++p) {
      if (p < r->num_tokens()) {
        t.push_back(r->token_ids[size_t(p)]);
      } else if (n_drafts > 0) {
        t.push_back(c.draft_token_ids[size_t(p - r->num_tokens())]);
      } else {
        // The sample of the step still being updated (overlap scheduling).
        auto s = in_flight_samples.find(c.request_id);
        ICHECK(p == r->num_tokens() && s != in_flight_samples.end())
            << "engine: request " << l.id << " position " << p << " has no input token";
        t.push_back(s->second);
      }
    }
    // A prefill chunk (the prompt, or everything known after a preemption) carries the
    // prefill's length for SWA bounded replay; decode and verification chunks none.
    const bool prefill = n_drafts == 0 && c.start_position + c.n_tokens <= r->num_tokens() &&
                         c.start_position + 1 < r->num_tokens();
    f->chunks.push_back({l.sequence, t, n_drafts > 0, prefill ? r->num_tokens() : 0});
    f->rows.push_back(row_request(l, *r, c));
    if (n_drafts > 0) f->rows.back().mode = RowMode::kHost;  // verified here (verify())
    if (l.matcher && f->rows.back().mode == RowMode::kSample) {
      f->launch_matchers.resize(n, nullptr);
      f->launch_matchers[i] = l.matcher.get();
    }
  }
  if (!f->launch_matchers.empty()) {  // the bitmasks, in row order, filled by launch()
    const size_t n_words = size_t(structured->n_mask_words());
    f->launch_mask_words = n_words;
    const auto n_constrained = std::count_if(f->launch_matchers.begin(), f->launch_matchers.end(),
                                             [](const grammar::GrammarMatcher* m) { return m != nullptr; });
    f->launch_masks.resize(n_words * size_t(n_constrained));
    f->launch_errors.assign(n, std::string());
    f->launch_ids.assign(n, std::string());  // copies: the worker must not read `live`
    for (size_t i = 0; i < n; ++i) {
      if (f->launch_matchers[i] != nullptr) f->launch_ids[i] = live.at(f->sched.scheduled[i].request_id).id;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) {
      if (f->launch_matchers[i] != nullptr) f->rows[i].bitmask = f->launch_masks.data() + n_words * k++;
    }
  }
  f->out_row.resize(n);
  int64_t n_verify_tokens = 0;
  for (size_t i = 0; i < n; ++i) {
    f->out_row[i] = int64_t(f->launch_rows.size());
    f->launch_rows.push_back(f->rows[i]);
    if (f->chunks[i].all_logits) {  // a verification: every row's logits, on the host
      f->launch_rows.resize(f->launch_rows.size() + f->tokens[i].size() - 1, f->rows[i]);
      n_verify_tokens += int64_t(f->tokens[i].size());
    }
  }
  if (n_verify_tokens > 0) {
    ++stats.n_verify_steps;
    stats.n_verified_tokens += n_verify_tokens;
  }
  ++stats.n_steps;
  stats.n_scheduled_tokens += f->sched.n_scheduled_tokens;
  stats.max_running = std::max<int64_t>(stats.max_running, int64_t(n));
  return f;
}

// The matchers of the rows a step samples already hold every earlier sample (sample() of the
// previous step ran before this one was launched), so their masks can be computed while the
// forward runs; nothing changes a matcher between here and sample(). A failure leaves the
// masks to sample(), which then fails as it would with overlap off.
void Engine::Impl::precompute_masks(InFlight& f) {
  if (!structured) return;
  const size_t n = f.sched.scheduled.size(), n_words = size_t(structured->n_mask_words());
  f.has_mask.assign(n, 0);
  try {
    for (size_t i = 0; i < n; ++i) {
      const ScheduledChunk& c = f.sched.scheduled[i];
      auto it = live.find(c.request_id);
      // kSample rows' masks are launch()'s (and that may be running on the worker now).
      if (!c.samples || f.rows[i].mode != RowMode::kHost || it == live.end() || !it->second.matcher) {
        continue;
      }
      if (f.masks.size() < n * n_words) f.masks.resize(n * n_words);
      it->second.matcher->fill_next_token_bitmask(f.masks.data() + i * n_words);
      f.has_mask[i] = 1;
    }
  } catch (...) {
    f.has_mask.clear();
  }
}

int32_t Engine::Impl::sample_one(Live& l, const Request& r, const float* logits,
                                 const uint32_t* precomputed) {
  const int64_t position = r.num_output_tokens();
  const std::span<const int32_t> history(r.token_ids.data() + r.num_prompt_tokens,
                                         size_t(r.num_output_tokens()));
  const std::vector<float>& row = target_row(l, history, logits, position, precomputed);
  const int32_t token = sample_token(row, l.params, position);
  commit_token(l, logits, position, token);
  return token;
}

const std::vector<float>& Engine::Impl::target_row(Live& l, std::span<const int32_t> history,
                                                   const float* logits, int64_t position,
                                                   const uint32_t* precomputed) {
  const ModelConfig& cfg = runner->config();
  const std::span<const float> raw(logits, size_t(cfg.vocab_size));
  if (args.on_logits) args.on_logits(l.id, position, raw);
  // Per-thread scratch: sample() may run rows on several threads.
  thread_local std::vector<float> row;
  thread_local std::vector<uint32_t> mask;
  row.assign(raw.begin(), raw.end());
  apply_penalties(row, l.params, history);
  if (l.matcher) {
    // The constraint decides when the output may end: EOS stays allowed where it allows it.
    const uint32_t* allowed = precomputed;
    if (allowed == nullptr) {
      mask.resize(size_t(structured->n_mask_words()));
      l.matcher->fill_next_token_bitmask(mask.data());
      allowed = mask.data();
    }
    check_mask_allows_something(allowed, size_t(structured->n_mask_words()));
    if (l.params.closing_bias != 0.0f)
      for (int32_t t : l.matcher->closing_tokens()) row[size_t(t)] += l.params.closing_bias;
    apply_token_bitmask_ref(row.data(), allowed, nullptr, 1, int64_t(row.size()));
  } else if (position < l.params.min_tokens || l.params.ignore_eos) {
    for (int64_t eos : cfg.eos_token_ids) row[size_t(eos)] = -INFINITY;
  }
  return row;
}

void Engine::Impl::commit_token(Live& l, const float* logits, int64_t position, int32_t token) {
  const std::span<const float> raw(logits, size_t(runner->config().vocab_size));
  if (l.matcher) {
    ICHECK(l.matcher->accept_token(token)) << "engine: sampled token " << token
                                           << " is not allowed by the constraint of " << l.id;
  }
  if (l.n_logprobs >= 0) {
    if (int64_t(l.logprobs.size()) <= position) l.logprobs.resize(size_t(position + 1));
    l.logprobs[size_t(position)] = token_logprob(raw, token, l.n_logprobs);
  }
}

// Rows are independent (each request owns its matcher, logprobs and RNG stream), so they are
// sampled in parallel; the tokens do not depend on the split. A failing row fails its request
// only (Sampled::failed). The on_logits hook is called from one thread.
Engine::Impl::Sampled Engine::Impl::sample(const InFlight& f) {
  const int64_t V = runner->config().vocab_size;
  Sampled result;
  std::vector<std::vector<int32_t>>& sampled = result.tokens;
  sampled.resize(f.sched.scheduled.size());
  struct Row {
    size_t i;
    Live* live;
    const Request* request;
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < sampled.size(); ++i) {
    const ScheduledChunk& c = f.sched.scheduled[i];
    if (!c.samples) continue;
    const Request* r = scheduler->find(c.request_id);
    auto it = live.find(c.request_id);
    if (r == nullptr || it == live.end()) continue;  // finished while the step ran
    rows.push_back({i, &it->second, r});
  }
  std::vector<int32_t> tokens(rows.size());
  std::vector<std::vector<int32_t>> multi(rows.size());  // verifications: committed tokens
  std::vector<std::string> errors(rows.size());
  std::vector<uint8_t> failed(rows.size(), 0);
  auto run_rows = [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const Row& w = rows[size_t(k)];
      const uint32_t* mask = w.i < f.has_mask.size() && f.has_mask[w.i]
                                 ? f.masks.data() + w.i * size_t(structured->n_mask_words())
                                 : nullptr;
      if (w.i < f.launch_errors.size() && !f.launch_errors[w.i].empty()) {
        errors[size_t(k)] = f.launch_errors[w.i];
        failed[size_t(k)] = 1;
        continue;
      }
      try {
        if (!f.sched.scheduled[w.i].draft_token_ids.empty()) {
          multi[size_t(k)] = verify(f, w.i, *w.live, *w.request);
        } else if (f.rows[w.i].mode == RowMode::kSample) {
          const int32_t token = f.result.tokens[size_t(f.out_row[w.i])];
          ICHECK(token >= 0 && token < V) << "engine: backend sampled token " << token;
          if (f.rows[w.i].bitmask != nullptr) {  // masked by the runner: the matcher takes it
            ICHECK(w.live->matcher && w.live->matcher->accept_token(token))
                << "engine: backend sampled token " << token << ", not allowed by the constraint of "
                << w.live->id;
          }
          tokens[size_t(k)] = token;
        } else {
          const int64_t row = f.result.logits_row[size_t(f.out_row[w.i])];
          ICHECK(f.rows[w.i].mode == RowMode::kHost && row >= 0);
          tokens[size_t(k)] = sample_one(*w.live, *w.request, f.result.logits.f32() + row * V, mask);
        }
      } catch (...) {
        errors[size_t(k)] = row_failure(w.live->id);
        failed[size_t(k)] = 1;
      }
    }
  };
  // Rows the backend sampled only read their tokens: no OpenMP region for them (one started
  // here every step would bring back this thread's team, which slows the CPU forwards that run
  // on the overlap worker meanwhile: base/parallel.h release_idle_threads).
  int64_t host_rows = 0;
  for (const Row& w : rows) host_rows += f.rows[w.i].mode == RowMode::kHost ? 1 : 0;
  if (args.on_logits || host_rows < 2) run_rows(0, int64_t(rows.size()));
  else parallel_for(int64_t(rows.size()), run_rows, 4);
  for (size_t k = 0; k < rows.size(); ++k) {
    if (failed[k]) {
      sampled[rows[k].i].push_back(0);  // placeholder (Sampled)
      result.failed.emplace_back(f.sched.scheduled[rows[k].i].request_id, std::move(errors[k]));
    } else if (!f.sched.scheduled[rows[k].i].draft_token_ids.empty()) {
      note_verification(f, rows[k].i, *rows[k].live, multi[k]);
      sampled[rows[k].i] = std::move(multi[k]);
    } else {
      sampled[rows[k].i].push_back(tokens[k]);
    }
  }
  return result;
}

RequestOutput Engine::Impl::emit(Live& l, std::span<const int32_t> outputs,
                                 std::optional<FinishReason> reason, int64_t n_preemptions) {
  RequestOutput o;
  o.id = l.id;
  o.n_prompt_tokens = l.n_prompt;
  o.n_preemptions = n_preemptions;
  o.n_cached_tokens = std::max<int64_t>(0, l.n_cached);
  bool stopped = false;
  while (l.n_emitted < int64_t(outputs.size()) && !stopped) {
    const int32_t token = outputs[size_t(l.n_emitted)];
    o.new_tokens.push_back(token);
    if (l.n_logprobs >= 0) o.logprobs.push_back(l.logprobs.at(size_t(l.n_emitted)));
    ++l.n_emitted;
    stopped = l.text->push(token);
  }
  if (stopped) {
    scheduler->finish(ids.at(l.id), FinishReason::kStop);  // nullopt if it just finished
    o.finished = true;
    o.finish_reason = finish_reason_name(FinishReason::kStop);
    o.stop_reason = l.text->stop_reason();
  } else if (reason) {
    l.text->finish();
    o.finished = true;
    o.finish_reason = finish_reason_name(*reason);
  }
  o.new_text = l.text->take();
  o.n_output_tokens = l.n_emitted;
  return o;
}

void Engine::Impl::fail(int64_t num, const std::string& message, std::vector<RequestOutput>& out) {
  auto it = live.find(num);
  if (it == live.end()) return;
  const std::optional<FinishedRequest> fin = scheduler->finish(num, FinishReason::kAbort);
  RequestOutput o;
  o.id = it->second.id;
  o.finished = true;
  o.finish_reason = "error";
  o.error = message;
  o.n_prompt_tokens = it->second.n_prompt;
  o.n_output_tokens = it->second.n_emitted;
  o.n_preemptions = fin ? fin->num_preemptions : 0;
  o.n_cached_tokens = std::max<int64_t>(0, it->second.n_cached);
  out.push_back(std::move(o));
  retire(num);
}

// Failed requests end first, so the scheduler drops their placeholder samples.
void Engine::Impl::update(const InFlight& f, const Sampled& s, std::vector<RequestOutput>& out) {
  for (const auto& [num, message] : s.failed) fail(num, message, out);
  const std::vector<std::vector<int32_t>>& sampled = s.tokens;
  std::vector<FinishedRequest> finished = scheduler->update(f.sched, sampled);
  std::unordered_map<int64_t, const FinishedRequest*> done;
  for (const FinishedRequest& fr : finished) done[fr.id] = &fr;
  for (size_t i = 0; i < sampled.size(); ++i) {
    if (sampled[i].empty()) continue;
    const int64_t num = f.sched.scheduled[i].request_id;
    auto it = live.find(num);
    if (it == live.end()) continue;
    Live& l = it->second;
    RequestOutput o;
    try {
      auto d = done.find(num);
      if (d != done.end()) {
        o = emit(l, d->second->output_token_ids, d->second->reason, d->second->num_preemptions);
      } else {
        const Request* r = scheduler->find(num);
        ICHECK(r != nullptr);
        const std::span<const int32_t> outputs(r->token_ids.data() + r->num_prompt_tokens,
                                               size_t(r->num_output_tokens()));
        o = emit(l, outputs, std::nullopt, r->num_preemptions);
      }
    } catch (...) {
      fail(num, row_failure(l.id), out);
      continue;
    }
    const bool fin = o.finished;
    if (!o.new_tokens.empty() || fin) out.push_back(std::move(o));
    if (fin) retire(num);
  }
}

void Engine::Impl::retire(int64_t num) {
  auto it = live.find(num);
  if (it == live.end()) return;
  release(it->second);
  if (it->second.matcher) retired_matchers.push_back(std::move(it->second.matcher));
  ids.erase(it->second.id);
  live.erase(it);
}

Engine::Engine(const EngineArgs& args)
    : Engine(args, make_engine_runner(args), load_engine_tokenizer(args)) {}

Engine::Engine(const EngineArgs& args, std::unique_ptr<Model> model,
               std::shared_ptr<const recipe::Tokenizer> tokenizer)
    : Engine(args, model ? std::make_unique<CpuRunner>(std::move(model)) : nullptr, std::move(tokenizer)) {}

Engine::Engine(const EngineArgs& args, std::unique_ptr<ModelRunner> runner,
               std::shared_ptr<const recipe::Tokenizer> tokenizer)
    : impl_(std::make_unique<Impl>()) {
  CHECK(runner != nullptr) << "engine: no model";
  impl_->args = args;
  impl_->runner = std::move(runner);
  impl_->tokenizer = std::move(tokenizer);
  impl_->init();
}

Engine::~Engine() {
  if (impl_ && impl_->worker) {
    try {
      impl_->worker->wait();
    } catch (...) {
    }
  }
}

const ModelConfig& Engine::model_config() const { return impl_->runner->config(); }
const ModelRunner& Engine::runner() const { return *impl_->runner; }
int64_t Engine::max_model_len() const { return impl_->max_model_len; }
const recipe::Tokenizer* Engine::tokenizer() const { return impl_->tokenizer.get(); }

std::shared_ptr<const grammar::CompiledGrammar> Engine::compile_constraint(const std::string& kind,
                                                                           const std::string& text) {
  CHECK(impl_->tokenizer != nullptr)
      << "engine: a structured-output constraint needs a tokenizer and the model has none";
  return impl_->structured_output().compile(kind, text);
}
const StateCache& Engine::state_cache() const { return impl_->scheduler->cache(); }
const EngineStats& Engine::stats() const {
  impl_->sync_prefix_stats();
  return impl_->stats;
}

void Engine::add_request(EngineRequest request) {
  Impl& m = *impl_;
  const ModelConfig& cfg = m.runner->config();
  CHECK(!request.id.empty()) << "engine: request id is empty";
  CHECK(m.ids.count(request.id) == 0) << "engine: request id '" << request.id << "' is already live";
  request.params.validate();
  CHECK(!request.prompt.empty()) << "engine: request '" << request.id << "' has an empty prompt";
  for (int32_t t : request.prompt) {
    CHECK(t >= 0 && t < cfg.vocab_size) << "engine: request '" << request.id << "' has token id "
                                        << t << " outside the vocabulary of " << cfg.vocab_size;
  }
  CHECK(request.n_logprobs >= -1 && request.n_logprobs <= cfg.vocab_size)
      << "engine: request '" << request.id << "' asks for " << request.n_logprobs << " logprobs";
  for (int32_t t : request.params.stop_token_ids) {
    CHECK(t >= 0 && t < cfg.vocab_size) << "engine: stop token id " << t << " outside the vocabulary";
  }
  for (const auto& [t, bias] : request.params.logit_bias) {
    CHECK(t >= 0 && t < cfg.vocab_size) << "engine: logit_bias token id " << t << " outside the vocabulary of "
                                        << cfg.vocab_size;
  }
  auto text = std::make_unique<TextStream>(m.tokenizer.get(), request.skip_special_tokens,
                                           request.stop);
  std::unique_ptr<grammar::GrammarMatcher> matcher;
  if (!request.constraint_kind.empty()) {
    CHECK(m.tokenizer != nullptr) << "engine: request '" << request.id
                                  << "' has a structured-output constraint but the model has no tokenizer";
    // The constraint decides where the output ends (its EOS terminates the matcher).
    CHECK(!request.params.ignore_eos) << "engine: request '" << request.id
                                      << "' sets ignore_eos with a structured-output constraint";
    // Compiled off this thread when the caller did (compile_constraint), else here.
    matcher = request.compiled_constraint
                  ? std::make_unique<grammar::GrammarMatcher>(request.compiled_constraint)
                  : m.structured_output().make_matcher(request.constraint_kind, request.constraint);
  }
  RequestSpec spec;
  spec.id = m.next_num;
  spec.prompt_token_ids = request.prompt;
  spec.max_tokens = request.params.max_tokens;
  spec.min_tokens = request.params.min_tokens;
  spec.stop_token_ids = request.params.stop_token_ids;
  if (!request.params.ignore_eos) {
    for (int64_t eos : cfg.eos_token_ids) spec.stop_token_ids.push_back(int32_t(eos));
  }
  spec.priority = request.priority;
  m.scheduler->add_request(std::move(spec));  // throws before any change of ours
  Impl::Live l;
  l.id = request.id;
  l.params = std::move(request.params);
  l.n_logprobs = request.n_logprobs;
  l.n_prompt = int64_t(request.prompt.size());
  l.text = std::move(text);
  l.matcher = std::move(matcher);
  m.ids.emplace(l.id, m.next_num);
  m.live.emplace(m.next_num, std::move(l));
  ++m.next_num;
}

bool Engine::abort(const std::string& id) {
  Impl& m = *impl_;
  auto it = m.ids.find(id);
  if (it == m.ids.end()) return false;
  const int64_t num = it->second;
  auto fin = m.scheduler->abort(num);
  ICHECK(fin.has_value()) << "engine: live request '" << id << "' unknown to the scheduler";
  Impl::Live& l = m.live.at(num);
  RequestOutput o = m.emit(l, {}, FinishReason::kAbort, fin->num_preemptions);
  m.pending.push_back(std::move(o));
  m.retire(num);
  return true;
}

bool Engine::prefix_caching() const { return impl_->prefix != nullptr; }

int64_t Engine::speculative_tokens() const { return impl_->spec_k; }

bool Engine::has_unfinished() const {
  return impl_->scheduler->has_unfinished() || impl_->inflight != nullptr || !impl_->pending.empty();
}

std::vector<RequestOutput> Engine::step() {
  Impl& m = *impl_;
  std::vector<RequestOutput> out = std::move(m.pending);
  m.pending.clear();
  // Speculative steps are not chained (engine.h), nor collective ones (one forward per step).
  if (!m.args.overlap || m.spec_k > 0 || m.args.collective_steps) {
    m.retired_matchers.clear();  // no launch runs
    m.free_deferred();
    SchedulerOutput so = m.scheduler->schedule();
    if (so.scheduled.empty()) {
      m.note_preempted(so);
      if (m.args.collective_steps) {  // this rank's share of the group's step: no chunks
        m.runner->launch({}, {});
        m.runner->collect();
      }
      return out;
    }
    auto f = m.prepare(std::move(so), {});
    m.launch(*f);
    f->result = m.runner->collect();
    m.note_done(*f);
    const auto sampled = m.sample(*f);
    m.update(*f, sampled, out);
    if (m.spec_k > 0) m.propose_drafts();
    m.free_deferred();  // nothing in flight: finished requests' states go back now, not at the next step
    return out;
  }
  // Overlap: step t (m.inflight) was launched on the worker; step t+1 is scheduled here. When
  // every token t+1 needs from t is sampled on the backend, t+1 is launched at once, its
  // inputs read from t's samples where they lie (sample_ref), before t's tokens reach the
  // host; otherwise it is launched after t's host sampling. Either way t's tokens are then
  // sampled/collected, the scheduler updated and t detokenized while t+1 runs.
  if (m.inflight == nullptr) {
    m.retired_matchers.clear();  // no launch runs
    m.free_deferred();
    SchedulerOutput so = m.scheduler->schedule();
    if (so.scheduled.empty()) {
      m.note_preempted(so);
      return out;
    }
    m.inflight = m.prepare(std::move(so), {});
    m.worker->submit([&m, f = m.inflight.get()] { m.launch(*f); });
  }
  SchedulerOutput next = m.scheduler->schedule();
  m.precompute_masks(*m.inflight);
  try {
    m.worker->wait();
  } catch (...) {
    m.retired_matchers.clear();
    m.inflight.reset();  // the failed step was not launched
    throw;
  }
  m.retired_matchers.clear();  // no launch runs until the next submit
  std::unique_ptr<Impl::InFlight> launched;
  if (!next.scheduled.empty() && m.can_chain(*m.inflight, next)) {
    std::unordered_map<int64_t, int32_t> refs;
    for (size_t i = 0; i < m.inflight->rows.size(); ++i) {
      if (m.inflight->rows[i].mode == RowMode::kSample) {
        refs[m.inflight->sched.scheduled[i].request_id] = sample_ref(m.inflight->out_row[i]);
      }
    }
    launched = m.prepare(std::move(next), refs);
    m.worker->submit([&m, f = launched.get()] { m.launch(*f); });
  }
  // While a launch runs on the worker, the runner is only collected from here (no sequence
  // is taken or freed until the next wait()). Should anything below throw, the launched step
  // is waited for (and collected) before its InFlight goes away.
  try {
    m.inflight->result = m.runner->collect();
    m.note_done(*m.inflight);
    if (!launched) m.free_deferred();
    const auto sampled = m.sample(*m.inflight);
    if (launched == nullptr && !next.scheduled.empty()) {
      std::unordered_map<int64_t, int32_t> samples;
      for (size_t i = 0; i < sampled.tokens.size(); ++i) {
        if (!sampled.tokens[i].empty()) samples[m.inflight->sched.scheduled[i].request_id] = sampled.tokens[i][0];
      }
      launched = m.prepare(std::move(next), samples);
      m.worker->submit([&m, f = launched.get()] { m.launch(*f); });
    } else if (launched == nullptr) {
      m.note_preempted(next);
    }
    m.update(*m.inflight, sampled, out);
  } catch (...) {
    if (launched) {  // wait for it and drop its results, leaving the runner with none uncollected
      try {
        m.worker->wait();
        m.runner->collect();
      } catch (...) {
      }
    }
    m.inflight.reset();
    throw;
  }
  m.inflight = std::move(launched);
  // Idle now: hand the finished requests' states back instead of holding them until the next
  // request arrives (they are the engine's largest per-request host allocations).
  if (m.inflight == nullptr) m.free_deferred();
  return out;
}

std::vector<RequestOutput> Engine::generate(std::vector<EngineRequest> requests) {
  Impl& m = *impl_;
  std::unordered_map<std::string, size_t> index;
  std::vector<RequestOutput> results(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    CHECK(index.emplace(requests[i].id, i).second)
        << "engine: request id '" << requests[i].id << "' appears twice";
  }
  size_t n_added = 0;
  try {
    for (EngineRequest& r : requests) {
      results[n_added].id = r.id;
      results[n_added].n_prompt_tokens = int64_t(r.prompt.size());
      add_request(std::move(r));
      ++n_added;
    }
  } catch (...) {
    for (size_t i = 0; i < n_added; ++i) abort(results[i].id);
    std::erase_if(m.pending, [&](const RequestOutput& o) { return index.count(o.id) != 0; });
    throw;
  }
  std::vector<RequestOutput> others;
  size_t remaining = results.size();
  while (remaining > 0) {
    ICHECK(has_unfinished()) << "engine: requests left but nothing to run";
    for (RequestOutput& o : step()) {
      auto it = index.find(o.id);
      if (it == index.end() || results[it->second].finished) {
        others.push_back(std::move(o));
        continue;
      }
      RequestOutput& acc = results[it->second];
      acc.new_tokens.insert(acc.new_tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      acc.new_text += o.new_text;
      acc.logprobs.insert(acc.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      acc.n_output_tokens = o.n_output_tokens;
      acc.n_preemptions = o.n_preemptions;
      acc.n_cached_tokens = o.n_cached_tokens;
      if (o.finished) {
        acc.finished = true;
        acc.finish_reason = o.finish_reason;
        acc.stop_reason = o.stop_reason;
        --remaining;
      }
    }
  }
  m.pending.insert(m.pending.begin(), std::make_move_iterator(others.begin()),
                   std::make_move_iterator(others.end()));
  return results;
}

}  // namespace deepinfer
