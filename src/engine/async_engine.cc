#include "engine/async_engine.h"

#include <malloc.h>

#include <pthread.h>

#include <chrono>
#include <unordered_set>

#include "base/error.h"
#include "base/logging.h"

namespace deepinfer {
namespace {

RequestOutput final_output(const std::string& id, const std::string& reason) {
  RequestOutput out;
  out.id = id;
  out.finished = true;
  out.finish_reason = reason;
  return out;
}

}  // namespace

AsyncEngine::AsyncEngine(std::unique_ptr<StepEngine> engine, AsyncEngineOptions options)
    : engine_(std::move(engine)), options_(options) {
  ICHECK(engine_ != nullptr);
  CHECK(options_.max_live_requests > 0) << "max_live_requests must be positive";
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() { shutdown(0.0); }

AsyncEngine::Admission AsyncEngine::submit(std::vector<EngineRequest> requests, Callback callback) {
  auto shared = std::make_shared<Callback>(std::move(callback));
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return Admission::kShuttingDown;
  if (!engine_->unavailable().empty()) return Admission::kUnavailable;
  if (stats_.n_live + static_cast<int64_t>(requests.size()) > options_.max_live_requests) {
    return Admission::kFull;
  }
  std::unordered_set<std::string> ids;
  for (const EngineRequest& r : requests) {
    CHECK(!live_.count(r.id) && ids.insert(r.id).second) << "duplicate request id '" << r.id << "'";
  }
  for (EngineRequest& r : requests) {
    live_.emplace(r.id, shared);
    inbox_.push_back({std::move(r), shared});
  }
  stats_.n_live += static_cast<int64_t>(requests.size());
  stats_.n_queued += static_cast<int64_t>(requests.size());
  wake_.notify_one();
  return Admission::kAccepted;
}

void AsyncEngine::abort(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!live_.count(id)) return;
  aborts_.push_back(id);
  wake_.notify_one();
}

AsyncEngineStats AsyncEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void AsyncEngine::shutdown(double drain_seconds) {
  std::lock_guard<std::mutex> once(shutdown_mu_);
  if (!thread_.joinable()) return;
  {
    std::unique_lock<std::mutex> lock(mu_);
    accepting_ = false;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(std::max(drain_seconds, 0.0));
    drained_.wait_until(lock, deadline, [&] { return stats_.n_live == 0; });
    stop_ = true;
    wake_.notify_all();
  }
  thread_.join();
}

void AsyncEngine::loop() {
  pthread_setname_np(pthread_self(), "di-engine");  // per-thread CPU time in /proc (bench)
  bool busy = false;  // the engine has unfinished requests (read on this thread only)
  bool stepped = false;  // the last iteration stepped (a collective engine: its group had work)
  bool trimmed = true;  // the heap was trimmed since the engine last had work
  const std::chrono::milliseconds idle_poll = engine_->idle_poll();
  auto idle_since = std::chrono::steady_clock::now();
  for (;;) {
    std::vector<Pending> incoming;
    std::vector<std::string> aborts;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] { return stop_ || !inbox_.empty() || !aborts_.empty(); };
      if (!busy && !stepped && idle_poll.count() > 0) {
        // A collective engine: wait briefly, then agree with the group again (a peer may have
        // work); trim as below once idle for half a second.
        if (!wake_.wait_for(lock, idle_poll, ready) && !trimmed &&
            std::chrono::steady_clock::now() - idle_since > std::chrono::milliseconds(500)) {
          lock.unlock();
          malloc_trim(0);
          lock.lock();
          trimmed = true;
        }
      } else if (!busy && !stepped) {
        // Idle: once the engine has been idle for half a second after work, hand freed heap
        // back to the OS (glibc keeps it otherwise), so a burst does not leave the server at
        // its peak resident size.
        while (!wake_.wait_for(lock, std::chrono::milliseconds(500), ready)) {
          if (!trimmed) {
            lock.unlock();
            malloc_trim(0);
            lock.lock();
            trimmed = true;
          }
        }
      }
      incoming.swap(inbox_);
      aborts.swap(aborts_);
      stop = stop_;
      stats_.n_queued = 0;
    }
    // Requests the engine refuses end here, with the reason.
    std::vector<std::pair<std::shared_ptr<Callback>, RequestOutput>> rejected;
    std::vector<std::string> rejected_errors;
    for (Pending& p : incoming) {
      const std::string id = p.request.id;
      try {
        engine_->add_request(std::move(p.request));
      } catch (const std::exception& e) {
        rejected.emplace_back(p.callback, final_output(id, "error"));
        rejected_errors.push_back(e.what());
      }
    }
    if (stop) {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, cb] : live_) aborts.push_back(id);
    }
    std::vector<std::string> aborted;
    for (const std::string& id : aborts) {
      if (engine_->abort(id)) aborted.push_back(id);
    }

    std::vector<RequestOutput> outputs;
    std::string step_error;
    busy = engine_->has_unfinished();
    if (busy) trimmed = false;
    bool run = false;
    if (!stop) {
      try {
        run = engine_->agree_to_step(busy);
      } catch (const std::exception& e) {
        step_error = e.what();
        LOG(ERROR) << "engine step agreement failed: " << step_error;
      }
    }
    if (stepped && !run) idle_since = std::chrono::steady_clock::now();
    stepped = run;
    if (run) {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        outputs = engine_->step();
      } catch (const Error& e) {
        step_error = e.what();
        LOG(ERROR) << "engine step failed: " << step_error << " [" << e.where() << "]";
      } catch (const std::exception& e) {
        step_error = e.what();
        LOG(ERROR) << "engine step failed: " << step_error;
      }
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const EngineLoad load = engine_->load();
      std::lock_guard<std::mutex> lock(mu_);
      stats_.n_steps += 1;
      stats_.step_seconds += secs;
      stats_.load = load;
    }

    // Match outputs to callbacks under the lock; call them after releasing it.
    std::vector<std::pair<std::shared_ptr<Callback>, RequestOutput>> deliveries;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto take = [&](const std::string& id, bool finished) -> std::shared_ptr<Callback> {
        auto it = live_.find(id);
        if (it == live_.end()) return nullptr;
        std::shared_ptr<Callback> cb = it->second;
        if (finished) {
          live_.erase(it);
          stats_.n_live -= 1;
        }
        return cb;
      };
      for (auto& [cb, out] : rejected) take(out.id, true);
      for (const std::string& id : aborted) {
        if (auto cb = take(id, true)) deliveries.emplace_back(cb, final_output(id, "abort"));
      }
      for (RequestOutput& out : outputs) {
        stats_.n_output_tokens += static_cast<int64_t>(out.new_tokens.size());
        if (auto cb = take(out.id, out.finished)) deliveries.emplace_back(cb, std::move(out));
      }
      if (stats_.n_live == 0) drained_.notify_all();
    }
    for (size_t i = 0; i < rejected.size(); ++i) (*rejected[i].first)(rejected[i].second, rejected_errors[i]);
    for (auto& [cb, out] : deliveries) (*cb)(out, out.error);  // error: that request failed alone
    if (!step_error.empty()) {
      fail_all(step_error);
      busy = engine_->has_unfinished();
    }
    if (stop) {
      try {
        engine_->leave();
      } catch (const std::exception& e) {
        LOG(WARNING) << "engine: leaving its group failed: " << e.what();
      }
      fail_all("the server is shutting down");
      return;
    }
  }
}

// Ends every live request with an error (after an engine failure, or what is left at exit).
void AsyncEngine::fail_all(const std::string& error) {
  std::unordered_map<std::string, std::shared_ptr<Callback>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    live.swap(live_);
    stats_.n_live = 0;
    drained_.notify_all();
  }
  for (const auto& [id, cb] : live) {
    try {
      engine_->abort(id);
    } catch (const std::exception& e) {
      LOG(ERROR) << "abort of " << id << " failed: " << e.what();
    }
    (*cb)(final_output(id, "error"), error);
  }
}

}  // namespace deepinfer
