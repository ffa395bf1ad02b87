// StepWorker: one persistent thread that runs one task at a time (the engine's forward of
// step t while the caller schedules step t+1). A persistent thread keeps one OpenMP team
// for the model's parallel loops instead of a new one per step.
//
// Thread-safety: submit() and wait() are called by one owner thread, alternately.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace deepinfer {

class StepWorker {
 public:
  StepWorker();
  ~StepWorker();  // joins the thread (waits for a running task)

  // Starts `task` on the worker. ICHECKs that no task is pending.
  void submit(std::function<void()> task);
  // Blocks until the submitted task finished; rethrows its exception. No-op when idle.
  void wait();
  bool busy() const { return pending_; }

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> task_;
  bool has_task_ = false;   // task_ set, not yet done (guarded by mu_)
  bool pending_ = false;    // submitted and not yet waited for (owner thread only)
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace deepinfer
