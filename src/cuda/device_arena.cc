#include "cuda/device_arena.h"

#include <cstdint>

#include "base/error.h"

namespace deepinfer::cuda {

DeviceArena::DeviceArena(size_t capacity_bytes) : buffer_(capacity_bytes) {}

void* DeviceArena::allocate(size_t bytes, size_t alignment) {
  ICHECK(alignment > 0 && (alignment & (alignment - 1)) == 0)
      << "DeviceArena: alignment " << alignment << " is not a power of two";
  const uintptr_t base = reinterpret_cast<uintptr_t>(buffer_.data());
  const uintptr_t start = (base + used_ + alignment - 1) & ~(uintptr_t{alignment} - 1);
  const size_t offset = start - base;
  CHECK_KIND(kResourceExhausted, offset + bytes <= buffer_.bytes())
      << "DeviceArena: request of " << bytes << " bytes (alignment " << alignment << ") with "
      << used_ << " of " << buffer_.bytes() << " bytes used";
  used_ = offset + bytes;
  return reinterpret_cast<void*>(start);
}

}  // namespace deepinfer::cuda
