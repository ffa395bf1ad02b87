// Helpers shared by the io tests: temporary directories, raw file writing, random
// tensors, and an assertion that a call throws a deepinfer::Error with given text.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/tensor.h"

namespace deepinfer::test {

// A fresh directory under the system temp dir, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "deepinfer_io_XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a literal header (and a declared length, default its size).
inline std::string raw_safetensors(const std::string& header, size_t data_bytes,
                                   int64_t declared_len = -1) {
  const uint64_t len = declared_len < 0 ? header.size() : static_cast<uint64_t>(declared_len);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out += header;
  out.append(data_bytes, '\x11');
  return out;
}

// Random bytes (any dtype).
inline Tensor random_tensor(DType dtype, Shape shape, uint32_t seed) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  std::mt19937 rng(seed);
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  return t;
}

// Random F32 values in [-1, 1).
inline Tensor random_f32(Shape shape, uint32_t seed) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng);
  return t;
}

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Runs fn, expects a deepinfer::Error of `kind` whose message contains every string in
// `needles`.
inline void expect_error(const std::function<void()>& fn, ErrorKind kind,
                         const std::vector<std::string>& needles) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(error_kind_name(e.kind()), std::string(error_kind_name(kind))) << e.what();
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "message \"" << e.what() << "\" does not mention \"" << needle << "\"";
    }
    return;
  }
  ADD_FAILURE() << "expected an Error mentioning " << (needles.empty() ? "" : needles[0]);
}

}  // namespace deepinfer::test
