// src/cuda helpers: errors carry the call and the CUDA error, memory round-trips, the arena
// aligns and refuses to overflow, events time device work.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "cuda/device_arena.h"
#include "cuda/device_buffer.h"
#include "cuda/device_context.h"
#include "cuda/device_tensor.h"
#include "cuda/event.h"
#include "cuda/stream.h"

namespace deepinfer::cuda {
namespace {

TEST(CudaCheck, ThrowsDeviceErrorNamingTheCall) {
  try {
    CUDA_CHECK(cudaSetDevice(12345));
    FAIL() << "expected an exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDevice);
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaSetDevice(12345)"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorInvalidDevice"), std::string::npos) << what;
  }
  cudaGetLastError();
  try {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(nullptr, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    FAIL() << "expected an exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDevice);
    EXPECT_NE(std::string(e.what()).find("CUBLAS_STATUS_"), std::string::npos) << e.what();
  }
}

TEST(DeviceMemory, TensorRoundTripAndOwnership) {
  std::vector<float> host(1000);
  std::iota(host.begin(), host.end(), -500.0f);
  Tensor h = Tensor::empty(DType::F32, {10, 100});
  std::memcpy(h.raw(), host.data(), h.nbytes());
  Tensor d = to_device(h);
  EXPECT_EQ(d.device(), Device::kCUDA);
  Tensor d2 = device_empty(DType::F32, {10, 100});
  copy_d2d_async(d2.raw(), d.raw(), d.nbytes(), nullptr);
  const Tensor back = to_host(d2);
  EXPECT_EQ(std::memcmp(back.raw(), host.data(), h.nbytes()), 0);
  Tensor shared = d;  // shallow copy keeps the memory alive after d goes away
  d = Tensor();
  EXPECT_EQ(std::memcmp(to_host(shared).raw(), host.data(), h.nbytes()), 0);
  EXPECT_THROW(copy_to_host(shared, h = Tensor::empty(DType::F32, {3}), nullptr), Error);
}

TEST(DeviceMemory, OutOfMemoryIsResourceExhausted) {
  try {
    DeviceBuffer huge(size_t{1} << 50);
    FAIL() << "allocated 1 PiB";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted) << e.what();
  }
  DeviceBuffer ok(1 << 20);  // the device still works afterwards
  EXPECT_NE(ok.data(), nullptr);
}

TEST(DeviceArena, AlignsAndRefusesOverflow) {
  DeviceArena arena(4096);
  void* a = arena.allocate(10);
  void* b = arena.allocate(10, 256);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 256, 0u);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 256);
  try {
    arena.allocate(4096);
    FAIL() << "arena overflow not detected";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
  }
  arena.reset();
  EXPECT_EQ(arena.allocate(4096), a);
}

TEST(StreamAndEvent, TimeACopy) {
  Stream s = Stream::create();
  DeviceBuffer src(64 << 20), dst(64 << 20);
  CUDA_CHECK(cudaMemsetAsync(src.data(), 1, src.bytes(), s));
  Event start, end;
  start.record(s);
  copy_d2d_async(dst.data(), src.data(), src.bytes(), s);
  end.record(s);
  end.synchronize();
  const float ms = Event::elapsed_ms(start, end);
  EXPECT_GT(ms, 0.0f);
  std::printf("  64 MiB d2d copy: %.3f ms (%.0f GB/s read+write)\n", ms,
              2.0 * src.bytes() / (ms * 1e6));
  s.synchronize();
}

TEST(DeviceContext, HasStreamHandleAndWorkspace) {
  DeviceContext ctx;
  EXPECT_NE(ctx.stream(), nullptr);
  EXPECT_NE(ctx.cublaslt(), nullptr);
  EXPECT_EQ(ctx.workspace_bytes(), DeviceContext::kDefaultWorkspaceBytes);
  EXPECT_NE(ctx.workspace(), nullptr);
}

}  // namespace
}  // namespace deepinfer::cuda
