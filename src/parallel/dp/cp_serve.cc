// Context-parallel prefill in serve: the leader's step driver and the follower loop (cp_serve.h).
#include "parallel/dp/cp_serve.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "base/error.h"
#include "base/logging.h"
#include "model/model.h"
#include "parallel/dp/dp_lockstep.h"

namespace deepinfer::dp {
namespace {

constexpr int64_t kMagic = 0x43505331;  // "CPS1": a command, not a stray message

// The fixed part of a command (int64 each); the payload is n_release sequence ids, then
// n_tokens token ids, as int64.
struct Header {
  int64_t magic = kMagic;
  int64_t n_release = 0;
  int64_t sequence = -1;  // -1: no CP chunk this step
  int64_t start = 0;      // the chunk's first position (the state's n_tokens)
  int64_t n_tokens = 0;
  int64_t all_logits = 0;
  int64_t prompt_length = 0;
  int64_t reserved = 0;
};
static_assert(sizeof(Header) == 8 * sizeof(int64_t));

int64_t out_rows(const SequenceChunk& c) { return c.all_logits ? int64_t(c.tokens.size()) : 1; }

}  // namespace

CpLeader::CpLeader(std::unique_ptr<Communicator> comm, int64_t min_tokens)
    : comm_(std::move(comm)), cp_(*comm_), min_tokens_(min_tokens) {
  CHECK(min_tokens_ >= 1) << "--cp-min-tokens must be >= 1 (got " << min_tokens_ << ")";
  ICHECK(comm_->rank() == 0) << "the context-parallel leader is CP rank 0";
}

void CpLeader::release(int64_t sequence) {
  if (mirrored_.erase(sequence) == 0) return;
  pending_releases_.push_back(sequence);
  releases_.fetch_add(1);
  n_mirrored_.store(int64_t(mirrored_.size()));
}

void CpLeader::invalidate(int64_t sequence) {
  std::lock_guard<std::mutex> lock(mu_);
  release(sequence);
}

void CpLeader::send(int64_t sequence, const SequenceChunk* chunk) {
  Header h;
  std::vector<int64_t> payload;
  {
    std::lock_guard<std::mutex> lock(mu_);
    h.n_release = int64_t(pending_releases_.size());
    payload = pending_releases_;
    pending_releases_.clear();
  }
  if (chunk != nullptr) {
    h.sequence = sequence;
    h.start = chunk->state->n_tokens;
    h.n_tokens = int64_t(chunk->tokens.size());
    h.all_logits = chunk->all_logits ? 1 : 0;
    h.prompt_length = chunk->prompt_length;
    payload.insert(payload.end(), chunk->tokens.begin(), chunk->tokens.end());
  }
  comm_->broadcast(&h, sizeof(h), 0);
  if (!payload.empty()) comm_->broadcast(payload.data(), int64_t(payload.size() * sizeof(int64_t)), 0);
  steps_.fetch_add(1);
}

Tensor CpLeader::forward_step(const Model& model, std::span<const SequenceChunk> chunks,
                              std::span<const int64_t> sequences) {
  ICHECK(chunks.size() == sequences.size());
  // The CP chunk: long enough, its sequence fresh or mirrored; with expert parallelism only as
  // the step's one chunk (one forward per rank and step).
  const bool split_ok = model.options().expert_parallel == nullptr;
  const bool cp_ok = model.options().swa_bounded_replay_keep == 0 && (split_ok || chunks.size() == 1);
  int64_t pick = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; cp_ok && i < chunks.size(); ++i) {
      const int64_t n = int64_t(chunks[i].tokens.size());
      if (n < min_tokens_ || (chunks[i].state->n_tokens != 0 && mirrored_.count(sequences[i]) == 0)) continue;
      if (pick < 0 || n > int64_t(chunks[size_t(pick)].tokens.size())) pick = int64_t(i);
    }
    // Every other chunk runs on the leader alone: its sequence's mirror (if any) goes stale.
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (int64_t(i) != pick) release(sequences[i]);
    }
    // A fresh sequence replaces whatever the followers held under its id.
    if (pick >= 0) mirrored_.erase(sequences[size_t(pick)]);
  }
  if (pick < 0) {
    send(-1, nullptr);
    return model.forward(chunks);
  }
  const SequenceChunk& cpc = chunks[size_t(pick)];
  const int64_t seq = sequences[size_t(pick)];
  send(seq, &cpc);
  Tensor cp_logits = model.forward_context_parallel(cpc, cp_);  // a failure leaves it unmirrored
  {
    std::lock_guard<std::mutex> lock(mu_);
    mirrored_.insert(seq);
    n_mirrored_.store(int64_t(mirrored_.size()));
  }
  cp_chunks_.fetch_add(1);
  cp_tokens_.fetch_add(int64_t(cpc.tokens.size()));
  if (chunks.size() == 1) return cp_logits;

  // The other chunks on the leader alone, then the rows in the step's order.
  std::vector<SequenceChunk> rest;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (int64_t(i) != pick) rest.push_back(chunks[i]);
  }
  Tensor rest_logits = model.forward(rest);
  const int64_t V = model.config().vocab_size;
  int64_t total = 0;
  for (const SequenceChunk& c : chunks) total += out_rows(c);
  Tensor out = Tensor::empty(DType::F32, {total, V});
  int64_t at = 0, rest_at = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const int64_t n = out_rows(chunks[i]);
    const float* src = int64_t(i) == pick ? cp_logits.f32() : rest_logits.f32() + rest_at * V;
    std::memcpy(out.f32() + at * V, src, size_t(n * V) * sizeof(float));
    if (int64_t(i) != pick) rest_at += n;
    at += n;
  }
  return out;
}

CpServeStats CpLeader::stats() const {
  CpServeStats s;
  s.cp_size = cp_.size();
  s.steps = steps_.load();
  s.cp_chunks = cp_chunks_.load();
  s.cp_tokens = cp_tokens_.load();
  s.mirrored = n_mirrored_.load();
  s.releases = releases_.load();
  return s;
}

std::string cp_metrics_text(const CpServeStats& st) {
  std::ostringstream s;
  auto line = [&](const char* name, const char* type, const char* help, int64_t value) {
    s << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << " " << value << "\n";
  };
  line("deepinfer_cp_size", "gauge", "Ranks of this replica's context-parallel group.", st.cp_size);
  line("deepinfer_cp_steps_total", "counter", "Steps whose command went to the context-parallel followers.", st.steps);
  line("deepinfer_cp_prefill_chunks_total", "counter", "Prefill chunks run context-parallel.", st.cp_chunks);
  line("deepinfer_cp_prefill_tokens_total", "counter", "Tokens of the prefill chunks run context-parallel.",
       st.cp_tokens);
  line("deepinfer_cp_releases_total", "counter", "Follower mirror states released.", st.releases);
  line("deepinfer_cp_mirrored_sequences", "gauge", "Sequences whose state the followers mirror now.", st.mirrored);
  return s.str();
}

void run_cp_follower(const Model& model, Communicator& step_comm, Communicator& cp_comm,
                     std::chrono::milliseconds idle_poll) {
  ContextParallel cp(cp_comm);
  CHECK(cp.rank() != 0) << "run_cp_follower: CP rank 0 is the leader";
  const bool expert_parallel = model.options().expert_parallel != nullptr;
  std::unordered_map<int64_t, std::unique_ptr<SequenceState>> mirrors;
  std::vector<int32_t> tokens;
  std::vector<int64_t> payload;
  for (;;) {
    const StepAgreement a = step_agreement(step_comm, false);
    if (a.n_leaving > 0) {
      LOG(INFO) << "context parallel: " << a.n_leaving << " rank(s) of the step group shut down; follower done";
      return;
    }
    if (!a.any_busy) {
      std::this_thread::sleep_for(idle_poll);
      continue;
    }
    Header h;
    cp_comm.broadcast(&h, sizeof(h), 0);
    CHECK_KIND(kInternal, h.magic == kMagic && h.n_release >= 0 && h.n_tokens >= 0)
        << "context parallel: a malformed command from the leader";
    payload.resize(size_t(h.n_release + h.n_tokens));
    if (!payload.empty()) cp_comm.broadcast(payload.data(), int64_t(payload.size() * sizeof(int64_t)), 0);
    for (int64_t i = 0; i < h.n_release; ++i) mirrors.erase(payload[size_t(i)]);
    if (h.sequence < 0) {
      if (expert_parallel) model.forward({});  // this rank's share of the EP group's step
      continue;
    }
    std::unique_ptr<SequenceState>& state = mirrors[h.sequence];
    // A chunk from position 0 starts a fresh mirror; a missing one fails the chunk's agreement.
    if (h.start == 0 || state == nullptr) state = model.new_state();
    tokens.assign(payload.begin() + h.n_release, payload.end());
    SequenceChunk chunk{state.get(), tokens, h.all_logits != 0, h.prompt_length};
    try {
      model.forward_context_parallel(chunk, cp);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kDevice) throw;  // a communicator failed: the group is gone
      LOG(WARNING) << "context parallel: the leader's chunk of sequence " << h.sequence << " failed here too ("
                   << e.what() << "); its mirror is dropped";
      mirrors.erase(h.sequence);
    }
  }
}

}  // namespace deepinfer::dp
