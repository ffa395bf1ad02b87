// CPU parallelism. parallel_for splits [0, n) into contiguous chunks across the
// OpenMP threads (both cores on CI). The split depends only on n and the thread
// count, and each index is processed by exactly one thread, so results never depend
// on scheduling as long as fn(i) writes only its own outputs.
#pragma once

#include <cstdint>
#include <functional>

namespace deepinfer {

int num_threads();
void set_num_threads(int n);
void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn,
                  int64_t min_chunk = 1);

}  // namespace deepinfer
