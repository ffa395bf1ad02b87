// Tensor: a dense, row-major array with a dtype, a shape and a device, sharing
// ownership of its storage. Copies are shallow (they share storage); use clone() for
// a deep copy. A tensor may also wrap memory it does not own (an mmap'ed checkpoint)
// by holding whatever keeps that memory alive.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"

namespace deepinfer {

enum class Device : uint8_t { kCPU, kCUDA };

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // Allocates uninitialised host memory.
  static Tensor empty(DType dtype, Shape shape);
  static Tensor zeros(DType dtype, Shape shape);
  // Wraps existing memory; `owner` keeps it alive (may be null for static memory).
  static Tensor wrap(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner,
                     Device device = Device::kCPU);

  bool defined() const { return data_ != nullptr || (numel() == 0 && !shape_.empty()); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t axis) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <typename T>
  T* data() { return static_cast<T*>(data_); }
  template <typename T>
  const T* data() const { return static_cast<const T*>(data_); }
  // Typed float access; ICHECKs the dtype.
  float* f32();
  const float* f32() const;

  // Same storage, new shape with the same element count.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) of the first axis, sharing storage.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  Tensor clone() const;

  std::string str() const;  // "F32[4, 8]"

 private:
  DType dtype_ = DType::F32;
  Device device_ = Device::kCPU;
  Shape shape_;
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
};

}  // namespace deepinfer
