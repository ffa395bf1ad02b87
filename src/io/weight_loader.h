// WeightStore: every tensor of a checkpoint under its NATIVE name (weight_names.h),
// as an owned host tensor ready for the CPU backend:
//  * F64 / F32 / F16 / BF16                   -> F32
//  * block-FP8 `X.weight` (F8_E4M3 [N, K]) + `X.scale` (F8_E8M0) or HF
//    `X.weight_scale_inv` (F32 / E8M0 / BF16), blocks from quantization_config
//    (default 128x128)                        -> F32 [N, K]
//  * FP4 `X.weight` (I8/U8 [N, K/2]) + `X.scale` (F8_E8M0 [N, K/32]) -> F32 [N, K]
//  * `*.tid2eid` (I32 or I64)                 -> I32
//  * other integer / bool tensors             -> kept as they are (copied)
//  * V4.1 Engram tables `layers.N.engram.embed.{weight,scale}` -> kept as they are, as views
//    of the checkpoint (FP8 codes + F8_E8M0 per 32 columns; too large to convert)
//  * V4.1 vision tensors (vision.*, aligner.*, image_*) -> skipped, with one log line
// Scale tensors that belong to a quantised weight are consumed and not exposed.
// HF checkpoints (any name starting with `model.` or `lm_head.`) are renamed to native
// names, and fused HF experts are split into `layers.N.ffn.experts.E.{w1,w2,w3}.weight`.
// `mtp.*` tensors are loaded like the others and stay available for the drafters.
//
// The model takes what it needs with take(); afterwards untaken_excluding("mtp.") (or
// check_all_taken()) lists what it did not recognise, so a stray tensor is an error:
//   auto store = WeightStore::load(dir, config);
//   Tensor wq_a = store.take("layers.0.attn.wq_a.weight", {cfg.q_lora_rank, cfg.hidden_size});
//   ...
//   store.check_all_taken();  // throws "unexpected tensor 'layers.0.foo'"
//
// Thread-safety: none (load, take and query from one thread).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/model_config.h"
#include "tensor/tensor.h"

namespace deepinfer {

struct LoadOptions {
  enum class Progress { kAuto, kOn, kOff };
  // kAuto: a progress bar on stderr only when stderr is a terminal.
  Progress progress = Progress::kAuto;
  // Deferred (the streaming GPU loader, runtime/gpu_weight_stream.h): names, pairing and
  // every check that needs no values run as above, but plain / block-FP8 / FP4 tensors are
  // not converted: each entry keeps its StoredTensor (take_stored) and its values are
  // converted later, a row range at a time (io/weight_stream.h). Engram tables stay views and
  // fused HF experts (float) are converted at load, as without defer.
  bool defer = false;
};

// One tensor of a deferred WeightStore: where its stored form is and what it converts to.
struct StoredTensor {
  enum class Kind { kPlain, kFp8, kFp4 };
  Kind kind = Kind::kPlain;
  std::string native;  // native name
  std::string origin;  // checkpoint name of the weight
  Tensor weight;       // the stored values (a view of the mapped checkpoint when `mapped`)
  Tensor scale;        // kFp8 / kFp4: the stored scales
  std::string scale_origin;
  Shape shape;               // of the converted tensor
  DType dtype = DType::F32;  // of the converted tensor (I32 for tid2eid, F32 for floats, else as stored)
  int64_t block_n = 0, block_k = 0;  // kFp8: the checkpoint's block grid
  // weight / scale are views of a mapped checkpoint file (their pages may be released after
  // use, io/weight_stream.h); false for tensors the store owns.
  bool mapped = false;
};

// The plain conversion of one tensor (F32 from floats; tid2eid to I32, checking the ids; other
// integer tensors copied; an FP8 tensor without scale is an Error naming its scale).
Tensor convert_plain_tensor(const std::string& native, const std::string& origin, const Tensor& t);

class WeightStore {
 public:
  WeightStore() = default;

  // Opens the checkpoint (directory or single file; see Checkpoint::open) and loads it.
  static WeightStore load(const std::string& path, const ModelConfig& config,
                          const LoadOptions& options = {});
  static WeightStore load(const Checkpoint& checkpoint, const ModelConfig& config,
                          const LoadOptions& options = {});
  // Same conversion pipeline on in-memory tensors (native or HF names, any supported
  // dtype), e.g. a generated model; `source` names them in error messages.
  static WeightStore from_tensors(const std::map<std::string, Tensor>& tensors,
                                  const ModelConfig& config, const std::string& source = "memory",
                                  const LoadOptions& options = {});
  // The largest stored tensor (weight + scale bytes) of a deferred store; 0 otherwise.
  size_t largest_stored_bytes() const;

  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  // The tensor `name`, marked as taken. Throws kNotFound "missing tensor 'NAME'" if absent,
  // kInvalidInput "tensor 'NAME' has shape [..], expected [..]" or "... dtype I8,
  // expected F32" on a mismatch. Without `dtype` the expected dtype is I32 for names
  // ending in ".tid2eid" and F32 for everything else.
  Tensor take(const std::string& name, const Shape& expected,
              std::optional<DType> dtype = std::nullopt);
  // Like take(), but returns an undefined Tensor if `name` is absent (a present tensor of
  // the wrong shape or dtype still throws).
  Tensor take_optional(const std::string& name, const Shape& expected,
                       std::optional<DType> dtype = std::nullopt);
  // Read access without marking as taken; throws kNotFound if absent.
  const Tensor& peek(const std::string& name) const;
  // take() for any store, deferred or not: the same checks (against the converted shape and
  // dtype), marks the tensor taken and returns how it is stored (a tensor the store holds
  // converted is a kPlain StoredTensor of itself: mapped = false, or true for a raw tensor
  // kept as a view of the mapped checkpoint, e.g. an Engram table).
  StoredTensor take_stored(const std::string& name, const Shape& expected,
                           std::optional<DType> dtype = std::nullopt);
  // The StoredTensor of a deferred entry (kept as stored, not converted); null otherwise.
  const StoredTensor* deferred(const std::string& name) const;

  // All native names, sorted.
  std::vector<std::string> names() const;
  size_t size() const { return entries_.size(); }
  // Names not taken yet that start with `prefix` ("" = all), sorted.
  std::vector<std::string> untaken(const std::string& prefix = "") const;
  // Names not taken yet that do NOT start with `excluded_prefix`, sorted.
  std::vector<std::string> untaken_excluding(const std::string& excluded_prefix) const;
  // Throws kInvalidInput "unexpected tensor 'NAME'" (the first few, and a count) if any
  // tensor outside `excluded_prefix` was not taken.
  void check_all_taken(const std::string& excluded_prefix = "mtp.") const;

  // Where the tensors came from (checkpoint path), for messages.
  const std::string& source() const { return source_; }
  bool loaded_hf_names() const { return hf_names_; }

 private:
  struct Entry {
    Tensor tensor;
    std::string origin;  // checkpoint name, if different from the native name
    bool taken = false;
    bool mapped_view = false;  // tensor is a view of the mapped checkpoint (raw tensors)
    std::shared_ptr<const StoredTensor> stored;  // deferred entries (tensor undefined)
  };
  static WeightStore build(const std::map<std::string, Tensor>& tensors, const ModelConfig& config,
                           const std::string& source, const LoadOptions& options, bool mapped);
  Entry& lookup(const std::string& name, const Shape& expected, std::optional<DType> dtype);

  std::map<std::string, Entry> entries_;
  std::string source_;
  bool hf_names_ = false;
};

}  // namespace deepinfer
