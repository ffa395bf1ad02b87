// Engram (MODEL_SPEC §C.8): the C++ op against the float64 NumPy reference
// (tools/engram_reference.py, fixture by tools/make_engram_tables.py) and the §E.12 invariants.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/dtype.h"
#include "base/error.h"
#include "io/engram_token_map.h"
#include "io/safetensors.h"
#include "engram_test_util.h"
#include "ops/engram/engram.h"

namespace deepinfer {
namespace {

using testing::engram_real_config;
using testing::kEngramFixture;
using testing::read_tensor;
using testing::shipped_engram_map;

std::vector<float> read_bf16(const SafetensorsFile& f, const std::string& name) {
  std::vector<float> out;
  for (uint16_t b : read_tensor<uint16_t>(f, name)) out.push_back(bf16_to_f32(b));
  return out;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The fixture: a tiny config (2 layers, 2 heads, max n-gram 4, head_dim 64, D 32, 4 streams),
// two sequences packed into one batch, per layer its table, weights and float64 outputs.
struct Fixture {
  std::shared_ptr<SafetensorsFile> f = SafetensorsFile::open(kEngramFixture);
  nlohmann::json meta(const std::string& key) const { return nlohmann::json::parse(f->metadata().at(key)); }
  EngramConfig config() const {
    EngramConfig c;
    c.layer_ids = meta("layer_ids").get<std::vector<int64_t>>();
    c.max_ngram_size = meta("max_ngram").get<int>();
    c.vocab_size = meta("vocab_size").get<int64_t>();
    c.n_heads = meta("n_heads").get<int>();
    c.head_dim = meta("head_dim").get<int>();
    c.compressed_vocab_size = meta("compressed_vocab_size").get<int64_t>();
    for (int64_t l : c.layer_ids) {
      int64_t sum = 0;
      for (int64_t p : read_tensor<int64_t>(*f, "layer" + std::to_string(l) + ".primes")) sum += p;
      c.num_embeddings.push_back(sum);
    }
    return c;
  }
  int hc() const { return meta("hc").get<int>(); }
  int64_t dim() const { return meta("dim").get<int64_t>(); }
};

// Rows of a packed batch of sequences (each from its position 0).
std::vector<int32_t> batch_rows(const std::vector<int32_t>& tokens, const std::vector<int32_t>& lens,
                                int max_ngram) {
  std::vector<int32_t> rows(tokens.size() * max_ngram);
  int64_t start = 0;
  for (int32_t n : lens) {
    engram_ngram_rows(tokens.data() + start, 0, n, max_ngram, rows.data() + start * max_ngram);
    start += n;
  }
  return rows;
}

std::vector<int64_t> hash(const EngramLayerTables& t, const std::vector<int32_t>& rows) {
  const EngramTokenMap& m = shipped_engram_map();
  const int64_t n = static_cast<int64_t>(rows.size()) / t.max_ngram;
  std::vector<int64_t> ids(n * t.n_cols);
  engram_hash_ids({&t, m.ids.data(), static_cast<int64_t>(m.ids.size()), m.compressed_vocab_size, 2},
                  rows.data(), n, ids.data());
  return ids;
}

// ---------------------------------------------------------------------------------------------
// Prime walk and multipliers

TEST(Engram, PrimeWalkReproducesTheRealConfigsNumEmbeddings) {
  const auto tables = engram_primes(engram_real_config());
  ASSERT_EQ(tables.size(), 2u);
  EXPECT_EQ(tables[0].n_rows, 384006168);
  EXPECT_EQ(tables[1].n_rows, 384016682);
  // MODEL_SPEC §C.8.3: layer 1 n=2 heads, layer 14's first and last primes.
  const std::vector<int64_t> l1_2gram = {16000057, 16000079, 16000081, 16000097,
                                         16000121, 16000129, 16000133, 16000183};
  EXPECT_EQ(std::vector<int64_t>(tables[0].primes.begin(), tables[0].primes.begin() + 8), l1_2gram);
  EXPECT_EQ(tables[0].primes[8], 16000189);
  EXPECT_EQ(tables[0].primes[16], 16000339);
  EXPECT_EQ(tables[0].primes[23], 16000463);
  EXPECT_EQ(tables[1].primes[0], 16000477);
  EXPECT_EQ(tables[1].primes[8], 16000667);
  EXPECT_EQ(tables[1].primes[16], 16000781);
  EXPECT_EQ(tables[1].primes[23], 16000889);
  std::set<int64_t> all;
  for (const auto& t : tables) {
    ASSERT_EQ(t.n_cols, 24);
    int64_t off = 0;
    for (int c = 0; c < t.n_cols; ++c) {
      EXPECT_EQ(t.offsets[c], off);
      off += t.primes[c];
      all.insert(t.primes[c]);
    }
  }
  EXPECT_EQ(all.size(), 48u) << "primes must be distinct across layers and heads";
}

TEST(Engram, WrongNumEmbeddingsIsAnErrorNamingTheKey) {
  EngramConfig c = engram_real_config();
  c.num_embeddings[1] += 1;
  EXPECT_NE(error_of([&] { engram_primes(c); }).find("engram_num_embeddings[1]"), std::string::npos);
  c = engram_real_config();
  c.num_embeddings.pop_back();
  EXPECT_NE(error_of([&] { engram_primes(c); }).find("engram_num_embeddings"), std::string::npos);
  c = engram_real_config();
  c.head_dim = 48;
  EXPECT_NE(error_of([&] { engram_primes(c); }).find("engram_head_dim"), std::string::npos);
  c = engram_real_config();
  c.max_ngram_size = 9;
  EXPECT_NE(error_of([&] { engram_primes(c); }).find("engram_max_ngram_size"), std::string::npos);
}

TEST(Engram, MultipliersAreNumpysAndMissingRowsAreNamed) {
  // numpy.random.default_rng(10007 * l).integers(0, ((2^63-1)//99092)//2, 4) * 2 + 1, l = 1, 14.
  EXPECT_EQ(engram_multipliers(1, 99092, 4),
            (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  EXPECT_EQ(engram_multipliers(14, 99092, 4),
            (std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
  EXPECT_EQ(engram_multipliers(14, 99092, 2), (std::vector<int64_t>{67716810739261, 51510806800915}));
  for (int l = 0; l < 64; ++l) {
    for (int64_t mu : engram_multipliers(l, 99092, kEngramMaxNgram)) {
      EXPECT_EQ(mu % 2, 1);
      EXPECT_LT(static_cast<unsigned __int128>(99091) * static_cast<uint64_t>(mu),
                static_cast<unsigned __int128>(1) << 63);
    }
  }
  try {
    engram_multipliers(64, 99092, 4);
    ADD_FAILURE() << "layer 64 has no committed multipliers";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("layer 64"), std::string::npos);
  }
  EXPECT_NE(error_of([] { engram_multipliers(1, 12345, 4); }).find("compressed vocab size 12345"),
            std::string::npos);
  EngramConfig c = engram_real_config();
  c.compressed_vocab_size = 99093;
  EXPECT_NE(error_of([&] { engram_primes(c); }).find("99093"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Token map

TEST(Engram, ShippedTokenMapHas99092CompressedIds) {
  // tools/make_engram_tables.py computes 99092 from models/tiny/tokenizer.json (V4), the value
  // DeepSeek's V4.1 code asserts; the V4.1 spellings of ids 128799 / 129264 leave the map as is.
  const EngramTokenMap& m = shipped_engram_map();
  ASSERT_EQ(m.ids.size(), 129280u);
  EXPECT_EQ(m.compressed_vocab_size, 99092);
  EXPECT_EQ(m.vocabulary_sha256, "81d7baa7f20b139f6f751d29ba2b1745d74c82756d63a2cb159304e97701f54f");
  // Ids are introduced in token order: each value is at most one above the running maximum.
  int32_t max_seen = -1;
  for (int32_t v : m.ids) {
    ASSERT_GE(v, 0);
    ASSERT_LE(v, max_seen + 1);
    max_seen = std::max(max_seen, v);
  }
  EXPECT_EQ(max_seen + 1, m.compressed_vocab_size);
  EXPECT_EQ(m.ids[0], 0);
  EXPECT_EQ(m.ids[2], 2);  // pad
}

TEST(Engram, MalformedTokenMapFilesAreRejected) {
  std::ifstream in(kEngramTokenMapPath, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string path = ::testing::TempDir() + "engram_map_bad.bin";
  auto try_bytes = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
    return error_of([&] { load_engram_token_map(path); });
  };
  EXPECT_NE(try_bytes(good.substr(0, good.size() - 4)).find(path), std::string::npos);
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_NE(try_bytes(bad_magic).find("magic"), std::string::npos);
  std::string swapped = good;  // the first two repeat pairs out of order
  std::swap_ranges(swapped.begin() + 52, swapped.begin() + 60, swapped.begin() + 60);
  EXPECT_NE(try_bytes(swapped), "");
  EXPECT_EQ(try_bytes(good), "");
  EXPECT_NE(error_of([] { load_engram_token_map("no/such/map.bin"); }).find("cannot open"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Against the float64 reference

TEST(Engram, MatchesTheFloat64ReferenceOnTheFixture) {
  const Fixture fx;
  const EngramConfig cfg = fx.config();
  const auto tables = engram_primes(cfg);
  const auto tokens = read_tensor<int32_t>(*fx.f, "tokens");
  const auto lens = read_tensor<int32_t>(*fx.f, "seq_lens");
  const auto x0 = read_tensor<float>(*fx.f, "x");
  const int hc = fx.hc();
  const int64_t d = fx.dim(), n = static_cast<int64_t>(tokens.size());
  ASSERT_EQ(static_cast<int64_t>(x0.size()), n * hc * d);
  const auto rows = batch_rows(tokens, lens, static_cast<int>(cfg.max_ngram_size));

  for (const EngramLayerTables& t : tables) {
    const std::string p = "layer" + std::to_string(t.layer_id) + ".";
    SCOPED_TRACE(p);
    EXPECT_EQ(t.primes, read_tensor<int64_t>(*fx.f, p + "primes"));
    EXPECT_EQ(t.offsets, read_tensor<int64_t>(*fx.f, p + "offsets"));
    EXPECT_EQ(t.multipliers, read_tensor<int64_t>(*fx.f, p + "multipliers")) << "committed table vs NumPy";
    const auto ids = hash(t, rows);
    EXPECT_EQ(ids, read_tensor<int64_t>(*fx.f, p + "ids"));

    const auto embed = read_tensor<uint8_t>(*fx.f, p + "embed.weight");
    const auto scale = read_tensor<uint8_t>(*fx.f, p + "embed.scale");
    const auto wkv = read_bf16(*fx.f, p + "wkv");
    const auto qw = read_tensor<float>(*fx.f, p + "q_weight");
    const auto kw = read_tensor<float>(*fx.f, p + "k_weight");
    const auto ref = read_tensor<double>(*fx.f, p + "out");
    std::vector<float> x = x0;
    EngramLayerParams lp;
    lp.n_rows = n;
    lp.n_hc = hc;
    lp.dim = d;
    lp.layer = &t;
    lp.ids = ids.data();
    lp.embed = embed.data();
    lp.embed_scale = scale.data();
    lp.n_table_rows = static_cast<int64_t>(embed.size()) / t.head_dim;
    lp.wkv = wkv.data();
    lp.q_weight = qw.data();
    lp.k_weight = kw.data();
    engram_layer_ref(lp, x.data());
    // fp32 vs fp64: the projection sums 384 products per output (|error| <~ 384 u sum|a b|, u =
    // 6e-8, in practice ~sqrt(384) u); the gate's dot and RMS factors add a few u relative; gamma
    // = sigmoid(sqrt|delta|) has slope <= 1/(8 sqrt|delta|), bounded for the fixture's |delta|.
    // Allowed: 1e-5 of the output scale per element (observed ~3e-7; a wrong column order,
    // scale, stream or sign moves elements by O(1)).
    double scale_ref = 0.0, max_err = 0.0;
    for (int64_t i = 0; i < n * hc * d; ++i) scale_ref = std::max(scale_ref, std::fabs(ref[i]));
    for (int64_t i = 0; i < n * hc * d; ++i) max_err = std::max(max_err, std::fabs(x[i] - ref[i]));
    std::printf("layer %d: max|out - ref| %.3g, max|ref| %.3g\n", t.layer_id, max_err, scale_ref);
    EXPECT_LE(max_err, 1e-5 * scale_ref) << "max|out - ref| " << max_err << ", max|ref| " << scale_ref;
    double moved = 0.0;
    for (int64_t i = 0; i < n * hc * d; ++i) moved = std::max(moved, std::fabs(ref[i] - x0[i]));
    EXPECT_GT(moved, 0.1 * scale_ref) << "the fixture's update must be visible";
  }
}

TEST(Engram, GateFollowsTheSignedSquareRootWithItsClamp) {
  const std::vector<float> x = {1.0f, 0.0f}, w = {1.0f, 1.0f};
  // delta = x.w.key / (rms(x) rms(key) sqrt(2)) with key parallel to x: 1 / (sqrt(.5)^2 sqrt 2).
  const std::vector<float> key = {3.0f, 0.0f}, neg = {-3.0f, 0.0f}, orth = {0.0f, 2.0f};
  const double delta = 1.0 / (0.5 * std::sqrt(2.0));
  EXPECT_NEAR(engram_gate(x.data(), key.data(), w.data(), 2, 1e-20f, 1e-6f),
              1.0 / (1.0 + std::exp(-std::sqrt(delta))), 1e-6);
  EXPECT_NEAR(engram_gate(x.data(), neg.data(), w.data(), 2, 1e-20f, 1e-6f),
              1.0 / (1.0 + std::exp(std::sqrt(delta))), 1e-6);
  EXPECT_EQ(engram_gate(x.data(), orth.data(), w.data(), 2, 1e-20f, 1e-6f), 0.5f);  // sign(0) = 0
  const std::vector<float> tiny = {1.0f, 1e-9f}, ktiny = {1e-9f, 1.0f}, w1 = {1.0f, 0.0f};
  // delta ~ 1e-9 > 0 is clamped to 1e-6 before the square root: gamma = sigmoid(1e-3).
  EXPECT_NEAR(engram_gate(tiny.data(), ktiny.data(), w1.data(), 2, 1e-20f, 1e-6f),
              1.0 / (1.0 + std::exp(-1e-3)), 1e-7);
}

// ---------------------------------------------------------------------------------------------
// §E.12 invariants on the real config and map

std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n) {
  std::uniform_int_distribution<int32_t> dist(0, 129279);
  std::vector<int32_t> t(n);
  for (auto& v : t) v = dist(rng);
  return t;
}

TEST(Engram, EveryIdOfColumnCLiesInItsBucket) {
  const auto tables = engram_primes(engram_real_config());
  std::mt19937 rng(7);
  const auto tokens = random_tokens(rng, 3000);
  std::vector<int32_t> rows(tokens.size() * 4);
  engram_ngram_rows(tokens.data(), 0, static_cast<int64_t>(tokens.size()), 4, rows.data());
  for (const auto& t : tables) {
    const auto ids = hash(t, rows);
    std::vector<std::set<int64_t>> distinct(t.n_cols);
    for (size_t r = 0; r < tokens.size(); ++r) {
      for (int c = 0; c < t.n_cols; ++c) {
        const int64_t id = ids[r * t.n_cols + c];
        ASSERT_GE(id, t.offsets[c]) << "layer " << t.layer_id << " column " << c;
        ASSERT_LT(id, t.offsets[c] + t.primes[c]) << "layer " << t.layer_id << " column " << c;
        distinct[c].insert(id);
      }
    }
    for (int c = 0; c < t.n_cols; ++c) EXPECT_GT(distinct[c].size(), 2900u) << "column " << c;
  }
  // The two layers hash differently (their multipliers differ).
  EXPECT_NE(hash(tables[0], rows)[100 * 24] - tables[0].offsets[0],
            hash(tables[1], rows)[100 * 24] - tables[1].offsets[0]);
}

TEST(Engram, NgramsNeverCrossTheSequenceStart) {
  const auto tables = engram_primes(engram_real_config());
  const EngramLayerTables& t = tables[0];
  std::mt19937 rng(11);
  const auto a = random_tokens(rng, 10), b = random_tokens(rng, 10);
  // A row near position 0 equals the one written with the pad token at the missing shifts.
  std::vector<int32_t> rows(10 * 4);
  engram_ngram_rows(b.data(), 0, 10, 4, rows.data());
  EXPECT_EQ(rows[1 * 4 + 2], -1);
  std::vector<int32_t> padded = rows;
  for (auto& v : padded) v = v < 0 ? 2 : v;
  EXPECT_EQ(hash(t, rows), hash(t, padded));
  // A dead entry at shift k pads every larger shift too.
  std::vector<int32_t> dead = rows, dead_ref = rows;
  dead[5 * 4 + 1] = -1;
  dead_ref[5 * 4 + 1] = dead_ref[5 * 4 + 2] = dead_ref[5 * 4 + 3] = 2;
  EXPECT_EQ(hash(t, dead), hash(t, dead_ref));

  // Two sequences packed in one batch: changing the tail of the first changes nothing in the
  // second, whose first rows differ from those of one concatenated stream.
  std::vector<int32_t> tokens = a;
  tokens.insert(tokens.end(), b.begin(), b.end());
  const auto ids = hash(t, batch_rows(tokens, {10, 10}, 4));
  std::vector<int32_t> changed = tokens;
  changed[9] = (changed[9] + 1) % 129280;
  changed[8] = (changed[8] + 7) % 129280;
  const auto ids_changed = hash(t, batch_rows(changed, {10, 10}, 4));
  EXPECT_NE(std::vector<int64_t>(ids.begin(), ids.begin() + 10 * 24),
            std::vector<int64_t>(ids_changed.begin(), ids_changed.begin() + 10 * 24));
  EXPECT_EQ(std::vector<int64_t>(ids.begin() + 10 * 24, ids.end()),
            std::vector<int64_t>(ids_changed.begin() + 10 * 24, ids_changed.end()));
  EXPECT_EQ(std::vector<int64_t>(ids.begin() + 10 * 24, ids.end()), hash(t, rows));
  const auto crossing = hash(t, batch_rows(tokens, {20}, 4));
  EXPECT_NE(std::vector<int64_t>(crossing.begin() + 10 * 24, crossing.begin() + 11 * 24),
            std::vector<int64_t>(ids.begin() + 10 * 24, ids.begin() + 11 * 24));
}

TEST(Engram, ChunkedRowsAndLayerEqualTheFullPass) {
  const Fixture fx;
  const auto tables = engram_primes(fx.config());
  const EngramLayerTables& t = tables[1];
  const std::string p = "layer" + std::to_string(t.layer_id) + ".";
  const auto embed = read_tensor<uint8_t>(*fx.f, p + "embed.weight");
  const auto scale = read_tensor<uint8_t>(*fx.f, p + "embed.scale");
  const auto wkv = read_bf16(*fx.f, p + "wkv");
  const auto qw = read_tensor<float>(*fx.f, p + "q_weight");
  const auto kw = read_tensor<float>(*fx.f, p + "k_weight");
  const int hc = fx.hc();
  const int64_t d = fx.dim(), n = 41;
  std::mt19937 rng(5);
  const auto tokens = random_tokens(rng, n);
  std::normal_distribution<float> normal;
  std::vector<float> x0(n * hc * d);
  for (auto& v : x0) v = normal(rng);

  auto run = [&](int64_t begin, int64_t end, float* x) {
    std::vector<int32_t> rows((end - begin) * t.max_ngram);
    engram_ngram_rows(tokens.data(), begin, end, t.max_ngram, rows.data());
    const auto ids = hash(t, rows);
    EngramLayerParams lp;
    lp.n_rows = end - begin;
    lp.n_hc = hc;
    lp.dim = d;
    lp.layer = &t;
    lp.ids = ids.data();
    lp.embed = embed.data();
    lp.embed_scale = scale.data();
    lp.n_table_rows = static_cast<int64_t>(embed.size()) / t.head_dim;
    lp.wkv = wkv.data();
    lp.q_weight = qw.data();
    lp.k_weight = kw.data();
    engram_layer_ref(lp, x + begin * hc * d);
    return ids;
  };
  std::vector<float> full = x0;
  const auto full_ids = run(0, n, full.data());
  std::vector<float> chunked = x0;
  std::vector<int64_t> chunked_ids;
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 1}, {1, 8}, {8, 9}, {9, 40}, {40, 41}}) {
    const auto ids = run(b, e, chunked.data());
    chunked_ids.insert(chunked_ids.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(chunked_ids, full_ids);
  EXPECT_EQ(chunked, full) << "bitwise: the projection's reduction order is fixed per row";
  EXPECT_NE(full, x0);
}

TEST(Engram, SkippedRowsAndBadIdsAndShortTables) {
  const Fixture fx;
  const auto tables = engram_primes(fx.config());
  const EngramLayerTables& t = tables[0];
  const std::string p = "layer" + std::to_string(t.layer_id) + ".";
  const auto embed = read_tensor<uint8_t>(*fx.f, p + "embed.weight");
  const auto scale = read_tensor<uint8_t>(*fx.f, p + "embed.scale");
  const auto wkv = read_bf16(*fx.f, p + "wkv");
  const auto qw = read_tensor<float>(*fx.f, p + "q_weight");
  const auto kw = read_tensor<float>(*fx.f, p + "k_weight");
  auto ids = read_tensor<int64_t>(*fx.f, p + "ids");
  const auto x0 = read_tensor<float>(*fx.f, "x");
  const int hc = fx.hc();
  const int64_t d = fx.dim(), n = static_cast<int64_t>(ids.size()) / t.n_cols;
  std::vector<uint8_t> skip(n, 0);
  skip[3] = 1;
  EngramLayerParams lp;
  lp.n_rows = n;
  lp.n_hc = hc;
  lp.dim = d;
  lp.layer = &t;
  lp.ids = ids.data();
  lp.embed = embed.data();
  lp.embed_scale = scale.data();
  lp.n_table_rows = static_cast<int64_t>(embed.size()) / t.head_dim;
  lp.wkv = wkv.data();
  lp.q_weight = qw.data();
  lp.k_weight = kw.data();
  lp.skip_rows = skip.data();
  std::vector<float> x = x0;
  engram_layer_ref(lp, x.data());
  for (int64_t r = 0; r < n; ++r) {
    const bool same = std::equal(x.begin() + r * hc * d, x.begin() + (r + 1) * hc * d,
                                 x0.begin() + r * hc * d);
    EXPECT_EQ(same, r == 3) << "row " << r;
  }
  lp.skip_rows = nullptr;
  ids[5] = lp.n_table_rows;
  EXPECT_NE(error_of([&] { engram_layer_ref(lp, x.data()); }).find("outside the table"),
            std::string::npos);
  ids[5] = 0;
  lp.n_table_rows = t.n_rows - 1;
  EXPECT_NE(error_of([&] { engram_layer_ref(lp, x.data()); }).find("prime walk needs"),
            std::string::npos);
}

}  // namespace
}  // namespace deepinfer
