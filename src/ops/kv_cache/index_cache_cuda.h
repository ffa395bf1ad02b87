// CUDA entries of the paged indexer-key cache (formats in index_cache.h: V4's e4m3 + fp32
// scale, V4.1's e2m1 + UE8M0 per 32; every entry below serves both). Device pointers; run on
// `stream`; never allocate or synchronise; graph capturable. With fp4 keys the tensor-core
// scores hold each key as e2m1 x its scale in bf16 (exact) and apply no per-key scale after.
//
//  * index_store_cuda / index_load_cuda: byte-identical to index_store_ref / identical to
//    index_load_ref.
//  * indexer_paged_scores_cuda: indexer_scores_cuda (ops/indexer/indexer_cuda.h) with keys
//    read from the cache: for row r and visible key s < (positions[r] + 1) / ratio, the key
//    is at slot block_table[seq[r] * max_blocks + s / block_size] * block_size + s %
//    block_size. Same per-key arithmetic (and order) as indexer_scores_cuda; entries
//    s >= n_keys(r) are left untouched. q [n_rows, n_heads, head_dim], g [n_rows, n_heads] fp32.
//  * indexer_paged_scores_mma_cuda: the same scores on bf16 tensor cores for larger batches
//    (prefill, big decode steps): one CTA per (row, 512 keys), the heads as the MMA M
//    dimension, q as hi + lo bf16 terms (16 significant bits: exact for official numerics'
//    FP4-rounded q, nmse ~1e-11 for an fp32 q) and the e4m3 codes exact in bf16, fp32
//    accumulation;
//    the key's scale after the dot product; the 64 heads summed in a fixed tree order (not
//    the SIMT kernel's h order, so fp32-level differences). Per row: batch independent. Needs
//    head_dim % 16 == 0 and <= 256, at most 64 heads, block_bytes % 8 == 0, q 16-byte
//    aligned (supported(); kUnsupported otherwise). preferred(): supported and n_rows >= 32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/kv_cache/index_cache.h"

namespace deepinfer {

void index_store_cuda(cudaStream_t stream, const IndexCacheLayout& layout, const float* keys,
                      int64_t n, int64_t row_stride, const int32_t* slots, uint8_t* cache);

void index_load_cuda(cudaStream_t stream, const IndexCacheLayout& layout, const uint8_t* cache,
                     const int32_t* slots, int64_t n, float* out);

struct IndexerPagedScoresParams {
  const float* q = nullptr;
  const float* g = nullptr;
  int64_t n_rows = 0, n_heads = 0;
  float head_scale = 1.0f, scale = 1.0f;
  const int32_t* positions = nullptr;  // [n_rows]
  const int32_t* seq = nullptr;        // [n_rows] row -> block table row
  int64_t ratio = 4;
  const uint8_t* cache = nullptr;
  IndexCacheLayout layout;
  const int32_t* block_table = nullptr;  // [n_seqs, max_blocks] physical block ids
  int64_t max_blocks = 0;
  float* scores = nullptr;
  int64_t score_stride = 0;
};

void indexer_paged_scores_cuda(cudaStream_t stream, const IndexerPagedScoresParams& p);
void indexer_paged_scores_mma_cuda(cudaStream_t stream, const IndexerPagedScoresParams& p);
bool indexer_paged_scores_mma_supported(const IndexerPagedScoresParams& p);
bool indexer_paged_scores_mma_preferred(const IndexerPagedScoresParams& p);

}  // namespace deepinfer
