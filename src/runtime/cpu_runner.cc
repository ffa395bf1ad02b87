#include "runtime/cpu_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/error.h"
#include "base/parallel.h"
#include "model/state_segment.h"
#include "ops/sampling/token_bitmask.h"

namespace deepinfer {

CpuRunner::CpuRunner(std::unique_ptr<Model> model, const CpuRunnerOptions& options)
    : model_(std::move(model)), options_(options) {
  CHECK(model_ != nullptr) << "CpuRunner: no model";
  CHECK(options_.max_sequences > 0 && options_.max_batch_tokens > 0)
      << "CpuRunner: max_sequences and max_batch_tokens must be positive";
}

RunnerCapacity CpuRunner::capacity() const {
  const int64_t limit = model_->config().max_position_embeddings;
  return {options_.max_sequences, limit > 0 ? limit : int64_t(1) << 40, options_.max_batch_tokens};
}

std::string CpuRunner::name() const {
  return std::string("cpu (") + numerics_name(model_->options().numerics) +
         (model_->options().batch_invariant ? ", batch-invariant)" : ")");
}

int64_t CpuRunner::new_sequence() {
  const int64_t id = take_id();
  states_[size_t(id)] = model_->new_state();
  return id;
}

int64_t CpuRunner::take_id() {
  CHECK_KIND(kResourceExhausted, n_live_ < options_.max_sequences)
      << "CpuRunner: all " << options_.max_sequences << " sequences are in use";
  int64_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = int64_t(states_.size());
    states_.emplace_back();
  }
  ++n_live_;
  return id;
}

namespace {
struct CpuPrefixState final : PrefixState {
  std::shared_ptr<const StateSegment> segment;
};
}  // namespace

std::shared_ptr<const PrefixState> CpuRunner::export_prefix(int64_t sequence, const PrefixState* parent) {
  const SequenceState& s = live(sequence);
  const auto* p = dynamic_cast<const CpuPrefixState*>(parent);
  CHECK(parent == nullptr || p != nullptr) << "CpuRunner: a prefix state of another runner";
  auto out = std::make_shared<CpuPrefixState>();
  out->segment = export_segment(s, p ? p->segment.get() : nullptr);
  out->begin = out->segment->begin;
  out->end = out->segment->end;
  out->bytes = out->segment->bytes();
  return out;
}

int64_t CpuRunner::import_prefix(std::span<const PrefixState* const> chain) {
  std::vector<const StateSegment*> segments;
  for (const PrefixState* piece : chain) {
    const auto* p = dynamic_cast<const CpuPrefixState*>(piece);
    CHECK(p != nullptr) << "CpuRunner: a prefix state of another runner";
    segments.push_back(p->segment.get());
  }
  std::unique_ptr<SequenceState> state = import_segments(segments);
  CHECK(int64_t(state->layers.size()) == model_->config().num_layers)
      << "CpuRunner: the prefix state belongs to another model";
  const int64_t id = take_id();
  states_[size_t(id)] = std::move(state);
  return id;
}

SequenceState& CpuRunner::live(int64_t sequence) const {
  CHECK(sequence >= 0 && sequence < int64_t(states_.size()) && states_[size_t(sequence)])
      << "CpuRunner: " << sequence << " is not a live sequence";
  return *states_[size_t(sequence)];
}

void CpuRunner::free_sequence(int64_t sequence) {
  live(sequence);
  if (options_.step_driver) options_.step_driver->invalidate(sequence);
  states_[size_t(sequence)].reset();
  free_ids_.push_back(sequence);
  --n_live_;
}

int64_t CpuRunner::n_tokens(int64_t sequence) const { return live(sequence).n_tokens; }

std::string CpuRunner::drafter() const { return drafter_kind_name(model_->drafter_kind()); }

int64_t CpuRunner::draft_length() const { return model_->draft_length(); }

void CpuRunner::truncate(int64_t sequence, int64_t n_tokens) {
  ICHECK(n_launched_.load() == n_collected_.load()) << "CpuRunner: truncate() with a launched step uncollected";
  model_->truncate(live(sequence), n_tokens);
  if (options_.step_driver) options_.step_driver->invalidate(sequence);
}

RunnerDraft CpuRunner::draft(int64_t sequence, int32_t next, int64_t n_drafts) {
  ICHECK(n_launched_.load() == n_collected_.load()) << "CpuRunner: draft() with a launched step uncollected";
  CHECK(n_drafts >= 0) << "CpuRunner: " << n_drafts << " drafts asked";
  RunnerDraft d;
  if (n_drafts == 0) return d;
  // DSpark drafts its block (the first n_drafts kept); MTP chains n_drafts steps.
  const bool block_drafter = model_->drafter_kind() == DrafterKind::kDspark;
  DraftBlock block = model_->draft(live(sequence), next,
                                   block_drafter ? std::min(n_drafts, model_->draft_length()) : n_drafts);
  d.tokens = std::move(block.tokens);
  d.confidence = std::move(block.confidence);
  if (int64_t(d.tokens.size()) > n_drafts) d.tokens.resize(size_t(n_drafts));
  if (int64_t(d.confidence.size()) > n_drafts) d.confidence.resize(size_t(n_drafts));
  const int64_t V = model_->config().vocab_size;
  if (int64_t(block.logits.size()) >= int64_t(d.tokens.size()) * V) {
    for (size_t i = 0; i < d.tokens.size(); ++i) {  // softmax of the row at its draft, in double
      const float* row = block.logits.data() + int64_t(i) * V;
      const double mx = *std::max_element(row, row + V);
      double total = 0;
      for (int64_t t = 0; t < V; ++t) total += std::exp(double(row[t]) - mx);
      d.probability.push_back(float(std::exp(double(row[d.tokens[i]]) - mx) / total));
    }
  }
  return d;
}

Tensor CpuRunner::run_model(std::span<const RunnerChunk> chunks, bool step) {
  chunks_.clear();
  chunk_sequences_.clear();
  int64_t rows = 0;
  for (const RunnerChunk& c : chunks) {
    SequenceState& s = live(c.sequence);
    for (const SequenceChunk& prev : chunks_) {
      CHECK(prev.state != &s) << "CpuRunner: sequence " << c.sequence << " appears twice in one batch";
    }
    chunks_.push_back({&s, c.tokens, c.all_logits, c.prompt_length});
    chunk_sequences_.push_back(c.sequence);
    rows += int64_t(c.tokens.size());
  }
  CHECK_KIND(kResourceExhausted, rows <= options_.max_batch_tokens)
      << "CpuRunner: " << rows << " rows exceed max_batch_tokens " << options_.max_batch_tokens;
  CpuStepDriver* driver = options_.step_driver.get();
  if (driver == nullptr) return model_->forward(chunks_);
  if (step) return driver->forward_step(*model_, chunks_, chunk_sequences_);
  for (int64_t id : chunk_sequences_) driver->invalidate(id);
  return model_->forward(chunks_);
}

Tensor CpuRunner::forward(std::span<const RunnerChunk> chunks) {
  const auto t0 = std::chrono::steady_clock::now();
  Tensor logits = run_model(chunks, false);
  busy_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return logits;
}

void CpuRunner::launch(std::span<const RunnerChunk> chunks, std::span<const RowRequest> rows,
                       const std::function<void()>& before_sampling) {
  const int64_t n = n_launched_.load();
  ICHECK(n - n_collected_.load() < 2) << "CpuRunner: two launched steps are not collected yet";
  // Sample references read the previous launch's tokens (collected or not: collect copies them).
  const std::vector<int32_t>* prev = n > 0 ? &slots_[(n - 1) % 2].result.tokens : nullptr;
  resolved_.resize(chunks.size());
  std::vector<RunnerChunk> plain(chunks.begin(), chunks.end());
  for (size_t c = 0; c < chunks.size(); ++c) {
    std::vector<int32_t>& t = resolved_[c];
    t.assign(chunks[c].tokens.begin(), chunks[c].tokens.end());
    for (int32_t& token : t) {
      if (!is_sample_ref(token)) continue;
      const int64_t j = sample_ref_row(token);
      CHECK(prev != nullptr && j < int64_t(prev->size()) && (*prev)[size_t(j)] >= 0)
          << "CpuRunner: input refers to row " << j << " of the previous launch, which sampled no token there";
      token = (*prev)[size_t(j)];
    }
    plain[c].tokens = t;
  }
  int64_t n_out = 0;
  for (const RunnerChunk& c : chunks) n_out += c.all_logits ? int64_t(c.tokens.size()) : 1;
  CHECK(int64_t(rows.size()) == n_out) << "CpuRunner: " << rows.size() << " row requests for "
                                       << n_out << " output rows";
  bool any_sample = false;
  for (const RowRequest& r : rows) any_sample |= r.mode == RowMode::kSample;
  CHECK(!any_sample || sampler_) << "CpuRunner: kSample rows without a sampler (set_sampler)";
  Launched& out = slots_[n % 2];
  const auto t0 = std::chrono::steady_clock::now();
  out.result.logits = run_model(plain, true);  // busy time counted at collect()
  if (before_sampling) before_sampling();
  const int64_t V = model_->config().vocab_size;
  out.result.tokens.assign(rows.size(), -1);
  out.result.logits_row.assign(rows.size(), -1);
  const float* logits = out.result.logits.f32();
  parallel_for(
      int64_t(rows.size()),
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const RowRequest& r = rows[size_t(i)];
          if (r.mode == RowMode::kSample) {
            std::span<const float> row(logits + i * V, size_t(V));
            thread_local std::vector<float> masked;
            if (r.mask_eos || r.bitmask != nullptr) {
              masked.assign(row.begin(), row.end());
              if (r.bitmask != nullptr) apply_token_bitmask_ref(masked.data(), r.bitmask, nullptr, 1, V);
              if (r.mask_eos) {
                for (int64_t eos : model_->config().eos_token_ids) masked[size_t(eos)] = -INFINITY;
              }
              row = masked;
            }
            out.result.tokens[size_t(i)] = sampler_(row, r);
          } else if (r.mode == RowMode::kHost) {
            out.result.logits_row[size_t(i)] = i;
          }
        }
      },
      4);
  out.busy_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  n_launched_.store(n + 1);
}

StepResult CpuRunner::collect() {
  const int64_t k = n_collected_.load();
  ICHECK(k < n_launched_.load()) << "CpuRunner: collect() without a launched step";
  Launched& s = slots_[k % 2];
  StepResult r;
  r.tokens = s.result.tokens;  // copied: the next launch may be reading them
  r.logits_row = std::move(s.result.logits_row);
  r.logits = std::move(s.result.logits);
  busy_seconds_ += s.busy_seconds;
  n_collected_.store(k + 1);
  return r;
}

}  // namespace deepinfer
