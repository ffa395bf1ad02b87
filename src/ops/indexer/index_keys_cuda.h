// CUDA entry finishing the V4.1 index keys (MODEL_SPEC §C.7 step 1): a KV+index source
// projects each compressed latent (pre-RoPE, compress_pool_cuda.h latent_by_row) to
// key = k_norm(wk . latent) with the runtime's GEMM and RMSNorm over [n_rows, width]; this
// kernel then, for each emitting row r (emit_rows[j], j < n_emit, or < *n_emit_device when
// set: one launch serves every step of a CUDA graph), entry e = positions[r] / ratio:
//   1. RoPE on the trailing rope_dim values at position ratio * e (inv_freq [rope_dim / 2],
//      interleaved pairs, angle = float(ratio * e) * inv_freq[i], as RopeTable::apply);
//   2. fp4 (official numerics): fp4_roundtrip(key, width, 32) (e2m1, power-of-two scales);
//   3. writes the key to keys + (slot[r] * max_entries + e) * width (the source's dense
//      index keys), or keys + r * width when by_row (a staging buffer).
// keys_in [n_rows, width] is read only. The CPU reference is the composition of RopeTable::apply
// and fp4_roundtrip (tests/ops/test_index_keys_v41_cuda.cc). fp32; width <= 4096; device
// pointers; runs on `stream`; no allocation or sync; graph capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

struct IndexKeysFinishParams {
  const float* keys_in = nullptr;  // [n_rows, width]
  float* keys = nullptr;
  int64_t max_entries = 0;
  bool by_row = false;
  int64_t width = 0, rope_dim = 0, ratio = 1;
  const float* inv_freq = nullptr;
  bool fp4 = false;
  const int32_t* emit_rows = nullptr;
  int64_t n_emit = 0;
  const int32_t* n_emit_device = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* slot = nullptr;
};

void index_keys_finish_cuda(cudaStream_t stream, const IndexKeysFinishParams& p);

}  // namespace deepinfer
