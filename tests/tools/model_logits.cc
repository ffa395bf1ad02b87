// model_logits: runs the engine's forward of a checkpoint over token sequences and writes what
// a training framework needs to check itself against the engine (tools/train_tiny.py
// --check-engine), and the engine's held-out perplexity on either backend (issue 16:
// bench/perplexity/run_gpu.sh):
//
//   model_logits --model DIR --ids FILE --out PREFIX [--numerics official|reference]
//                [--full-logits N] [--chunk C]
//                [--device cpu|cuda] [--weight-format fp32|fp8] [--kv-cache-dtype auto|fp8|bf16]
//
// The model runs through make_model_runner (runtime/runner_factory.h), the runner the engine
// uses: device cpu is the CPU Model (the default), device cuda the CudaRunner with the given
// weight format (fp32 default) and KV cache dtype (auto: GpuModel's default).
//
// FILE holds one sequence per line, token ids separated by commas or spaces. Each sequence
// runs in a fresh state, in chunks of C tokens (default: the whole sequence at once), with
// logits for every position. Writes
//   PREFIX.nll.f32      for every sequence, for t = 0..T-2: -log softmax(logits[t])[ids[t+1]]
//                       (float32, little-endian, sequences concatenated; computed in double)
//   PREFIX.logits.f32   the full fp32 logits [T, V] of the first N sequences (default 1)
// and prints one JSON line: {"sequences":..,"tokens":..,"nll_sum":..,"vocab":..}.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/runner_factory.h"
#include "tool_util.h"

namespace {

using deepinfer::RunnerArgs;
using deepinfer::RunnerChunk;
using deepinfer::Tensor;

using deepinfer::tools::read_token_lists;

int run(int argc, char** argv) {
  std::string model_dir, ids_path, out_prefix, numerics = "official";
  int64_t full_logits = 1, chunk = 0;
  RunnerArgs args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") model_dir = next();
    else if (a == "--ids") ids_path = next();
    else if (a == "--out") out_prefix = next();
    else if (a == "--numerics") numerics = next();
    else if (a == "--full-logits") full_logits = std::stoll(next());
    else if (a == "--chunk") chunk = std::stoll(next());
    else if (a == "--device") args.device = next();
    else if (a == "--weight-format") args.weight_format = next();
    else if (a == "--kv-cache-dtype") args.kv_cache_dtype = next();
    else throw std::runtime_error("unknown argument " + a);
  }
  if (model_dir.empty() || ids_path.empty() || out_prefix.empty()) {
    throw std::runtime_error("usage: model_logits --model DIR --ids FILE --out PREFIX "
                             "[--numerics official|reference] [--full-logits N] [--chunk C] [--device cpu|cuda] "
                             "[--weight-format fp32|fp8] [--kv-cache-dtype auto|fp8|bf16]");
  }
  const auto seqs = read_token_lists(ids_path);
  int64_t longest = 1;
  for (const auto& ids : seqs) longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
  args.model_dir = model_dir;
  args.model_options.numerics = deepinfer::parse_numerics(numerics);
  args.max_sequences = 1;
  args.max_context = longest;
  args.max_batch_tokens = std::max<int64_t>(chunk > 0 ? chunk : longest, 1);
  auto runner = deepinfer::make_model_runner(args);
  const int64_t V = runner->config().vocab_size;
  std::fprintf(stderr, "model_logits: %s on %s\n", model_dir.c_str(), runner->name().c_str());
  std::ofstream nll_out(out_prefix + ".nll.f32", std::ios::binary);
  std::ofstream logits_out(out_prefix + ".logits.f32", std::ios::binary);
  double nll_sum = 0.0;
  int64_t n_scored = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const std::vector<int32_t>& ids = seqs[s];
    const int64_t T = static_cast<int64_t>(ids.size());
    const int64_t step = chunk > 0 ? chunk : T;
    const int64_t sequence = runner->new_sequence();
    std::vector<float> logits;
    logits.reserve(T * V);
    for (int64_t begin = 0; begin < T; begin += step) {
      const int64_t end = std::min(T, begin + step);
      RunnerChunk c{sequence, std::span<const int32_t>(ids.data() + begin, end - begin), true};
      Tensor out = runner->forward(std::span<const RunnerChunk>(&c, 1));
      logits.insert(logits.end(), out.f32(), out.f32() + out.numel());
    }
    runner->free_sequence(sequence);
    if (static_cast<int64_t>(s) < full_logits) {
      logits_out.write(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float));
    }
    for (int64_t t = 0; t + 1 < T; ++t) {
      const float* row = &logits[t * V];
      double mx = row[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max<double>(mx, row[v]);
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      const double nll = std::log(sum) + mx - row[ids[t + 1]];
      const float f = static_cast<float>(nll);
      nll_out.write(reinterpret_cast<const char*>(&f), sizeof(f));
      nll_sum += nll;
      ++n_scored;
    }
  }
  std::printf("{\"sequences\": %zu, \"tokens\": %lld, \"nll_sum\": %.9g, \"vocab\": %lld}\n",
              seqs.size(), static_cast<long long>(n_scored), nll_sum, static_cast<long long>(V));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return deepinfer::tools::tool_main("model_logits", run, argc, argv); }
