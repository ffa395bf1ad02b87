// CUDA entries of the KV compressor (MODEL_SPEC §A.5; CPU: compress_pool.h and
// Model::compressor_step) over a batch of chunks, with the per-sequence state in device
// memory. Width w (d_c); c = 2 for the overlapping ratio-4 compressor, else 1; cw = c * w.
//
// State of one sequence (slot) for one compressor: a ring of the last 2m positions' a and z
// values, ring_a / ring_z + (slot * 2m + p % 2m) * cw (z there already includes ape), and
// its emitted entries, entries + (slot * max_entries + e) * w.
//
// Per call (rows of the batch; int32 per-row metadata as in sparse_attention_cuda.h):
//  1. compressor_add_ape_cuda: z[r, :] += ape[positions[r] % m, :]   (z [n_rows, cw]).
//  2. compressor_emit_cuda: for each emitting row r (positions[r] + 1 ≡ 0 mod m, listed in
//     emit_rows [n_emit]), entry e = positions[r] / m pools the 2m (overlap: A halves of
//     window e-1, weight 0 when e == 0, then B halves of window e) or m slots with a
//     per-channel softmax over z, then RMSNorm (weight norm_w, eps), RoPE on the last
//     rope_dim channels at position m * e (inv_freq [rope_dim / 2]), and writes the entry.
//     Positions of the current chunk come from a / z, older ones from the ring.
//  3. ring_store_cuda (runtime) then writes the chunk's a / z rows into the ring; it must run
//     after 2 (the emission reads the ring's older positions).
// qat (official numerics, MODEL_SPEC §A.10) is applied to the finished entry as the CPU
// does: kFp8Nope = fp8_roundtrip over the first w - rope_dim values (blocks of 64; main
// compressor), kHadamardFp4 = hadamard_transform then fp4_roundtrip (blocks of 32; indexer
// compressor, w a power of two), kFp4E4m3 = fp4_roundtrip_e4m3_scale over all w values
// (blocks of 16, e4m3 scales; V4.1 compressed entries, MODEL_SPEC §C.5). kNone = reference
// numerics. latent_by_row (optional, V4.1 index-key owners) receives the pooled, normalised
// entry before RoPE and QAT at row r (the latent the index keys are projected from, §C.7).
// No position bias: compressor_add_ape_cuda is simply not called (V4.1); no gate (V4.1
// ratio 1): z = 0, so the single slot's weight is exactly 1. fp32. Run on `stream`; no
// allocation or sync.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

enum class CompressorQat { kNone, kFp8Nope, kHadamardFp4, kFp4E4m3 };

struct CompressorEmitParams {
  const float* a = nullptr;  // [n_rows, cw] current chunk rows
  const float* z = nullptr;  // [n_rows, cw] (ape added)
  const float* ring_a = nullptr;
  const float* ring_z = nullptr;
  // Positions per slot of the rings (ring + (slot * ring_len + p % ring_len) * cw); 0 = 2m.
  // Larger rings (2m + the rollback depth, GpuModelOptions::max_rollback) keep rolled-back
  // positions from overwriting older ones a later emission reads.
  int64_t ring_len = 0;
  float* entries = nullptr;
  int64_t max_entries = 0;
  // true: the entry of emitting row r goes to entries + r * width instead (a [n_rows, width]
  // staging buffer that a paged cache store reads; max_entries unused).
  bool entries_by_row = false;
  int64_t ratio = 0;  // m
  int64_t width = 0;  // w
  bool overlap = false;
  const int32_t* emit_rows = nullptr;
  int64_t n_emit = 0;
  // Optional: the emitting-row count on the device. When set, n_emit is only the launch's
  // upper bound (e.g. the rows of a CUDA-graph bucket) and rows j >= *n_emit_device of
  // emit_rows are skipped, so one captured launch serves every step.
  const int32_t* n_emit_device = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* slot = nullptr;
  const int32_t* chunk_start = nullptr;
  const int32_t* chunk_row0 = nullptr;
  const float* norm_w = nullptr;
  float eps = 1e-6f;
  int64_t rope_dim = 0;
  const float* inv_freq = nullptr;
  CompressorQat qat = CompressorQat::kNone;
  float* latent_by_row = nullptr;  // [n_rows, width] pre-RoPE latents of emitting rows
};

void compressor_add_ape_cuda(cudaStream_t stream, float* z, const float* ape,
                             const int32_t* positions, int64_t n_rows, int64_t ratio, int64_t cw);
void compressor_emit_cuda(cudaStream_t stream, const CompressorEmitParams& p);

}  // namespace deepinfer
