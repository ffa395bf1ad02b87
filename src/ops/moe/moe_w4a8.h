// W4A8 routed experts (issue 14 deliverable 2, issue 22 MoE decode): the device format of FP4
// expert stacks and the plain CPU references the CUDA kernel (moe_w4a8_cuda.h) is tested
// against. CPU code, built in every configuration.
//
// Checkpoint format (MODEL_SPEC §B.2): a matrix [n, k] (row = output feature) is stored as
// codes uint8 [n, k/2] packed along K (byte m of a row holds element 2m in bits 0-3 and 2m+1 in
// bits 4-7; e2m1 nibbles: bit 3 sign, c & 7 -> {0, .5, 1, 1.5, 2, 3, 4, 6}) and UE8M0 scales
// uint8 [n, k/32] (one per 32 consecutive K elements of a row): W[i, j] = e2m1(c[i, j]) *
// 2^(S[i, j/32] - 127). k must be a multiple of 32.
//
// Device format (w4a8_pack): K padded to kp = round_up(k, 128) with zero codes; a row's codes
// are kp/2 bytes in 64-byte chunks (128 elements = 4 scale blocks); inside a chunk the sixteen
// 4-byte words are transposed 4 x 4:  chunk[16 t + 4 j + b] = ckpt[16 j + 4 t + b]  (t, j < 4,
// b < 4), so one 16-byte load by lane t of a quad holds 8 elements of each of the chunk's four
// scale blocks (what one m16n8k32 MMA per scale block needs, see sm90_moe_w4a8_decode.cu).
// Rows are tiled in groups of 16 (kW4a8RowGroup: one warp's MMA rows): group g (rows 16 g ..
// 16 g + h - 1, h = min(16, n - 16 g)) is h * kp / 2 contiguous bytes, chunk-major: chunk c of
// row 16 g + r at 16 g * kp / 2 + c * h * 64 + r * 64 (w4a8_code_offset). A warp thereby
// streams one contiguous region, 1 KB per chunk, instead of 64 bytes from each of 16 rows
// kp / 2 bytes apart (the row-major layout read at 31-35 % of the H200's DRAM peak,
// bench/results/moe-w4a8-ncu-h200-2026-12-03-*; that its scattered requests cost DRAM page
// locality is the hypothesis this layout tests, not yet measured). Scales uint8, the
// checkpoint bytes (padding blocks 127), tiled the same way with 4 bytes per row and chunk:
// group base 16 g * kp / 32, then c * h * 4 + r * 4 (w4a8_scale_offset). Rows [a, b) of a
// matrix pack on their own to the same bytes when a is a multiple of 16 and b - a is too or b
// is n (how the streaming loader packs). The bytes are the checkpoint's: the device holds
// 0.5 + 1/32 bytes per weight, half of the FP8 conversion.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/moe/moe.h"

namespace deepinfer {

constexpr int64_t kW4a8Group = 128;  // K elements per interleave group (64 code bytes)
constexpr int64_t kW4a8RowGroup = 16;  // rows per tile of the device layout

#if defined(__CUDACC__)
#define DEEPINFER_W4A8_HD __host__ __device__
#else
#define DEEPINFER_W4A8_HD
#endif
// Rows of the row group that starts at row g0 (a multiple of 16) of an n-row matrix.
DEEPINFER_W4A8_HD inline int64_t w4a8_group_rows(int64_t n, int64_t g0) {
  return n - g0 < kW4a8RowGroup ? n - g0 : kW4a8RowGroup;
}
// Byte offsets of chunk c (K elements 128 c .. 128 c + 127) of `row` in an [n, kp] matrix:
// its 64 code bytes and its 4 scale bytes.
DEEPINFER_W4A8_HD inline int64_t w4a8_code_offset(int64_t n, int64_t kp, int64_t row, int64_t c) {
  const int64_t g0 = row - row % kW4a8RowGroup;
  return g0 * (kp / 2) + c * w4a8_group_rows(n, g0) * 64 + (row - g0) * 64;
}
DEEPINFER_W4A8_HD inline int64_t w4a8_scale_offset(int64_t n, int64_t kp, int64_t row, int64_t c) {
  const int64_t g0 = row - row % kW4a8RowGroup;
  return g0 * (kp / 32) + c * w4a8_group_rows(n, g0) * 4 + (row - g0) * 4;
}

inline int64_t w4a8_padded_k(int64_t k) { return (k + kW4a8Group - 1) / kW4a8Group * kW4a8Group; }
// Device bytes of one [n, k] matrix: codes then scales (separate arrays in a stack).
inline int64_t w4a8_code_bytes(int64_t n, int64_t k) { return n * w4a8_padded_k(k) / 2; }
inline int64_t w4a8_scale_bytes(int64_t n, int64_t k) { return n * w4a8_padded_k(k) / 32; }

// Checkpoint [n, k/2] codes + [n, k/32] scales -> device n * kp/2 code bytes + n * kp/32 scale
// bytes (the tiled layout above). Throws Error (kUnsupported) when k % 32 != 0 or n < 1.
void w4a8_pack(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k,
               uint8_t* dev_codes, uint8_t* dev_scales);
// The fp32 values [n, k] of a checkpoint-format matrix (exact: every value is a power of two
// times an e2m1 value). A scale byte 255 (NaN) throws Error.
void w4a8_dequant_ref(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k,
                      float* out);

// The W4A8 recipe of one expert layer on the CPU, in the checkpoint format (per-expert
// pointers): x quantised per 1 x act_block like act_quant_ref (act_block 128 for V4, 32 for
// V4.1), W1 x and W3 x from the exact weights and the quantised x (double accumulation), clamped
// SwiGLU x routing weight, h quantised the same way, W2 h, and out[t] = sum over the token's
// slots j (ascending) of the expert outputs + y_shared[t] (may be null). ids [T, k] outside
// [0, E) add nothing. What sm90_moe_w4a8_decode.cu computes up to fp32 summation order.
struct W4a8ExpertRef {
  const uint8_t *w1 = nullptr, *s1 = nullptr, *w3 = nullptr, *s3 = nullptr, *w2 = nullptr,
                *s2 = nullptr;  // w1 / w3: [I, D], w2: [D, I] (checkpoint format)
};
void moe_experts_w4a8_ref(const float* x, int64_t n_tokens, int64_t top_k, int64_t dim,
                          int64_t inter, float limit, int64_t act_block, const int32_t* ids,
                          const float* weights, const std::vector<W4a8ExpertRef>& experts,
                          const float* y_shared, float* out);

}  // namespace deepinfer
