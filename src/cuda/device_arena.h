// DeviceArena: a bump allocator over one DeviceBuffer allocated once (at start), for
// workspaces and per-step scratch. allocate() never calls cudaMalloc; reset() makes all of
// the arena free again (the caller guarantees no queued work still uses it).
// Not thread-safe: one arena per stream/thread.
#pragma once

#include <cstddef>

#include "cuda/device_buffer.h"

namespace deepinfer::cuda {

class DeviceArena {
 public:
  DeviceArena() = default;
  explicit DeviceArena(size_t capacity_bytes);

  // Returns `bytes` of device memory aligned to `alignment` (a power of two, >= 1).
  // Throws Error(kResourceExhausted) naming the request and the arena's state when full.
  void* allocate(size_t bytes, size_t alignment = 256);
  template <typename T>
  T* allocate_n(size_t count, size_t alignment = 256) {
    return static_cast<T*>(allocate(count * sizeof(T), alignment));
  }
  void reset() { used_ = 0; }

  size_t used() const { return used_; }
  size_t capacity() const { return buffer_.bytes(); }

 private:
  DeviceBuffer buffer_;
  size_t used_ = 0;
};

}  // namespace deepinfer::cuda
