#include "tensor/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace deepinfer {

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  for (int64_t d : shape) CHECK(d >= 0) << "negative dimension in shape " << shape_str(shape);
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  const size_t bytes = std::max<size_t>(t.nbytes(), 1);
  // 64-byte alignment for vector loads.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  CHECK_KIND(kResourceExhausted, p != nullptr) << "out of host memory allocating " << bytes
                                               << " bytes";
  t.owner_ = std::shared_ptr<void>(p, std::free);
  t.data_ = p;
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::wrap(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner,
                    Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.owner_ = std::move(owner);
  t.device_ = device;
  return t;
}

int64_t Tensor::size(int64_t axis) const {
  if (axis < 0) axis += dim();
  ICHECK(axis >= 0 && axis < dim()) << "axis " << axis << " out of range for " << str();
  return shape_[axis];
}

float* Tensor::f32() {
  ICHECK(dtype_ == DType::F32) << "expected F32, got " << str();
  return static_cast<float*>(data_);
}

const float* Tensor::f32() const {
  ICHECK(dtype_ == DType::F32) << "expected F32, got " << str();
  return static_cast<const float*>(data_);
}

Tensor Tensor::reshape(Shape shape) const {
  ICHECK(shape_numel(shape) == numel()) << "reshape " << str() << " to " << shape_str(shape);
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  ICHECK(dim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0])
      << "slice_rows(" << begin << ", " << end << ") of " << str();
  Tensor t = *this;
  const size_t row_bytes = shape_[0] == 0 ? 0 : nbytes() / shape_[0];
  t.shape_[0] = end - begin;
  t.data_ = static_cast<uint8_t*>(data_) + begin * row_bytes;
  return t;
}

Tensor Tensor::clone() const {
  ICHECK(device_ == Device::kCPU) << "clone() of a device tensor";
  Tensor t = empty(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

std::string Tensor::str() const { return std::string(dtype_name(dtype_)) + shape_str(shape_); }

}  // namespace deepinfer
