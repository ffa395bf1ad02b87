#include "cuda/graph.h"

#include <exception>
#include <utility>

#include "base/error.h"
#include "cuda/cuda_check.h"

namespace deepinfer::cuda {

Graph Graph::capture(cudaStream_t stream, const std::function<void()>& enqueue) {
  ICHECK(stream != nullptr) << "Graph::capture needs a non-default stream";
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  Graph g;
  std::exception_ptr error;
  try {
    enqueue();
  } catch (...) {
    error = std::current_exception();
  }
  // Always end the capture, so the stream is usable after a failure.
  const cudaError_t end = cudaStreamEndCapture(stream, &g.graph_);
  if (error) {
    if (g.graph_ != nullptr) cudaGraphDestroy(std::exchange(g.graph_, nullptr));
    cudaGetLastError();
    std::rethrow_exception(error);
  }
  if (end != cudaSuccess) {
    cudaGetLastError();
    THROW(kDevice) << "CUDA graph capture failed: " << cudaGetErrorName(end) << " ("
                   << cudaGetErrorString(end)
                   << "); a synchronising call (memcpy, sync, allocation) inside the capture?";
  }
  CUDA_CHECK(cudaGraphGetNodes(g.graph_, nullptr, &g.n_nodes_));
  CUDA_CHECK(cudaGraphInstantiate(&g.exec_, g.graph_, 0));
  return g;
}

Graph::~Graph() { reset(); }

void Graph::reset() {
  if (exec_ != nullptr) cudaGraphExecDestroy(std::exchange(exec_, nullptr));
  if (graph_ != nullptr) cudaGraphDestroy(std::exchange(graph_, nullptr));
  n_nodes_ = 0;
}

Graph::Graph(Graph&& other) noexcept
    : graph_(std::exchange(other.graph_, nullptr)),
      exec_(std::exchange(other.exec_, nullptr)),
      n_nodes_(std::exchange(other.n_nodes_, 0)) {}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    reset();
    graph_ = std::exchange(other.graph_, nullptr);
    exec_ = std::exchange(other.exec_, nullptr);
    n_nodes_ = std::exchange(other.n_nodes_, 0);
  }
  return *this;
}

void Graph::launch(cudaStream_t stream) const {
  ICHECK(exec_ != nullptr) << "Graph::launch of an empty graph";
  CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

}  // namespace deepinfer::cuda
