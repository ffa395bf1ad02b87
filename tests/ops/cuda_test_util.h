// Device helpers for the CUDA op tests: upload / download fp32 and int32 vectors, NaN-poisoned
// device outputs (so unwritten elements fail the comparison).
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/device_tensor.h"
#include "cuda/event.h"

namespace deepinfer::test {

template <typename T>
Tensor upload_vec(const std::vector<T>& v, DType dtype) {
  Tensor t = cuda::device_empty(dtype, {static_cast<int64_t>(v.size())});
  cuda::copy_h2d(t.raw(), v.data(), v.size() * sizeof(T));
  return t;
}

inline Tensor upload_f32(const std::vector<float>& v) { return upload_vec(v, DType::F32); }
inline Tensor upload_i32(const std::vector<int32_t>& v) { return upload_vec(v, DType::I32); }

inline Tensor poisoned_f32(int64_t n) { return cuda::device_filled(DType::F32, {n}, 0xff); }

inline std::vector<float> download_f32(const Tensor& t) {
  std::vector<float> v(t.numel());
  cuda::copy_d2h(v.data(), t.raw(), t.nbytes());
  return v;
}

// Mean milliseconds of one call of run() (enqueued on the default stream) over `iters` calls
// after one warm-up call. For printed reports only, never asserted.
template <typename Run>
double mean_ms(Run&& run, int iters) {
  run();
  cuda::Event start, stop;
  start.record(nullptr);
  for (int i = 0; i < iters; ++i) run();
  stop.record(nullptr);
  stop.synchronize();
  return cuda::Event::elapsed_ms(start, stop) / iters;
}

}  // namespace deepinfer::test
