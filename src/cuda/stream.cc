#include "cuda/stream.h"

#include <utility>

#include "cuda/cuda_check.h"

namespace deepinfer::cuda {

Stream Stream::create(int priority) {
  Stream s;
  CUDA_CHECK(cudaStreamCreateWithPriority(&s.stream_, cudaStreamNonBlocking, priority));
  s.owned_ = true;
  return s;
}

Stream::~Stream() {
  if (owned_ && stream_ != nullptr) cudaStreamDestroy(stream_);
}

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), owned_(std::exchange(other.owned_, false)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (owned_ && stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

void Stream::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace deepinfer::cuda
