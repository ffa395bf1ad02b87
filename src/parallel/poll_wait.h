// Deadline polling shared by the communicators: wait for a nonblocking operation (an MPI
// request, a CUDA stream) by calling done() until it returns true or the deadline passes.
// Spins for the first ~100 µs (a collective between live peers usually finishes by then),
// then sleeps with a growing back-off capped at 500 µs so that idle ranks do not burn a core
// (CI runs 4 ranks on 2 cores). done() may throw; the exception propagates.
#pragma once

#include <chrono>
#include <string>
#include <thread>

namespace deepinfer::parallel_detail {

template <typename Done>
bool poll_until(Done&& done, std::chrono::steady_clock::time_point deadline) {
  using clock = std::chrono::steady_clock;
  const auto spin_end = clock::now() + std::chrono::microseconds(100);
  while (clock::now() < spin_end) {
    if (done()) return true;
  }
  auto nap = std::chrono::microseconds(10);
  for (;;) {
    if (done()) return true;
    if (clock::now() >= deadline) return done();
    std::this_thread::sleep_for(nap);
    if (nap < std::chrono::microseconds(500)) nap *= 2;
  }
}

// "30 s", "2.5 s", "0.2 s": a timeout as people read it in an error message.
inline std::string format_seconds(std::chrono::milliseconds ms) {
  const long long v = ms.count();
  if (v % 1000 == 0) return std::to_string(v / 1000) + " s";
  std::string frac = std::to_string(v % 1000);
  frac = std::string(3 - frac.size(), '0') + frac;
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return std::to_string(v / 1000) + "." + frac + " s";
}

}  // namespace deepinfer::parallel_detail
