// Graph: one captured CUDA graph (move-only), for replaying a fixed sequence of kernels
// (a decode step of one batch-size bucket) with one launch.
//
//   Graph g = Graph::capture(stream, [&] { enqueue_work(stream); });
//   g.launch(stream);   // replays the captured kernels with the pointers they were given
//
// Capture uses cudaStreamCaptureModeThreadLocal: work that this thread enqueues on
// `stream` is recorded, not run; a synchronising call inside the capture (cudaMemcpy,
// cudaStreamSynchronize, an allocation) fails the capture, and capture() throws an Error
// naming the failing call. Inputs of a replay are passed through device buffers whose
// addresses were fixed at capture time (the caller updates their contents before launch).
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace deepinfer::cuda {

class Graph {
 public:
  Graph() = default;
  // Records what `enqueue` puts on `stream` and instantiates it. Throws Error(kDevice) if the
  // capture was invalidated (e.g. a host synchronisation inside `enqueue`); the stream is
  // left out of capture mode either way.
  static Graph capture(cudaStream_t stream, const std::function<void()>& enqueue);
  ~Graph();
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  bool empty() const { return exec_ == nullptr; }
  // Enqueues one replay on `stream` (asynchronous).
  void launch(cudaStream_t stream) const;
  size_t n_nodes() const { return n_nodes_; }

 private:
  void reset();

  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  size_t n_nodes_ = 0;
};

}  // namespace deepinfer::cuda
