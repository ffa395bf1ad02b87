// Host FP8 quantisation of GpuModel's dense weights (kFp8): 128x128 blocks, e4m3 codes,
// power-of-two (UE8M0) block scales. Plain C++ (built with and without CUDA), so the CPU
// tests check what the device is given.
//
// Per block (partial edge blocks allowed): amax = max |w| over the block;
//   scale = 2^ceil(log2(amax / 448))  (ops/quant/qat.h pow2_scale, the activation rule
//           without its 1e-4 amax floor), 1 for an all-zero block;
//   code  = e4m3(w / scale), round to nearest even, saturating at +-448.
// Hence amax / scale lies in (224, 448] and |code| <= 448 (never a NaN code); code * scale
// is exact in fp32 (a power-of-two scale); the round-trip error is at most half an e4m3 ulp
// of w / scale, times scale.
// Exactness on checkpoint weights: values that are already e4m3 codes times one power of two
// 2^S per block with |code| <= 448 (the official block-FP8 weights, MODEL_SPEC §B.1/§B.4,
// which io dequantises to fp32) come back bit-exactly: the new scale is <= 2^S, so each
// value / scale is its code times a power of two and still an e4m3 value. The codes equal the
// stored ones when the new scale equals the stored one (tests/runtime/test_fp8_weight_quant.cc
// checks every FP8 tensor of the mixed_quant golden checkpoint).
// Thread-safety: a pure function of its arguments.
#pragma once

#include <cstdint>

namespace deepinfer {

// w [n, k] row-major fp32 (finite; an Error names the block otherwise). Fills codes [n, k]
// (e4m3) and the scale grid [ceil(n/128), ceil(k/128)] (fp32 powers of two); when
// round_trip is true, w is overwritten with code * scale.
void quantize_fp8_blocks(float* w, int64_t n, int64_t k, uint8_t* codes, float* grid,
                         bool round_trip);

}  // namespace deepinfer
