// GPU forward (GpuModel) on the golden checkpoints. Reference numerics with the bf16 paged KV
// cache (and the plain fp32 path, paged_kv off) against HF transformers' float64 logits
// (tests/data/golden); official numerics with the FP8 paged KV cache (584-byte layout, FP8
// indexer keys), and with the bf16 cache, against the CPU backend's official numerics. Each:
// at every position cosine similarity >= 0.999 and the same argmax wherever the reference
// top-1 margin exceeds 1e-2, for
//  * one full prefill,
//  * chunked prefill (chunks of 7) for half the sequence, then decode one token at a time,
//  * two sequences batched together (one in chunks of 13, one prefilled then decoding).
// Also prints the GPU-vs-CPU-backend maximum relative difference (same numerics) per model.
// Paged block tables: two sequences growing interleaved (small blocks, a third sequence freed
// in between, so their tables are non-contiguous and reuse freed blocks) give bitwise the
// logits each gives alone (batch-invariant kernels), for both cache dtypes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "io/safetensors.h"
#include "model/model.h"
#include "runtime/gpu_model.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
const char* kGoldenDir = "tests/data/golden";

std::vector<int32_t> read_ids(const SafetensorsFile& f, const std::string& name) {
  Tensor t = f.tensor(name);
  std::vector<int32_t> ids(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    ids[i] = t.dtype() == DType::I64 ? static_cast<int32_t>(t.data<int64_t>()[i]) : t.data<int32_t>()[i];
  }
  return ids;
}

std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name) {
  Tensor t = f.tensor(name);
  EXPECT_EQ(t.dtype(), DType::F32) << name;
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

std::vector<std::string> golden_models() {
  std::vector<std::string> names;
  if (!fs::exists(kGoldenDir)) return names;
  for (const auto& entry : fs::directory_iterator(kGoldenDir)) {
    if (fs::exists(entry.path() / "reference.safetensors")) names.push_back(entry.path().filename());
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct RowStats {
  double min_cos = 1.0;
  int n_argmax_checked = 0;
};

// ours/ref [rows, V]; margins [rows].
RowStats expect_rows_close(const std::vector<float>& ours, const std::vector<float>& ref,
                           const std::vector<float>& margins, int64_t vocab, const std::string& what) {
  RowStats st;
  EXPECT_EQ(ours.size(), ref.size()) << what;
  if (ours.size() != ref.size()) return st;
  const int64_t rows = static_cast<int64_t>(ref.size()) / vocab;
  int n_bad = 0;
  double max_rel = 0.0;
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
    if (!(cos >= st.min_cos)) st.min_cos = cos;  // NaN propagates
    const bool cos_ok = cos >= 0.999;
    bool argmax_ok = true;
    if (margins[r] > 1e-2f) {
      ++st.n_argmax_checked;
      argmax_ok = std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
    }
    if ((!cos_ok || !argmax_ok) && ++n_bad <= 5) {
      ADD_FAILURE() << what << ": position " << r << " cosine " << cos
                    << (argmax_ok ? "" : ", argmax differs") << " (margin " << margins[r] << ")";
    }
  }
  EXPECT_EQ(n_bad, 0) << what << ": " << n_bad << " of " << rows << " positions fail";
  std::printf("  %-28s positions %4lld  min cosine %.9f (1 - cos %.2e)  max|diff|/max|ref| %.2e"
              "  argmax checked %d\n",
              what.c_str(), static_cast<long long>(rows), st.min_cos, 1.0 - st.min_cos, max_rel,
              st.n_argmax_checked);
  return st;
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
                     const std::string& label) {
  const int64_t S = static_cast<int64_t>(tokens.size()), V = model.config().vocab_size;
  const auto full = run(model, tokens, [&](size_t) { return S; });
  expect_rows_close(full, ref, margins, V, label + " full prefill");
  const auto chunked = run(model, tokens, [&](size_t begin) {
    return static_cast<int64_t>(begin) < S / 2 ? 7 : 1;
  });
  expect_rows_close(chunked, ref, margins, V, label + " chunks of 7 then decode");

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
  expect_rows_close(out_a, ref, margins, V, label + " batched: chunks of 13");
  expect_rows_close(out_b, ref, margins, V, label + " batched: prefill 29 + decode");
  model.free_sequence(a);
  model.free_sequence(b);
}

class GoldenCudaTest : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path dir() const { return fs::path(kGoldenDir) / GetParam(); }
};

TEST_P(GoldenCudaTest, MatchesHFReference) {
  auto ref = SafetensorsFile::open((dir() / "reference.safetensors").string());
  const auto tokens = read_ids(*ref, "input_ids");
  const auto logits = read_f32(*ref, "logits");
  const auto margins = read_f32(*ref, "logits_margin");
  const int64_t S = static_cast<int64_t>(tokens.size());
  std::vector<std::string> variants = {"hf"};
  if (fs::exists(dir() / "native")) variants.push_back("native");
  for (const std::string& variant : variants) {
    SCOPED_TRACE(GetParam() + "/" + variant);
    std::printf("%s/%s (%lld tokens)\n", GetParam().c_str(), variant.c_str(),
                static_cast<long long>(S));
    GpuModelOptions opt;
    opt.max_sequences = 3;
    opt.max_context = 1024;
    opt.max_batch_tokens = 512;
    auto model = GpuModel::load((dir() / variant).string(), opt);
    // Reference numerics defaults to the bf16 paged cache.
    ASSERT_TRUE(model->options().kv_cache_dtype.has_value());
    EXPECT_EQ(*model->options().kv_cache_dtype, KvCacheDtype::kBf16);
    check_scenarios(*model, tokens, logits, margins, "bf16 KV");
    const auto full = run(*model, tokens, [&](size_t) { return S; });
    model.reset();

    // The plain fp32 path (the paged path's oracle) passes the same checks.
    opt.paged_kv = false;
    auto plain = GpuModel::load((dir() / variant).string(), opt);
    EXPECT_FALSE(plain->options().kv_cache_dtype.has_value());
    check_scenarios(*plain, tokens, logits, margins, "plain fp32");
    plain.reset();

    // Same numerics on the CPU backend, for the record.
    auto cpu = Model::load((dir() / variant).string(), {Numerics::kReference, false});
    auto state = cpu->new_state();
    SequenceChunk c{state.get(), tokens, true};
    Tensor cl = cpu->forward(std::span<const SequenceChunk>(&c, 1));
    float diff = 0.0f, scale = 0.0f;
    for (int64_t i = 0; i < cl.numel(); ++i) {
      diff = std::max(diff, std::abs(cl.f32()[i] - full[i]));
      scale = std::max(scale, std::abs(cl.f32()[i]));
    }
    std::printf("  GPU (bf16 KV) vs CPU backend (full prefill): max|diff| / max|logit| = %.3g\n",
                diff / scale);
  }
}

// Official numerics (QAT round trips): the GPU against the CPU backend's official numerics,
// the same two checks (margins taken from the CPU logits).
TEST_P(GoldenCudaTest, OfficialMatchesCpuOfficial) {
  auto ref = SafetensorsFile::open((dir() / "reference.safetensors").string());
  const auto tokens = read_ids(*ref, "input_ids");
  const int64_t S = static_cast<int64_t>(tokens.size());
  std::printf("%s/hf official (%lld tokens), vs the CPU backend's official numerics\n",
              GetParam().c_str(), static_cast<long long>(S));
  auto cpu = Model::load((dir() / "hf").string(), {Numerics::kOfficial, false});
  auto state = cpu->new_state();
  SequenceChunk c{state.get(), tokens, true};
  Tensor cl = cpu->forward(std::span<const SequenceChunk>(&c, 1));
  const int64_t V = cpu->config().vocab_size;
  std::vector<float> cpu_logits(cl.f32(), cl.f32() + cl.numel()), margins(S);
  for (int64_t r = 0; r < S; ++r) {
    std::vector<float> row(&cpu_logits[r * V], &cpu_logits[(r + 1) * V]);
    std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
    margins[r] = row[0] - row[1];
  }
  for (KvCacheDtype dtype : {KvCacheDtype::kFp8, KvCacheDtype::kBf16}) {
    GpuModelOptions opt;
    opt.max_sequences = 3;
    opt.max_context = 1024;
    opt.max_batch_tokens = 512;
    opt.numerics = Numerics::kOfficial;
    if (dtype == KvCacheDtype::kBf16) opt.kv_cache_dtype = dtype;  // kFp8: the default
    auto model = GpuModel::load((dir() / "hf").string(), opt);
    ASSERT_TRUE(model->options().kv_cache_dtype.has_value());
    EXPECT_EQ(*model->options().kv_cache_dtype, dtype);
    check_scenarios(*model, tokens, cpu_logits, margins,
                    std::string("official ") + kv_cache_dtype_name(dtype) + " KV");
  }
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
