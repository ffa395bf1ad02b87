// Engram CUDA kernels (ops/engram/engram_cuda.h) against the CPU reference (engram_ref.cc):
//  * hash: bitwise engram_hash_ids at n = 1, 3, 37, 129 rows, sequences shorter than the
//    n-gram, dead tokens inside sequences, on the released V4.1-Flash config (24 columns) and
//    the tiny golden's (max n-gram 3); the fixture's ids in the chain test below;
//  * dequantisation: bitwise the CPU's e4m3 * 2^(s - 127) (every e8m0 code but the NaN 255,
//    e4m3 codes but the NaNs), tables in device memory and in pinned mapped host memory,
//    checkpoint and packed layouts, 16-byte and bytewise loads; the raw gather copies rows
//    byte for byte and its staging buffer dequantises to the same values;
//  * gate + update vs engram_gate and the CPU update at D = 32, 333, 5120: the gate's three
//    sums are double (another order than the CPU's), so gamma may differ by expf's and the
//    float roundings' few ulp: |dx| <= 1e-5 (|x| + |value|) per element (a wrong stream,
//    sign or norm moves elements by O(|value|)); dead rows bitwise unchanged; with bf16
//    rounding one bf16 ulp more;
//  * the whole chain (hash -> gather -> fp32 projection -> gate) on the fixture vs the CPU
//    engram_layer_ref and the float64 reference: within 1e-5 of the output scale (the CPU
//    test's own bound vs float64; GPU and CPU differ only in fp32 reduction order), ids
//    bitwise the fixture's, with the table in device memory and in pinned host memory.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/dtype.h"
#include "base/error.h"
#include "cuda/cuda_check.h"
#include "cuda/device_context.h"
#include "cuda/device_tensor.h"
#include "io/engram_token_map.h"
#include "io/safetensors.h"
#include "op_test_util.h"
#include "engram_test_util.h"
#include "ops/engram/engram.h"
#include "ops/engram/engram_cuda.h"
#include "ops/gemm/gemm.h"

namespace deepinfer {
namespace {

using testing::engram_real_config;
using testing::kEngramFixture;
using testing::read_tensor;
using testing::shipped_engram_map;

const int64_t kRowCounts[] = {1, 3, 37, 129};

EngramConfig golden_config() {  // tests/data/golden_v41/engram: max n-gram 3, 2 heads
  EngramConfig c;
  c.layer_ids = {1, 4};
  c.num_embeddings = {556, 638};
  c.max_ngram_size = 3;
  c.vocab_size = 128;
  c.n_heads = 2;
  c.head_dim = 64;
  c.pad_token_id = 2;
  c.compressed_vocab_size = 99092;
  return c;
}

// Device buffer of raw bytes (owning).
template <typename T>
Tensor to_dev(const std::vector<T>& v, DType dtype) {
  Tensor t = cuda::device_empty(dtype, {static_cast<int64_t>(v.size())});
  if (!v.empty()) cuda::copy_h2d(t.raw(), v.data(), v.size() * sizeof(T));
  return t;
}

template <typename T>
std::vector<T> from_dev(const Tensor& t) {
  std::vector<T> v(t.nbytes() / sizeof(T));
  cuda::copy_d2h(v.data(), t.raw(), t.nbytes());
  return v;
}

// Pinned host memory mapped into the device (the zero-copy table placement).
struct Pinned {
  void* host = nullptr;
  void* dev = nullptr;
  explicit Pinned(size_t bytes) {
    CUDA_CHECK(cudaHostAlloc(&host, std::max<size_t>(bytes, 16), cudaHostAllocMapped));
    CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
  }
  ~Pinned() { cudaFreeHost(host); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
};

// Histories of n rows: sequences of random lengths 1..6 packed one after another (so many are
// shorter than the n-gram), each from its position 0; about one token in eight dead (-1).
std::vector<int32_t> random_history(std::mt19937_64& rng, int64_t n, int max_ngram,
                                    int32_t n_tokens) {
  std::uniform_int_distribution<int32_t> tok(0, n_tokens - 1);
  std::uniform_int_distribution<int> len(1, 6), die(0, 7);
  std::vector<int32_t> rows(n * max_ngram);
  for (int64_t start = 0; start < n;) {
    const int64_t l = std::min<int64_t>(len(rng), n - start);
    std::vector<int32_t> seq(l);
    for (auto& t : seq) t = die(rng) == 0 ? -1 : tok(rng);
    engram_ngram_rows(seq.data(), 0, l, max_ngram, rows.data() + start * max_ngram);
    start += l;
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------

TEST(EngramCuda, HashIsBitwiseTheCpuHash) {
  auto rng = test::fresh_rng();
  const EngramTokenMap& map = shipped_engram_map();
  const int64_t n_tokens = static_cast<int64_t>(map.ids.size());
  const Tensor map_d = to_dev(map.ids, DType::I32);
  cuda::DeviceContext ctx;
  for (const EngramConfig& cfg : {engram_real_config(), golden_config()}) {
    for (const EngramLayerTables& t : engram_primes(cfg)) {
      const EngramHashParams hp{&t, map.ids.data(), n_tokens, map.compressed_vocab_size, 2};
      const EngramHashCudaParams dp = engram_hash_cuda_params(hp, map_d.data<int32_t>());
      for (int64_t n : kRowCounts) {
        SCOPED_TRACE(::testing::Message() << "layer " << t.layer_id << " max n-gram " << t.max_ngram
                                        << " n " << n);
        const auto hist = random_history(rng, n, t.max_ngram, static_cast<int32_t>(n_tokens));
        std::vector<int64_t> ref(n * t.n_cols);
        engram_hash_ids(hp, hist.data(), n, ref.data());
        const Tensor hist_d = to_dev(hist, DType::I32);
        Tensor ids_d = cuda::device_filled(DType::I64, {n * t.n_cols}, 0xff);
        engram_hash_cuda(ctx.stream(), dp, hist_d.data<int32_t>(), n, ids_d.data<int64_t>());
        ctx.synchronize();
        EXPECT_EQ(from_dev<int64_t>(ids_d), ref);
      }
    }
  }
}

TEST(EngramCuda, HashParamsRejectABadMap) {
  const EngramTokenMap& map = shipped_engram_map();
  const auto tables = engram_primes(golden_config());
  std::vector<int32_t> bad = map.ids;
  bad[77] = 99092;
  const Tensor map_d = to_dev(bad, DType::I32);
  const int64_t n = static_cast<int64_t>(bad.size());
  try {
    engram_hash_cuda_params({&tables[0], bad.data(), n, 99092, 2}, map_d.data<int32_t>());
    ADD_FAILURE() << "a map value outside [0, C) must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 77"), std::string::npos) << e.what();
  }
  EXPECT_THROW(engram_hash_cuda_params({&tables[0], map.ids.data(), n, 99093, 2},
                                       map_d.data<int32_t>()),
               Error);
}

// A random table [rows, hd] (codes without the NaN codes, scales 0..254) and ids into it.
struct RandomTable {
  int64_t rows = 0, hd = 0;
  std::vector<uint8_t> codes, scales;
  RandomTable(std::mt19937_64& rng, int64_t rows_, int64_t hd_) : rows(rows_), hd(hd_) {
    std::uniform_int_distribution<int> byte(0, 255), sc(0, 254);
    codes.resize(rows * hd);
    for (auto& c : codes) {
      do c = static_cast<uint8_t>(byte(rng));
      while ((c & 0x7f) == 0x7f);
    }
    scales.resize(rows * (hd / 32));
    for (auto& s : scales) s = static_cast<uint8_t>(sc(rng));
  }
  // The CPU reference's expression (engram_ref.cc), row `id` into dst[hd].
  void dequant(int64_t id, float* dst) const {
    const auto& e4m3 = e4m3_values();
    for (int64_t i = 0; i < hd; ++i) {
      dst[i] = e4m3[codes[id * hd + i]] *
               std::ldexp(1.0f, static_cast<int>(scales[id * (hd / 32) + i / 32]) - 127);
    }
  }
  std::vector<uint8_t> packed() const {
    const int64_t rb = engram_packed_row_bytes(hd), ns = hd / 32;
    std::vector<uint8_t> p(rows * rb, 0);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(&p[r * rb], &codes[r * hd], hd);
      std::memcpy(&p[r * rb + hd], &scales[r * ns], ns);
    }
    return p;
  }
};

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

TEST(EngramCuda, DequantIsBitwiseTheCpuGatherInEveryPlacementAndLayout) {
  auto rng = test::fresh_rng();
  cuda::DeviceContext ctx;
  for (int64_t hd : {64, 256}) {
    const RandomTable tab(rng, 1031, hd);
    const int64_t ns = hd / 32, rb = engram_packed_row_bytes(hd);
    const std::vector<uint8_t> packed = tab.packed();
    // Placements: device / pinned host; layouts: checkpoint (two arrays), packed, and the
    // checkpoint layout one byte off 16-byte alignment (the bytewise load path).
    const Tensor codes_d = to_dev(tab.codes, DType::U8), scales_d = to_dev(tab.scales, DType::U8);
    const Tensor packed_d = to_dev(packed, DType::U8);
    Tensor shifted_d = cuda::device_empty(DType::U8, {static_cast<int64_t>(tab.codes.size()) + 16});
    cuda::copy_h2d(shifted_d.data<uint8_t>() + 1, tab.codes.data(), tab.codes.size());
    Pinned codes_h(tab.codes.size()), scales_h(tab.scales.size()), packed_h(packed.size());
    std::memcpy(codes_h.host, tab.codes.data(), tab.codes.size());
    std::memcpy(scales_h.host, tab.scales.data(), tab.scales.size());
    std::memcpy(packed_h.host, packed.data(), packed.size());
    auto u8 = [](const void* p) { return static_cast<const uint8_t*>(p); };
    struct Case {
      const char* name;
      EngramTableView view;
    };
    const Case cases[] = {
        {"device, checkpoint layout", {codes_d.data<uint8_t>(), scales_d.data<uint8_t>(), hd, ns, tab.rows, hd}},
        {"device, packed", {packed_d.data<uint8_t>(), packed_d.data<uint8_t>() + hd, rb, rb, tab.rows, hd}},
        {"device, unaligned codes", {shifted_d.data<uint8_t>() + 1, scales_d.data<uint8_t>(), hd, ns, tab.rows, hd}},
        {"pinned host, checkpoint layout", {u8(codes_h.dev), u8(scales_h.dev), hd, ns, tab.rows, hd}},
        {"pinned host, packed", {u8(packed_h.dev), u8(packed_h.dev) + hd, rb, rb, tab.rows, hd}},
    };
    for (int n_cols : {6, 24}) {
      for (int64_t n : kRowCounts) {
        std::uniform_int_distribution<int64_t> pick(0, tab.rows - 1);
        std::vector<int64_t> ids(n * n_cols);
        for (auto& id : ids) id = pick(rng);
        ids[0] = 0;
        ids.back() = tab.rows - 1;
        std::vector<float> ref(n * n_cols * hd);
        for (int64_t rc = 0; rc < n * n_cols; ++rc) tab.dequant(ids[rc], &ref[rc * hd]);
        const Tensor ids_d = to_dev(ids, DType::I64);
        for (const Case& c : cases) {
          SCOPED_TRACE(::testing::Message() << c.name << ", hd " << hd << ", " << n_cols << " columns, n " << n);
          Tensor e = cuda::device_filled(DType::F32, {n * n_cols * hd}, 0xff);
          engram_dequant_cuda(ctx.stream(), c.view, ids_d.data<int64_t>(), n, n_cols, e.data<float>());
          ctx.synchronize();
          EXPECT_EQ(bits(from_dev<float>(e)), bits(ref));
        }
        // Raw gather of the packed rows (device and pinned), then dequantisation of the staging.
        for (const uint8_t* base : {packed_d.data<uint8_t>(), u8(packed_h.dev)}) {
          SCOPED_TRACE(::testing::Message() << "gather rows, hd " << hd << ", n " << n
                                          << (base == u8(packed_h.dev) ? ", pinned" : ", device"));
          Tensor staged = cuda::device_filled(DType::U8, {n * n_cols * rb}, 0xab);
          engram_gather_rows_cuda(ctx.stream(), base, rb, ids_d.data<int64_t>(), n, n_cols,
                                  staged.data<uint8_t>());
          Tensor e = cuda::device_filled(DType::F32, {n * n_cols * hd}, 0xff);
          const EngramTableView sv{staged.data<uint8_t>(), staged.data<uint8_t>() + hd, rb, rb,
                                   n * n_cols, hd};
          engram_dequant_cuda(ctx.stream(), sv, nullptr, n, n_cols, e.data<float>());
          ctx.synchronize();
          std::vector<uint8_t> want(n * n_cols * rb);
          for (int64_t rc = 0; rc < n * n_cols; ++rc) {
            std::memcpy(&want[rc * rb], &packed[ids[rc] * rb], rb);
          }
          EXPECT_EQ(from_dev<uint8_t>(staged), want);
          EXPECT_EQ(bits(from_dev<float>(e)), bits(ref));
        }
      }
    }
  }
}

TEST(EngramCuda, DequantRejectsBadViews) {
  cuda::DeviceContext ctx;
  Tensor t = cuda::device_empty(DType::U8, {4096});
  Tensor e = cuda::device_empty(DType::F32, {1024});
  const uint8_t* p = t.data<uint8_t>();
  EXPECT_THROW(engram_dequant_cuda(ctx.stream(), {p, p, 48, 1, 10, 48}, nullptr, 1, 1, e.data<float>()),
               Error);  // head_dim not a multiple of 32
  EXPECT_THROW(engram_dequant_cuda(ctx.stream(), {p, p, 64, 2, 3, 64}, nullptr, 2, 2, e.data<float>()),
               Error);  // 4 staged rows, 3 in the table
  const auto* ids = reinterpret_cast<const int64_t*>(p);
  EXPECT_THROW(engram_gather_rows_cuda(ctx.stream(), p, 66, ids, 1, 1, t.data<uint8_t>()), Error);  // 66 % 16
}

// ---------------------------------------------------------------------------------------------

// CPU gate + update of engram_layer_ref for rows [n, hc, d] with kv [n, (hc+1) d].
void gate_ref(std::vector<float>& x, const std::vector<float>& kv, const std::vector<float>& w,
              const std::vector<int32_t>& hist, int mg, int64_t n, int hc, int64_t d, bool bf16) {
  for (int64_t r = 0; r < n; ++r) {
    if (hist[r * mg] < 0) continue;
    for (int s = 0; s < hc; ++s) {
      float* xs = &x[(r * hc + s) * d];
      const float* key = &kv[r * (hc + 1) * d + s * d];
      const float* value = &kv[r * (hc + 1) * d + hc * d];
      const float g = engram_gate(xs, key, &w[s * d], d, 1e-20f, 1e-6f);
      for (int64_t i = 0; i < d; ++i) {
        const float y = xs[i] + g * value[i];
        xs[i] = bf16 ? round_bf16(y) : y;
      }
    }
  }
}

TEST(EngramCuda, GateAndUpdateMatchTheCpu) {
  auto rng = test::fresh_rng();
  cuda::DeviceContext ctx;
  const int hc = 4, mg = 4;
  for (int64_t d : {32, 333, 5120}) {
    for (int64_t n : kRowCounts) {
      for (bool bf16 : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "D " << d << " n " << n << (bf16 ? " bf16" : ""));
        const auto x0 = test::randn(rng, n * hc * d);
        const auto kv = test::randn(rng, n * (hc + 1) * d, 0.7f);
        const auto w = test::randn(rng, hc * d, 0.5f);
        const auto hist = random_history(rng, n, mg, 1000);
        std::vector<float> ref = x0;
        gate_ref(ref, kv, w, hist, mg, n, hc, d, bf16);
        const Tensor kv_d = to_dev(kv, DType::F32), w_d = to_dev(w, DType::F32);
        const Tensor hist_d = to_dev(hist, DType::I32);
        Tensor x_d = to_dev(x0, DType::F32);
        EngramGateCudaParams p;
        p.n = n;
        p.n_hc = hc;
        p.dim = d;
        p.kv = kv_d.data<float>();
        p.kv_stride = (hc + 1) * d;
        p.w = w_d.data<float>();
        p.history = hist_d.data<int32_t>();
        p.history_stride = mg;
        p.round_bf16 = bf16;
        p.x = x_d.data<float>();
        engram_gate_cuda(ctx.stream(), p);
        ctx.synchronize();
        const auto out = from_dev<float>(x_d);
        const double rel = bf16 ? 1e-5 + 1.0 / 128 : 1e-5;
        int64_t bad = 0, dead_rows = 0;
        double worst = 0.0;
        for (int64_t r = 0; r < n; ++r) {
          const bool dead = hist[r * mg] < 0;
          dead_rows += dead;
          for (int64_t j = r * hc * d; j < (r + 1) * hc * d; ++j) {
            if (dead) {
              bad += std::memcmp(&out[j], &x0[j], 4) != 0;
              continue;
            }
            const float v = kv[r * (hc + 1) * d + hc * d + (j % d)];
            const double err = std::fabs(static_cast<double>(out[j]) - ref[j]);
            const double lim = rel * (std::fabs(x0[j]) + std::fabs(v)) + 1e-30;
            worst = std::max(worst, err / lim);
            bad += !(err <= lim);
          }
        }
        EXPECT_EQ(bad, 0) << "worst error / bound " << worst << " (" << dead_rows << " dead rows)";
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------

TEST(EngramCuda, WholeChainMatchesTheCpuEngramOnTheFixture) {
  const auto f = SafetensorsFile::open(kEngramFixture);
  auto meta = [&](const std::string& k) { return nlohmann::json::parse(f->metadata().at(k)); };
  EngramConfig cfg;
  cfg.layer_ids = meta("layer_ids").get<std::vector<int64_t>>();
  cfg.max_ngram_size = meta("max_ngram").get<int>();
  cfg.vocab_size = meta("vocab_size").get<int64_t>();
  cfg.n_heads = meta("n_heads").get<int>();
  cfg.head_dim = meta("head_dim").get<int>();
  cfg.compressed_vocab_size = meta("compressed_vocab_size").get<int64_t>();
  for (int64_t l : cfg.layer_ids) {
    int64_t sum = 0;
    for (int64_t p : read_tensor<int64_t>(*f, "layer" + std::to_string(l) + ".primes")) sum += p;
    cfg.num_embeddings.push_back(sum);
  }
  const int hc = meta("hc").get<int>();
  const int64_t d = meta("dim").get<int64_t>();
  const auto tokens = read_tensor<int32_t>(*f, "tokens");
  const auto lens = read_tensor<int32_t>(*f, "seq_lens");
  const auto x0 = read_tensor<float>(*f, "x");
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int mg = static_cast<int>(cfg.max_ngram_size);
  std::vector<int32_t> hist(n * mg);
  for (int64_t start = 0, s = 0; s < static_cast<int64_t>(lens.size()); start += lens[s++]) {
    engram_ngram_rows(tokens.data() + start, 0, lens[s], mg, hist.data() + start * mg);
  }
  const EngramTokenMap& map = shipped_engram_map();
  const int64_t n_tokens = static_cast<int64_t>(map.ids.size());
  const Tensor map_d = to_dev(map.ids, DType::I32), hist_d = to_dev(hist, DType::I32);
  cuda::DeviceContext ctx;

  for (const EngramLayerTables& t : engram_primes(cfg)) {
    const std::string p = "layer" + std::to_string(t.layer_id) + ".";
    const auto embed = read_tensor<uint8_t>(*f, p + "embed.weight");
    const auto scale = read_tensor<uint8_t>(*f, p + "embed.scale");
    std::vector<float> wkv;
    for (uint16_t b : read_tensor<uint16_t>(*f, p + "wkv")) wkv.push_back(bf16_to_f32(b));
    const auto qw = read_tensor<float>(*f, p + "q_weight");
    const auto kw = read_tensor<float>(*f, p + "k_weight");
    const auto ref64 = read_tensor<double>(*f, p + "out");
    const auto ids_fixture = read_tensor<int64_t>(*f, p + "ids");
    const int64_t hd = t.head_dim, k = t.n_cols * hd, n_kv = (hc + 1) * d;
    const int64_t n_table_rows = static_cast<int64_t>(embed.size()) / hd;

    // CPU Engram (engram_layer_ref, as Model::engram_block calls it).
    std::vector<int64_t> ids(n * t.n_cols);
    const EngramHashParams hp{&t, map.ids.data(), n_tokens, map.compressed_vocab_size, 2};
    engram_hash_ids(hp, hist.data(), n, ids.data());
    EngramLayerParams lp;
    lp.n_rows = n;
    lp.n_hc = hc;
    lp.dim = d;
    lp.layer = &t;
    lp.ids = ids.data();
    lp.embed = embed.data();
    lp.embed_scale = scale.data();
    lp.n_table_rows = n_table_rows;
    lp.wkv = wkv.data();
    lp.q_weight = qw.data();
    lp.k_weight = kw.data();
    std::vector<float> cpu = x0;
    engram_layer_ref(lp, cpu.data());

    std::vector<float> w(hc * d);
    for (int64_t i = 0; i < hc * d; ++i) w[i] = qw[i] * kw[i];
    const Tensor wkv_d = to_dev(wkv, DType::F32), w_d = to_dev(w, DType::F32);
    const Tensor codes_d = to_dev(embed, DType::U8), scales_d = to_dev(scale, DType::U8);
    Pinned codes_h(embed.size()), scales_h(scale.size());
    std::memcpy(codes_h.host, embed.data(), embed.size());
    std::memcpy(scales_h.host, scale.data(), scale.size());
    for (bool pinned : {false, true}) {
      SCOPED_TRACE(p + (pinned ? "pinned host table" : "device table"));
      const EngramTableView view{
          pinned ? static_cast<const uint8_t*>(codes_h.dev) : codes_d.data<uint8_t>(),
          pinned ? static_cast<const uint8_t*>(scales_h.dev) : scales_d.data<uint8_t>(),
          hd, hd / 32, n_table_rows, hd};
      Tensor ids_d = cuda::device_filled(DType::I64, {n * t.n_cols}, 0xff);
      Tensor e_d = cuda::device_filled(DType::F32, {n * k}, 0xff);
      Tensor kv_d = cuda::device_filled(DType::F32, {n * n_kv}, 0xff);
      Tensor x_d = to_dev(x0, DType::F32);
      engram_hash_cuda(ctx.stream(), engram_hash_cuda_params(hp, map_d.data<int32_t>()),
                       hist_d.data<int32_t>(), n, ids_d.data<int64_t>());
      engram_dequant_cuda(ctx.stream(), view, ids_d.data<int64_t>(), n, t.n_cols, e_d.data<float>());
      gemm_f32_cuda(ctx, e_d.data<float>(), wkv_d.data<float>(), n, n_kv, k, kv_d.data<float>());
      EngramGateCudaParams g;
      g.n = n;
      g.n_hc = hc;
      g.dim = d;
      g.kv = kv_d.data<float>();
      g.kv_stride = n_kv;
      g.w = w_d.data<float>();
      g.history = hist_d.data<int32_t>();
      g.history_stride = mg;
      g.x = x_d.data<float>();
      engram_gate_cuda(ctx.stream(), g);
      ctx.synchronize();
      EXPECT_EQ(from_dev<int64_t>(ids_d), ids_fixture);
      const auto out = from_dev<float>(x_d);
      double scale_ref = 0.0, err_cpu = 0.0, err64 = 0.0, moved = 0.0;
      for (int64_t i = 0; i < n * hc * d; ++i) {
        scale_ref = std::max(scale_ref, std::fabs(ref64[i]));
        err_cpu = std::max(err_cpu, std::isfinite(out[i]) ? std::fabs(double(out[i]) - cpu[i]) : INFINITY);
        err64 = std::max(err64, std::isfinite(out[i]) ? std::fabs(out[i] - ref64[i]) : INFINITY);
        moved = std::max(moved, std::fabs(double(out[i]) - x0[i]));
      }
      std::printf("layer %d %s: max|gpu - cpu| %.3g, max|gpu - f64| %.3g, max|ref| %.3g\n",
                  t.layer_id, pinned ? "pinned" : "device", err_cpu, err64, scale_ref);
      EXPECT_LE(err_cpu, 1e-5 * scale_ref);
      EXPECT_LE(err64, 1e-5 * scale_ref);
      EXPECT_GT(moved, 0.1 * scale_ref) << "the update must be visible";
    }
  }
}

}  // namespace
}  // namespace deepinfer
