// StreamGate: holds back a CUDA stream from the host, so that tests can keep enqueued device
// work (copies from pinned staging memory, forwards) pending for as long as they need:
// close(stream) enqueues a host function that blocks the stream until open() is called (or
// until `limit` has passed, so that a broken test fails instead of hanging). The gate
// function makes no CUDA call. A gate is closed once; open() may come from any thread.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace deepinfer::testing {

class StreamGate {
 public:
  explicit StreamGate(std::chrono::milliseconds limit = std::chrono::seconds(30)) : limit_(limit) {}
  void close(cudaStream_t stream) {
    ASSERT_EQ(cudaLaunchHostFunc(stream, &StreamGate::hold, this), cudaSuccess);
  }
  void open() { open_.store(true); }
  // Whether the gate let the stream pass because its time limit ran out (a test bug).
  bool timed_out() const { return timed_out_.load(); }

 private:
  static void CUDART_CB hold(void* p) {
    auto* g = static_cast<StreamGate*>(p);
    const auto t0 = std::chrono::steady_clock::now();
    while (!g->open_.load()) {
      if (std::chrono::steady_clock::now() - t0 > g->limit_) {
        g->timed_out_.store(true);
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  std::chrono::milliseconds limit_;
  std::atomic<bool> open_{false}, timed_out_{false};
};

}  // namespace deepinfer::testing
