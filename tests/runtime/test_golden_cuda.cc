// GPU forward (GpuModel) on the golden checkpoints (tests/data/golden). What each part proves:
//  A. Kernel exactness: the plain fp32 state (paged_kv = false, reference numerics) against
//     HF transformers' float64 logits: every position cosine >= 0.999 and the same argmax
//     wherever the reference top-1 margin exceeds 1e-2 (the acceptance bar; measured
//     1 - cos ~1e-13, so the bar is far from binding).
//  B2. The acceptance check for reference numerics: the bf16 paged cache against HF's float64
//     logits, same two checks at every position, with HF's discrete choices replayed
//     (GpuModel::force_decisions with the choices the CPU reference forward records, which
//     are HF's: see Bf16KvMatchesHFWithHFsChoices). Why replay: see B and D.
//  C2. The acceptance check for official numerics: the FP8 (and bf16) paged cache against the
//     CPU backend's official numerics, same checks, with the CPU's choices replayed.
//  B. bf16 KV storage noise: reference numerics with the bf16 paged cache against the CPU
//     backend's reference numerics (fp32 state) on the same checkpoint with the discrete
//     choices removed (no_selection(): every expert of the score-routed layers and every
//     compressed entry selected; hash layers keep their token-id table, which no noise can
//     change). Same two checks, margins from the CPU logits. Why not against HF with the
//     real routing: a bf16 rounding of a cache entry moves a router score or an indexer score
//     by ~1e-3 relative, enough to swap a near-tied top-k member (MoE top-2, indexer top-k),
//     and one swapped expert changes that position's logits by far more than any numeric
//     bound (seen on the H200: hca 1 of 424 positions, mixed_quant 36; isolated positions).
//     Those flips are a property of the model, not a defect of the kernels; D reports them.
//     The CPU reproduces them: its reference forward with the state's window ring and
//     compressed entries rounded to bf16 after every decode step (a throwaway program) gives
//     hca min cos 0.931060 with the argmax flipped at position 366, mixed_quant min cos
//     0.663132 at 189 (31 positions below 0.999), csa 0.999849 -- the H200's bf16 paged
//     numbers (0.931072, 0.663173, 0.999849) at the same positions.
//  C. Official numerics with the FP8 paged cache (584-byte entries, FP8 indexer keys; and the
//     bf16 cache) against the CPU backend's official numerics, both with the discrete choices
//     removed, same checks. The CPU rounds the K=V entries as the FP8 cache stores them (FP8
//     NoPE + bf16 RoPE dims), so a 1-ulp fp32 difference between the two RoPE implementations
//     can cross a bf16 / FP8 rounding boundary and become a storage-ulp difference; with the
//     real routing that sometimes flips a discrete choice (mixed_quant, 6 positions).
//     Official numerics compare exactly only in batch-invariant mode (test_gpu_model_cuda,
//     InterleavedSequencesMatchAlone below); here they compare within the same bounds.
//     Headroom of B and C, estimated on the CPU with the no-selection checkpoints (a throwaway
//     program, not a test): rounding the CPU state's window ring and compressed entries to
//     bf16 after every decode step gives min cos 0.9999923 (mixed_quant; others >= 0.999997)
//     and no argmax change where the margin > 1e-2 (16 of mixed_quant's 424 margins lie in
//     (0.01, 0.03)); official numerics with fixed-order vs BLAS GEMMs (fp32-level differences
//     through the FP8 / bf16 storage roundings) min cos 0.9999936, no argmax change.
//  D. The real-routing runs (bf16 KV vs HF, official FP8 KV vs CPU official): the positions
//     failing the checks are printed, not asserted; asserted is that every one of them comes
//     at or after the first position where the GPU's recorded choices (record_decisions)
//     differ from the reference's, so each is a discrete flip and not a numeric defect.
// Each of A-D (and B2, C2) runs three scenarios:
//  * one full prefill,
//  * chunked prefill (chunks of 7) for half the sequence, then decode one token at a time,
//  * two sequences batched together (one in chunks of 13, one prefilled then decoding).
// Paged block tables: two sequences growing interleaved (small blocks, a third sequence freed
// in between, so their tables are non-contiguous and reuse freed blocks) give bitwise the
// logits each gives alone (batch-invariant kernels), for both cache dtypes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "io/config_parser.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/weight_source.h"
#include "runtime/gpu_model.h"
#include "../model/golden_data.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using testing::golden_models;
using testing::kGoldenDir;
using testing::read_f32;
using testing::read_ids;

// Top-1 minus top-2 of each row of logits [rows, V].
std::vector<float> margins_of(const std::vector<float>& logits, int64_t V) {
  const int64_t rows = static_cast<int64_t>(logits.size()) / V;
  std::vector<float> m(rows);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row(&logits[r * V], &logits[(r + 1) * V]);
    std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
    m[r] = row[0] - row[1];
  }
  return m;
}

// Asserted (parts A-C) or only reported (part D).
enum class Mode { kAssert, kReport };

// ours/ref [rows, V]; margins [rows]. Per position: cosine >= 0.999 and the same argmax where
// the reference margin > 1e-2 (the acceptance checks). kAssert: every failing position
// is a test failure (the first 5 named, with the row's max|diff| so a flipped argmax can be
// told from a near tie); kReport: the count of failing positions is printed.
// Returns the failing positions.
std::vector<int64_t> compare_rows(const std::vector<float>& ours, const std::vector<float>& ref,
                                  const std::vector<float>& margins, int64_t vocab,
                                  const std::string& what, Mode mode) {
  std::vector<int64_t> failing;
  EXPECT_EQ(ours.size(), ref.size()) << what;
  if (ours.size() != ref.size()) return failing;
  const int64_t rows = static_cast<int64_t>(ref.size()) / vocab;
  int n_bad = 0, n_argmax_checked = 0;
  double max_rel = 0.0, min_cos = 1.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = &ours[r * vocab];
    const float* b = &ref[r * vocab];
    double dot = 0, na = 0, nb = 0, diff = 0, scale = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      diff = std::max(diff, std::abs(static_cast<double>(a[v]) - b[v]));
      scale = std::max(scale, std::abs(static_cast<double>(b[v])));
      dot += static_cast<double>(a[v]) * b[v];
      na += static_cast<double>(a[v]) * a[v];
      nb += static_cast<double>(b[v]) * b[v];
    }
    const double cos = dot / std::sqrt(na * nb);
    if (!(diff / scale <= max_rel)) max_rel = diff / scale;
    if (!(cos >= min_cos)) min_cos = cos;  // NaN propagates
    const bool cos_ok = cos >= 0.999;
    bool argmax_ok = true;
    if (margins[r] > 1e-2f) {
      ++n_argmax_checked;
      argmax_ok = std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
    }
    if (!cos_ok || !argmax_ok) failing.push_back(r);
    if ((!cos_ok || !argmax_ok) && ++n_bad <= 5 && mode == Mode::kAssert) {
      ADD_FAILURE() << what << ": position " << r << " cosine " << cos
                    << (argmax_ok ? "" : ", argmax differs") << " (margin " << margins[r]
                    << ", max|diff| " << diff << ")";
    }
  }
  if (mode == Mode::kAssert) {
    EXPECT_EQ(n_bad, 0) << what << ": " << n_bad << " of " << rows << " positions fail";
  }
  std::printf("  %-40s positions %4lld  min cosine %.9f (1 - cos %.2e)  max|diff|/max|ref| %.2e"
              "  argmax checked %d",
              what.c_str(), static_cast<long long>(rows), min_cos, 1.0 - min_cos, max_rel,
              n_argmax_checked);
  if (mode == Mode::kReport) {
    std::printf("  failing %d (report only)", n_bad);
  }
  std::printf("\n");
  return failing;
}

// Where two traces of the same positions [0, n) differ: the number of (layer, position)
// choices (an expert set or an indexer pick set) that differ and the first such position.
struct TraceDiff {
  int n_diff = 0;
  int64_t first = -1;
};
TraceDiff diff_traces(const DecisionTrace& a, const DecisionTrace& b, int64_t n) {
  TraceDiff d;
  for (size_t l = 0; l < a.experts.size(); ++l) {
    for (const auto* t : {&a.experts[l], &a.picks[l]}) {
      const bool experts = t == &a.experts[l];
      const std::vector<int32_t>& u = *t;
      const std::vector<int32_t>& v = experts ? b.experts[l] : b.picks[l];
      const int64_t w = experts ? a.top_k : a.index_topk;
      if (u.empty()) continue;
      for (int64_t p = 0; p < n; ++p) {
        if (std::equal(u.begin() + p * w, u.begin() + (p + 1) * w, v.begin() + p * w)) continue;
        ++d.n_diff;
        if (d.first < 0 || p < d.first) d.first = p;
      }
    }
  }
  return d;
}

// Runs `tokens` through a fresh sequence in chunk sizes given by `chunk_of(step)`.
template <typename ChunkOf>
std::vector<float> run(GpuModel& model, const std::vector<int32_t>& tokens, ChunkOf chunk_of) {
  const int64_t seq = model.new_sequence();
  std::vector<float> out;
  size_t begin = 0;
  for (int step = 0; begin < tokens.size(); ++step) {
    const size_t end = std::min(tokens.size(), begin + static_cast<size_t>(chunk_of(begin)));
    GpuChunk c{seq, std::span<const int32_t>(tokens.data() + begin, end - begin), true};
    Tensor logits = model.forward(std::span<const GpuChunk>(&c, 1));
    out.insert(out.end(), logits.f32(), logits.f32() + logits.numel());
    begin = end;
  }
  EXPECT_EQ(model.n_tokens(seq), static_cast<int64_t>(tokens.size()));
  model.free_sequence(seq);
  return out;
}

// The three scenarios of the header on `model` against `ref` logits [S, V] with `margins`.
void check_scenarios(GpuModel& model, const std::vector<int32_t>& tokens,
                     const std::vector<float>& ref, const std::vector<float>& margins,
                     const std::string& label, Mode mode = Mode::kAssert) {
  const int64_t S = static_cast<int64_t>(tokens.size()), V = model.config().vocab_size;
  const auto full = run(model, tokens, [&](size_t) { return S; });
  compare_rows(full, ref, margins, V, label + " full prefill", mode);
  const auto chunked = run(model, tokens, [&](size_t begin) {
    return static_cast<int64_t>(begin) < S / 2 ? 7 : 1;
  });
  compare_rows(chunked, ref, margins, V, label + " chunks of 7 then decode", mode);

  // Two sequences in the same forward calls: A in chunks of 13, B prefilled with 29
  // tokens then decoding one token per step (A finishes first, B continues alone).
  const int64_t a = model.new_sequence(), b = model.new_sequence();
  std::vector<float> out_a, out_b;
  size_t pa = 0, pb = 0;
  while (pa < tokens.size() || pb < tokens.size()) {
    std::vector<GpuChunk> chunks;
    size_t na = 0, nb = 0;
    if (pa < tokens.size()) {
      na = std::min<size_t>(13, tokens.size() - pa);
      chunks.push_back({a, std::span<const int32_t>(tokens.data() + pa, na), true});
    }
    if (pb < tokens.size()) {
      nb = pb == 0 ? 29 : 1;
      chunks.push_back({b, std::span<const int32_t>(tokens.data() + pb, nb), true});
    }
    Tensor l = model.forward(chunks);
    const float* p = l.f32();
    out_a.insert(out_a.end(), p, p + na * V);
    out_b.insert(out_b.end(), p + na * V, p + (na + nb) * V);
    pa += na;
    pb += nb;
  }
  compare_rows(out_a, ref, margins, V, label + " batched: chunks of 13", mode);
  compare_rows(out_b, ref, margins, V, label + " batched: prefill 29 + decode", mode);
  model.free_sequence(a);
  model.free_sequence(b);
}

// D's check: a full prefill with the real routing, the GPU's choices recorded. Positions
// failing the checks are printed, not asserted, but each must come at or after the first
// position where the GPU chose differently from the reference (an expert set or indexer
// picks in any layer): with the same choices up to a position, B2 / C2 bound its logits, so
// a failure without an earlier flip would be a numeric defect, not a discrete flip.
void check_flips_explain_failures(GpuModel& gpu, const std::vector<int32_t>& tokens,
                                  const DecisionTrace& reference, const std::vector<float>& ref,
                                  const std::vector<float>& margins, const std::string& label) {
  const int64_t S = static_cast<int64_t>(tokens.size());
  DecisionTrace mine(gpu.config(), S);
  gpu.record_decisions(&mine);
  const auto full = run(gpu, tokens, [&](size_t) { return S; });
  gpu.record_decisions(nullptr);
  const auto failing = compare_rows(full, ref, margins, gpu.config().vocab_size,
                                    label + " full prefill, choices recorded", Mode::kReport);
  const TraceDiff d = diff_traces(mine, reference, S);
  std::printf("    %d (layer, position) choices differ from the reference's, the first at position "
              "%lld; %zu failing positions, the first at %lld\n", d.n_diff,
              static_cast<long long>(d.first), failing.size(),
              static_cast<long long>(failing.empty() ? -1 : failing.front()));
  for (int64_t p : failing) {
    EXPECT_TRUE(d.first >= 0 && p >= d.first)
        << label << ": position " << p << " fails with no earlier change of a discrete choice";
  }
}

// Hash layers read tid2eid [V, k]; with k raised to every expert, the table is the checkpoint's
// k columns repeated E / k times. Same function: each of a token's k experts is selected E / k
// times with weight score / (E/k * sum of its k scores) (norm_topk_prob), and those copies sum
// to the original weight. Everything else is read through unchanged.
class TiledHashTables final : public WeightSource {
 public:
  TiledHashTables(std::unique_ptr<WeightSource> inner, int64_t k) : inner_(std::move(inner)), k_(k) {}
  Tensor take(const std::string& name, const Shape& shape) override {
    if (!name.ends_with("tid2eid") || shape.size() != 2 || shape[1] == k_) return inner_->take(name, shape);
    const int64_t V = shape[0], wide = shape[1];
    EXPECT_EQ(wide % k_, 0) << name;
    const Tensor t = inner_->take(name, {V, k_});
    Tensor out = Tensor::empty(DType::I32, {V, wide});
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t j = 0; j < wide; ++j) out.data<int32_t>()[v * wide + j] = t.data<int32_t>()[v * k_ + j % k_];
    }
    return out;
  }
  std::vector<std::string> untaken() const override { return inner_->untaken(); }

 private:
  std::unique_ptr<WeightSource> inner_;
  int64_t k_;
};

// The checkpoint in `dir` with its discrete choices removed: every routed expert selected in
// the score-routed layers (routing weights stay the normalised scores, a continuous function),
// every compressed entry selected by the indexer (index_topk >= max_context / 4 entries).
struct NoSelection {
  ModelConfig config;
  ModelWeights weights;
};
NoSelection no_selection(const std::string& dir, int64_t max_context) {
  const ModelConfig original = load_model_config(dir);
  ModelConfig cfg = original;
  EXPECT_TRUE(cfg.norm_topk_prob) << "tiled hash tables need normalised routing weights";
  EXPECT_EQ(cfg.n_routed_experts % cfg.n_experts_per_tok, 0);
  cfg.n_experts_per_tok = cfg.n_routed_experts;
  cfg.index_topk = std::max<int64_t>(1024, max_context / 4);
  TiledHashTables source(open_checkpoint_weights(dir, original), original.n_experts_per_tok);
  ModelWeights w = load_model_weights(cfg, source);
  return {cfg, std::move(w)};
}

// CPU backend logits of a full prefill of `tokens`, all rows.
std::vector<float> cpu_logits(const Model& cpu, const std::vector<int32_t>& tokens) {
  auto state = cpu.new_state();
  SequenceChunk c{state.get(), tokens, true};
  Tensor l = cpu.forward(std::span<const SequenceChunk>(&c, 1));
  return std::vector<float>(l.f32(), l.f32() + l.numel());
}

// Every position below n has its experts (score-routed layers) and indexer picks recorded.
void expect_complete(const DecisionTrace& t, int64_t n) {
  int64_t n_rows = 0;
  for (size_t l = 0; l < t.experts.size(); ++l) {
    for (int64_t p = 0; p < n && !t.experts[l].empty(); ++p, ++n_rows) {
      for (int64_t j = 0; j < t.top_k; ++j) ASSERT_GE(t.experts[l][p * t.top_k + j], 0) << l << " " << p;
    }
    for (int64_t p = 0; p < n && !t.picks[l].empty(); ++p) {
      const int64_t want = std::min<int64_t>(t.index_topk, (p + 1) / 4);
      for (int64_t j = 0; j < t.index_topk; ++j) {
        ASSERT_EQ(t.picks[l][p * t.index_topk + j] >= 0, j < want) << l << " " << p << " " << j;
      }
    }
  }
  EXPECT_GT(n_rows, 0) << "no score-routed layer recorded";
}

GpuModelOptions golden_options() {
  GpuModelOptions opt;
  opt.max_sequences = 3;
  opt.max_context = 1024;
  opt.max_batch_tokens = 512;
  return opt;
}

class GoldenCudaTest : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path dir() const { return fs::path(kGoldenDir) / GetParam(); }
  std::vector<std::string> variants() const {
    std::vector<std::string> v = {"hf"};
    if (fs::exists(dir() / "native")) v.push_back("native");
    return v;
  }
};

// A: the plain fp32 state against HF's float64 logits.
TEST_P(GoldenCudaTest, PlainFp32MatchesHFReference) {
  auto ref = SafetensorsFile::open((dir() / "reference.safetensors").string());
  const auto tokens = read_ids(*ref, "input_ids");
  const auto logits = read_f32(*ref, "logits");
  const auto margins = read_f32(*ref, "logits_margin");
  for (const std::string& variant : variants()) {
    SCOPED_TRACE(GetParam() + "/" + variant);
    std::printf("%s/%s (%zu tokens), A: GPU plain fp32 state vs HF float64\n", GetParam().c_str(),
                variant.c_str(), tokens.size());
    GpuModelOptions opt = golden_options();
    opt.paged_kv = false;
    auto plain = GpuModel::load((dir() / variant).string(), opt);
    EXPECT_FALSE(plain->options().kv_cache_dtype.has_value());
    check_scenarios(*plain, tokens, logits, margins, "A plain fp32");
  }
}

// B: the bf16 paged cache against the CPU backend (reference numerics, fp32 state), no
// discrete choices.
TEST_P(GoldenCudaTest, Bf16KvMatchesCpuWithoutSelection) {
  auto ref = SafetensorsFile::open((dir() / "reference.safetensors").string());
  const auto tokens = read_ids(*ref, "input_ids");
  for (const std::string& variant : variants()) {
    SCOPED_TRACE(GetParam() + "/" + variant);
    std::printf("%s/%s (%zu tokens), B: GPU bf16 KV vs CPU reference numerics, every expert and "
                "entry selected\n", GetParam().c_str(), variant.c_str(), tokens.size());
    const GpuModelOptions opt = golden_options();
    NoSelection ns = no_selection((dir() / variant).string(), opt.max_context);
    GpuModel gpu(ns.config, ns.weights, opt);
    // Reference numerics defaults to the bf16 paged cache.
    ASSERT_TRUE(gpu.options().kv_cache_dtype.has_value());
    EXPECT_EQ(*gpu.options().kv_cache_dtype, KvCacheDtype::kBf16);
    EXPECT_TRUE(gpu.options().paged_kv);
    const Model cpu(ns.config, std::move(ns.weights), ModelOptions{Numerics::kReference, false});
    const auto want = cpu_logits(cpu, tokens);
    check_scenarios(gpu, tokens, want, margins_of(want, ns.config.vocab_size), "B bf16 KV");
  }
}

// C: official numerics on the FP8 (default) and bf16 paged caches against the CPU backend's
// official numerics, no discrete choices.
TEST_P(GoldenCudaTest, OfficialMatchesCpuOfficialWithoutSelection) {
  auto ref = SafetensorsFile::open((dir() / "reference.safetensors").string());
  const auto tokens = read_ids(*ref, "input_ids");
  std::printf("%s/hf official (%zu tokens), C: GPU vs CPU official numerics, every expert and "
              "entry selected\n", GetParam().c_str(), tokens.size());
  GpuModelOptions opt = golden_options();
  opt.numerics = Numerics::kOfficial;
  NoSelection ns = no_selection((dir() / "hf").string(), opt.max_context);
  std::vector<std::unique_ptr<GpuModel>> gpus;
  for (KvCacheDtype dtype : {KvCacheDtype::kFp8, KvCacheDtype::kBf16}) {
    opt.kv_cache_dtype.reset();
    if (dtype == KvCacheDtype::kBf16) opt.kv_cache_dtype = dtype;  // kFp8: the default
    gpus.push_back(std::make_unique<GpuModel>(ns.config, ns.weights, opt));
    ASSERT_TRUE(gpus.back()->options().kv_cache_dtype.has_value());
    EXPECT_EQ(*gpus.back()->options().kv_cache_dtype, dtype);
  }
  const Model cpu(ns.config, std::move(ns.weights), ModelOptions{Numerics::kOfficial, false});
  const auto want = cpu_logits(cpu, tokens);
  const auto margins = margins_of(want, ns.config.vocab_size);
  for (auto& gpu : gpus) {
    const std::string dtype = kv_cache_dtype_name(*gpu->options().kv_cache_dtype);
    SCOPED_TRACE(dtype);
    check_scenarios(*gpu, tokens, want, margins, "C official " + dtype + " KV");
  }
}

// The acceptance check for reference numerics: the bf16 paged cache against HF's
// float64 logits at every position, with HF's discrete choices. The GPU replays the choices
// the CPU reference forward records (force_decisions); those are HF's: the CPU test
// RecordedIndexerPicksAreHFs shows its indexer picks equal HF's at every position, and its
// logits match HF's within 1e-4 at every position (test_golden), which a swapped expert
// would break. The continuous math (weights, attention over the picked entries, bf16 cache)
// is the GPU's own.
TEST_P(GoldenCudaTest, Bf16KvMatchesHFWithHFsChoices) {
  auto ref = SafetensorsFile::open((dir() / "reference.safetensors").string());
  const auto tokens = read_ids(*ref, "input_ids");
  const auto logits = read_f32(*ref, "logits");
  const auto margins = read_f32(*ref, "logits_margin");
  for (const std::string& variant : variants()) {
    SCOPED_TRACE(GetParam() + "/" + variant);
    std::printf("%s/%s (%zu tokens), B2: GPU bf16 KV vs HF float64, HF's discrete choices "
                "replayed\n", GetParam().c_str(), variant.c_str(), tokens.size());
    auto cpu = Model::load((dir() / variant).string(), {Numerics::kReference, false});
    const auto rec = testing::record_forward(*cpu, tokens);
    expect_complete(rec.trace, static_cast<int64_t>(tokens.size()));
    auto gpu = GpuModel::load((dir() / variant).string(), golden_options());
    ASSERT_EQ(*gpu->options().kv_cache_dtype, KvCacheDtype::kBf16);
    gpu->force_decisions(&rec.trace);
    check_scenarios(*gpu, tokens, logits, margins, "B2 bf16 KV vs HF");
  }
}

// The acceptance check for official numerics: the FP8 (default) and bf16 paged caches against
// the CPU backend's official numerics at every position, with the CPU's discrete choices.
TEST_P(GoldenCudaTest, OfficialMatchesCpuOfficialWithItsChoices) {
  auto ref = SafetensorsFile::open((dir() / "reference.safetensors").string());
  const auto tokens = read_ids(*ref, "input_ids");
  std::printf("%s/hf official (%zu tokens), C2: GPU vs CPU official numerics, the CPU's "
              "discrete choices replayed\n", GetParam().c_str(), tokens.size());
  auto cpu = Model::load((dir() / "hf").string(), {Numerics::kOfficial, false});
  const auto rec = testing::record_forward(*cpu, tokens);
  expect_complete(rec.trace, static_cast<int64_t>(tokens.size()));
  const auto margins = margins_of(rec.logits, cpu->config().vocab_size);
  GpuModelOptions opt = golden_options();
  opt.numerics = Numerics::kOfficial;
  for (KvCacheDtype dtype : {KvCacheDtype::kFp8, KvCacheDtype::kBf16}) {
    opt.kv_cache_dtype.reset();
    if (dtype == KvCacheDtype::kBf16) opt.kv_cache_dtype = dtype;  // kFp8: the default
    auto gpu = GpuModel::load((dir() / "hf").string(), opt);
    ASSERT_EQ(*gpu->options().kv_cache_dtype, dtype);
    const std::string name = kv_cache_dtype_name(dtype);
    SCOPED_TRACE(name);
    gpu->force_decisions(&rec.trace);
    check_scenarios(*gpu, tokens, rec.logits, margins, "C2 official " + name + " KV");
  }
}

// D: the real routing (top-k experts, indexer top-k): the bf16 paged cache against HF, official
// numerics on the FP8 cache against the CPU backend's official numerics. Failing positions
// are printed, not asserted; asserted is that each follows a change of a discrete choice
// (check_flips_explain_failures), i.e. that they are near-tie flips made by storage noise
// (see the header), not numeric defects.
TEST_P(GoldenCudaTest, RealRoutingReport) {
  auto ref = SafetensorsFile::open((dir() / "reference.safetensors").string());
  const auto tokens = read_ids(*ref, "input_ids");
  const auto logits = read_f32(*ref, "logits");
  const auto margins = read_f32(*ref, "logits_margin");
  std::printf("%s/hf (%zu tokens), D: real routing, report only\n", GetParam().c_str(),
              tokens.size());
  GpuModelOptions opt = golden_options();
  {
    auto cpu = Model::load((dir() / "hf").string(), {Numerics::kReference, false});
    const auto rec = testing::record_forward(*cpu, tokens);  // HF's choices (see B2)
    auto gpu = GpuModel::load((dir() / "hf").string(), opt);
    check_flips_explain_failures(*gpu, tokens, rec.trace, logits, margins, "D bf16 KV vs HF");
    check_scenarios(*gpu, tokens, logits, margins, "D bf16 KV vs HF", Mode::kReport);
  }
  opt.numerics = Numerics::kOfficial;
  auto gpu = GpuModel::load((dir() / "hf").string(), opt);
  EXPECT_EQ(*gpu->options().kv_cache_dtype, KvCacheDtype::kFp8);
  auto cpu = Model::load((dir() / "hf").string(), {Numerics::kOfficial, false});
  const auto rec = testing::record_forward(*cpu, tokens);
  const auto cpu_margins = margins_of(rec.logits, cpu->config().vocab_size);
  check_flips_explain_failures(*gpu, tokens, rec.trace, rec.logits, cpu_margins,
                               "D official fp8 KV vs CPU official");
  check_scenarios(*gpu, tokens, rec.logits, cpu_margins, "D official fp8 KV vs CPU official",
                  Mode::kReport);
}

// Logits of two sequences run alone (each on a fresh model) and grown interleaved on one model
// (alternating single-sequence forwards and joint ones, a third sequence prefilled and freed
// in between): bitwise equal. Blocks of 8 entries, so every sequence spans many blocks whose
// ids interleave with the other's and reuse the freed sequence's blocks.
TEST_P(GoldenCudaTest, InterleavedSequencesMatchAlone) {
  auto ref = SafetensorsFile::open((dir() / "reference.safetensors").string());
  const auto tokens = read_ids(*ref, "input_ids");
  const int64_t S = std::min<int64_t>(static_cast<int64_t>(tokens.size()), 200);
  const std::vector<int32_t> ta(tokens.begin(), tokens.begin() + S);
  std::vector<int32_t> tb(tokens.rbegin(), tokens.rbegin() + S);  // another text
  for (Numerics numerics : {Numerics::kReference, Numerics::kOfficial}) {
    GpuModelOptions opt;
    opt.max_sequences = 3;
    opt.max_context = 512;
    opt.max_batch_tokens = 64;
    opt.numerics = numerics;  // kBf16 / kFp8 cache by default
    opt.kv_block_size = 8;
    opt.batch_invariant = true;
    const std::string what = numerics_name(numerics);
    SCOPED_TRACE(what);
    const int64_t ca = 5, cb = 3;  // chunk sizes of A and B
    auto alone = [&](const std::vector<int32_t>& t, int64_t chunk) {
      auto m = GpuModel::load((dir() / "hf").string(), opt);
      return run(*m, t, [&](size_t) { return chunk; });
    };
    const auto la = alone(ta, ca), lb = alone(tb, cb);

    auto m = GpuModel::load((dir() / "hf").string(), opt);
    const int64_t V = m->config().vocab_size;
    const int64_t c = m->new_sequence();
    std::vector<int32_t> tc(tokens.begin() + 3, tokens.begin() + 3 + 40);
    GpuChunk cc{c, tc, false};
    m->forward(std::span<const GpuChunk>(&cc, 1));
    const int64_t a = m->new_sequence(), b = m->new_sequence();
    std::vector<float> oa, ob;
    int64_t pa = 0, pb = 0;
    for (int step = 0; pa < S || pb < S; ++step) {
      if (step == 6) m->free_sequence(c);  // its blocks go back to the free list
      std::vector<GpuChunk> chunks;
      int64_t na = 0, nb = 0;
      const bool do_a = pa < S && step % 3 != 1, do_b = pb < S && step % 3 != 0;
      if (do_a) {
        na = std::min(ca, S - pa);
        chunks.push_back({a, std::span<const int32_t>(ta.data() + pa, na), true});
      }
      if (do_b) {
        nb = std::min(cb, S - pb);
        chunks.push_back({b, std::span<const int32_t>(tb.data() + pb, nb), true});
      }
      if (chunks.empty()) continue;
      Tensor l = m->forward(chunks);
      oa.insert(oa.end(), l.f32(), l.f32() + na * V);
      ob.insert(ob.end(), l.f32() + na * V, l.f32() + (na + nb) * V);
      pa += na;
      pb += nb;
    }
    ASSERT_EQ(oa.size(), la.size());
    ASSERT_EQ(ob.size(), lb.size());
    EXPECT_EQ(std::memcmp(oa.data(), la.data(), la.size() * sizeof(float)), 0)
        << what << ": sequence A interleaved differs from A alone";
    EXPECT_EQ(std::memcmp(ob.data(), lb.data(), lb.size() * sizeof(float)), 0)
        << what << ": sequence B interleaved differs from B alone";
    std::printf("  %s/%s interleaved vs alone: %zu + %zu logits rows compared bitwise\n",
                GetParam().c_str(), what.c_str(), la.size() / V, lb.size() / V);
  }
}

TEST_P(GoldenCudaTest, RejectsBadInput) {
  GpuModelOptions opt;
  opt.max_sequences = 1;
  opt.max_context = 64;
  opt.max_batch_tokens = 16;
  auto model = GpuModel::load((dir() / "hf").string(), opt);
  const int64_t seq = model->new_sequence();
  EXPECT_THROW(model->new_sequence(), Error);
  std::vector<int32_t> bad = {1, static_cast<int32_t>(model->config().vocab_size)};
  GpuChunk c{seq, bad, false};
  EXPECT_THROW(model->forward(std::span<const GpuChunk>(&c, 1)), Error);
  std::vector<int32_t> many(17, 1);
  c.tokens = many;
  EXPECT_THROW(model->forward(std::span<const GpuChunk>(&c, 1)), Error);
  EXPECT_EQ(model->n_tokens(seq), 0);
}

INSTANTIATE_TEST_SUITE_P(HF, GoldenCudaTest, ::testing::ValuesIn(golden_models()));
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenCudaTest);

TEST(GoldenCuda, DataIsPresent) { EXPECT_GE(golden_models().size(), 4u); }

}  // namespace
}  // namespace deepinfer
