#include "cuda/event.h"

#include <utility>

#include "cuda/cuda_check.h"

namespace deepinfer::cuda {

Event::Event() { CUDA_CHECK(cudaEventCreate(&event_)); }

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(event_, stream)); }

void Event::synchronize() const { CUDA_CHECK(cudaEventSynchronize(event_)); }

float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

}  // namespace deepinfer::cuda
