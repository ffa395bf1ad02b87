// Test instrumentation of GpuModel's MTP-1 drafter (runtime/gpu_mtp.cc): while a GpuMtpTrace
// is installed, the chained draft step `step` of every GpuModel::draft copies row 0 (the
// first sequence of the call) of each intermediate value to the host right after the stage
// that produced it (synchronising the stream each time), by stage name. A test feeds each
// stage's recorded GPU input to the CPU reference op and compares its output with the
// recorded GPU output, so a difference is localised to one stage instead of accumulating
// through the block (tests/runtime/test_gpu_mtp_cuda.cc, Fp8StagesAgainstTheEmulation).
//
// Stages, in order (widths: D hidden, hc streams, Rq q rank, H*d heads, d head_dim, E experts,
// k experts per token, Is shared width, V vocabulary):
//   h_in [hc*D] input streams (step 0: X^L[p]), e [D] enorm(embed(token)), ep [D] e_proj(e),
//   hn [hc*D] hnorm(h_in), hp [hc*D] h_proj(hn), z_in [hc*D] the block's input streams,
//   x_attn [D] attn_norm(collapse), q_r [Rq] wq_a(x_attn), q_rn [Rq] q_norm(q_r),
//   q [H*d] wq_b(q_rn) (+ per-head norm, before RoPE), kv_raw [d] wkv(x_attn),
//   kv [d] kv_norm(kv_raw) (before RoPE), o [H*d] attention output after the inverse RoPE,
//   y_attn [D] the grouped output projection, z_attn [hc*D], x_ffn [D] ffn_norm(collapse),
//   router [E] gate logits (fp32), route_ids [k], route_w [k], shared_act [Is]
//   SwiGLU(sw1 x, sw3 x), y_shared [D] sw2(shared_act), y_moe [D] routed + shared,
//   z_out [hc*D], h [D] hc_head, h_norm [D] norm(h), logits [V] head(h_norm).
// route_ids are stored as floats. One trace at a time; not thread-safe (as GpuModel).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace deepinfer {

struct GpuMtpTrace {
  int64_t step = 0;                                   // the chained draft step recorded
  std::map<std::string, std::vector<float>> values;  // stage -> row 0's values
};

// Installs `trace` (nullptr: none) for the following GpuModel::draft calls.
void set_gpu_mtp_trace(GpuMtpTrace* trace);

}  // namespace deepinfer
