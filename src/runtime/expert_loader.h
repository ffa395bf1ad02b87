// CheckpointExperts: the routed experts of a checkpoint as GpuModel's kFp8 format stores
// them, taken from the checkpoint's own quantised tensors instead of re-quantising the fp32
// values io dequantised (issue 4, deliverable 3; MODEL_SPEC §B.1-B.2):
//  * FP4 experts (`layers.L.ffn.experts.E.wX.weight` I8/U8 [n, k/2] + `.scale` F8_E8M0
//    [n, k/32]) are converted to block FP8 by io/fp4_to_fp8.h under Fp4ToFp8Policy::kExact:
//    the result dequantises to exactly io's FP4 values, and a matrix without an exact form
//    fails with an Error naming the tensor;
//  * block-FP8 experts (F8_E4M3 [n, k] + F8_E8M0 scales, 128x128 blocks in the config's
//    quantization_config) are taken as they are;
//  * anything else (bf16 / fp32 experts, HF checkpoints whose experts are fused, other block
//    sizes or scale dtypes) is kOther: the caller quantises the host fp32 values itself.
// The packed FP4 form stays available (fp4()), so a later W4A8 kernel can take the codes
// instead of the FP8 conversion.
//
// Thread-safety: const methods may run concurrently; fp8() updates the counters (one thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "io/checkpoint.h"
#include "io/fp4_to_fp8.h"
#include "io/model_config.h"
#include "tensor/tensor.h"

namespace deepinfer {

enum class ExpertStorage { kOther, kFp8Block, kFp4 };

// The packed FP4 matrix as stored: codes I8/U8 [n, k/2], scales F8_E8M0 [n, ceil(k/32)]
// (read-only views into the mapped checkpoint).
struct Fp4Packed {
  Tensor codes;
  Tensor scale;
};

class CheckpointExperts {
 public:
  // Opens the checkpoint at `path` (Checkpoint::open: a directory or one file).
  CheckpointExperts(const std::string& path, const ModelConfig& config);

  // How routed expert `expert` of `layer`, matrix w ("w1", "w2" or "w3"), is stored.
  ExpertStorage storage(int64_t layer, int64_t expert, const std::string& w) const;
  // kFp4 only (ICHECKed): the stored pair.
  Fp4Packed fp4(int64_t layer, int64_t expert, const std::string& w) const;
  // The matrix [n, k] in block FP8 (F8_E4M3 [n, k] + F8_E8M0 [ceil(n/128), ceil(k/128)]):
  // FP4 converted exactly, block FP8 as stored (views); nullopt for kOther. Throws Error
  // naming the tensor when it is not [n, k], when an FP4 matrix has no exact FP8 form, or on
  // an e8m0 NaN scale.
  std::optional<Fp8BlockWeight> fp8(int64_t layer, int64_t expert, const std::string& w,
                                    int64_t n, int64_t k);

  int64_t n_fp4_converted() const { return n_fp4_converted_; }  // by fp8(), all exact
  int64_t n_fp8_as_stored() const { return n_fp8_as_stored_; }
  const std::string& path() const { return checkpoint_.path(); }

 private:
  Checkpoint checkpoint_;
  int64_t block_n_ = 0, block_k_ = 0;
  int64_t n_fp4_converted_ = 0, n_fp8_as_stored_ = 0;
};

}  // namespace deepinfer
