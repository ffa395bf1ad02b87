// SWA bounded replay on the CPU backend (model/swa_replay.h): what it saves and what it costs.
// Reports only; asserts nothing (bench/results/swa-replay-cpu-*.md records a run).
//
//   swa_replay_measure time [--model DIR|tiny-v4.1] [--lengths 512,1024,2048] [--keeps 134,140]
//       prefill seconds of one prompt, full vs replay (median of --reps), and the decoder's
//       measured cost per row, from which the exact variant's time is estimated: replaying
//       the dependency cone of the decoder windows (MODEL_SPEC §C.6) computes, in decoder layer j
//       of n (j = 0 the boundary), min(L, W + r + (n - 1 - j)(W - 1)) rows (the last layer
//       fills its window ring exactly, W + rollback r keys; each layer below needs W - 1 more).
//   swa_replay_measure deviation [--model DIR | --random-seeds 1,2,3] [--tokens FILE]
//       [--ends 160:512:32] [--keeps 134,140,256]
//       the next-token distribution after each prompt prefix tokens[0, e) of each token list:
//       full prefill vs replay, top-1 agreement and KL(full || replay) (nats). --tokens: one id
//       list per line (the trained model's held-out slice); random configs draw random tokens.
// Common: --numerics official|reference (official), --rollback R (6: DeepInfer's 134 = 128 + 6).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/parallel.h"
#include "model/model.h"
#include "model/swa_replay.h"
#include "model/tiny_model.h"
#include "model/weight_source.h"
#include "../../tests/tools/tool_util.h"

using namespace deepinfer;

namespace {

std::map<std::string, std::string> parse_flags(int argc, char** argv, int first) {
  std::map<std::string, std::string> f;
  for (int i = first; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0) throw std::runtime_error("expected --name value, got " + k);
    f[k.substr(2)] = argv[i + 1];
  }
  return f;
}

std::vector<int64_t> int_list(const std::string& s) {
  std::vector<int64_t> v;
  const size_t c1 = s.find(':');
  if (c1 != std::string::npos) {  // a:b:step
    const size_t c2 = s.find(':', c1 + 1);
    const int64_t a = std::stoll(s.substr(0, c1)), b = std::stoll(s.substr(c1 + 1, c2 - c1 - 1));
    const int64_t step = std::stoll(s.substr(c2 + 1));
    for (int64_t x = a; x <= b; x += step) v.push_back(x);
    return v;
  }
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoll(item));
  return v;
}

std::string get(const std::map<std::string, std::string>& f, const std::string& k, const std::string& d) {
  auto it = f.find(k);
  return it == f.end() ? d : it->second;
}

struct Models {
  std::unique_ptr<Model> full;
  std::map<int64_t, std::unique_ptr<Model>> replay;  // by KEEP
};

Models make_models(const std::string& model, int64_t seed, const std::vector<int64_t>& keeps,
                   ModelOptions o) {
  Models m;
  if (model == "tiny-v4.1" || seed >= 0) {
    const ModelConfig cfg = tiny_v41_model_config();
    auto src = random_weights(cfg, seed >= 0 ? static_cast<uint64_t>(seed) : kTinySeed);
    const ModelWeights w = load_model_weights(cfg, *src);
    m.full = std::make_unique<Model>(cfg, w, o);
    for (int64_t k : keeps) {
      ModelOptions ok = o;
      ok.swa_bounded_replay_keep = k;
      m.replay[k] = std::make_unique<Model>(cfg, w, ok);
    }
  } else {
    m.full = Model::load(model, o);
    for (int64_t k : keeps) {
      ModelOptions ok = o;
      ok.swa_bounded_replay_keep = k;
      m.replay[k] = Model::load(model, ok);
    }
  }
  return m;
}

// Last-row logits of a prefill of `tokens` (one chunk carrying the prompt length).
std::vector<float> prefill_last(const Model& m, std::span<const int32_t> tokens, double* seconds) {
  auto st = m.new_state();
  SequenceChunk c{st.get(), tokens, false, static_cast<int64_t>(tokens.size())};
  const auto t0 = std::chrono::steady_clock::now();
  Tensor t = m.forward(std::span<const SequenceChunk>(&c, 1));
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {t.f32(), t.f32() + t.numel()};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int n_decoder_layers(const ModelConfig& cfg) {
  return static_cast<int>(cfg.num_layers - decoder_boundary(cfg));
}

int run_time(const std::map<std::string, std::string>& f, const ModelOptions& o) {
  const std::vector<int64_t> lengths = int_list(get(f, "lengths", "512,1024,2048"));
  const std::vector<int64_t> keeps = int_list(get(f, "keeps", "134,140"));
  const int reps = std::stoi(get(f, "reps", "3"));
  Models m = make_models(get(f, "model", "tiny-v4.1"), -1, keeps, o);
  const ModelConfig& cfg = m.full->config();
  const int64_t W = cfg.sliding_window, r = m.full->rollback_depth(), n = n_decoder_layers(cfg);
  std::printf("model: %lld layers, decoder boundary %lld (%lld decoder layers), W %lld, rollback %lld, "
              "threads %d\n\n", static_cast<long long>(cfg.num_layers),
              static_cast<long long>(decoder_boundary(cfg)), static_cast<long long>(n),
              static_cast<long long>(W), static_cast<long long>(r), num_threads());
  std::printf("| L | full (s) |");
  for (int64_t k : keeps) std::printf(" KEEP %lld (s) | saved |", static_cast<long long>(k));
  std::printf(" decoder s/row | exact cone rows | exact variant est. (s) | saved |\n|---|---|");
  for (size_t i = 0; i < keeps.size(); ++i) std::printf("---|---|");
  std::printf("---|---|---|---|\n");
  std::mt19937 gen(1);
  for (int64_t L : lengths) {
    std::vector<int32_t> tokens(L);
    for (auto& t : tokens) t = static_cast<int32_t>(gen() % cfg.vocab_size);
    std::vector<double> tf;
    for (int i = 0; i < reps; ++i) {
      double s;
      prefill_last(*m.full, tokens, &s);
      tf.push_back(s);
    }
    const double full = median(tf);
    std::printf("| %lld | %.3f |", static_cast<long long>(L), full);
    std::vector<double> tk;
    for (int64_t k : keeps) {
      std::vector<double> t;
      for (int i = 0; i < reps; ++i) {
        double s;
        prefill_last(*m.replay.at(k), tokens, &s);
        t.push_back(s);
      }
      tk.push_back(median(t));
      std::printf(" %.3f | %.0f%% |", tk.back(), 100.0 * (1.0 - tk.back() / full));
    }
    // Decoder cost per row from the full run and the smallest KEEP: full - replay =
    // n (L - KEEP) rows of decoder work (the source's compressor runs in both).
    const int64_t k0 = std::min<int64_t>(keeps.front(), L);
    const double per_row = L > k0 ? (full - tk.front()) / static_cast<double>(n * (L - k0)) : 0.0;
    int64_t cone = 0;
    for (int64_t j = 0; j < n; ++j) cone += std::min<int64_t>(L, W + r + (n - 1 - j) * (W - 1));
    const double exact = full - per_row * static_cast<double>(n * L - cone);
    std::printf(" %.2e | %lld | %.3f | %.0f%% |\n", per_row, static_cast<long long>(cone), exact,
                100.0 * (1.0 - exact / full));
  }
  return 0;
}

// KL(p || q) of two logit rows (softmax at temperature 1), in nats.
double kl(const float* lp, const float* lq, int64_t V) {
  const float mp = *std::max_element(lp, lp + V), mq = *std::max_element(lq, lq + V);
  double zp = 0, zq = 0;
  for (int64_t i = 0; i < V; ++i) {
    zp += std::exp(double(lp[i]) - mp);
    zq += std::exp(double(lq[i]) - mq);
  }
  double s = 0;
  for (int64_t i = 0; i < V; ++i) {
    const double a = double(lp[i]) - mp - std::log(zp), b = double(lq[i]) - mq - std::log(zq);
    s += std::exp(a) * (a - b);
  }
  return std::max(0.0, s);
}

int run_deviation(const std::map<std::string, std::string>& f, const ModelOptions& o) {
  const std::vector<int64_t> keeps = int_list(get(f, "keeps", "134,140,256"));
  const std::vector<int64_t> ends = int_list(get(f, "ends", "160:512:32"));
  const std::string model = get(f, "model", "");
  std::vector<int64_t> seeds = {-1};
  if (f.count("random-seeds")) seeds = int_list(f.at("random-seeds"));
  struct Acc {
    int64_t n = 0, agree = 0, exact = 0;
    double kl_sum = 0, kl_max = 0;
    std::vector<double> kls;
  };
  std::map<int64_t, Acc> acc;
  for (int64_t seed : seeds) {
    Models m = make_models(seed >= 0 ? "tiny-v4.1" : model, seed, keeps, o);
    const int64_t V = m.full->config().vocab_size;
    std::vector<std::vector<int32_t>> lists;
    if (f.count("tokens")) {
      lists = tools::read_token_lists(f.at("tokens"));
    } else {
      std::mt19937 gen(static_cast<uint32_t>(seed + 1000));
      for (int i = 0; i < std::stoi(get(f, "prompts", "4")); ++i) {
        std::vector<int32_t> t(ends.back());
        for (auto& x : t) x = static_cast<int32_t>(gen() % V);
        lists.push_back(t);
      }
    }
    for (const auto& toks : lists) {
      for (int64_t e : ends) {
        if (e > static_cast<int64_t>(toks.size())) continue;
        std::span<const int32_t> prompt(toks.data(), e);
        const std::vector<float> ref = prefill_last(*m.full, prompt, nullptr);
        const int64_t top_ref = std::max_element(ref.begin(), ref.end()) - ref.begin();
        for (int64_t k : keeps) {
          const std::vector<float> got = prefill_last(*m.replay.at(k), prompt, nullptr);
          Acc& a = acc[k];
          const double d = kl(ref.data(), got.data(), V);
          a.n++;
          a.agree += (std::max_element(got.begin(), got.end()) - got.begin()) == top_ref;
          a.exact += got == ref;
          a.kl_sum += d;
          a.kl_max = std::max(a.kl_max, d);
          a.kls.push_back(d);
        }
      }
    }
  }
  std::printf("| KEEP | prompts | top-1 agreement | bitwise equal | mean KL | median KL | max KL |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (auto& [k, a] : acc) {
    std::printf("| %lld | %lld | %.1f%% | %lld | %.2e | %.2e | %.2e |\n", static_cast<long long>(k),
                static_cast<long long>(a.n), 100.0 * a.agree / a.n, static_cast<long long>(a.exact),
                a.kl_sum / a.n, median(a.kls), a.kl_max);
  }
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2) throw std::runtime_error("usage: swa_replay_measure time|deviation [--flags]");
  const std::string mode = argv[1];
  const auto f = parse_flags(argc, argv, 2);
  ModelOptions o;
  o.numerics = parse_numerics(get(f, "numerics", "official"));
  o.max_rollback = std::stoll(get(f, "rollback", "6"));
  if (mode == "time") return run_time(f, o);
  if (mode == "deviation") return run_deviation(f, o);
  throw std::runtime_error("unknown mode " + mode);
}

}  // namespace

int main(int argc, char** argv) { return tools::tool_main("swa_replay_measure", run, argc, argv); }
