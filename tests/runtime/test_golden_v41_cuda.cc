// GPU forward (GpuModel) on the DeepSeek-V4.1 golden checkpoints (tests/data/golden_v41,
// README there: tiny random models, mlx-lm 0.32.2's deepseek_v41.py as the independent
// reference). What each part proves:
//  * Reference numerics, plain fp32 state (paged_kv = false) against mlx's float32 logits at
//    every position: full prefill, chunked prefill (chunks of 1, 7, 64; chunks of 1 are pure
//    decode, which catches the MODEL_SPEC §C.7 defect of scoring another source's keys),
//    two sequences batched (in two chunks each); the CPU test's bound: max|ours - ref| <=
//    1e-4 * max|ref| per position. Both checkpoint spellings (bf16, and fp8 dequantised to
//    the same fp32 weights).
//  * Official numerics (FP8 window, FP4 x e4m3 compressed entries, FP4 index keys and
//    queries), plain state, against the CPU backend's official path on the same weights: the
//    rule (FP4 rounding thresholds amplify fp32 order noise): argmax equal at >= 95% of
//    positions and cosine >= 0.999 at every position, in every scenario.
//  * The bf16 paged cache (kv_cache_dtype bf16): official numerics against the CPU official
//    path with the same loose rule (the FP8 / FP4 x e4m3 values are exact in bf16, so only
//    fp32 order noise separates it from the plain state); reference numerics against mlx
//    with a looser one (bf16 storage rounds every K=V entry: argmax equal at >= 90% of
//    positions, cosine >= 0.999 at >= 90%), numbers printed.
//    Official numerics: argmax at >= 95% and cosine >= 0.999 at EVERY position (within 1e-4
//    printed only, see below). Every rule bounds the worst position;
//    reference bf16: a position below 0.999 (or with another argmax) must come at or after
//    the first position where the GPU's discrete choices (record_decisions: experts, indexer
//    picks) differ from the CPU reference's (= mlx's) on that sequence alone, so a low
//    position is a discrete flip, never a numeric defect. Why such positions exist (measured:
//    the H200 at 874cbdc against the CPU with a throwaway program, not a test):
//      - reference bf16: the CPU reference forward with the window and compressed K=V rounded
//        to bf16 gives, vs mlx, base a min cos 0.846984 (positions 41, 53), base b -0.096952
//        (argmax 75/80, 10 positions below 0.999 from position 7 on), deep b 0.469813
//        (positions 20, 76), dspark_quant a 0.985708, r2only b 0.998826: the H200's bf16
//        paged numbers (0.846985, -0.096952, 0.469813, 0.985703, 0.998826). bf16 storage
//        swaps near-tied top-k members; nothing in the paged path differs.
//      - official: the CPU official path with its K=V also rounded to bf16 is bitwise
//        unchanged (the values are exact); with 4-ulp noise on the attention output (another
//        summation order) base b gives 34/80 within 1e-4, min cos 0.999281 in 4 of 12 seeds
//        (a threshold crossed at position 10) and base a 71/80, min cos 0.99999977: the
//        H200's paged base b (34/80, 0.999281) and chunks of 7 (70/80, 0.99999975). Hence
//        no within-1e-4 assertion for official numerics.
//  * Batch invariance (the class of bug a 90% rule could hide): with batch_invariant, two
//    sequences of different texts run interleaved (different chunk sizes, joint and single
//    forwards, a third sequence freed in between so paged blocks are reused with stale
//    entries) give bitwise the logits each gives alone, on the plain fp32 state and the bf16
//    paged cache, in both numerics, at every position.
//  * The `engram` model (Engram before layers 1 and 4; its reference is mlx's backbone with
//    this repository's NumPy Engram, README there) runs every part above through GpuEngram,
//    the n-gram history built on the device (chunks of 1 read every earlier token from the
//    ring, runtime/engram_history.h).
//  * kv_cache_dtype fp8 (the 528 / 288 / 68-byte formats, exact for official values): official
//    numerics against the CPU official path by the loose rule, every scenario; batch
//    invariance as below.
//  * Refusals: V4.1 options outside phase 1 (FP8 routed experts under weight_format fp8,
//    Engram with dummy weights) fail at construction with kUnsupported naming the option; bad tokens
//    fail the forward before any state changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "base/error.h"
#include "io/config_parser.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "runtime/gpu_model.h"
#include "../model/golden_data.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using testing::read_f32;
using testing::read_ids;
using testing::rows_out_of_tolerance;

constexpr const char* kDir = "tests/data/golden_v41";

GpuModelOptions v41_options() {
  GpuModelOptions o;
  o.max_sequences = 3;
  o.max_context = 256;
  o.max_batch_tokens = 256;
  o.paged_kv = false;
  return o;
}

// `tokens` through a fresh sequence in chunks of `chunk`, every row's logits.
std::vector<float> run_chunked(GpuModel& model, const std::vector<int32_t>& tokens, size_t chunk) {
  const int64_t seq = model.new_sequence();
  std::vector<float> out;
  for (size_t begin = 0; begin < tokens.size(); begin += chunk) {
    const size_t end = std::min(tokens.size(), begin + chunk);
    GpuChunk c{seq, std::span<const int32_t>(tokens.data() + begin, end - begin), true};
    Tensor l = model.forward(std::span<const GpuChunk>(&c, 1));
    out.insert(out.end(), l.f32(), l.f32() + l.numel());
  }
  EXPECT_EQ(model.n_tokens(seq), static_cast<int64_t>(tokens.size()));
  model.free_sequence(seq);
  return out;
}

// Two sequences in the same forwards, in two chunks each (as the CPU test): logits of a, b.
std::pair<std::vector<float>, std::vector<float>> run_batched(GpuModel& model,
                                                              const std::vector<int32_t>& ta,
                                                              const std::vector<int32_t>& tb) {
  const int64_t V = model.config().vocab_size;
  const int64_t a = model.new_sequence(), b = model.new_sequence();
  std::vector<float> out_a, out_b;
  for (auto [begin, end] : {std::pair<size_t, size_t>{0, 37}, {37, ta.size()}}) {
    const GpuChunk chunks[2] = {
        {a, std::span<const int32_t>(ta.data() + begin, end - begin), true},
        {b, std::span<const int32_t>(tb.data() + begin, end - begin), true}};
    Tensor l = model.forward(chunks);
    const int64_t n = static_cast<int64_t>(end - begin);
    out_a.insert(out_a.end(), l.f32(), l.f32() + n * V);
    out_b.insert(out_b.end(), l.f32() + n * V, l.f32() + 2 * n * V);
  }
  model.free_sequence(a);
  model.free_sequence(b);
  return {out_a, out_b};
}

// Per-position statistics of ours against ref [rows, V].
struct RowStats {
  int64_t rows = 0, argmax_equal = 0, within = 0, cos_ok = 0;
  double min_cos = 1.0;
};
RowStats row_stats(const std::vector<float>& ours, const std::vector<float>& ref, int64_t V) {
  RowStats s;
  EXPECT_EQ(ours.size(), ref.size());
  if (ours.size() != ref.size()) return s;
  s.rows = static_cast<int64_t>(ref.size()) / V;
  s.within = s.rows - rows_out_of_tolerance(ours, ref, V);
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* a = &ours[r * V];
    const float* b = &ref[r * V];
    s.argmax_equal += (std::max_element(a, a + V) - a) == (std::max_element(b, b + V) - b);
    double dot = 0, na = 0, nb = 0;
    for (int64_t v = 0; v < V; ++v) {
      dot += static_cast<double>(a[v]) * b[v];
      na += static_cast<double>(a[v]) * a[v];
      nb += static_cast<double>(b[v]) * b[v];
    }
    const double cos = dot / std::sqrt(na * nb);
    if (!(cos >= s.min_cos)) s.min_cos = cos;  // NaN propagates
    s.cos_ok += cos >= 0.999;
  }
  return s;
}

void print_stats(const std::string& what, const RowStats& s) {
  std::printf("  %-52s positions %3lld  argmax equal %3lld  within 1e-4 %3lld  cos>=0.999 %3lld"
              "  min cos %.9f\n",
              what.c_str(), static_cast<long long>(s.rows), static_cast<long long>(s.argmax_equal),
              static_cast<long long>(s.within), static_cast<long long>(s.cos_ok), s.min_cos);
}

// The rule for official numerics: argmax equal at >= 95% of positions, cosine >= 0.999 at
// every position (header).
void expect_loose(const std::vector<float>& ours, const std::vector<float>& ref, int64_t V,
                  const std::string& what) {
  const RowStats s = row_stats(ours, ref, V);
  print_stats(what, s);
  EXPECT_GE(s.argmax_equal * 20, s.rows * 19) << what;
  // Within 1e-4 is printed, not asserted: one FP4 / top-k threshold crossed by fp32 order
  // noise moves every later position by up to ~1e-3 (base bf16 paged b: 34/80, reproduced on
  // the CPU, header); the exact check of these paths is BatchedMatchesAloneBitwise. Every
  // position's cosine is bounded instead: worst measured 0.999281 (that run; plain state
  // 0.999925).
  EXPECT_GE(s.min_cos, 0.999) << what << ": a position outside FP4 threshold noise";
}

// bf16 storage of every K=V entry (reference numerics): argmax at >= 90% of positions. The
// share of positions at cosine >= 0.999 is printed, not asserted: bf16 keys swap near-tied
// top-k members and every later position moves (base, sequence b: 70 of 80 on the H200 and
// 70 of 80 on the CPU with its K=V rounded to bf16, min cos -0.097 on both). What is asserted
// per position is expect_flips_explain (each low position comes after a changed choice), and
// BatchedMatchesAloneBitwise ties the batched runs to the alone ones.
void expect_bf16_close(const std::vector<float>& ours, const std::vector<float>& ref, int64_t V,
                       const std::string& what) {
  const RowStats s = row_stats(ours, ref, V);
  print_stats(what, s);
  EXPECT_GE(s.argmax_equal * 10, s.rows * 9) << what;
}

// Whether ours' argmax is, in `ref`, within `tie` * max|ref| of ref's own maximum (a near tie
// that rounding may flip without any defect).
bool argmax_is_near_tie(const std::vector<float>& ours, const std::vector<float>& ref, double tie) {
  const auto mine = std::max_element(ours.begin(), ours.end()) - ours.begin();
  const float top = *std::max_element(ref.begin(), ref.end());
  float scale = 0;
  for (float v : ref) scale = std::max(scale, std::fabs(v));
  return top - ref[mine] <= tie * scale;
}

// Every scenario of the header (full, chunks of 1 / 7 / 64, batched a and b) against `ref` /
// `ref_b` with `check`.
using Check = std::function<void(const std::vector<float>&, const std::vector<float>&, int64_t,
                                 const std::string&)>;
void check_scenarios(GpuModel& gpu, const std::vector<int32_t>& tokens,
                     const std::vector<int32_t>& tokens_b, const std::vector<float>& ref,
                     const std::vector<float>& ref_b, const std::string& label, const Check& check) {
  const int64_t V = gpu.config().vocab_size;
  check(run_chunked(gpu, tokens, tokens.size()), ref, V, label + " full prefill");
  for (size_t chunk : {1, 7, 64}) {
    check(run_chunked(gpu, tokens, chunk), ref, V, label + " chunks of " + std::to_string(chunk));
  }
  const auto [a, b] = run_batched(gpu, tokens, tokens_b);
  check(a, ref, V, label + " batched, sequence a");
  check(b, ref_b, V, label + " batched, sequence b");
}

void strict(const std::vector<float>& ours, const std::vector<float>& ref, int64_t V,
            const std::string& what) {
  const RowStats s = row_stats(ours, ref, V);
  print_stats(what, s);
  testing::expect_rows_match(ours, ref, V, what);
}

// CPU backend logits of `tokens` (all rows) and of tokens_b, in the given numerics.
std::pair<std::vector<float>, std::vector<float>> cpu_logits(const std::string& dir,
                                                             Numerics numerics,
                                                             const std::vector<int32_t>& ta,
                                                             const std::vector<int32_t>& tb) {
  auto model = Model::load(dir, {numerics, false});
  auto one = [&](const std::vector<int32_t>& t) {
    auto state = model->new_state();
    SequenceChunk c{state.get(), t, true};
    Tensor l = model->forward(std::span<const SequenceChunk>(&c, 1));
    return std::vector<float>(l.f32(), l.f32() + l.numel());
  };
  return {one(ta), one(tb)};
}

// The first position where the two traces' choices differ (each row compared as a set:
// experts or picks), -1 when none does, over positions [0, n).
int64_t first_choice_difference(const DecisionTrace& x, const DecisionTrace& y, int64_t n) {
  int64_t first = -1;
  auto scan = [&](const std::vector<int32_t>& a, const std::vector<int32_t>& b, int64_t w) {
    if (a.empty() || b.empty() || w == 0) return;
    for (int64_t p = 0; p < n && (first < 0 || p < first); ++p) {
      std::vector<int32_t> ra(a.begin() + p * w, a.begin() + (p + 1) * w);
      std::vector<int32_t> rb(b.begin() + p * w, b.begin() + (p + 1) * w);
      std::sort(ra.begin(), ra.end());
      std::sort(rb.begin(), rb.end());
      if (ra != rb) first = p;
    }
  };
  for (size_t l = 0; l < x.experts.size() && l < y.experts.size(); ++l) {
    scan(x.experts[l], y.experts[l], x.top_k);
    scan(x.picks[l], y.picks[l], x.index_topk);
  }
  return first;
}

// A full prefill of `tokens` alone on `gpu` with its choices recorded, against `ref` (mlx):
// every position with cosine < 0.999 or another argmax must come at or after the first
// position where the GPU chose differently from the CPU reference forward (`cpu`, whose
// logits are mlx's to 1e-4): with the same choices up to a position, only bf16 storage
// rounding separates the two, so a low position before any flip would be a numeric defect.
void expect_flips_explain(GpuModel& gpu, Model& cpu, const std::vector<int32_t>& tokens,
                          const std::vector<float>& ref, const std::string& what) {
  const int64_t S = static_cast<int64_t>(tokens.size()), V = gpu.config().vocab_size;
  DecisionTrace mine(gpu.config(), S);
  gpu.record_decisions(&mine);
  const std::vector<float> ours = run_chunked(gpu, tokens, tokens.size());
  gpu.record_decisions(nullptr);
  const testing::RecordedForward theirs = testing::record_forward(cpu, tokens);
  const int64_t first = first_choice_difference(mine, theirs.trace, S);
  ASSERT_EQ(ours.size(), ref.size()) << what;
  int64_t n_low = 0, first_low = -1;
  for (int64_t p = 0; p < S; ++p) {
    const std::vector<float> a(ours.begin() + p * V, ours.begin() + (p + 1) * V);
    const std::vector<float> b(ref.begin() + p * V, ref.begin() + (p + 1) * V);
    const RowStats st = row_stats(a, b, V);
    // An argmax flip at a near tie (the reference's margin under 1e-3 of max|ref|; measured:
    // flips at cos 0.999996-0.9999996 with no changed choice) is rounding, not a defect.
    if (st.min_cos >= 0.999 && (st.argmax_equal == 1 || argmax_is_near_tie(a, b, 1e-3))) continue;
    ++n_low;
    if (first_low < 0) first_low = p;
    EXPECT_TRUE(first >= 0 && p >= first)
        << what << ": position " << p << " (cos " << st.min_cos
        << ") with no earlier change of a discrete choice";
  }
  std::printf("  %-52s first choice difference at %3lld; %lld positions below 0.999 / other "
              "argmax, the first at %lld\n",
              what.c_str(), static_cast<long long>(first), static_cast<long long>(n_low),
              static_cast<long long>(first_low));
}

class GoldenV41Cuda : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path dir() const { return fs::path(kDir) / GetParam(); }
  std::shared_ptr<SafetensorsFile> ref() const {
    return SafetensorsFile::open((dir() / "reference.safetensors").string());
  }
};

TEST_P(GoldenV41Cuda, ReferencePlainStateMatchesMlx) {
  auto r = ref();
  const auto tokens = read_ids(*r, "input_ids"), tokens_b = read_ids(*r, "input_ids_b");
  const auto logits = read_f32(*r, "logits_reference"), logits_b = read_f32(*r, "logits_reference_b");
  for (const char* variant : {"bf16", "fp8"}) {
    SCOPED_TRACE(GetParam() + "/" + variant);
    std::printf("%s/%s: GPU reference numerics, plain fp32 state, vs mlx\n", GetParam().c_str(),
                variant);
    auto gpu = GpuModel::load((dir() / variant).string(), v41_options());
    ASSERT_TRUE(gpu->config().is_v41());
    check_scenarios(*gpu, tokens, tokens_b, logits, logits_b, "reference plain", strict);
  }
}

TEST_P(GoldenV41Cuda, OfficialPlainStateMatchesCpuOfficial) {
  auto r = ref();
  const auto tokens = read_ids(*r, "input_ids"), tokens_b = read_ids(*r, "input_ids_b");
  const std::string bf16 = (dir() / "bf16").string();
  const auto [want, want_b] = cpu_logits(bf16, Numerics::kOfficial, tokens, tokens_b);
  std::printf("%s: GPU official numerics, plain fp32 state, vs the CPU official path\n",
              GetParam().c_str());
  GpuModelOptions o = v41_options();
  o.numerics = Numerics::kOfficial;
  auto gpu = GpuModel::load(bf16, o);
  check_scenarios(*gpu, tokens, tokens_b, want, want_b, "official plain", expect_loose);
}

TEST_P(GoldenV41Cuda, Bf16PagedCache) {
  auto r = ref();
  const auto tokens = read_ids(*r, "input_ids"), tokens_b = read_ids(*r, "input_ids_b");
  const std::string bf16 = (dir() / "bf16").string();
  GpuModelOptions o = v41_options();
  o.paged_kv = true;
  o.kv_cache_dtype = KvCacheDtype::kBf16;
  o.kv_block_size = 16;  // several blocks per sequence at 80 tokens
  {
    std::printf("%s: GPU official numerics, bf16 paged cache, vs the CPU official path\n",
                GetParam().c_str());
    o.numerics = Numerics::kOfficial;
    const auto [want, want_b] = cpu_logits(bf16, Numerics::kOfficial, tokens, tokens_b);
    auto gpu = GpuModel::load(bf16, o);
    ASSERT_TRUE(gpu->options().kv_cache_dtype.has_value());
    EXPECT_EQ(*gpu->options().kv_cache_dtype, KvCacheDtype::kBf16);
    check_scenarios(*gpu, tokens, tokens_b, want, want_b, "official bf16 paged", expect_loose);
  }
  {
    std::printf("%s: GPU reference numerics, bf16 paged cache, vs mlx\n", GetParam().c_str());
    o.numerics = Numerics::kReference;
    auto gpu = GpuModel::load(bf16, o);
    check_scenarios(*gpu, tokens, tokens_b, read_f32(*r, "logits_reference"),
                    read_f32(*r, "logits_reference_b"), "reference bf16 paged", expect_bf16_close);
    auto cpu = Model::load(bf16, {Numerics::kReference, false});
    expect_flips_explain(*gpu, *cpu, tokens, read_f32(*r, "logits_reference"),
                         "reference bf16 paged, sequence a alone");
    expect_flips_explain(*gpu, *cpu, tokens_b, read_f32(*r, "logits_reference_b"),
                         "reference bf16 paged, sequence b alone");
  }
}

// kv_cache_dtype fp8 (header): the 528 / 288 / 68-byte formats hold official numerics'
// values exactly, so official numerics on them meets the CPU official path by the same rule as
// the bf16 paged cache; and the paged state holds the formats' sizes.
TEST_P(GoldenV41Cuda, Fp8PagedCache) {
  auto r = ref();
  const auto tokens = read_ids(*r, "input_ids"), tokens_b = read_ids(*r, "input_ids_b");
  const std::string bf16 = (dir() / "bf16").string();
  GpuModelOptions o = v41_options();
  o.paged_kv = true;
  o.kv_cache_dtype = KvCacheDtype::kFp8;
  o.kv_block_size = 16;
  o.kv_window_block_size = 0;  // first every pool in blocks of 16 (the default 8 is below)
  o.numerics = Numerics::kOfficial;
  std::printf("%s: GPU official numerics, fp8 paged cache (528 / 288 / 68-B formats), vs the "
              "CPU official path\n", GetParam().c_str());
  const auto [want, want_b] = cpu_logits(bf16, Numerics::kOfficial, tokens, tokens_b);
  auto gpu = GpuModel::load(bf16, o);
  ASSERT_TRUE(gpu->options().kv_cache_dtype.has_value());
  EXPECT_EQ(*gpu->options().kv_cache_dtype, KvCacheDtype::kFp8);
  check_scenarios(*gpu, tokens, tokens_b, want, want_b, "official fp8 paged", expect_loose);
  o.kv_cache_dtype.reset();  // official numerics default to fp8
  auto dflt = GpuModel::load(bf16, o);
  EXPECT_EQ(*dflt->options().kv_cache_dtype, KvCacheDtype::kFp8);

  // GpuModelOptions::kv_window_block_size: the window pool in blocks of 8 beside compressed
  // entries and index keys in blocks of 16 (a confusion of the two geometries lands on other
  // entries). Against the CPU official path in every scenario, and against the shared blocks
  // of 16 above in chunks of 7: the same entries in the same order, so the logits agree far
  // inside the loose bound (max |diff| <= 1e-5 x max |logit|; bitwise equality reported).
  const auto shared = run_chunked(*gpu, tokens, 7);
  o.kv_window_block_size = 8;
  auto own = GpuModel::load(bf16, o);
  check_scenarios(*own, tokens, tokens_b, want, want_b, "official fp8 paged, window blocks of 8", expect_loose);
  const auto mine = run_chunked(*own, tokens, 7);
  ASSERT_EQ(mine.size(), shared.size());
  float worst = 0.0f, scale = 0.0f;
  for (size_t i = 0; i < mine.size(); ++i) {
    worst = std::max(worst, std::fabs(mine[i] - shared[i]));
    scale = std::max(scale, std::fabs(shared[i]));
  }
  const bool bitwise = std::memcmp(mine.data(), shared.data(), mine.size() * sizeof(float)) == 0;
  std::printf("  window blocks of 8 vs 16, chunks of 7: max |diff| %.3g (max |logit| %.3g), bitwise %s\n",
              worst, scale, bitwise ? "yes" : "no");
  EXPECT_LE(worst, 1e-5f * scale) << "window blocks of 8 vs 16: the same entries should give the same logits";
  GpuModelOptions bad = o;
  bad.kv_window_block_size = 12;
  EXPECT_THROW(GpuModel::load(bf16, bad), Error);
}

// Header, "Batch invariance": A (chunks of 5) and B (chunks of 3, another text) interleaved
// -- joint forwards and forwards of one of them, a third sequence prefilled first and freed
// at step 6 -- against each alone in the same chunks, bitwise at every position. Paged blocks
// of 8 entries, so tables interleave and reuse the freed sequence's blocks.
TEST_P(GoldenV41Cuda, BatchedMatchesAloneBitwise) {
  auto r = ref();
  const auto ta = read_ids(*r, "input_ids"), tb = read_ids(*r, "input_ids_b");
  const std::string bf16 = (dir() / "bf16").string();
  struct Path {
    const char* name;
    bool paged;
    Numerics numerics;
    KvCacheDtype dtype = KvCacheDtype::kBf16;
  };
  for (const Path& path : {Path{"plain reference", false, Numerics::kReference},
                           Path{"plain official", false, Numerics::kOfficial},
                           Path{"bf16 paged reference", true, Numerics::kReference},
                           Path{"bf16 paged official", true, Numerics::kOfficial},
                           Path{"fp8 paged official", true, Numerics::kOfficial, KvCacheDtype::kFp8}}) {
    SCOPED_TRACE(path.name);
    GpuModelOptions o = v41_options();
    o.paged_kv = path.paged;
    if (path.paged) {
      o.kv_cache_dtype = path.dtype;
      o.kv_block_size = 8;
    }
    o.numerics = path.numerics;
    o.batch_invariant = true;
    const size_t ca = 5, cb = 3;
    auto alone = [&](const std::vector<int32_t>& t, size_t chunk) {
      auto m = GpuModel::load(bf16, o);
      return run_chunked(*m, t, chunk);
    };
    const auto la = alone(ta, ca), lb = alone(tb, cb);

    auto m = GpuModel::load(bf16, o);
    const int64_t V = m->config().vocab_size;
    const int64_t c = m->new_sequence();
    const std::vector<int32_t> tc(tb.rbegin(), tb.rbegin() + 40);
    GpuChunk cc{c, tc, false};
    m->forward(std::span<const GpuChunk>(&cc, 1));
    const int64_t a = m->new_sequence(), b = m->new_sequence();
    std::vector<float> oa, ob;
    size_t pa = 0, pb = 0;
    for (int step = 0; pa < ta.size() || pb < tb.size(); ++step) {
      if (step == 6) m->free_sequence(c);  // its blocks go back to the free list
      std::vector<GpuChunk> chunks;
      size_t na = 0, nb = 0;
      if (pa < ta.size() && step % 3 != 1) {
        na = std::min(ca, ta.size() - pa);
        chunks.push_back({a, std::span<const int32_t>(ta.data() + pa, na), true});
      }
      if (pb < tb.size() && step % 3 != 0) {
        nb = std::min(cb, tb.size() - pb);
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
        << path.name << ": sequence A interleaved differs from A alone";
    EXPECT_EQ(std::memcmp(ob.data(), lb.data(), lb.size() * sizeof(float)), 0)
        << path.name << ": sequence B interleaved differs from B alone";
    print_stats(std::string(path.name) + ": A interleaved vs alone", row_stats(oa, la, V));
    print_stats(std::string(path.name) + ": B interleaved vs alone", row_stats(ob, lb, V));
  }
}

// Decode steps replayed as CUDA graphs (padded to a bucket, per-step counts read on the
// device: compressor emission, index keys, candidate blocks) give bitwise the logits of
// eager decode steps, both batch invariant, on the bf16 paged cache.
TEST_P(GoldenV41Cuda, GraphDecodeIsBitwiseEager) {
  auto r = ref();
  const auto tokens = read_ids(*r, "input_ids");
  GpuModelOptions o = v41_options();
  o.paged_kv = true;
  o.kv_cache_dtype = KvCacheDtype::kBf16;
  o.kv_block_size = 16;
  o.batch_invariant = true;
  auto decode = [&](bool graphs) {
    o.cuda_graphs = graphs;
    auto gpu = GpuModel::load((dir() / "bf16").string(), o);
    const int64_t seq = gpu->new_sequence();
    std::vector<float> out;
    GpuChunk c{seq, std::span<const int32_t>(tokens.data(), 20), true};
    Tensor l = gpu->forward(std::span<const GpuChunk>(&c, 1));
    out.insert(out.end(), l.f32(), l.f32() + l.numel());
    for (size_t p = 20; p < tokens.size(); ++p) {
      c.tokens = std::span<const int32_t>(tokens.data() + p, 1);
      l = gpu->forward(std::span<const GpuChunk>(&c, 1));
      out.insert(out.end(), l.f32(), l.f32() + l.numel());
    }
    if (graphs) {
      EXPECT_GT(gpu->graph_stats().replays, 0);
    }
    return out;
  };
  const auto eager = decode(false), graphed = decode(true);
  ASSERT_EQ(eager.size(), graphed.size());
  EXPECT_TRUE(eager == graphed) << GetParam() << ": graph decode differs from eager decode";
  const int64_t V = static_cast<int64_t>(eager.size() / tokens.size());
  print_stats("reference bf16 paged, prefill 20 + decode (report)",
              row_stats(eager, read_f32(*r, "logits_reference"), V));
}

INSTANTIATE_TEST_SUITE_P(Mlx, GoldenV41Cuda, ::testing::ValuesIn(testing::golden_models(kDir)));
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenV41Cuda);

// The kind of the Error `f` throws (or "none").
template <typename F>
std::string thrown_kind(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message != nullptr) *message = e.what();
    return e.kind() == ErrorKind::kUnsupported    ? "unsupported"
           : e.kind() == ErrorKind::kInvalidInput ? "invalid_input"
                                                  : "other";
  }
  return "none";
}

TEST(GoldenV41CudaRefusals, UnsupportedOptionsAndBadInput) {
  ASSERT_GE(testing::golden_models(kDir).size(), 4u) << "tests/data/golden_v41 is incomplete";
  const std::string base = (fs::path(kDir) / "base" / "bf16").string();
  std::string msg;
  {
    GpuModelOptions o = v41_options();
    // weight_format fp8 runs (32x32-block dense FP8, test_golden_v41_fp8_cuda); its routed
    // experts must be FP4 as stored (expert_format w4a8): the bf16 spelling has none.
    o.weight_format = WeightFormat::kFp8;
    EXPECT_EQ(thrown_kind([&] { GpuModel::load(base, o); }, &msg), "unsupported");
    EXPECT_NE(msg.find("expert_format fp8"), std::string::npos) << msg;
  }
  const fs::path engram = fs::path(kDir) / "engram" / "bf16";
  if (fs::exists(engram)) {  // Engram tables come from the checkpoint: no dummy weights
    const ModelConfig cfg = load_model_config(engram.string());
    EXPECT_EQ(thrown_kind([&] { GpuModel(cfg, 7, v41_options()); }, &msg), "unsupported");
    EXPECT_NE(msg.find("Engram"), std::string::npos) << msg;
  }
  // Bad tokens: refused before any state changes; the sequence then runs as if they never
  // came.
  auto gpu = GpuModel::load(base, v41_options());
  const int64_t V = gpu->config().vocab_size;
  const int64_t seq = gpu->new_sequence();
  const std::vector<int32_t> bad = {3, static_cast<int32_t>(V)}, neg = {-1};
  GpuChunk c{seq, bad, true};
  EXPECT_EQ(thrown_kind([&] { gpu->forward(std::span<const GpuChunk>(&c, 1)); }), "invalid_input");
  c.tokens = neg;
  EXPECT_EQ(thrown_kind([&] { gpu->forward(std::span<const GpuChunk>(&c, 1)); }), "invalid_input");
  EXPECT_EQ(gpu->n_tokens(seq), 0);
  gpu->free_sequence(seq);
  auto r = SafetensorsFile::open((fs::path(kDir) / "base" / "reference.safetensors").string());
  const auto tokens = read_ids(*r, "input_ids");
  testing::expect_rows_match(run_chunked(*gpu, tokens, tokens.size()),
                             read_f32(*r, "logits_reference"), V, "after refused forwards");
}

}  // namespace
}  // namespace deepinfer
