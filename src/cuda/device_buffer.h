// DeviceBuffer: one cudaMalloc'ed allocation, owned (move-only, freed on destruction).
// Use it for long-lived device memory allocated once at start (weights, state pools,
// workspaces). Not thread-safe; the memory itself may be used from any stream.
#pragma once

#include <cstddef>

namespace deepinfer::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Allocates `bytes` of device memory on the current device (contents uninitialised).
  // Throws Error(kResourceExhausted) when the device is out of memory, kDevice otherwise.
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool empty() const { return data_ == nullptr; }

  // Releases ownership: the caller must cudaFree the returned pointer.
  void* release();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// cudaMalloc with the same error behaviour as DeviceBuffer; bytes == 0 returns nullptr.
void* device_malloc(size_t bytes);
// cudaFree that never throws (for destructors); errors are logged.
void device_free(void* ptr) noexcept;

}  // namespace deepinfer::cuda
