// Candidate blocks of V4.1's candidate source (MODEL_SPEC §C.7 steps 3-4), CPU reference.
// The candidate source scores every visible index key; its n visible entries are cut into
// blocks of `block` entries (the last may be partial); a block's score is the max of its
// entries' scores; the block holding the newest entry is always taken (its score is set to
// +inf), then the best blocks by score (ties: lower block first), min(n_pick, n_blocks) in
// all. A block whose score is -inf is never taken. Layers that use the source's candidates
// score only the entries of its blocks.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

// The blocks taken for one query row: mask[b] for b < ceil(n / block).
std::vector<uint8_t> candidate_blocks_ref(const float* scores, int64_t n, int64_t block,
                                          int64_t n_pick);

}  // namespace deepinfer
