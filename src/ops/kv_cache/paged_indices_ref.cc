#include <algorithm>

#include "base/error.h"
#include "ops/kv_cache/paged_indices.h"

namespace deepinfer {

void paged_indices_ref(const PagedIndexParams& p) {
  for (int64_t r = 0; r < p.n_rows; ++r) {
    const int64_t pos = p.positions[r], seq = p.seq[r];
    if (p.window_indices != nullptr) {
      CHECK(p.window > 0 && p.window_block_size > 0) << "paged indices: window geometry";
      for (int64_t j = 0; j < p.window; ++j) {
        const int64_t e = pos - p.window + 1 + j;
        int32_t slot = -1;
        if (e >= 0) {
          CHECK(e / p.window_block_size < p.window_max_blocks)
              << "paged indices: position " << e << " beyond the window block table";
          const int64_t block = p.window_table[seq * p.window_max_blocks + e / p.window_block_size];
          slot = static_cast<int32_t>(block * p.window_block_size + e % p.window_block_size);
        }
        p.window_indices[r * p.window + j] = slot;
      }
    }
    if (p.cmp_indices != nullptr) {
      CHECK(p.ratio > 0 && p.cmp_block_size > 0) << "paged indices: compressed geometry";
      const int64_t n = std::min<int64_t>(
          p.max_cmp, p.selected != nullptr ? p.n_selected[r] : (pos + 1) / p.ratio);
      for (int64_t j = 0; j < p.max_cmp; ++j) {
        int64_t e = -1;
        if (j < n) e = p.selected != nullptr ? p.selected[r * p.max_selected + j] : j;
        int32_t slot = -1;
        if (e >= 0) {
          CHECK(e / p.cmp_block_size < p.cmp_max_blocks)
              << "paged indices: entry " << e << " beyond the compressed block table";
          const int64_t block = p.cmp_table[seq * p.cmp_max_blocks + e / p.cmp_block_size];
          slot = static_cast<int32_t>(block * p.cmp_block_size + e % p.cmp_block_size);
        }
        p.cmp_indices[r * p.max_cmp + j] = slot;
      }
      p.n_cmp[r] = static_cast<int32_t>(n);
    }
  }
}

}  // namespace deepinfer
