// Per-row slot lists of paged attention (kv_cache.h KvSource::indices) from the positions,
// the requests' block tables and the indexer's selection. A logical entry e of a pool lives
// at slot table[seq * max_blocks + e / block_size] * block_size + e % block_size.
//
//  * window pool (one entry per position): window_indices[r * window + j] = slot of position
//    p = positions[r] - window + 1 + j, or -1 when p < 0 (MODEL_SPEC §A.3: query t reads
//    positions max(0, t - W + 1) .. t; its own key must be stored before attention).
//  * compressed pool (ratio > 0, cmp_indices != nullptr): with `selected` (CSA), entry j <
//    n_selected[r] is selected[r * max_selected + j] (-1 stays -1), n_cmp[r] = n_selected[r];
//    without (HCA), entries 0 .. n_vis - 1 with n_vis = (positions[r] + 1) / ratio, n_cmp[r] =
//    n_vis. cmp_indices [n_rows, max_cmp]; slots past n_cmp[r] are -1. The caller sizes
//    max_cmp >= max_selected (CSA) or >= every row's n_vis (HCA); a longer list is cut at
//    max_cmp.
#pragma once

#include <cstdint>

namespace deepinfer {

struct PagedIndexParams {
  int64_t n_rows = 0;
  const int32_t* positions = nullptr;  // [n_rows]
  const int32_t* seq = nullptr;        // [n_rows] row -> block-table row
  // Window pool.
  const int32_t* window_table = nullptr;  // [n_seqs, window_max_blocks]
  int64_t window_max_blocks = 0, window_block_size = 0, window = 0;
  int32_t* window_indices = nullptr;  // out [n_rows, window]; nullptr: not built
  // Compressed pool.
  const int32_t* cmp_table = nullptr;  // [n_seqs, cmp_max_blocks]
  int64_t cmp_max_blocks = 0, cmp_block_size = 0, ratio = 0;
  const int32_t* selected = nullptr;    // [n_rows, max_selected] logical entries or -1
  const int32_t* n_selected = nullptr;  // [n_rows]
  int64_t max_selected = 0;
  int32_t* cmp_indices = nullptr;  // out [n_rows, max_cmp]; nullptr: not built
  int32_t* n_cmp = nullptr;        // out [n_rows]
  int64_t max_cmp = 0;
};

// CPU reference (host pointers).
void paged_indices_ref(const PagedIndexParams& p);

}  // namespace deepinfer
