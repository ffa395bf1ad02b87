// RoutePolicy (parallel/dp/route_policy.h): capacity, affinity, down replicas, deterministic
// tie-breaks, and the routing text of OpenAI request bodies.
#include "parallel/dp/route_policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace deepinfer::dp {
namespace {

ReplicaLoad load(int64_t capacity, int64_t live, bool up = true, double usage = 0.0) {
  ReplicaLoad l;
  l.up = up;
  l.capacity = capacity;
  l.live = live;
  l.block_usage = usage;
  return l;
}

std::string text_of(char c, size_t n) { return std::string(n, c); }

TEST(RoutePolicy, MostFreeCapacityWins) {
  RoutePolicy p(3);
  EXPECT_EQ(p.choose("", {load(10, 8), load(10, 2), load(10, 5)}).replica, 1);
  // The front's own in-flight count is newer than the report: it counts when larger.
  RoutePolicy two(2);
  std::vector<ReplicaLoad> l = {load(10, 1), load(10, 2)};
  l[0].in_flight = 6;
  EXPECT_EQ(two.choose("", l).replica, 1);
  l[0].in_flight = 1;  // smaller than its report: the report counts
  EXPECT_EQ(two.choose("", l).replica, 0);
  // Free = capacity - live: a bigger replica with more live requests can still be freer.
  EXPECT_EQ(two.choose("", {load(4, 0), load(64, 50)}).replica, 1);
}

TEST(RoutePolicy, TiesGoToLowerBlockUsageThenLowerIndex) {
  RoutePolicy p(3);
  EXPECT_EQ(p.choose("", {load(8, 4, true, 0.5), load(8, 4, true, 0.2), load(8, 4, true, 0.2)}).replica, 1);
  EXPECT_EQ(p.choose("", {load(8, 4), load(8, 4), load(8, 4)}).replica, 0);
  EXPECT_EQ(p.choose("", {load(8, 5), load(8, 4), load(8, 4)}).replica, 1);
}

TEST(RoutePolicy, DownReplicasAreNeverChosen) {
  RoutePolicy p(3);
  EXPECT_EQ(p.choose("", {load(10, 0, false), load(10, 9), load(10, 0, false)}).replica, 1);
  EXPECT_EQ(p.choose("", {load(10, 0, false), load(10, 0, false), load(10, 0, false)}).replica, -1);
}

TEST(RoutePolicy, AffinityFollowsTheLongestRecordedPrefix) {
  RouteOptions o;
  o.block_chars = 4;
  o.affinity_slack = 3;
  RoutePolicy p(3, o);
  const std::string a = text_of('a', 16) + text_of('b', 8);
  p.record(a, 2);
  p.record(text_of('a', 8), 1);  // a shorter prefix of `a` now on replica 1
  const std::vector<ReplicaLoad> even = {load(10, 0), load(10, 0), load(10, 0)};
  // Same first 16 chars as `a`, then different: the 16-char prefix (replica 2) is the longest match.
  RouteDecision d = p.choose(text_of('a', 16) + "zzzz", even);
  EXPECT_EQ(d.replica, 2);
  EXPECT_EQ(d.matched_chars, 16);
  // Only the first 8 chars match anything longer than nothing: replica 1 (its record overwrote
  // the 4- and 8-char prefixes).
  d = p.choose(text_of('a', 8) + "zzzzzzzz", even);
  EXPECT_EQ(d.replica, 1);
  EXPECT_EQ(d.matched_chars, 8);
  // No whole block in common: by capacity.
  d = p.choose("zzzzzzzz", even);
  EXPECT_EQ(d.replica, 0);
  EXPECT_EQ(d.matched_chars, 0);
  // Shorter than one block: capacity only.
  EXPECT_EQ(p.choose("aaa", even).matched_chars, 0);
}

TEST(RoutePolicy, AffinityYieldsToAClearlyFreerReplica) {
  RouteOptions o;
  o.block_chars = 4;
  o.affinity_slack = 3;
  RoutePolicy p(2, o);
  const std::string t = text_of('q', 12);
  p.record(t, 1);
  // Within the slack (free 7 vs best 10): affinity.
  EXPECT_EQ(p.choose(t, {load(10, 0), load(10, 3)}).replica, 1);
  // Beyond it (free 6 vs 10): capacity.
  RouteDecision d = p.choose(t, {load(10, 0), load(10, 4)});
  EXPECT_EQ(d.replica, 0);
  EXPECT_EQ(d.matched_chars, 0);
  // A down replica's affinity does not count, and forget_replica drops it for good.
  EXPECT_EQ(p.choose(t, {load(10, 5), load(10, 0, false)}).replica, 0);
  p.forget_replica(1);
  EXPECT_EQ(p.n_entries(), 0);
  EXPECT_EQ(p.choose(t, {load(10, 1), load(10, 0)}).matched_chars, 0);
}

TEST(RoutePolicy, EntriesAreBoundedLeastRecentlyUsedFirst) {
  RouteOptions o;
  o.block_chars = 4;
  o.max_entries = 3;
  RoutePolicy p(2, o);
  p.record("aaaa", 1);
  p.record("bbbb", 1);
  p.record("cccc", 1);
  p.record("aaaa", 1);  // refreshes "aaaa"
  p.record("dddd", 1);  // evicts "bbbb", the least recently used
  EXPECT_EQ(p.n_entries(), 3);
  const std::vector<ReplicaLoad> even = {load(10, 0), load(10, 0)};
  EXPECT_EQ(p.choose("aaaa", even).replica, 1);
  EXPECT_EQ(p.choose("bbbb", even).replica, 0);
  EXPECT_EQ(p.choose("dddd", even).replica, 1);
}

TEST(RoutePolicy, RejectsBadOptions) {
  EXPECT_ANY_THROW(RoutePolicy(0));
  RouteOptions o;
  o.block_chars = 0;
  EXPECT_ANY_THROW(RoutePolicy(2, o));
}

TEST(RoutingText, CompletionsChatAndResponses) {
  EXPECT_EQ(routing_text(R"({"model":"m","prompt":"hello world"})"), "hello world");
  EXPECT_EQ(routing_text(R"({"prompt":["first","second"]})"), "first");
  EXPECT_EQ(routing_text(R"({"prompt":[1,2,3]})"), "1,2,3,");
  EXPECT_EQ(routing_text(R"({"prompt":[[7,8],[9]]})"), "7,8,");
  EXPECT_EQ(routing_text(R"({"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]})"),
            "<system>be brief<user>hi");
  EXPECT_EQ(routing_text(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})"),
            "<user>ab");
  EXPECT_EQ(routing_text(R"({"input":"just text"})"), "just text");
  // Chats that share a system prompt share a routing prefix.
  const std::string a = routing_text(R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":"one"}]})");
  const std::string b = routing_text(R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":"two"}]})");
  EXPECT_EQ(a.substr(0, 12), b.substr(0, 12));
  EXPECT_EQ(routing_text("not json"), "");
  EXPECT_EQ(routing_text(R"({"model":"m"})"), "");
}

}  // namespace
}  // namespace deepinfer::dp
