// GpuModel: CUDA graphs for decode and verification steps and DSpark drafts
// (GpuModelOptions::cuda_graphs; gpu_model.h says which forwards qualify and how padding rows
// are kept away from real sequences).
//
// A key's graph (a forward: L tokens per chunk, a bucket of b chunks, b * L rows; a DSpark
// draft: a bucket of sequences, gpu_dspark.cc) is captured lazily, on its first use, by
// replay_or_capture: that call runs the padded work eagerly (its results are the call's; it
// also performs every lazy set-up outside the capture: cuBLASLt heuristics, kernel
// attributes), then captures the same enqueue sequence without running it. Later calls of the
// key upload their metadata (outside the graph, one async copy from pinned memory) and replay
// it. Capture time is logged and summed in graph_stats().capture_ms, every capture counted in
// graph_stats().captured. A failed capture (an op that synchronises or allocates inside the
// work) is logged and turns graphs off for the model; the eager run stands.
#include <chrono>

#include "base/error.h"
#include "base/logging.h"
#include "runtime/gpu_model_impl.h"

namespace deepinfer {

int64_t GpuModel::Impl::graph_bucket(int64_t n, int64_t rows_each, int64_t max_rows) const {
  for (int64_t b : opt.graph_buckets) {
    if (b < n) continue;
    return b * rows_each <= max_rows ? b : 0;
  }
  return 0;
}

GpuModel::Impl::GraphRun GpuModel::Impl::replay_or_capture(const cuda::Graph* found, cuda::Graph* captured,
                                                           const std::string& what,
                                                           const std::function<void()>& enqueue) {
  cudaStream_t stream = ctx.stream();
  if (found != nullptr) {
    found->launch(stream);
    return GraphRun::kReplayed;
  }
  enqueue();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    *captured = cuda::Graph::capture(stream, enqueue);
  } catch (const Error& e) {  // the eager run above is valid; later calls stay eager
    graphs_on = false;
    LOG(WARNING) << "GpuModel: capturing the " << what << " failed, CUDA graphs turned off: " << e.what();
    return GraphRun::kEager;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  graph_stats.capture_ms += ms;
  ++graph_stats.captured;
  LOG(INFO) << "GpuModel: captured the " << what << " (" << captured->n_nodes() << " nodes) in " << ms << " ms";
  return GraphRun::kCaptured;
}

void GpuModel::Impl::run_graph(GraphKey key) {
  graph_stats.last_bucket = key.rows();
  graph_stats.last_length = key.length;
  auto it = graphs.find(key);
  const bool verify = key.length > 1;
  const GpuWork start = work;
  GpuWork body;  // the work of a whole enqueue (a capture that fails part-way leaves the eager run's)
  cuda::Graph g;
  const std::string what =
      it != graphs.end() ? std::string()
                         : std::string(verify ? "verification" : "decode") + " graph of " +
                               std::to_string(key.chunks) + " chunks x " + std::to_string(key.length) + " tokens";
  // Each enqueue counts the body's work from the same start (the eager run and the capture).
  const GraphRun run = replay_or_capture(it != graphs.end() ? &it->second : nullptr, &g, what, [&] {
    work = start;
    enqueue_forward();
    body = work;
  });
  switch (run) {
    case GraphRun::kReplayed:
      work = graph_work.at(key);
      ++graph_stats.replays;
      if (verify) ++graph_stats.verify_replays;
      return;
    case GraphRun::kCaptured:
      work = body;
      graph_work[key] = body;
      if (verify) ++graph_stats.verify_captured;
      graphs.emplace(key, std::move(g));
      return;
    case GraphRun::kEager:
      work = body;
      return;
  }
}

const GpuGraphStats& GpuModel::graph_stats() const { return impl_->graph_stats; }

void GpuModel::set_cuda_graphs(bool on) {
  CHECK(impl_->opt.cuda_graphs) << "set_cuda_graphs: the model was built without cuda_graphs";
  impl_->graphs_on = on;
}

}  // namespace deepinfer
