#include "base/parallel.h"

#include <omp.h>

#include <algorithm>

namespace deepinfer {

int num_threads() { return omp_get_max_threads(); }
void set_num_threads(int n) { omp_set_num_threads(std::max(1, n)); }

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (n <= 0) return;
  const int64_t max_parts = std::max<int64_t>(1, n / std::max<int64_t>(1, min_chunk));
  const int64_t parts = std::min<int64_t>(num_threads(), max_parts);
  if (parts <= 1 || omp_in_parallel()) {
    fn(0, n);
    return;
  }
#pragma omp parallel for num_threads(parts) schedule(static, 1)
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t begin = n * p / parts, end = n * (p + 1) / parts;
    if (begin < end) fn(begin, end);
  }
}

bool release_idle_threads() {
  if (omp_in_parallel()) return false;
  return omp_pause_resource_all(omp_pause_soft) == 0;
}

}  // namespace deepinfer
