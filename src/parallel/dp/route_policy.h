// RoutePolicy: which data-parallel replica serves the next request (the DP front,
// dp_front.h). Two signals:
//   capacity  each replica's free state capacity: its state slots (requests it can hold at
//             once; the admission limit before its first step) less its live requests, where
//             live is the larger of what the replica last reported and what the front has in
//             flight on it now (the report is a poll old; the front's own count is current,
//             so a burst spreads instead of piling onto the replica that looked emptiest).
//   affinity  the replica that recently served the longest prefix of this prompt (its prefix
//             cache likely holds that prefix's state). The prompt's routing text is cut into
//             blocks of block_chars bytes; the hash of every whole-block prefix maps to the
//             replica chosen for it last (least recently used entries go beyond max_entries).
// choose(): the longest prefix whose replica is up and whose free capacity is within
// `affinity_slack` of the best replica's wins (SGLang's cache-aware policy in spirit: follow
// the cache unless that replica is clearly busier); otherwise the replica with the most free
// capacity, ties to the lower block usage, then the lower index. Deterministic for given
// inputs. A replica that is down is never chosen and its affinity entries are dropped.
//
// Thread-safety: none (the front calls it under its own lock).
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace deepinfer::dp {

struct ReplicaLoad {
  bool up = false;
  int64_t capacity = 0;        // requests it holds at once (state slots, else its admission limit)
  int64_t live = 0;            // live requests it reported (queued + running)
  int64_t in_flight = 0;       // requests the front has on it now
  double block_usage = 0.0;    // its fullest state-cache pool, used / total
  int64_t free() const { return capacity - (live > in_flight ? live : in_flight); }
};

struct RouteOptions {
  int64_t block_chars = 64;     // affinity granularity, bytes of routing text
  int64_t max_blocks = 64;      // only the first max_blocks blocks of a prompt are hashed
  int64_t max_entries = 1 << 16;
  int64_t affinity_slack = 8;   // follow affinity while free >= best free - slack
};

struct RouteDecision {
  int replica = -1;             // -1: no replica is up
  int64_t matched_chars = 0;    // prefix length that decided it (0: by capacity)
};

class RoutePolicy {
 public:
  RoutePolicy(int n_replicas, RouteOptions options = {});

  // `text`: the request's routing text (routing_text()); may be empty (capacity only).
  RouteDecision choose(std::string_view text, const std::vector<ReplicaLoad>& loads) const;
  // Remembers that `replica` serves `text` (every whole-block prefix of it).
  void record(std::string_view text, int replica);
  // Drops every affinity entry of a replica (it went down).
  void forget_replica(int replica);
  int64_t n_entries() const { return int64_t(entries_.size()); }

 private:
  struct Entry {
    int replica;
    std::list<uint64_t>::iterator lru;
  };
  std::vector<uint64_t> prefix_hashes(std::string_view text) const;

  int n_replicas_;
  RouteOptions options_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_;  // most recent first
};

// The text a request is routed by: for /v1/completions its "prompt" (a string, or token ids
// written as text; the first prompt of a list), for /v1/chat/completions and /v1/responses
// the messages / input in order (role and content). Empty when the body is not such JSON.
std::string routing_text(std::string_view body);

}  // namespace deepinfer::dp
