// Routed experts of one MoE layer with FP4 (e2m1 + UE8M0 per 32 along K) weights and FP8
// (e4m3) activations on the device, for decode-size batches (T <= kW4a8MaxTokens): the
// experts stay FP4 in HBM (moe_w4a8.h's device format) and are dequantised to e4m3 on chip
// (exact: e2m1 * 2^-6 is an e4m3 value), multiplied on tensor cores (mma.sync m16n8k32 e4m3,
// sm_89+; built for sm_90a), the per-32 weight scale times the activation scale applied to
// each 32-wide K partial product in fp32 ("per-32 scales through the MMA").
//
// Launches (no host synchronisation, no allocation; graph capturable for a fixed T):
//   moe_align_cuda (moe_grouped_cuda.h: per-expert rows in slot order, 64-row tiles)
//   act_quant_cuda of x per 1 x act_block (act_block 128: V4; 32: V4.1, MODEL_SPEC §C)
//   up:   one CTA per (live 64-row tile, 128 columns of I): W1 and W3 rows streamed once per
//         16 tokens of the tile with 16-byte non-allocating loads straight into registers;
//         clamped SwiGLU x routing weight, then h quantised per 1 x act_block (the official
//         recipe) into an e4m3 buffer by slot
//   down: one CTA per (live tile, 128 columns of D): W2 the same way, y [T*k, D] fp32 by slot
//   combine: out[t] = sum_j y[t*k + j] (j ascending; slots without an expert add nothing)
//            + y_shared[t]
// A tile of an expert with more than 16 rows streams the tile's weights once per 16 rows
// (the later passes mostly from L2); at decode nearly every expert has fewer rows.
//
// Determinism / batch invariance: each output element of a token is one fixed sequence of
// MMAs (its own column) and fp32 FMAs in ascending K, independent of the other tokens and of
// its column inside the MMA; the combine sums a token's slots in j order. So a token's output
// is bitwise the same alone and in any batch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/moe/moe_grouped_cuda.h"
#include "ops/moe/moe_w4a8.h"

namespace deepinfer {

constexpr int64_t kW4a8MaxTokens = 1024;  // decode sizes; prefill keeps the FP8 grouped path

// Stacks in the device format of moe_w4a8.h, expert e at e * (per-expert bytes):
//   w1, w3 codes [E, I, Dp/2], scales [E, I, Dp/32]; w2 codes [E, D, Ip/2], scales [E, D, Ip/32]
// (Dp, Ip: D, I rounded up to 128). All pointers 16-byte aligned.
struct MoeW4a8Weights {
  const uint8_t *w1 = nullptr, *s1 = nullptr;
  const uint8_t *w3 = nullptr, *s3 = nullptr;
  const uint8_t *w2 = nullptr, *s2 = nullptr;
};

// D % 32 == 0, I % 32 == 0, act_block 32 or 128, 1 <= T <= kW4a8MaxTokens (T == 0: nothing).
size_t moe_experts_w4a8_workspace_bytes(const MoeExpertsShape& s, int64_t act_block);

// The carve-up of the workspace (for tests and debugging).
struct MoeW4a8Workspace {
  MoeAlignBuffers align;
  uint8_t* xq = nullptr;  // [T, D] e4m3
  float* sx = nullptr;    // [T, ceil(D / act_block)] row-major
  uint8_t* hq = nullptr;  // [T*k, Ip] e4m3, by slot (K order of the kernel's operand layout)
  float* sh = nullptr;    // [T*k, Ip / act_block]
  float* y = nullptr;     // [T*k, D] fp32, by slot
};
MoeW4a8Workspace moe_experts_w4a8_workspace(const MoeExpertsShape& s, int64_t act_block,
                                            void* workspace);

// Which kernels run (both compute the same recipe; see sm90_moe_w4a8_decode.cu):
//   kPlain: one CTA per (tile, 128 rows), the whole K in one chain (the reference path);
//   kFast:  the weights staged through shared memory with cp.async (6 stages, no registers
//           held by loads in flight), the per-32 partials of a 128-wide activation block
//           summed before the activation scale, and optionally K split over a thread-block
//           cluster (moe_w4a8_set_fast_split; partial sums added in fixed cluster-rank order).
//           The same products in another fp32 order than kPlain (a few ulp, an h code may flip
//           at an e4m3 rounding boundary); still a function of the token alone (batch
//           invariant: no split or order depends on T).
enum class MoeW4a8Kernel { kPlain, kFast };

// out [T, D] = the routed experts (+ y_shared [T, D], may be null) as moe_experts_fp8_cuda,
// with W4A8 weights: x fp32 [T, D], ids int32 [T, k] (ids outside [0, E) get no row),
// weights fp32 [T, k]. Every element of out is written. workspace: 256-byte aligned,
// moe_experts_w4a8_workspace_bytes(s, act_block) bytes.
void moe_experts_w4a8_cuda(cudaStream_t stream, const MoeExpertsShape& s, int64_t act_block,
                           const float* x, const int32_t* ids, const float* weights,
                           const MoeW4a8Weights& w, const float* y_shared, void* workspace,
                           float* out, MoeW4a8Kernel kernel = MoeW4a8Kernel::kPlain);

}  // namespace deepinfer

namespace deepinfer {

// Benchmarks only: the kFast K splits (cluster sizes 1..8) of the up and the down projection
// (default 2, 2). Set once before any call: a token's bits depend on the split.
void moe_w4a8_set_fast_split(int up, int down);

// Benchmarks and tests: kPlain's tokens per pass, 16 or 8 (the narrow kernels: one n8 tile,
// 2 CTAs per SM for the up projection too; an expert with more rows takes more passes), or 0
// (default): 8 for 8 < T k and T <= 64, else 16 (measured; sm90_moe_w4a8_decode.cu). A token
// gets the same bits at either width; process-wide, set before any call.
void moe_w4a8_set_pass_max(int pass);

// The read-bandwidth ceiling the W4A8 benchmark reports beside the copy bandwidth: every
// 16-byte word of [p, p + bytes) read once with the kernel's own ld.global.nc.L1::no_allocate
// loads (bytes % 16 == 0, p 16-byte aligned), XOR-folded into *sink so nothing is elided.
void w4a8_read_probe_cuda(cudaStream_t stream, const void* p, int64_t bytes, uint32_t* sink);

}  // namespace deepinfer
