#include <cblas.h>

#include "base/parallel.h"
#include "ops/linear/linear.h"

namespace deepinfer {
namespace {

// Dot product with 8 interleaved accumulators combined in a fixed tree: the order
// depends only on k, never on which row or batch this is.
inline float dot_fixed(const float* a, const float* b, int64_t k) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i < k; ++i, ++j) acc[j] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

void linear_ref(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                GemmMode mode) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m * n; ++i) y[i] = 0.0f;
    return;
  }
  if (mode == GemmMode::kBlas) {
    // OpenBLAS runs single-threaded; we split the output columns across our own OpenMP
    // threads. Two thread pools spinning on two cores (OpenBLAS's and OpenMP's) measured
    // several times slower than either alone.
    static const bool single_threaded_blas = [] {
      openblas_set_num_threads(1);
      return true;
    }();
    (void)single_threaded_blas;
    parallel_for(n, [&](int64_t begin, int64_t end) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
                  static_cast<int>(end - begin), static_cast<int>(k), 1.0f, x, static_cast<int>(k),
                  w + begin * k, static_cast<int>(k), 0.0f, y + begin, static_cast<int>(n));
    }, 64);
    return;
  }
  // Fixed order: parallel over output columns (each output computed by one thread).
  parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t row = 0; row < m; ++row) {
      const float* xr = x + row * k;
      float* yr = y + row * n;
      for (int64_t col = begin; col < end; ++col) yr[col] = dot_fixed(xr, w + col * k, k);
    }
  }, 16);
}

Tensor linear(const Tensor& x, const Tensor& w, GemmMode mode) {
  CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1))
      << "linear: x " << x.str() << " and w " << w.str() << " do not match";
  Tensor y = Tensor::empty(DType::F32, {x.size(0), w.size(0)});
  linear_ref(x.f32(), x.size(0), x.size(1), w.f32(), w.size(0), y.f32(), mode);
  return y;
}

}  // namespace deepinfer
