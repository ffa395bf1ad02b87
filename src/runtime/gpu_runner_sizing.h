// Sizing of the CUDA runner (no CUDA types, so it is unit-tested on the CPU): how many
// sequences fit in device memory. GpuModel (runtime/gpu_model.h) allocates everything at
// construction: weights, activation buffers for max_batch_tokens rows, and state pools of
// max_context tokens for each of max_sequences sequences. This estimates weights and
// activations from the config (mirroring gpu_model.cc's allocations) and divides what the
// utilisation target leaves after them by the per-sequence state.
#pragma once

#include <cstdint>
#include <string>

#include "io/model_config.h"

namespace deepinfer {

struct GpuSizing {
  int64_t weight_bytes = 0;      // device weights (fp32, or FP8 codes + block scales)
  int64_t activation_bytes = 0;  // per-forward buffers + cuBLASLt workspace
  // estimate_gpu_sizing: the plain (dense fp32) pools. CudaRunner replaces it by GpuModel's
  // own plan (plan_gpu_state in runtime/gpu_state_plan.h: paged FP8 / bf16 entries) and adds
  // that plan's fixed state bytes to activation_bytes.
  int64_t state_bytes_per_sequence = 0;
};

// `fp8_weights`: projections, experts and the head stored as FP8 e4m3 with fp32 block scales
// (128x128, V4.1 32x32: fp8_weight_block); everything else fp32. `w4a8_experts`: the routed
// experts kept FP4 with UE8M0 scales per 32 (GpuModel's expert_format w4a8), about half of
// their FP8 bytes.
GpuSizing estimate_gpu_sizing(const ModelConfig& config, int64_t max_context, int64_t max_batch_tokens,
                              bool fp8_weights, bool w4a8_experts = false);

// Sequences that fit: the engine may use `utilization` of `total_bytes`, less what others
// already use (total - free). Returns min(max_sequences, fit); 0 when not even one fits.
int64_t gpu_sequences_that_fit(const GpuSizing& sizing, int64_t free_bytes, int64_t total_bytes,
                               double utilization, int64_t max_sequences);

// "weights 1.2 GiB, activations 0.3 GiB, 12.0 MiB per sequence" for the start-up log.
std::string gpu_sizing_summary(const GpuSizing& sizing);

}  // namespace deepinfer
