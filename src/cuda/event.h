// Event: an owned CUDA event with timing enabled (move-only), for ordering between streams
// and for timing device work: record(a) ... record(b); b.synchronize(); elapsed_ms(a, b).
#pragma once

#include <cuda_runtime.h>

namespace deepinfer::cuda {

class Event {
 public:
  Event();
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  void synchronize() const;
  // Milliseconds between two recorded, completed events.
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace deepinfer::cuda
