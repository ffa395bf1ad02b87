// Load-time conversion of checkpoint tensors to F32 host tensors (MODEL_SPEC.md §B.1-B.3).
// Inputs may be unaligned read-only views into an mmap'ed file; outputs are fresh,
// aligned, owned tensors. Results are exact: every output element is the F32 product
// of the decoded element and its decoded scale (one rounding at most, none in practice
// since the scales are powers of two), independent of the thread count.
// `name` is only used in error messages.
#pragma once

#include <string>

#include "tensor/tensor.h"

namespace deepinfer {

// F64 / F32 / F16 / BF16 -> F32 (F64 rounds to nearest).
Tensor convert_to_f32(const Tensor& t, const std::string& name);

// Block-FP8: q F8_E4M3 [N, K], scale [ceil(N/block_n), ceil(K/block_k)] in F8_E8M0
// (ue8m0), F32 or BF16 (HF's `weight_scale_inv` multiplies too, despite its name).
// W[i, j] = e4m3(q[i, j]) * scale[i / block_n, j / block_k].
Tensor dequant_fp8_block(const Tensor& q, const Tensor& scale, int64_t block_n, int64_t block_k,
                         const std::string& name);

// FP4 e2m1 experts: packed I8/U8 [N, K/2] (byte k: element 2k in bits 0-3, 2k+1 in bits
// 4-7), scale F8_E8M0 [N, ceil(K/32)]. W[i, j] = e2m1(c[i, j]) * 2^(scale[i, j/32] - 127).
Tensor dequant_fp4(const Tensor& packed, const Tensor& scale, const std::string& name);

// The shape / dtype checks of dequant_fp8_block and dequant_fp4 alone (no values read): an
// Error naming the tensor as those functions throw it. For loaders that convert later.
void check_fp8_block_pair(const Tensor& q, const Tensor& scale, int64_t block_n, int64_t block_k,
                          const std::string& name);
void check_fp4_pair(const Tensor& packed, const Tensor& scale, const std::string& name);

// True if (weight, scale) look like the FP4 layout above (I8/U8 weight, 2-D, scale
// with the same rows and ceil(2*cols/32) columns).
bool is_fp4_pair(const Tensor& weight, const Tensor& scale);

}  // namespace deepinfer
