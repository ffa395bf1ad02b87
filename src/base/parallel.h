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

// Releases the calling thread's idle OpenMP threads (omp_pause_resource_all, soft: they are
// started again by its next parallel region). OpenMP keeps one team per thread that starts
// parallel regions, and the idle threads of one thread's team slow down the regions that
// another thread starts: on 2 cores, regions started from a second thread after the first had
// used OpenMP took 43 us instead of 9.6 us (61 us with OMP_WAIT_POLICY=active; measured
// 2026-12-03). Call it when the parallel work moves to another thread for good (Engine, before
// its StepWorker runs the CPU forwards). Never inside a parallel region; returns false where
// the runtime refused.
bool release_idle_threads();

}  // namespace deepinfer
