// Thread-local scratch vectors of the tokenizer keep their capacity between calls, so that
// encoding allocates nothing per call. Without a cap, one huge input would pin its peak for
// the thread's lifetime: the server's preparation threads held ~150 bytes per token of the
// largest prompt they had seen (10 refused 6 MB prompts: +340 MiB in use for good). Capacity
// above `max_bytes` is given back after the call; ordinary prompts keep reusing theirs.
#pragma once

#include <cstddef>
#include <vector>

namespace deepinfer::recipe {

inline constexpr size_t kMaxKeptScratchBytes = size_t(1) << 20;

template <class T>
void release_large_scratch(std::vector<T>& v, size_t max_bytes = kMaxKeptScratchBytes) {
  if (v.capacity() * sizeof(T) > max_bytes) std::vector<T>().swap(v);
}

}  // namespace deepinfer::recipe
