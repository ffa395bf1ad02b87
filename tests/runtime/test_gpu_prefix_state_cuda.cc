// GpuModel's prefix states (runtime/gpu_prefix_state.cc; issue 18) on the golden checkpoints:
// a sequence imported from a chain of exported pieces continues bitwise as the sequence that
// exported them (batch-invariant kernels), and as a sequence that never exported anything,
// at every position after the hit (prefill chunks, then one-token decode steps), for hits
// ending at a block boundary, at ratio-4 / ratio-128 (V4) or ratio-2 (V4.1) group boundaries
// and mid-window; V4 with fp32 and FP8 weights, FP8 and bf16 paged KV and the plain fp32
// state, the MTP-1 drafter's ring (its drafts after the hit compared too); V4.1 with fp32
// weights, paged bf16 and plain, Engram's token ring included. Pieces of another layout are
// refused naming the difference; a piece outlives its model. Label cuda: needs a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/safetensors.h"
#include "runtime/gpu_model.h"
#include "../model/golden_data.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

std::vector<int32_t> golden_tokens(const fs::path& model_dir) {
  auto ref = SafetensorsFile::open((model_dir / "reference.safetensors").string());
  return testing::read_ids(*ref, "input_ids");
}

// tokens [from, to) through `seq`: chunks of `chunk` for the first `prefill` tokens, then one
// token per forward (decode steps); every row's logits.
std::vector<float> run_span(GpuModel& m, int64_t seq, const std::vector<int32_t>& t, int64_t from, int64_t to,
                            int64_t chunk, int64_t prefill) {
  std::vector<float> out;
  for (int64_t p = from; p < to;) {
    const int64_t n = p - from < prefill ? std::min({chunk, to - p, from + prefill - p}) : 1;
    GpuChunk c{seq, std::span<const int32_t>(t.data() + p, size_t(n)), true};
    Tensor l = m.forward(std::span<const GpuChunk>(&c, 1));
    out.insert(out.end(), l.f32(), l.f32() + l.numel());
    p += n;
  }
  return out;
}

// Prefill [0, hit) of a fresh sequence in chunks of 7 stopping at every multiple of `step`
// and at `hit`, exporting a piece at each stop (each the parent of the next).
int64_t prefill_exporting(GpuModel& m, const std::vector<int32_t>& t, int64_t hit, int64_t step,
                          std::vector<std::shared_ptr<const PrefixState>>* pieces) {
  const int64_t seq = m.new_sequence();
  for (int64_t p = 0; p < hit;) {
    const int64_t stop = std::min(hit, (p / step + 1) * step);
    run_span(m, seq, t, p, stop, 7, stop - p);
    p = stop;
    if (pieces) pieces->push_back(m.export_prefix(seq, pieces->empty() ? nullptr : pieces->back().get()));
  }
  return seq;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// For each hit: exporter, importer and a sequence that exported nothing continue from the hit
// alike (chunks of 5 for 12 tokens, then decode steps), bitwise.
void check_hits(const fs::path& model_dir, const std::string& weights_dir, const GpuModelOptions& opt,
                const std::vector<int64_t>& hits, int64_t step, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<int32_t> t = golden_tokens(model_dir);
  auto m = GpuModel::load((model_dir / weights_dir).string(), opt);
  const int64_t N = std::min<int64_t>(int64_t(t.size()), opt.max_context);
  for (int64_t hit : hits) {
    SCOPED_TRACE("hit at " + std::to_string(hit));
    ASSERT_LT(hit, N);
    std::vector<std::shared_ptr<const PrefixState>> pieces;
    const int64_t a = prefill_exporting(*m, t, hit, step, &pieces);
    int64_t bytes = 0;
    for (const auto& p : pieces) bytes += p->bytes;
    EXPECT_EQ(pieces.back()->end, hit);
    EXPECT_GT(bytes, 0);
    std::vector<const PrefixState*> chain;
    for (const auto& p : pieces) chain.push_back(p.get());
    const int64_t b = m->import_prefix(chain);
    EXPECT_EQ(m->n_tokens(b), hit);
    const int64_t c = prefill_exporting(*m, t, hit, step, nullptr);
    // The drafter reads its ring: drafts right after the hit agree too.
    if (m->has_mtp()) {
      const int32_t next = t[size_t(hit)];
      const int64_t seqs[2] = {a, b};
      const int32_t nexts[2] = {next, next};
      const auto da = m->draft(std::span<const int64_t>(seqs, 1), std::span<const int32_t>(nexts, 1), 2);
      const auto db = m->draft(std::span<const int64_t>(seqs + 1, 1), std::span<const int32_t>(nexts, 1), 2);
      EXPECT_EQ(da[0].tokens, db[0].tokens);
      EXPECT_TRUE(bitwise_equal(da[0].logits, db[0].logits)) << "MTP drafts after the hit";
    }
    const auto la = run_span(*m, a, t, hit, N, 5, 12);
    const auto lb = run_span(*m, b, t, hit, N, 5, 12);
    const auto lc = run_span(*m, c, t, hit, N, 5, 12);
    EXPECT_TRUE(bitwise_equal(la, lc)) << "exporting changed the sequence";
    EXPECT_TRUE(bitwise_equal(lb, lc)) << "the imported sequence differs from a cold one";
    m->free_sequence(a);
    m->free_sequence(b);
    m->free_sequence(c);
  }
}

GpuModelOptions base_options() {
  GpuModelOptions o;
  o.max_sequences = 4;
  o.max_context = 512;
  o.max_batch_tokens = 64;
  o.batch_invariant = true;
  return o;
}

const fs::path kV4 = testing::kGoldenDir;
const fs::path kV41 = "tests/data/golden_v41";

// csa: window 16, ratio 4 (indexer). Hits: 64 (block, group and window multiple), 100 (ratio-4
// boundary, mid-window), 66 and 45 (mid everything).
TEST(GpuPrefixState, V4RatioFourHitsAreExact) {
  for (int variant = 0; variant < 4; ++variant) {
    GpuModelOptions o = base_options();
    std::string what;
    if (variant == 0) {
      o.numerics = Numerics::kReference;  // bf16 paged
      what = "reference bf16 kv";
    } else if (variant == 1) {
      o.numerics = Numerics::kOfficial;  // fp8 paged
      o.kv_block_size = 8;               // runs across many page blocks
      what = "official fp8 kv, blocks of 8";
    } else if (variant == 2) {
      o.numerics = Numerics::kOfficial;
      o.weight_format = WeightFormat::kFp8;
      what = "official fp8 weights fp8 kv";
    } else {
      o.numerics = Numerics::kReference;
      o.paged_kv = false;
      what = "reference plain state";
    }
    check_hits(kV4 / "csa", "hf", o, {64, 100, 66, 45}, 16, "csa " + what);
  }
}

// hca: ratio 128. Hits: 256 (ratio-128 boundary), 300 and 129 (mid group, mid-window).
TEST(GpuPrefixState, V4RatioOneTwentyEightHitsAreExact) {
  for (bool official : {false, true}) {
    GpuModelOptions o = base_options();
    o.numerics = official ? Numerics::kOfficial : Numerics::kReference;
    check_hits(kV4 / "hca", "hf", o, {256, 300, 129}, 64, official ? "hca fp8 kv" : "hca bf16 kv");
  }
}

// mixed_quant (native form: it holds mtp.0): ratios 4 and 128 together, FP8 weights, the MTP
// drafter with rollback slots.
TEST(GpuPrefixState, V4MixedWithMtpHitsAreExact) {
  for (bool fp8_weights : {false, true}) {
    GpuModelOptions o = base_options();
    o.numerics = Numerics::kOfficial;
    o.weight_format = fp8_weights ? WeightFormat::kFp8 : WeightFormat::kF32;
    o.mtp = true;
    o.max_rollback = 2;
    check_hits(kV4 / "mixed_quant", "native", o, {256, 260, 301, 133}, 32,
               fp8_weights ? "mixed_quant fp8 weights + mtp" : "mixed_quant fp32 weights + mtp");
  }
}

// V4.1 (window 8): ratio-2 and ratio-1 sources, reuse / reindex layers, candidate blocks;
// engram: the token-history ring. Hits: 40 (ratio-2 boundary, window multiple), 46 (ratio-2
// boundary, mid-window), 41 and 27 (mid group).
TEST(GpuPrefixState, V41HitsAreExact) {
  for (const char* name : {"base", "r2only", "engram"}) {
    for (int variant = 0; variant < 3; ++variant) {
      GpuModelOptions o = base_options();
      o.max_context = 256;
      std::string what = std::string(name);
      if (variant == 0) {
        o.numerics = Numerics::kReference;
        o.kv_cache_dtype = KvCacheDtype::kBf16;
        what += " reference paged bf16";
      } else if (variant == 1) {
        o.numerics = Numerics::kOfficial;
        o.kv_cache_dtype = KvCacheDtype::kBf16;
        o.kv_block_size = 8;
        what += " official paged bf16, blocks of 8";
      } else {
        o.numerics = Numerics::kOfficial;
        o.paged_kv = false;
        what += " official plain";
      }
      check_hits(kV41 / name, "bf16", o, {40, 46, 41, 27}, 8, what);
    }
  }
}

struct ForeignPiece final : PrefixState {};

std::string thrown_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Pieces of another runner or model layout are refused naming what differs; a piece's device
// memory outlives its model.
TEST(GpuPrefixState, ForeignPiecesAreRefusedAndPiecesOutliveTheModel) {
  const std::vector<int32_t> t = golden_tokens(kV4 / "csa");
  GpuModelOptions o = base_options();
  o.numerics = Numerics::kOfficial;
  auto m = GpuModel::load((kV4 / "csa" / "hf").string(), o);
  const int64_t a = prefill_exporting(*m, t, 40, 40, nullptr);
  std::shared_ptr<const PrefixState> piece = m->export_prefix(a, nullptr);
  EXPECT_EQ(piece->begin, 0);
  EXPECT_EQ(piece->end, 40);

  ForeignPiece foreign;
  foreign.end = 40;
  const PrefixState* fp = &foreign;
  EXPECT_NE(thrown_message([&] { m->import_prefix(std::span<const PrefixState* const>(&fp, 1)); })
                .find("another runner"),
            std::string::npos);
  EXPECT_NE(thrown_message([&] { m->export_prefix(a, &foreign); }).find("another runner"), std::string::npos);

  GpuModelOptions ref = o;
  ref.numerics = Numerics::kReference;
  auto other = GpuModel::load((kV4 / "csa" / "hf").string(), ref);
  const PrefixState* p = piece.get();
  EXPECT_NE(thrown_message([&] { other->import_prefix(std::span<const PrefixState* const>(&p, 1)); })
                .find("numerics"),
            std::string::npos);
  GpuModelOptions w8 = o;
  w8.weight_format = WeightFormat::kFp8;
  other = GpuModel::load((kV4 / "csa" / "hf").string(), w8);
  EXPECT_NE(thrown_message([&] { other->import_prefix(std::span<const PrefixState* const>(&p, 1)); })
                .find("weights"),
            std::string::npos);
  GpuModelOptions bf16 = o;
  bf16.kv_cache_dtype = KvCacheDtype::kBf16;
  other = GpuModel::load((kV4 / "csa" / "hf").string(), bf16);
  EXPECT_NE(thrown_message([&] { other->import_prefix(std::span<const PrefixState* const>(&p, 1)); })
                .find("bf16"),
            std::string::npos);
  // A model of the same layout takes it (the bytes are the same state).
  other = GpuModel::load((kV4 / "csa" / "hf").string(), o);
  const int64_t b = other->import_prefix(std::span<const PrefixState* const>(&p, 1));
  EXPECT_EQ(other->n_tokens(b), 40);
  // Exporting below the parent's end is refused.
  const int64_t short_seq = prefill_exporting(*m, t, 20, 20, nullptr);
  EXPECT_NE(thrown_message([&] { m->export_prefix(short_seq, piece.get()); }).find("not more than"),
            std::string::npos);
  m.reset();
  other.reset();
  piece.reset();  // freed after its model: no stream left, synchronous free
  SUCCEED();
}

}  // namespace
}  // namespace deepinfer
