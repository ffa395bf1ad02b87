// Test driver for tests/io/interop/check_safetensors.py (the reference `safetensors`
// library on the other side):
//   safetensors_tool dump FILE    prints {"metadata": {..}, "tensors": {name: {dtype, shape,
//                                 hex}}} as read by SafetensorsFile, or the error on stderr
//   safetensors_tool write FILE   writes one [3, 5] tensor per dtype, "t_<DTYPE>", with
//                                 byte i of tensor k = (37 i + 11 k) mod 256 (BOOL: (i+k) mod 2)
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"

using namespace deepinfer;

namespace {

const DType kAll[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E8M0,
                      DType::I64, DType::I32, DType::I16, DType::I8,  DType::U8,      DType::BOOL};

int dump(const std::string& path) {
  auto file = SafetensorsFile::open(path);
  nlohmann::json out = {{"metadata", file->metadata()}, {"tensors", nlohmann::json::object()}};
  for (const std::string& name : file->names()) {
    const TensorInfo& info = file->info(name);
    std::string hex;
    const uint8_t* p = file->bytes(name);
    char buf[3];
    for (size_t i = 0; i < info.nbytes; ++i) {
      std::snprintf(buf, sizeof(buf), "%02x", p[i]);
      hex += buf;
    }
    out["tensors"][name] = {{"dtype", dtype_name(info.dtype)}, {"shape", info.shape}, {"hex", hex}};
  }
  std::cout << out.dump() << "\n";
  return 0;
}

int write(const std::string& path) {
  std::map<std::string, Tensor> tensors;
  int k = 0;
  for (DType d : kAll) {
    Tensor t = Tensor::empty(d, {3, 5});
    auto* p = static_cast<uint8_t*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) {
      p[i] = d == DType::BOOL ? static_cast<uint8_t>((i + k) % 2) : static_cast<uint8_t>((37 * i + 11 * k) % 256);
    }
    tensors[std::string("t_") + dtype_name(d)] = t;
    ++k;
  }
  write_safetensors(path, tensors, {{"format", "pt"}, {"writer", "deepinfer"}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: safetensors_tool dump|write FILE\n";
    return 2;
  }
  try {
    const std::string cmd = argv[1];
    if (cmd == "dump") return dump(argv[2]);
    if (cmd == "write") return write(argv[2]);
    std::cerr << "unknown command " << cmd << "\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
