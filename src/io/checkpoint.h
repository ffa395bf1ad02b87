// Checkpoint: the safetensors files of one model, looked up by tensor name.
//
// Checkpoint::open(path) accepts
//  * a single .safetensors file;
//  * a directory with `model.safetensors.index.json` (sharded): its "weight_map" maps
//    tensor names to shard files in the same directory. Every shard must exist and hold
//    every tensor the index assigns to it; tensors a shard holds beyond the index are
//    included too;
//  * a directory with `model.safetensors`;
//  * otherwise a directory's `*.safetensors` files, all of them.
// A tensor name present in two files is an error naming both. Names are the checkpoint's
// own (native or HF); see weight_names.h for the mapping.
//
// Thread-safety: immutable after open(); const methods may be called concurrently.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace deepinfer {

class Checkpoint {
 public:
  // Throws kNotFound (missing path / shard / tensor listed in the index) or kInvalidInput.
  static Checkpoint open(const std::string& path);

  // The directory (or the single file) it was opened from.
  const std::string& path() const { return path_; }
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  // All tensor names, sorted.
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  // The file holding `name`; throws kNotFound naming the tensor and the checkpoint.
  const SafetensorsFile& file_of(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const { return file_of(name).info(name); }
  // Zero-copy, read-only view (see SafetensorsFile::tensor).
  Tensor tensor(const std::string& name) const { return file_of(name).tensor(name); }
  // Total bytes of tensor data.
  size_t total_bytes() const;

 private:
  void add_file(std::shared_ptr<SafetensorsFile> file);

  std::string path_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // name -> index into files_
  std::vector<std::string> names_;
};

}  // namespace deepinfer
