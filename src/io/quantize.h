// Weight quantisers producing the official checkpoint formats (MODEL_SPEC.md §B.1, §B.2),
// the inverse of dequant.h: for writing native FP8/FP4 checkpoints of generated models
// (tests, the tiny model) and for checking the loader.
//
// Scales are powers of two stored as E8M0 (ue8m0): for a block with amax = max |w|,
// s = 2^ceil(log2(amax / qmax)) (qmax = 448 for e4m3, 6 for e2m1), so |w / s| <= qmax;
// values are rounded to nearest-even and saturated. An all-zero block gets s = 1.
// Quantising a dequantised tensor again gives back the same values (dequant of the
// result is bit-identical), though not necessarily the same codes.
#pragma once

#include "tensor/tensor.h"

namespace deepinfer {

struct QuantizedWeight {
  Tensor weight;  // F8_E4M3 [N, K] or I8 [N, K/2] (FP4 pairs)
  Tensor scale;   // F8_E8M0
};

// w: F32 [N, K] -> F8_E4M3 [N, K] + F8_E8M0 [ceil(N/block_n), ceil(K/block_k)].
QuantizedWeight quantize_fp8_block(const Tensor& w, int64_t block_n, int64_t block_k);

// w: F32 [N, K] with K even -> I8 [N, K/2] (element 2k in the low nibble of byte k) +
// F8_E8M0 [N, ceil(K/32)].
QuantizedWeight quantize_fp4(const Tensor& w);

}  // namespace deepinfer
