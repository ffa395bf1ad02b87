// FP4 routed experts -> block-FP8 at load (MODEL_SPEC §B.2), so the experts run through the
// FP8 grouped GEMM (ops/moe/moe_grouped_cuda.h) on GPUs without FP4 tensor cores.
//
// Input: packed I8/U8 [N, K/2] (byte b: element 2b in bits 0-3, 2b+1 in bits 4-7) and
// F8_E8M0 scales [N, ceil(K/32)]: W[i, j] = e2m1(c[i, j]) * 2^(S[i, j/32] - 127).
// Output: F8_E4M3 [N, K] and F8_E8M0 [ceil(N/128), ceil(K/128)] (the block-FP8 checkpoint
// layout, B.1; partial edge blocks allowed), computed as DeepSeek's convert.py
// (cast_e2m1fn_to_e4m3fn) does: per 128x128 block, the new scale exponent is
// max(S over the block's 32-blocks) - 6, and each value becomes
// e4m3(e2m1(c) * 2^(S[i, j/32] - new)). Because 6 * 2^6 = 384 <= 448 nothing overflows; the
// result is exact unless the 32-block scales inside one 128x128 block span so widely that a
// value falls below e4m3's resolution (smallest subnormal 2^-9): e.g. 0.5 * 2^-10. (A new
// exponent below 0, i.e. every 32-block scale under 2^-121, is clamped to code 0 and the
// same check applies.)
//
// DeepSeek's converter does not check: torch's cast rounds such values to nearest-even
// (to a neighbouring subnormal or zero). Fp4ToFp8Policy::kRound reproduces that; the default
// kExact throws an Error naming the tensor, the element and both values, since a lossy
// expert should not pass silently. Dequantising the result gives bit-identical values to
// dequant_fp4 (io/dequant.h) whenever the conversion is exact.
#pragma once

#include <string>

#include "tensor/tensor.h"

namespace deepinfer {

enum class Fp4ToFp8Policy { kExact, kRound };

struct Fp8BlockWeight {
  Tensor weight;  // F8_E4M3 [N, K]
  Tensor scale;   // F8_E8M0 [ceil(N/128), ceil(K/128)]
  int64_t n_rounded = 0;  // values that were not exact (kRound only; 0 under kExact)
};

// Throws Error naming `name` and the [row, block] of the first scale byte 255 (the e8m0 NaN
// code) in rows row0 .. row0 + n_rows - 1 of an FP4 tensor's F8_E8M0 scales, `scales` pointing
// at row row0 of [*, n_sb]. Every reader of stored FP4 codes (this conversion, the W4A8 packs)
// calls it.
void check_fp4_scales(const uint8_t* scales, int64_t n_rows, int64_t n_sb, int64_t row0, const std::string& name);

// `name` appears in error messages. Thread-safe; parallel over row blocks; deterministic.
Fp8BlockWeight fp4_to_fp8_block(const Tensor& packed, const Tensor& scale,
                                const std::string& name,
                                Fp4ToFp8Policy policy = Fp4ToFp8Policy::kExact);

}  // namespace deepinfer
