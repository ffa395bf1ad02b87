// CUDA entries of the paged K=V cache (layouts and math in kv_cache.h). Device pointers;
// run on `stream`; never allocate or synchronise; graph capturable. Slots must lie in
// [-1, n_blocks * block_size) of the cache they address (not checked on the device); cache
// pointers must be 8-byte aligned (the kernels load up to 8 bytes at a time; block_bytes is
// a multiple of 8, so every block and entry stays aligned).
//
//  Every KvEntryFormat (kv_cache.h) is served by kv_store/load, paged_attention_cuda and
//  paged_attention_mma_cuda; a call's two sources may differ in format (V4.1: e4m3/32 window,
//  e2m1 + e4m3/16 compressed; both dequantise exactly, to fp32 or to bf16). The sm90 decode
//  kernel serves kModel1 (both sources), V4.1's pair (each source e4m3/32 or e2m1 + e4m3/16,
//  rope_dim 0) and bf16; it refuses a MODEL1 source beside a V4.1 one.
//
//  * kv_store_cuda: byte-identical to kv_store_ref. entries [n, row_stride] fp32 (first
//    head_dim values of each row), slots int32 [n] (-1 skips the row).
//  * kv_load_cuda: identical to kv_load_ref (-1 rows become 0): the unfused composition
//    kv_load_cuda + sparse_attention_cuda is the oracle / bisection path of paged attention.
//  * paged_attention_cuda: paged_attention_ref's math (fp32 online softmax, the sink merged
//    at the end). One thread block per (row, group of up to 16 heads), one warp per head;
//    the block dequantises 16 keys at a time into shared memory, so every key is read once
//    per (row, head group) instead of once per (row, head). Each warp's arithmetic depends
//    only on its row's key list (fixed tile order), never on the batch or the head grouping:
//    a row's output is bitwise the same alone or in any batch. head_dim at most 512.
//    Split-K ("flash decoding", only with a workspace): when n_rows * head groups < 264 (two
//    blocks per SM of a 132-SM H200), each row's key list (window source then compressed
//    source, one logical list) is cut into n_splits chunks processed by separate blocks
//    (grid.y), n_splits = min(ceil(512 / blocks), 64, ceil(max_keys / 32)) with max_keys =
//    sources[0].max_indices + sources[1].max_indices; a row with n keys uses chunks of
//    max(32, round_up(ceil(n / n_splits), 16)) keys. Each block writes its heads' partial
//    (max, sum, acc[head_dim]) to the workspace; a combine kernel (one block per (row, head))
//    merges the row's chunks in the fixed order 0, 1, ... and adds the sink. The plan depends
//    only on (n_rows, n_heads, max_keys), never on timing or per-step counts, so launches are
//    graph-safe and the result is deterministic for a given batch shape. It is NOT batch
//    invariant (the split count depends on n_rows, and split vs unsplit differ by rounding):
//    callers that need batch invariance (GpuModelOptions::batch_invariant) pass no workspace,
//    and then every row's output is bitwise the same alone or in any batch as above.
//  * paged_attention_workspace_bytes: bytes of workspace that make every call with at most
//    n_rows rows (same n_heads, head_dim, max_keys or less) able to split; 0 when no such call
//    splits. n_rows * n_heads * n_splits * (head_dim + 2) * 4 at most over those calls.
//  * paged_attention_mma_cuda: the same attention on bf16 tensor cores (mma.sync m16n8k16,
//    fp32 accumulation), for large grids (prefill). One CTA per (row, group of up to 64
//    heads): the heads are the M dimension of both products, the key tile (32 keys) is
//    dequantised once per CTA into shared memory as bf16 (exact for both cache dtypes). q and
//    the softmax weights P each enter as two bf16 terms (hi + lo, ~2^-16 relative), so the
//    products are fp32-accurate and the output agrees with paged_attention_ref to fp32-level
//    rounding (not bitwise: another summation order). Per row, a fixed tile order: a row's
//    output does not depend on the batch. No workspace. Needs head_dim % 32 == 0 and <= 512,
//    rope_dim % 8 == 0, q 16-byte and out 8-byte aligned (kUnsupported / kInvalidInput).
//  * paged_attention_mma_supported: those shape conditions. paged_attention_mma_preferred:
//    supported and a grid worth the kernel (n_rows * ceil(n_heads / 64) >= 264, two CTAs per
//    SM of a 132-SM H200); below it the SIMT kernel (split-K) is faster.
//  * sm90_paged_decode_cuda (sm90_paged_decode.cu): the fast decode path of paged attention
//    on bf16 tensor cores, the same math as paged_attention_ref for head_dim 512 (fp8 cache:
//    the V4 layout, rope_dim 64, or V4.1's formats, rope_dim 0; bf16 cache: any rope_dim),
//    any n_heads (groups of 64; 128 =
//    V4-Pro runs as two groups, each dequantising the keys itself), sinks required. One CTA
//    per (row, 64-head group, chunk of the key list) reads each listed key once for its 64
//    heads: tiles of 64 keys gathered with cp.async (double buffer), fp8 dequantised into a
//    bf16 tile (exact), S = Q K^T and O += P V by mma.sync m16n8k16 (fp32 accumulation),
//    online softmax in fp32 (exp2), sink merged at the end.
//    Numerics (option (a) of issue 22, FlashMLA's): q and the softmax weights P are rounded
//    to bf16 once (keys are exact), so the result agrees with paged_attention_ref to bf16
//    level, not fp32 level (test_paged_decode_cuda bounds it by the bf16 rounding unit): for
//    `official` numerics decode. `reference` numerics and batch_invariant keep the fp32
//    kernels above (paged_attention_cuda, paged_attention_mma_cuda).
//    Split-K (only with a workspace): when n_rows * groups <= SMs / 2, n_splits = min(SMs /
//    (n_rows * groups), ceil(max_keys / 64), 64) with max_keys = sources[0].max_indices +
//    sources[1].max_indices; a row with n keys is cut into chunks of max(64,
//    round_up(ceil(n / n_splits), 64)) keys (grid.y), partials (max, sum, acc) go to the
//    workspace and a combine kernel merges a row's chunks in the order 0, 1, ... and adds the
//    sink. The plan depends on shapes and the device's SM count only (graph-safe,
//    deterministic for a batch shape), so a row's output depends on n_rows through the split
//    count: NOT batch invariant with a workspace. Without a workspace (never split) each row's
//    arithmetic depends only on its own key list: bitwise the same alone or in any batch.
//    Needs q 16-byte, out 8-byte and caches 16-byte aligned (kUnsupported otherwise).
//  * sm90_paged_decode_supported: those conditions. sm90_paged_decode_workspace_bytes: bytes
//    of workspace that let every call of at most n_rows rows (same n_heads, max_keys or less)
//    split; 0 when none splits. sm90_paged_decode_splits: the split count a call would use.
//  * paged_indices_cuda: paged_indices_ref (paged_indices.h) on the device: the per-row slot
//    lists of paged_attention_cuda from positions, block tables and the indexer's selection
//    (block-table entries are not range-checked on the device).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/kv_cache/kv_cache.h"
#include "ops/kv_cache/paged_indices.h"

namespace deepinfer {

void kv_store_cuda(cudaStream_t stream, const KvCacheLayout& layout, const float* entries,
                   int64_t n, int64_t row_stride, const int32_t* slots, uint8_t* cache);

void kv_load_cuda(cudaStream_t stream, const KvCacheLayout& layout, const uint8_t* cache,
                  const int32_t* slots, int64_t n, float* out);

void paged_attention_cuda(cudaStream_t stream, const PagedAttentionParams& p);

int64_t paged_attention_workspace_bytes(int64_t n_rows, int64_t n_heads, int64_t head_dim,
                                        int64_t max_keys);

void paged_attention_mma_cuda(cudaStream_t stream, const PagedAttentionParams& p);
bool paged_attention_mma_supported(const PagedAttentionParams& p);
bool paged_attention_mma_preferred(const PagedAttentionParams& p);

void sm90_paged_decode_cuda(cudaStream_t stream, const PagedAttentionParams& p);
bool sm90_paged_decode_supported(const PagedAttentionParams& p);
int64_t sm90_paged_decode_workspace_bytes(int64_t n_rows, int64_t n_heads, int64_t head_dim,
                                          int64_t max_keys);
int64_t sm90_paged_decode_splits(int64_t n_rows, int64_t n_heads, int64_t max_keys);

void paged_indices_cuda(cudaStream_t stream, const PagedIndexParams& p);

}  // namespace deepinfer
