#include "server/generation.h"

#include <algorithm>
#include <random>

#include "recipe/chat_prompt.h"

namespace deepinfer::server {
namespace {

uint64_t random_u64() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

}  // namespace

std::string random_id(const std::string& prefix) {
  static const char* kHex = "0123456789abcdef";
  std::string id = prefix;
  uint64_t a = random_u64(), b = random_u64();
  for (int i = 0; i < 12; ++i) id += kHex[(a >> (4 * i)) & 15];
  for (int i = 0; i < 12; ++i) id += kHex[(b >> (4 * i)) & 15];
  return id;
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Generation::Generation(std::string id, std::string object, const ModelInfo& model,
                       const SamplingRequest& sampling, bool keep_special)
    : id_(std::move(id)), object_(std::move(object)), info_(model), model_(model.name), sampling_(sampling),
      tokenizer_(*model.tokenizer),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      keep_special_(keep_special),
      start_(std::chrono::steady_clock::now()) {
  no_text_ids_ = model.eos_ids;
  no_text_ids_.insert(no_text_ids_.end(), sampling.params.stop_token_ids.begin(),
                      sampling.params.stop_token_ids.end());
  if (keep_special && sampling.skip_special_tokens) {
    // The chat parser reads its markers from the text; every other special token makes none.
    const recipe::SpecialTokens markers;
    for (const recipe::AddedToken& t : tokenizer_.added_tokens()) {
      const bool marker = t.content.find(markers.thinking_start) != std::string::npos ||
                          t.content.find(markers.thinking_end) != std::string::npos ||
                          t.content.find(markers.dsml) != std::string::npos;
      if (t.special && !marker) no_text_ids_.push_back(t.id);
    }
  }
  std::sort(no_text_ids_.begin(), no_text_ids_.end());
}

void Generation::add_choice(const std::vector<int32_t>& prompt, int64_t max_tokens, bool count_prompt) {
  const size_t i = choices_.size();
  EngineRequest r;
  r.id = id_ + "-" + std::to_string(i);
  r.prompt = prompt;
  r.params = sampling_.params;
  r.params.max_tokens = max_tokens;
  r.params.seed = sampling_.seed ? *sampling_.seed + i : random_u64();
  r.stop = sampling_.stop;
  r.n_logprobs = sampling_.n_logprobs;
  r.priority = sampling_.priority;
  r.skip_special_tokens = !keep_special_;  // the engine matches stop strings on this text
  r.constraint_kind = sampling_.constraint_kind;
  r.constraint = sampling_.constraint;
  index_[r.id] = i;
  choices_.emplace_back().engine_id = r.id;
  choices_.back().counts_prompt = count_prompt;
  last_token_at_.emplace_back();
  detok_.emplace_back(tokenizer_, /*skip_special_tokens=*/!keep_special_);
  requests_.push_back(std::move(r));
  if (count_prompt) n_prompt_tokens_ += static_cast<int64_t>(prompt.size());
}

int64_t Generation::n_cached_prompt_tokens() const {
  int64_t n = 0;
  for (const Choice& c : choices_) {
    if (c.counts_prompt) n += c.n_cached;
  }
  return n;
}

int64_t Generation::n_completion_tokens() const {
  int64_t n = 0;
  for (const Choice& c : choices_) n += c.n_tokens;
  return n;
}

std::vector<std::string> Generation::finish_reasons() const {
  std::vector<std::string> reasons;
  for (const Choice& c : choices_) {
    if (c.finished) reasons.push_back(c.finish_reason);
  }
  return reasons;
}

std::vector<std::string> Generation::unfinished_ids() const {
  std::vector<std::string> ids;
  for (const Choice& c : choices_) {
    if (!c.finished) ids.push_back(c.engine_id);
  }
  return ids;
}

Json Generation::envelope(Json choices) const {
  Json chunk = {{"id", id_}, {"object", object_}, {"created", created_}, {"model", model_},
                {"choices", std::move(choices)}};
  if (sampling_.continuous_usage_stats) {
    chunk["usage"] = usage();  // so far
  } else if (sampling_.include_usage) {
    chunk["usage"] = nullptr;
  }
  return chunk;
}

Json Generation::usage() const {
  const int64_t completion = n_completion_tokens();
  return {{"prompt_tokens", n_prompt_tokens_},
          {"prompt_tokens_details", {{"cached_tokens", n_cached_prompt_tokens()}}},
          {"completion_tokens", completion},
          {"total_tokens", n_prompt_tokens_ + completion}};
}

std::string Generation::token_text(int32_t id) const { return std::string(tokenizer_.token_bytes(id)); }

void Generation::end_early(size_t i, std::string reason) { early_.emplace_back(i, std::move(reason)); }

void Generation::finish_choice(size_t i, std::string reason, std::vector<Json>& chunks) {
  Choice& c = choices_[i];
  if (c.finished) return;
  handle_finish(i, reason, chunks);
  c.finished = true;
  c.finish_reason = reason;
  ++n_finished_;
}

void Generation::on_output(const RequestOutput& out, const std::string& error,
                           std::vector<std::string>& events, std::vector<std::string>& aborts) {
  auto it = index_.find(out.id);
  if (it == index_.end()) return;
  const size_t i = it->second;
  if (choices_[i].finished) return;  // ended early; the engine's last word does not matter
  if (!error.empty()) {
    // One failed choice fails the request: end every choice and report the error.
    error_ = ApiError(500, "generation failed: " + error, "server_error");
    for (Choice& c : choices_) {
      if (c.finished) continue;
      if (c.engine_id != out.id) aborts.push_back(c.engine_id);
      c.finished = true;
      c.finish_reason = "error";
      ++n_finished_;
    }
    if (stream()) events.push_back(stream_error_payload());
    return;
  }
  if (!out.new_tokens.empty()) {
    const auto now = std::chrono::steady_clock::now();
    if (ttft_ < 0) ttft_ = std::chrono::duration<double>(now - start_).count();
    if (choices_[i].n_tokens > 0) {
      inter_token_.push_back(std::chrono::duration<double>(now - last_token_at_[i]).count());
    }
    last_token_at_[i] = now;
  }
  choices_[i].n_tokens += static_cast<int64_t>(out.new_tokens.size());
  choices_[i].n_cached = out.n_cached_tokens;
  std::string text;
  for (int32_t t : out.new_tokens) {
    if (!std::binary_search(no_text_ids_.begin(), no_text_ids_.end(), t)) text += detok_[i].push(t);
  }
  if (out.finished) text += detok_[i].flush();
  std::vector<Json> chunks;
  handle_output(i, out, text, chunks);
  for (auto& [k, reason] : early_) {
    if (!choices_[k].finished) {
      finish_choice(k, reason, chunks);
      if (!(k == i && out.finished)) aborts.push_back(choices_[k].engine_id);
    }
  }
  early_.clear();
  // The engine says "abort" for a request the server cut off (only a shutdown does so while the
  // client still listens): not an OpenAI finish_reason; the output was truncated, as "length".
  if (out.finished) finish_choice(i, out.finish_reason == "abort" ? "length" : out.finish_reason, chunks);
  if (stream()) {
    for (Json& c : chunks) events.push_back(dump(wrap_chunk(std::move(c))));
  }
}

std::vector<std::string> Generation::final_events() {
  std::vector<std::string> events;
  if (stream() && sampling_.include_usage && !error_) {
    Json chunk = envelope(Json::array());
    chunk["usage"] = usage();
    events.push_back(dump(chunk));
  }
  return events;
}

}  // namespace deepinfer::server
