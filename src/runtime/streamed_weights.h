// StreamedWeights: a checkpoint's ModelWeights whose tensors are placeholders, for loaders that
// convert each tensor only when it goes to the device (runtime/gpu_weight_stream.h), never
// building the host fp32 model.
//
// The checkpoint is opened as a deferred WeightStore (io/weight_loader.h LoadOptions::defer:
// names, pairing, dtype / shape checks, nothing converted), then load_model_weights runs over
// it as for the CPU, so every check of the eager path (missing, wrong shape or dtype,
// unexpected tensors, MTP detection) applies unchanged. Each tensor it takes is a placeholder:
// a Tensor of the converted dtype and shape whose data pointer lies in an address range
// reserved PROT_NONE (no memory behind it: touching it faults at once instead of reading
// garbage), one disjoint span per tensor, so pointer arithmetic inside a tensor (e.g. a group
// of wo_a) still identifies it. find() maps any pointer inside a span back to its tensor's
// StoredTensor and element offset; owner_of() finds the StreamedWeights whose range holds a
// pointer (a process-wide registry, so the pointers can travel inside a plain ModelWeights).
// Tensors the store holds converted (Engram tables kept as views, fused HF experts) are handed
// out as they are, not as placeholders.
//
// Thread-safety: construction and find() from any thread once built; owner_of is guarded.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "io/model_config.h"
#include "io/weight_loader.h"
#include "model/weights.h"

namespace deepinfer {

// What the host path (load_model_weights over the eager WeightStore) would hold for the
// checkpoint at `path`, from its headers only: 4 bytes per converted element (FP4 weights
// unpack to two elements per byte; scales are consumed; Engram tables stay mapped and are not
// counted). For refusing a checkpoint that cannot load that way before trying.
double host_fp32_load_bytes(const std::string& path);
// MemAvailable of /proc/meminfo in bytes (-1 if unknown).
double host_memory_available();

class StreamedWeights {
 public:
  // Opens `path` (Checkpoint::open) and builds the placeholder ModelWeights. Throws the
  // loaders' Errors naming the tensor for a bad checkpoint.
  StreamedWeights(const std::string& path, const ModelConfig& config);
  ~StreamedWeights();
  StreamedWeights(const StreamedWeights&) = delete;
  StreamedWeights& operator=(const StreamedWeights&) = delete;

  const ModelWeights& weights() const { return weights_; }
  const std::string& path() const { return path_; }

  struct Where {
    const StoredTensor* tensor = nullptr;
    int64_t offset = 0;  // elements from the tensor's first one
  };
  // The placeholder tensor holding `p`, or nullopt.
  std::optional<Where> find(const void* p) const;
  bool contains(const void* p) const;
  static StreamedWeights* owner_of(const void* p);

  // Tensors handed out as they are stored (Engram tables) that are views of the mapped
  // checkpoint: whether [p, p + n) lies inside one, and release_view_bytes, which drops the
  // process's pages of that range (io/weight_stream.h release_mapped_bytes; a later read faults
  // them back in from the file) when it does and does nothing otherwise (never on memory
  // that is not a file mapping, where dropping pages would zero it).
  bool in_mapped_view(const void* p, size_t n) const;
  void release_view_bytes(const void* p, size_t n) const;

  // Stored bytes (weight + scale) of all placeholder tensors, and the largest one.
  size_t stored_bytes() const { return stored_bytes_; }
  size_t largest_stored_bytes() const { return largest_stored_bytes_; }
  size_t placeholders() const { return spans_.size(); }

 private:
  class Source;
  Tensor placeholder(StoredTensor st);
  void note_view(const StoredTensor& st);  // records a handed-out view of the mapping

  std::string path_;
  WeightStore store_;
  uint8_t* base_ = nullptr;
  size_t reserved_ = 0, used_ = 0;
  std::map<uintptr_t, std::unique_ptr<StoredTensor>> spans_;  // span start -> tensor
  std::map<uintptr_t, uintptr_t> mapped_views_;                // view start -> end (take_raw)
  size_t stored_bytes_ = 0, largest_stored_bytes_ = 0;
  ModelWeights weights_;
};

}  // namespace deepinfer
