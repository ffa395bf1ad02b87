// libFuzzer harness: a whole safetensors file (8-byte header length, JSON header, data) opened
// with SafetensorsFile::open (the loader's only entry), then every tensor it lists is wrapped
// and its first and last data byte read (ASan checks the offsets the parser accepted).
// The input lives in a memfd, so open() sees a regular file and mmaps it.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "io/safetensors.h"

using namespace deepinfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  if (fd < 0) fuzz::finding("memfd_create", "failed");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    fuzz::finding("memfd write", "failed");
  }
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  fuzz::expect_ok_or_refusal([&] {
    auto file = SafetensorsFile::open(path);
    volatile uint8_t sink = 0;
    for (const std::string& name : file->names()) {
      const TensorInfo& info = file->info(name);
      Tensor t = file->tensor(name);
      for (int64_t d : t.shape()) {
        if (d < 0) fuzz::finding("accepted tensor", "negative dimension");
      }
      if (t.nbytes() != info.nbytes) fuzz::finding("accepted tensor", "Tensor::nbytes() != the header's byte size");
      if (info.nbytes > 0) {
        const uint8_t* p = file->bytes(name);
        sink = sink + p[0] + p[info.nbytes - 1];
      }
    }
    for (const auto& [key, value] : file->metadata()) sink = sink + static_cast<uint8_t>(key.size() + value.size());
  });
  return 0;
}
