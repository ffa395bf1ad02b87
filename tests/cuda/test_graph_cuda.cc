// cuda::Graph: a captured sequence replays with the contents its buffers hold at launch
// time, and a synchronising call inside a capture fails with an Error, leaving the stream
// usable.
#include <gtest/gtest.h>

#include <vector>

#include "base/error.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/graph.h"
#include "cuda/stream.h"

namespace deepinfer::cuda {
namespace {

TEST(Graph, ReplaysCapturedCopiesWithCurrentContents) {
  Stream s = Stream::create();
  constexpr size_t kN = 1000;
  DeviceBuffer src(kN * sizeof(int)), dst(kN * sizeof(int));
  Graph g = Graph::capture(s, [&] {
    CUDA_CHECK(cudaMemsetAsync(dst.data(), 0, kN * sizeof(int), s));
    CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), kN / 2 * sizeof(int),
                               cudaMemcpyDeviceToDevice, s));
  });
  EXPECT_FALSE(g.empty());
  EXPECT_EQ(g.n_nodes(), 2u);
  for (int round = 1; round <= 3; ++round) {
    std::vector<int> h(kN, round);
    CUDA_CHECK(cudaMemcpy(src.data(), h.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
    g.launch(s);
    s.synchronize();
    std::vector<int> out(kN, -1);
    CUDA_CHECK(cudaMemcpy(out.data(), dst.data(), kN * sizeof(int), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < kN; ++i) ASSERT_EQ(out[i], i < kN / 2 ? round : 0) << i;
  }
}

TEST(Graph, SynchronisingCallInsideCaptureThrowsAndStreamStaysUsable) {
  Stream s = Stream::create();
  DeviceBuffer buf(64);
  EXPECT_THROW(Graph::capture(s, [&] { CUDA_CHECK(cudaStreamSynchronize(s)); }), Error);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  CUDA_CHECK(cudaStreamIsCapturing(s, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  CUDA_CHECK(cudaMemsetAsync(buf.data(), 7, 64, s));
  s.synchronize();
}

}  // namespace
}  // namespace deepinfer::cuda
