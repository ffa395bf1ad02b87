// Stream: an owned, non-blocking CUDA stream (move-only). A default-constructed Stream
// wraps the legacy default stream (nullptr) and owns nothing.
#pragma once

#include <cuda_runtime.h>

namespace deepinfer::cuda {

class Stream {
 public:
  Stream() = default;
  // Creates a stream with cudaStreamNonBlocking (does not synchronise with stream 0).
  static Stream create(int priority = 0);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  operator cudaStream_t() const { return stream_; }  // NOLINT: implicit by design
  // Blocks the host until all work queued on the stream is done; throws on device errors.
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
  bool owned_ = false;
};

}  // namespace deepinfer::cuda
