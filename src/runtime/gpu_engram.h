// GpuEngram: one Engram layer (MODEL_SPEC §C.8) on the CUDA device, for the V4.1 GpuModel.
// The device twin of Model::engram_block (src/model/engram_block.cc): per forward, before
// engram layer l runs (after layer l-1's FFN post, before layer l's attention mix),
//   hash (ops/engram/engram_cuda.h) -> gather + dequantise the n_cols table rows of each row
//   -> kv = engram.wkv . e (DeviceLinear, fp32 or FP8) -> gate + X_k += gamma_k value.
//
// Construction (once per engram layer, at load; allocates and uploads, synchronous):
//  * the layer's hash constants: engram_primes(cfg.engram)[slot of `layer`] (prime walk and
//    the committed NumPy multipliers), the token map uploaded to the device (int32 [n_tokens]);
//  * engram.wkv: fp32 as given, or FP8 e4m3 with b x b block scales quantised on the host
//    (b = fp8_weight_block(cfg): 32 for V4.1; runtime/fp8_weight_quant.h, as GpuModel's kFp8
//    projections); the gate weight
//    w = q_weight * k_weight (fp32 product, as the CPU computes it);
//  * the table, repacked per row (codes then scales, padded to 16 bytes:
//    engram_packed_row_bytes, 272 B for V4.1-Flash's head_dim 256) into device memory or into
//    pinned, mapped host memory read zero-copy by the gather kernel (placement below). The
//    host table (EngramWeights::table / table_scale) is not referenced after construction;
//  * scratch for max_rows rows: ids, e [rows, n_cols * hd], kv [rows, (n_hc + 1) D], and the
//    FP8 activation codes / scales.
//
// apply() enqueues four launches on ctx.stream(); it never allocates or synchronises and is
// CUDA-graph capturable (its launch sizes depend on n_rows only, like GpuModel's other
// launches: a graph bucket's padding rows are computed and ignored). Numerics against the CPU
// block: ids and the dequantised rows are bitwise the CPU's; the projection and the gate's
// sums differ only in reduction order (fp32), or by the FP8 quantisation of wkv and of e per
// 1 x b block (fp8_wkv). With batch_invariant every step is per row (rowwise fp32 / SIMT FP8
// GEMM; hash, gather and gate are per row already), so a row's update does not depend on the
// batch.
//
// Prefetch (options.prefetch; the plain path above stays the default and the oracle): the
// table rows only depend on the token history, known before layer 0 runs, so prefetch() on a
// side stream hashes and copies the rows raw into an HBM staging buffer
// (engram_gather_rows_cuda) while the main stream runs the layers before this one; the next
// apply() then waits for it (an event) and dequantises from the staging buffer instead of the
// table. Same values bit for bit (the same hash and the same dequantisation of the same bytes).
// The side stream first waits for everything enqueued on ctx.stream() before the call (an
// event), so the fork / join is graph-capturable and never races the previous forward.
//
// Thread-safety: apply() / prefetch() use the object's scratch: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "cuda/device_context.h"
#include "io/engram_token_map.h"
#include "io/model_config.h"
#include "model/weights.h"
#include "ops/engram/engram_cuda.h"
#include "runtime/device_linear.h"
#include "tensor/tensor.h"

namespace deepinfer {

// Where the table lives. kAuto: device memory when the packed table is at most
// device_table_max_bytes, else pinned host memory.
enum class EngramTablePlacement { kAuto, kDevice, kPinnedHost };

struct GpuEngramOptions {
  int64_t max_rows = 512;  // rows of one apply (GpuModel: max_batch_tokens, or the graph bucket)
  bool fp8_wkv = false;    // engram.wkv as FP8 (GpuModel's WeightFormat::kFp8), else fp32
  bool batch_invariant = false;
  EngramTablePlacement placement = EngramTablePlacement::kAuto;
  int64_t device_table_max_bytes = int64_t{1} << 30;
  bool round_bf16 = false;  // round the updated streams to bf16 (EngramLayerParams::round_bf16)
  bool prefetch = false;    // allocate the staging buffer of prefetch() (max_rows * n_cols rows)
};

class GpuEngram {
 public:
  // `layer`: a layer id in cfg.engram.layer_ids; `w`: that layer's LayerWeights::engram
  // (load_model_weights); `map`: ModelWeights::engram_map. Throws deepinfer::Error naming
  // the problem: kInvalidInput for a layer without Engram, inconsistent shapes (a table
  // shorter than the prime walk, wkv / q / k shapes), a token map that disagrees with the
  // config's compressed vocabulary; CUDA errors as CUDA_CHECK throws them.
  GpuEngram(const ModelConfig& cfg, int64_t layer, const EngramWeights& w, const EngramTokenMap& map,
            const GpuEngramOptions& options = {});
  ~GpuEngram();
  GpuEngram(const GpuEngram&) = delete;
  GpuEngram& operator=(const GpuEngram&) = delete;

  // Updates the streams of n_rows rows in place (n_rows <= max_rows, else kInvalidInput).
  //  history: device int32 [n_rows, max_ngram()], row-major: history[r * max_ngram() + k] is the
  //    raw token id k positions before row r's position in its own sequence (k = 0: row r's
  //    own token), or -1 where that position is before the sequence start or is a dead
  //    (image) token. Exactly engram_ngram_rows (ops/engram/engram.h) of the row's sequence:
  //    the CALLER builds it on the host per forward (GpuModel's step planning: for each chunk,
  //    the last max_ngram() - 1 committed tokens of its sequence, which the runner keeps as
  //    the CPU Model keeps SequenceState::recent_tokens, followed by the chunk's tokens; -1
  //    for image positions) and uploads it with the rest of the row metadata, before the first
  //    kernel of the forward; one array serves every engram layer of the model (they share
  //    max_ngram). Token ids must be < the token map's size (the runner validates tokens
  //    against the vocabulary, which the map covers). A row whose own token is -1 (dead) keeps
  //    its streams (gamma = 0).
  //  x: device fp32 [n_rows, hc_mult, hidden_size], the residual streams.
  void apply(cuda::DeviceContext& ctx, const int32_t* history, int64_t n_rows, float* x);

  // Enqueues on `side` (after a wait for the work already on ctx.stream()) the hash and the
  // raw gather of the rows of the next apply(), which must then get the same history pointer
  // and n_rows (kInvalidInput otherwise) and consumes the prefetch. Needs options.prefetch.
  void prefetch(cuda::DeviceContext& ctx, cudaStream_t side, const int32_t* history,
                int64_t n_rows);

  int64_t layer() const { return layer_; }
  int max_ngram() const { return tables_.max_ngram; }
  int64_t max_rows() const { return options_.max_rows; }
  const EngramLayerTables& tables() const { return tables_; }
  bool table_on_device() const { return table_on_device_; }
  int64_t table_bytes() const { return table_bytes_; }    // the packed table (host or device)
  int64_t device_bytes() const { return device_bytes_; }  // device memory this object holds
  // The ids [n_rows, n_cols] of the last apply (device; valid until the next apply).
  const int64_t* last_ids() const { return ids_.data<int64_t>(); }

 private:
  void pack_table(const EngramWeights& w, uint8_t* dst, int64_t r0, int64_t r1) const;  // rows [r0, r1)

  GpuEngramOptions options_;
  int64_t layer_ = 0;
  int n_hc_ = 0;
  int64_t dim_ = 0;
  float eps_ = 1e-20f;
  EngramLayerTables tables_;
  EngramHashCudaParams hash_params_;
  EngramTableView view_;
  bool table_on_device_ = false;
  int64_t table_bytes_ = 0, device_bytes_ = 0;
  Tensor pinned_;  // kPinnedHost: the cudaHostAlloc'ed (mapped) table; freed with the object
  Tensor token_map_, table_device_, w_gate_, wkv32_, wkvq_, wkvs_;
  DeviceLinear wkv_;
  Tensor ids_, e_, kv_, act_q_, act_s_;
  Tensor staging_;                  // prefetch: [max_rows * n_cols, packed row bytes]
  cudaEvent_t ready_ = nullptr, done_ = nullptr;  // prefetch fork / join
  const int32_t* prefetched_history_ = nullptr;
  int64_t prefetched_rows_ = -1;    // -1: no prefetch pending
};

}  // namespace deepinfer
