// Paged FP8 cache of lightning-indexer keys (MODEL_SPEC §A.6; research/kernels.md §2.1
// "fp8_paged_mqa_logits", 132 B per key for head_dim 128): per key head_dim e4m3 codes and
// one fp32 scale, addressed by physical slot = block * block_size + offset. A page block
// holds every key's codes first, then every key's scale:
//
//      block b (block_bytes = block_size * (head_dim + 4), at cache + b * block_bytes)
//      +----------------+----------------+ ... +-------+-------+ ... +
//      | key 0: e4m3    | key 1: e4m3    |     | s0    | s1    |     |
//      | [head_dim]     | [head_dim]     |     | fp32  | fp32  |     |
//      +----------------+----------------+ ... +-------+-------+ ... +
//                                             ^ block_size * head_dim
//
// Storing a key k: amax = max(max|k|, 1e-4), s = 2^ceil(log2(amax / 448)) (qat.h pow2_scale),
// code = e4m3(clamp(k / s, +-448)) (RNE); loading gives e4m3(code) * s. With official
// numerics the keys reaching the cache are already FP4 round-tripped (32-blocks, power-of-two
// scales, after the Hadamard rotation): e2m1 values times powers of two, which this format
// holds exactly as long as the key's nonzero magnitudes span less than about 2^13 (the
// e4m3 subnormal floor), so the cache then changes no score. Reference numerics (unrounded
// keys) lose what e4m3 rounding loses.
//
// DeepSeek-V4.1's index keys (MODEL_SPEC §C.7; DeepInfer's 68-B `ica_cache`) use
// IndexKeyFormat::kE2m1Ue8m0Block32: per key head_dim e2m1 codes two per byte (dim 2i in the
// low nibble of byte i), then one UE8M0 scale per 32 dims (head_dim 128: 64 + 4 = 68 B), same
// block structure (all codes, then all scale groups). Storing: fp4_roundtrip's formula with
// block 32 (amax floor 6 * 2^-126, s = 2^ceil(log2(amax / 6)), code e2m1(clamp(k / s, +-6))),
// so load(store(k)) = fp4_roundtrip(k, head_dim, 32) exactly: official numerics' keys (already
// FP4 round-tripped) are held without loss.
#pragma once

#include <cstdint>

namespace deepinfer {

enum class IndexKeyFormat : uint8_t {
  kE4m3Fp32Scale,    // V4: e4m3 codes + one fp32 scale (132 B at 128)
  kE2m1Ue8m0Block32, // V4.1: e2m1 codes + UE8M0 per 32 (68 B at 128)
};

struct IndexCacheLayout {
  int64_t head_dim = 128;
  int64_t block_size = 64;  // keys per page block
  IndexKeyFormat format = IndexKeyFormat::kE4m3Fp32Scale;

  bool fp4() const { return format == IndexKeyFormat::kE2m1Ue8m0Block32; }
  int64_t data_bytes() const { return fp4() ? head_dim / 2 : head_dim; }
  int64_t scale_bytes() const { return fp4() ? head_dim / 32 : 4; }
  int64_t entry_bytes() const { return data_bytes() + scale_bytes(); }
  int64_t block_bytes() const { return block_size * entry_bytes(); }
  int64_t data_offset(int64_t slot) const {
    return slot / block_size * block_bytes() + slot % block_size * data_bytes();
  }
  int64_t scale_offset(int64_t slot) const {
    return slot / block_size * block_bytes() + block_size * data_bytes() + slot % block_size * scale_bytes();
  }
  // Throws kInvalidInput: head_dim a positive multiple of 32 at most 256, block_size > 0.
  void validate() const;
};

// Writes keys[i * row_stride + 0 .. head_dim) into slot slots[i] (-1 skips the row) of
// `cache` (n_blocks blocks); throws kInvalidInput for a slot outside [-1, n_blocks *
// block_size). Inputs must be finite.
void index_store_ref(const IndexCacheLayout& layout, const float* keys, int64_t n,
                     int64_t row_stride, const int32_t* slots, uint8_t* cache, int64_t n_blocks);

// out[i * head_dim + ..] = dequantised key at slots[i]; -1 rows become 0.
void index_load_ref(const IndexCacheLayout& layout, const uint8_t* cache, int64_t n_blocks,
                    const int32_t* slots, int64_t n, float* out);

}  // namespace deepinfer
