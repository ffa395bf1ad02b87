// Constrained generation through the Engine with the built-in tiny model: a deterministic sample
// of JSONSchemaBench schemas (every k-th file), one json_schema request each, all batched through
// one engine. Reports compile time, engine steps and seconds per step with the constraint on, and
// the same requests unconstrained (same lengths) as the baseline; never asserts.
//   bench_structured_engine [--schemas 60] [--max-tokens 256] [--overlap 1] [--temperature 1]
//                           [--dir ../shared/fixtures/jsonschemabench/data] [--unconstrained 1]
//                           [--closer-bias 0] [--closing-bias 0] [--max-num-seqs 64]
// --closer-bias B adds logit_bias B to every token spelled only with " ] } , : and to EOS (the
// earlier, hand-picked preference for ending values); --closing-bias B sets
// SamplingParams::closing_bias (the grammar-derived one that
// tests/python/test_structured_jsonschemabench.py uses).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/engine.h"
#include "engine/structured_output.h"
#include "recipe/tokenizer.h"

using namespace deepinfer;
namespace fs = std::filesystem;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<fs::path> sample_files(const fs::path& dir, int64_t n) {
  std::vector<fs::path> files;
  std::vector<fs::path> subdirs;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) subdirs.push_back(e.path());
  std::sort(subdirs.begin(), subdirs.end());
  for (const auto& d : subdirs) {
    std::vector<fs::path> in;
    for (const auto& e : fs::directory_iterator(d))
      if (e.path().extension() == ".json") in.push_back(e.path());
    std::sort(in.begin(), in.end());
    files.insert(files.end(), in.begin(), in.end());
  }
  const size_t step = std::max<size_t>(1, files.size() / size_t(std::max<int64_t>(n, 1)));
  std::vector<fs::path> out;
  for (size_t i = 0; i < files.size() && int64_t(out.size()) < n; i += step) out.push_back(files[i]);
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct RunResult {
  double seconds = 0;
  int64_t steps = 0, tokens = 0, n_stop = 0, n_length = 0;
};

RunResult run(Engine& engine, std::vector<EngineRequest> reqs) {
  const int64_t steps0 = engine.stats().n_steps;
  const double t0 = now();
  auto outs = engine.generate(std::move(reqs));
  RunResult r;
  r.seconds = now() - t0;
  r.steps = engine.stats().n_steps - steps0;
  for (const auto& o : outs) {
    r.tokens += o.n_output_tokens;
    r.n_stop += o.finish_reason == "stop";
    r.n_length += o.finish_reason == "length";
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n_schemas = 60, max_tokens = 256, overlap = 1, unconstrained = 1, max_num_seqs = 64;
  double temperature = 1.0, closer_bias = 0.0, closing_bias = 0.0;
  std::string dir = "../shared/fixtures/jsonschemabench/data";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--schemas") n_schemas = std::stoll(argv[i + 1]);
    else if (k == "--max-tokens") max_tokens = std::stoll(argv[i + 1]);
    else if (k == "--overlap") overlap = std::stoll(argv[i + 1]);
    else if (k == "--temperature") temperature = std::stod(argv[i + 1]);
    else if (k == "--unconstrained") unconstrained = std::stoll(argv[i + 1]);
    else if (k == "--dir") dir = argv[i + 1];
    else if (k == "--closer-bias") closer_bias = std::stod(argv[i + 1]);
    else if (k == "--closing-bias") closing_bias = std::stod(argv[i + 1]);
    else if (k == "--max-num-seqs") max_num_seqs = std::stoll(argv[i + 1]);
    else { std::fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
  }
  EngineArgs args;
  args.overlap = overlap != 0;
  args.max_num_seqs = max_num_seqs;
  args.max_model_len = max_tokens + 64;
  Engine engine(args);
  CHECK(engine.tokenizer() != nullptr) << "no tokenizer for the tiny model";
  const std::vector<int32_t> prompt = engine.tokenizer()->encode("Answer:", false);

  // Which schemas compile: a separate StructuredOutput, so the engine's own compile cache and
  // mask caches start cold for the timed run (as for a server's first requests).
  std::vector<int32_t> stops;
  for (int64_t eos : engine.model_config().eos_token_ids) stops.push_back(int32_t(eos));
  StructuredOutput checker(*engine.tokenizer(), engine.model_config().vocab_size, stops);
  std::vector<std::string> schemas;
  const auto files = sample_files(dir, n_schemas);
  const double tc = now();
  for (const auto& f : files) {
    const std::string text = read(f);
    try {
      checker.make_matcher("json_schema", text);
      schemas.push_back(text);
    } catch (const Error&) {
    }
  }
  std::printf("schemas %zu, compiled %zu (%.2f s), max_tokens %lld, overlap %lld, temperature %.2f, "
              "closer bias %.1f, closing bias %.1f, max_num_seqs %lld\n", files.size(), schemas.size(), now() - tc,
              (long long)max_tokens, (long long)overlap, temperature, closer_bias, closing_bias,
              (long long)max_num_seqs);
  std::vector<std::pair<int32_t, float>> bias;
  if (closer_bias != 0.0) {
    const recipe::Tokenizer& tok = *engine.tokenizer();
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      if (!tok.has_token(id) || tok.is_special(id)) continue;
      const std::string_view b = tok.token_bytes(id);
      if (!b.empty() && b.find_first_not_of("\"]},:") == std::string_view::npos)
        bias.emplace_back(id, float(closer_bias));
    }
    for (int64_t eos : engine.model_config().eos_token_ids) bias.emplace_back(int32_t(eos), float(closer_bias));
  }
  std::vector<EngineRequest> reqs;
  for (size_t i = 0; i < schemas.size(); ++i) {
    EngineRequest q;
    q.id = "s" + std::to_string(i);
    q.prompt = prompt;
    q.params.temperature = float(temperature);
    q.params.seed = i;
    q.params.max_tokens = max_tokens;
    q.params.logit_bias = bias;
    q.params.closing_bias = float(closing_bias);
    q.constraint_kind = "json_schema";
    q.constraint = schemas[i];
    reqs.push_back(std::move(q));
  }
  const RunResult c = run(engine, reqs);
  std::printf("%-14s %8s %8s %10s %12s %6s %6s\n", "run", "seconds", "steps", "ms/step", "out tokens",
              "stop", "length");
  auto row = [](const char* name, const RunResult& r) {
    std::printf("%-14s %8.2f %8lld %10.2f %12lld %6lld %6lld\n", name, r.seconds, (long long)r.steps,
                1e3 * r.seconds / double(std::max<int64_t>(r.steps, 1)), (long long)r.tokens,
                (long long)r.n_stop, (long long)r.n_length);
  };
  row("constrained", c);
  if (unconstrained) {
    // Same batch shape without the constraint: every request runs max_tokens (ignore_eos).
    for (auto& q : reqs) {
      q.id += "u";
      q.constraint_kind.clear();
      q.constraint.clear();
      q.params.ignore_eos = true;
    }
    row("unconstrained", run(engine, reqs));
  }
  return 0;
}
