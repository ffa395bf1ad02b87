// safetensors files: a strict, zero-copy reader (mmap) and a writer.
//
// Format (https://huggingface.co/docs/safetensors): 8-byte little-endian header length N,
// N bytes of JSON, then the data section. The JSON object maps tensor names to
// {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]} (offsets relative to the
// data section); an optional "__metadata__" entry maps strings to strings.
//
// The reader validates everything before exposing a tensor: header length within the
// file (and at most 100 MB), a JSON object, known dtypes (F64 F32 F16 BF16 F8_E4M3
// F8_E8M0 I64 I32 I16 I8 U8 BOOL), non-negative shapes, begin <= end, end within the file,
// end - begin == numel * dtype size, no two tensors overlapping. Every error is a
// deepinfer::Error whose message names the file (and the tensor when there is one).
// Gaps between tensors and trailing bytes after the last one are tolerated.
//
// Thread-safety: a SafetensorsFile is immutable after open(); all const methods may be
// called concurrently.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace deepinfer {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  size_t offset = 0;  // byte offset of the first element, from the start of the file
  size_t nbytes = 0;  // == numel * dtype_size(dtype)
};

class SafetensorsFile : public std::enable_shared_from_this<SafetensorsFile> {
 public:
  // Maps and validates `path`. Throws kNotFound if it cannot be opened, kInvalidInput
  // for a malformed file.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }
  // Tensor names, sorted.
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& name) const { return infos_.count(name) != 0; }
  // Throws kNotFound naming the tensor and the file.
  const TensorInfo& info(const std::string& name) const;
  // Zero-copy view into the mapping (the view keeps the mapping alive). The memory is
  // mapped read-only: never write through it. The data may be unaligned for its dtype
  // (only the writer below guarantees alignment); read it with memcpy or clone() it.
  Tensor tensor(const std::string& name) const;
  // The raw bytes of a tensor (same lifetime rules as tensor()).
  const uint8_t* bytes(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void parse_header();

  std::string path_;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, TensorInfo> infos_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (host tensors, any dtype) to `path` atomically (a temporary file in
// the same directory, then rename). The header is padded with spaces to a multiple of 8
// bytes and tensors are laid out by decreasing element size, then name, with no gaps,
// so every tensor is aligned for its dtype and the file is valid for other readers too.
void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace deepinfer
