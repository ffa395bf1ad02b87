// Host FP8 quantisation of GpuModel's dense weights (kFp8): b x b blocks (b = 128 for V4,
// 32 for V4.1: DeviceLinear::block, ops/gemm/gemm.h), e4m3 codes, power-of-two (UE8M0)
// block scales. Plain C++ (built with and without CUDA), so the CPU
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

#include "io/model_config.h"

namespace deepinfer {

// The b of a model's kFp8 dense weights (b x b weight blocks, 1 x b activation blocks;
// MODEL_SPEC §B.1/§B.4): 32 for DeepSeek-V4.1, 128 otherwise. A family property, not the
// checkpoint's weight_block_size, so a V4.1 checkpoint stored in bf16 is quantised on the
// grid the official FP8 one is stored on (and a V4 one off the 128 grid is re-quantised,
// as before). The one place GpuModel, GpuEngram, the stream loader and the tests take it from.
inline int64_t fp8_weight_block(const ModelConfig& cfg) { return cfg.is_v41() ? 32 : 128; }

// w [n, k] row-major fp32 (finite; an Error names the block otherwise). Fills codes [n, k]
// (e4m3) and the scale grid [ceil(n/block), ceil(k/block)] (fp32 powers of two); when
// round_trip is true, w is overwritten with code * scale.
void quantize_fp8_blocks(float* w, int64_t n, int64_t k, uint8_t* codes, float* grid,
                         bool round_trip, int64_t block = 128);

}  // namespace deepinfer
