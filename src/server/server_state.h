// State shared by the server's connections (server.h). Immutable except `metrics` and the
// engine, both thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include <boost/asio/thread_pool.hpp>

#include "engine/async_engine.h"
#include "recipe/tokenizer.h"
#include "server/cors.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "server/server.h"

namespace deepinfer::server {

// Engine request ids admitted and not yet finished (a second shutdown signal aborts them).
class LiveRequests {
 public:
  void add(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    ids_.insert(id);
  }
  void remove(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    ids_.erase(id);
  }
  std::vector<std::string> snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {ids_.begin(), ids_.end()};
  }

 private:
  mutable std::mutex mu_;
  std::unordered_set<std::string> ids_;
};

struct ServerState {
  ServerOptions options;
  const recipe::Tokenizer& tokenizer;
  AsyncEngine& engine;
  ModelInfo model;  // tokenizer, name, max_model_len, EOS ids, chat version
  Metrics metrics;
  int64_t created = 0;  // unix seconds the server started (GET /v1/models)
  std::unique_ptr<boost::asio::thread_pool> prep_pool;  // request parsing, prompt tokenization
  std::unique_ptr<boost::asio::thread_pool> grammar_pool;  // constraint compilation (budgeted)
  // Requests read so far, and exchanges ended / sessions destroyed (the idle heap trim
  // watches both: memory is freed when a request ends, which may be long after it began).
  std::atomic<int64_t> n_exchanges{0};
  std::atomic<int64_t> n_exchanges_ended{0};
  LiveRequests live;
  CorsPolicy cors;
};

}  // namespace deepinfer::server
