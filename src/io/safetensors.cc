#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace deepinfer {
namespace {

// The reference implementation refuses larger headers; so do we (a corrupt length
// field must not make us allocate or parse gigabytes).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

uint64_t read_le_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void write_le_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Reads a non-negative JSON integer; false if `v` is not one.
bool as_u64(const nlohmann::json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CHECK_KIND(kNotFound, fd >= 0) << "cannot open safetensors file '" << path
                                 << "': " << std::strerror(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    THROW(kInvalidInput) << "safetensors file '" << path << "' is not a regular file";
  }
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ < 8) {
    ::close(fd);
    THROW(kInvalidInput) << "safetensors file '" << path << "' is truncated: " << file->size_
                         << " bytes, less than the 8-byte header length field";
  }
  void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);
  CHECK_KIND(kResourceExhausted, p != MAP_FAILED)
      << "cannot mmap safetensors file '" << path << "': " << std::strerror(mmap_errno);
  file->base_ = static_cast<uint8_t*>(p);
  file->parse_header();
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

void SafetensorsFile::parse_header() {
  const uint64_t header_len = read_le_u64(base_);
  CHECK(header_len <= kMaxHeaderBytes)
      << "safetensors file '" << path_ << "': header length " << header_len
      << " is larger than the " << kMaxHeaderBytes << "-byte limit (corrupt file?)";
  CHECK(header_len <= size_ - 8) << "safetensors file '" << path_ << "': header length "
                                 << header_len << " runs past the end of the file ("
                                 << size_ << " bytes; truncated?)";
  const char* text = reinterpret_cast<const char*>(base_ + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + header_len);
  } catch (const nlohmann::json::exception& e) {
    THROW(kInvalidInput) << "safetensors file '" << path_ << "': header is not valid JSON ("
                         << e.what() << ")";
  }
  CHECK(header.is_object()) << "safetensors file '" << path_
                            << "': header is not a JSON object";
  const size_t data_start = 8 + static_cast<size_t>(header_len);
  const size_t data_size = size_ - data_start;

  for (const auto& [name, entry] : header.items()) {
    const std::string where = "safetensors file '" + path_ + "', tensor '" + name + "'";
    if (name == "__metadata__") {
      CHECK(entry.is_object()) << "safetensors file '" << path_
                               << "': __metadata__ is not a JSON object";
      for (const auto& [key, value] : entry.items()) {
        CHECK(value.is_string()) << "safetensors file '" << path_ << "': __metadata__ entry '"
                                 << key << "' is not a string";
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    CHECK(entry.is_object()) << where << ": entry is not a JSON object";
    CHECK(entry.contains("dtype") && entry["dtype"].is_string())
        << where << ": missing or non-string 'dtype'";
    CHECK(entry.contains("shape") && entry["shape"].is_array())
        << where << ": missing or non-array 'shape'";
    CHECK(entry.contains("data_offsets") && entry["data_offsets"].is_array() &&
          entry["data_offsets"].size() == 2)
        << where << ": missing 'data_offsets' or not a pair [begin, end]";

    TensorInfo info;
    info.name = name;
    const std::string dtype = entry["dtype"].get<std::string>();
    CHECK(dtype_from_string(dtype, &info.dtype)) << where << ": unknown dtype '" << dtype << "'";

    uint64_t numel = 1;
    for (const auto& dim : entry["shape"]) {
      uint64_t d = 0;
      CHECK(as_u64(dim, &d)) << where << ": shape entry " << dim.dump()
                             << " is not a non-negative integer";
      CHECK(d <= static_cast<uint64_t>(INT64_MAX)) << where << ": shape entry " << d << " is too large";
      CHECK(!__builtin_mul_overflow(numel, d, &numel)) << where << ": shape overflows";
      info.shape.push_back(static_cast<int64_t>(d));
    }
    uint64_t nbytes = 0;
    CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(info.dtype)), &nbytes))
        << where << ": byte size overflows";

    uint64_t begin = 0, end = 0;
    CHECK(as_u64(entry["data_offsets"][0], &begin) && as_u64(entry["data_offsets"][1], &end))
        << where << ": data_offsets are not non-negative integers";
    CHECK(begin <= end) << where << ": data_offsets [" << begin << ", " << end
                        << "] end before they begin";
    CHECK(end <= data_size) << where << ": data_offsets [" << begin << ", " << end
                            << "] run past the end of the data section (" << data_size
                            << " bytes; truncated file?)";
    CHECK(end - begin == nbytes) << where << ": " << (end - begin) << " bytes of data but dtype "
                                 << dtype << " and shape " << shape_str(info.shape) << " need "
                                 << nbytes << " bytes";
    info.offset = data_start + static_cast<size_t>(begin);
    info.nbytes = static_cast<size_t>(nbytes);
    infos_.emplace(name, std::move(info));
  }

  // Overlap check: sort the non-empty ranges by start.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& [name, info] : infos_) {
    names_.push_back(name);
    if (info.nbytes > 0) by_offset.push_back(&info);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->name < b->name;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    const TensorInfo& cur = *by_offset[i];
    CHECK(prev.offset + prev.nbytes <= cur.offset)
        << "safetensors file '" << path_ << "': tensors '" << prev.name << "' and '" << cur.name
        << "' overlap";
  }
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  CHECK_KIND(kNotFound, it != infos_.end())
      << "tensor '" << name << "' not found in safetensors file '" << path_ << "'";
  return it->second;
}

const uint8_t* SafetensorsFile::bytes(const std::string& name) const {
  return base_ + info(name).offset;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& i = info(name);
  return Tensor::wrap(base_ + i.offset, i.dtype, i.shape,
                      std::const_pointer_cast<SafetensorsFile>(shared_from_this()));
}

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const std::pair<const std::string, Tensor>*> order;
  for (const auto& entry : tensors) {
    CHECK(entry.first != "__metadata__") << "cannot write a tensor named __metadata__";
    CHECK(entry.second.device() == Device::kCPU)
        << "write_safetensors: tensor '" << entry.first << "' is not on the host";
    CHECK(entry.second.defined()) << "write_safetensors: tensor '" << entry.first
                                  << "' is undefined";
    order.push_back(&entry);
  }
  // Decreasing element size keeps every tensor aligned (the header is padded to 8).
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return dtype_size(a->second.dtype()) > dtype_size(b->second.dtype());
  });

  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto* entry : order) {
    const Tensor& t = entry->second;
    const uint64_t n = t.nbytes();
    header[entry->first] = {{"dtype", dtype_name(t.dtype())},
                            {"shape", t.shape()},
                            {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    CHECK_KIND(kNotFound, out.good()) << "cannot create '" << tmp << "'";
    uint8_t len[8];
    write_le_u64(len, text.size());
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto* entry : order) {
      const Tensor& t = entry->second;
      out.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
    }
    out.flush();
    CHECK_KIND(kResourceExhausted, out.good()) << "error writing '" << tmp << "'";
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  CHECK_KIND(kNotFound, !ec) << "cannot rename '" << tmp << "' to '" << path
                             << "': " << ec.message();
}

}  // namespace deepinfer
