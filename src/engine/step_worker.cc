#include "engine/step_worker.h"

#include "base/error.h"

namespace deepinfer {

StepWorker::StepWorker() : thread_([this] { loop(); }) {}

StepWorker::~StepWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StepWorker::submit(std::function<void()> task) {
  ICHECK(!pending_) << "StepWorker: a task is already pending";
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = std::move(task);
    has_task_ = true;
    error_ = nullptr;
  }
  pending_ = true;
  cv_.notify_all();
}

void StepWorker::wait() {
  if (!pending_) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !has_task_; });
  pending_ = false;
  task_ = nullptr;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void StepWorker::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return has_task_ || stop_; });
    if (has_task_) {
      std::function<void()> task = task_;
      lock.unlock();
      std::exception_ptr error;
      try {
        task();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      error_ = error;
      has_task_ = false;
      cv_.notify_all();
      continue;
    }
    if (stop_) return;
  }
}

}  // namespace deepinfer
