// Sizing of the CUDA runner (no CUDA types, so it is unit-tested on the CPU): how many
// sequences fit in device memory. GpuModel (runtime/gpu_model.h) allocates everything at
// construction: weights, activation buffers for max_batch_tokens rows, and dense state pools
// of max_context tokens for each of max_sequences sequences. This estimates those three parts
// from the config (mirroring gpu_model.cc's allocations) and divides what the utilisation
// target leaves after weights and activations by the per-sequence state.
#pragma once

#include <cstdint>
#include <string>

#include "io/model_config.h"

namespace deepinfer {

struct GpuSizing {
  int64_t weight_bytes = 0;      // device weights (fp32, or FP8 codes + block scales)
  int64_t activation_bytes = 0;  // per-forward buffers + cuBLASLt workspace
  int64_t state_bytes_per_sequence = 0;  // window ring, compressor rings, compressed entries
  // NOTE (F2): GpuModel's state is now paged (FP8 584-byte / bf16 entries by default, fp32 only
  // with paged_kv off). plan_gpu_state(config, options) in runtime/gpu_state_plan.h gives the
  // exact bytes (header-only, no CUDA): state_bytes_per_sequence() per sequence plus
  // fixed_state_bytes() once; this estimate (dense fp32) overstates the paged state.
};

// `fp8_weights`: projections, experts and the head stored as FP8 e4m3 with 128x128 fp32
// block scales; everything else fp32.
GpuSizing estimate_gpu_sizing(const ModelConfig& config, int64_t max_context, int64_t max_batch_tokens,
                              bool fp8_weights);

// Sequences that fit: the engine may use `utilization` of `total_bytes`, less what others
// already use (total - free). Returns min(max_sequences, fit); 0 when not even one fits.
int64_t gpu_sequences_that_fit(const GpuSizing& sizing, int64_t free_bytes, int64_t total_bytes,
                               double utilization, int64_t max_sequences);

// "weights 1.2 GiB, activations 0.3 GiB, 12.0 MiB per sequence" for the start-up log.
std::string gpu_sizing_summary(const GpuSizing& sizing);

}  // namespace deepinfer
