// RoutePolicy (route_policy.h): capacity + prefix-affinity routing of the DP front.
#include "parallel/dp/route_policy.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deepinfer::dp {

RoutePolicy::RoutePolicy(int n_replicas, RouteOptions options) : n_replicas_(n_replicas), options_(options) {
  CHECK(n_replicas > 0) << "route policy: needs at least one replica";
  CHECK(options.block_chars > 0 && options.max_blocks > 0 && options.max_entries > 0 && options.affinity_slack >= 0)
      << "route policy: block_chars, max_blocks and max_entries must be positive, affinity_slack >= 0";
}

// FNV-1a over the text, the running hash taken at every whole block (a prefix's hash).
std::vector<uint64_t> RoutePolicy::prefix_hashes(std::string_view text) const {
  std::vector<uint64_t> hashes;
  uint64_t h = 1469598103934665603ull;
  const size_t block = size_t(options_.block_chars);
  const size_t n = std::min(text.size() / block, size_t(options_.max_blocks)) * block;
  for (size_t i = 0; i < n; ++i) {
    h = (h ^ uint8_t(text[i])) * 1099511628211ull;
    if ((i + 1) % block == 0) hashes.push_back(h);
  }
  return hashes;
}

RouteDecision RoutePolicy::choose(std::string_view text, const std::vector<ReplicaLoad>& loads) const {
  ICHECK(int(loads.size()) == n_replicas_) << "route policy: " << loads.size() << " loads for " << n_replicas_
                                           << " replicas";
  RouteDecision d;
  for (int r = 0; r < n_replicas_; ++r) {
    const ReplicaLoad& l = loads[size_t(r)];
    if (!l.up) continue;
    if (d.replica < 0) {
      d.replica = r;
      continue;
    }
    const ReplicaLoad& b = loads[size_t(d.replica)];
    if (l.free() > b.free() || (l.free() == b.free() && l.block_usage < b.block_usage)) d.replica = r;
  }
  if (d.replica < 0) return d;
  const int64_t best_free = loads[size_t(d.replica)].free();
  const std::vector<uint64_t> hashes = prefix_hashes(text);
  for (size_t k = hashes.size(); k-- > 0;) {
    auto it = entries_.find(hashes[k]);
    if (it == entries_.end()) continue;
    const int r = it->second.replica;
    if (r < 0 || r >= n_replicas_ || !loads[size_t(r)].up) continue;
    if (loads[size_t(r)].free() < best_free - options_.affinity_slack) continue;
    return {r, int64_t(k + 1) * options_.block_chars};
  }
  return d;
}

void RoutePolicy::record(std::string_view text, int replica) {
  ICHECK(replica >= 0 && replica < n_replicas_) << "route policy: replica " << replica << " out of range";
  for (uint64_t h : prefix_hashes(text)) {
    auto it = entries_.find(h);
    if (it != entries_.end()) {
      it->second.replica = replica;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      continue;
    }
    lru_.push_front(h);
    entries_.emplace(h, Entry{replica, lru_.begin()});
    if (int64_t(entries_.size()) > options_.max_entries) {
      entries_.erase(lru_.back());
      lru_.pop_back();
    }
  }
}

void RoutePolicy::forget_replica(int replica) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.replica == replica) {
      lru_.erase(it->second.lru);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

namespace {

void append_content(const nlohmann::json& content, std::string& out) {
  if (content.is_string()) {
    out += content.get<std::string>();
  } else if (content.is_array()) {  // content parts: their text in order
    for (const nlohmann::json& part : content) {
      if (part.is_object() && part.contains("text") && part["text"].is_string()) {
        out += part["text"].get<std::string>();
      } else if (part.is_string()) {
        out += part.get<std::string>();
      }
    }
  }
}

}  // namespace

std::string routing_text(std::string_view body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return {};
  std::string out;
  if (j.contains("prompt")) {
    nlohmann::json p = j["prompt"];
    // A list of prompts (strings or id lists) routes by its first; a list of ids is one prompt.
    if (p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array())) p = p[0];
    if (p.is_string()) return p.get<std::string>();
    if (p.is_array()) {
      for (const nlohmann::json& t : p) out += t.dump() + ",";
    }
    return out;
  }
  const char* list = j.contains("messages") ? "messages" : j.contains("input") ? "input" : nullptr;
  if (list == nullptr) return {};
  const nlohmann::json& items = j[list];
  if (items.is_string()) return items.get<std::string>();
  if (!items.is_array()) return {};
  for (const nlohmann::json& m : items) {
    if (!m.is_object()) continue;
    if (m.contains("role") && m["role"].is_string()) out += "<" + m["role"].get<std::string>() + ">";
    if (m.contains("content")) append_content(m["content"], out);
  }
  return out;
}

}  // namespace deepinfer::dp
