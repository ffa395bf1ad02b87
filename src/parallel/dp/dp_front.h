// DpFront: the HTTP front of data-parallel serving (issue 19 deliverable 6; DeepInfer has
// none). It runs in the launcher process, outside mpirun, so it outlives a rank that dies.
// Clients talk to it exactly as to `deepinfer serve` (same OpenAI endpoints on --port); it
// forwards each request to one replica (a rank's own `deepinfer serve` on an internal port)
// and passes the answer back, SSE streams included, as they come.
//
// Routing (route_policy.h): free state capacity from each replica's GET /internal/load
// (polled every poll_interval) and the front's own in-flight counts, plus prefix affinity on
// the request's prompt text. Only POST generation endpoints use affinity; other paths go to
// the replica with the most free capacity.
//
// Failure: replicas form failure groups (the ranks of one expert-parallel group: one rank
// lost makes the group's collectives fail). A replica is down when its load poll fails or
// times out (health_timeout), when it reports itself unavailable, or when a request to it
// breaks (connection refused, reset, or no byte for request_timeout); then its whole group is
// down, its affinity entries are dropped, and every request in flight on the group is cut
// and answered: HTTP 503 with an OpenAI error body ("replica 1 (127.0.0.1:8101) failed:
// ...", code "replica_failed"), or, for a stream already started, one SSE event
// `data: {"error": {...}}` and the end of the stream. New requests go to the live replicas;
// with none up they get 503 at once. A group comes back once all its replicas answer their
// polls again (a paused replica resumed; a dead one never does).
//
// Endpoints of its own: GET /health (200 while any replica is up, else 503), GET /metrics
// (the front's routing counters deepinfer_dp_*, then every up replica's metrics with a
// replica="i" label; EPLB's imbalance among them where the replicas report it), GET
// /internal/replicas (JSON: each replica's address, group, state, load, why it is down).
//
// Implementation: blocking Boost.Asio sockets, one thread per client connection (keep-alive)
// and one poller thread per replica; a watchdog thread enforces every deadline by shutting
// the socket down (a blocked read then returns), which is also how a replica's failure cuts
// the requests in flight on it.
//
// Thread-safety: construct, then run() on one thread; stop() from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/dp/route_policy.h"

namespace deepinfer::dp {

struct ReplicaAddress {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  int group = 0;  // failure group: the replica's expert-parallel group
};

struct FrontOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;           // 0: any free port (DpFront::port())
  std::vector<ReplicaAddress> replicas;
  double poll_interval_seconds = 0.2;
  double health_timeout_seconds = 5;    // a load poll unanswered this long: down
  double connect_timeout_seconds = 5;
  double request_timeout_seconds = 600; // no byte from the replica this long: 503 (0: no limit)
  double idle_timeout_seconds = 60;     // client keep-alive
  size_t max_body_bytes = 64u << 20;
  RouteOptions route;
};

class DpFront {
 public:
  // Binds host:port (throws Error naming the address when it cannot).
  explicit DpFront(FrontOptions options);
  ~DpFront();
  DpFront(const DpFront&) = delete;
  DpFront& operator=(const DpFront&) = delete;

  uint16_t port() const;
  // Serves until stop(); returns once every connection has ended.
  void run();
  void stop();
  // Number of replicas up now (tests and the launcher's readiness wait).
  int n_up() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::dp
