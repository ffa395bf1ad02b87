// GpuModel: CUDA graphs for decode and verification steps (GpuModelOptions::cuda_graphs;
// gpu_model.h says which forwards qualify and how padding rows are kept away from real
// sequences).
//
// A key's graph (L tokens per chunk, a bucket of b chunks: b * L rows) is captured lazily, on
// its first use: that forward runs the padded step eagerly (its results are the forward's; it
// also performs every lazy set-up outside the capture: cuBLASLt heuristics, kernel attributes),
// then captures the same enqueue sequence without running it. Later forwards of the key upload
// their metadata (outside the graph, one async copy from pinned memory) and replay it. Capture
// time is logged and summed in graph_stats().capture_ms. A failed capture (an op that
// synchronises or allocates inside the forward) is logged and turns graphs off for the model;
// the forward itself has already run.
#include <chrono>

#include "base/error.h"
#include "base/logging.h"
#include "runtime/gpu_model_impl.h"

namespace deepinfer {

void GpuModel::Impl::run_graph(GraphKey key) {
  cudaStream_t stream = ctx.stream();
  graph_stats.last_bucket = key.rows();
  graph_stats.last_length = key.length;
  auto it = graphs.find(key);
  if (it != graphs.end()) {
    it->second.launch(stream);
    work = graph_work.at(key);
    ++graph_stats.replays;
    if (key.length > 1) ++graph_stats.verify_replays;
    return;
  }
  enqueue_forward();
  const GpuWork body = work;
  const auto t0 = std::chrono::steady_clock::now();
  cuda::Graph g;
  try {
    g = cuda::Graph::capture(stream, [&] { enqueue_forward(); });
  } catch (const Error& e) {
    // This forward already ran (eagerly) and is valid; later ones stay eager.
    work = body;
    graphs_on = false;
    LOG(WARNING) << "GpuModel: capturing the graph of " << key.chunks << " chunks x " << key.length
                 << " tokens failed, CUDA graphs turned off: " << e.what();
    return;
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  work = body;
  graph_work[key] = body;
  graph_stats.capture_ms += ms;
  ++graph_stats.captured;
  if (key.length > 1) ++graph_stats.verify_captured;
  LOG(INFO) << "GpuModel: captured the " << (key.length > 1 ? "verification" : "decode") << " graph of "
            << key.chunks << " chunks x " << key.length << " tokens (" << g.n_nodes() << " nodes) in " << ms
            << " ms";
  graphs.emplace(key, std::move(g));
}

const GpuGraphStats& GpuModel::graph_stats() const { return impl_->graph_stats; }

void GpuModel::set_cuda_graphs(bool on) {
  CHECK(impl_->opt.cuda_graphs) << "set_cuda_graphs: the model was built without cuda_graphs";
  impl_->graphs_on = on;
}

}  // namespace deepinfer
