// Paged K=V cache, CPU reference (kv_cache.h): layout sizes, the bytes of a hand-built fp8
// entry (MODEL1 layout: 448 e4m3 + 64 bf16 + 7 UE8M0 + pad, data parts first in a block),
// load(store(x)) == the official QAT round trip (fp8_roundtrip of the NoPE dims, bf16 of the
// RoPE dims), the bf16 variant, slot checks, and paged attention over non-contiguous blocks
// against sparse_attention_row_ref on the plain vectors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "ops/attention/sparse_attention.h"
#include "ops/kv_cache/index_cache.h"
#include "ops/kv_cache/kv_cache.h"
#include "ops/kv_cache/paged_indices.h"
#include "ops/quant/qat.h"

namespace deepinfer {
namespace {

std::vector<float> randn(std::mt19937& gen, int64_t n, float stddev) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

TEST(KvCache, LayoutSizes) {
  const KvCacheLayout fp8 = KvCacheLayout::v4(KvCacheDtype::kFp8, 64);
  EXPECT_EQ(fp8.data_bytes(), 576);
  EXPECT_EQ(fp8.scale_bytes(), 8);
  EXPECT_EQ(fp8.entry_bytes(), 584);
  EXPECT_EQ(fp8.block_bytes(), 37440);  // 64 * 584 = 37376 rounded up to a multiple of 576
  EXPECT_EQ(fp8.n_scales(), 7);
  EXPECT_EQ(fp8.data_offset(3 * 64 + 5), 3 * 37440 + 5 * 576);
  EXPECT_EQ(fp8.scale_offset(3 * 64 + 5), 3 * 37440 + 64 * 576 + 5 * 8);
  const KvCacheLayout bf16 = KvCacheLayout::v4(KvCacheDtype::kBf16, 64);
  EXPECT_EQ(bf16.entry_bytes(), 1024);
  EXPECT_EQ(bf16.block_bytes(), 65536);
  EXPECT_EQ(bf16.data_offset(64 + 2), 65536 + 2048);
  const KvCacheLayout small{KvCacheDtype::kFp8, 128, 64, 3};
  EXPECT_EQ(small.entry_bytes(), 200);
  EXPECT_EQ(small.block_bytes(), 768);  // 600 rounded up to a multiple of 192
  EXPECT_EQ(kv_cache_dtype_from_string("fp8"), KvCacheDtype::kFp8);
  EXPECT_EQ(kv_cache_dtype_from_string("bf16"), KvCacheDtype::kBf16);
  EXPECT_THROW(kv_cache_dtype_from_string("fp16"), Error);
  EXPECT_THROW((KvCacheLayout{KvCacheDtype::kFp8, 512, 96, 64}.validate()), Error);  // nope 416
  EXPECT_THROW((KvCacheLayout{KvCacheDtype::kBf16, 100, 0, 64}.validate()), Error);
  EXPECT_THROW((KvCacheLayout{KvCacheDtype::kFp8, 512, 64, 0}.validate()), Error);
}

// Entry whose codes are known by construction: group g has scale 2^(g-3) (its amax is
// 448 * 2^(g-3)), element i > 0 is sign * (1 + m/8) * 2^(E-7) * scale with code
// sign<<7 | E<<3 | m (E = 0: subnormal m/8 * 2^-6); RoPE values are bf16-exact.
TEST(KvCache, Fp8EntryBytesMatchAHandBuiltEntry) {
  const KvCacheLayout l = KvCacheLayout::v4(KvCacheDtype::kFp8, 4);
  const int64_t n_blocks = 3, slot = 2 * 4 + 1;  // block 2, offset 1
  std::vector<float> x(512);
  std::vector<uint8_t> want_codes(448), want_scales(8, 0), want_rope(128);
  for (int64_t g = 0; g < 7; ++g) {
    const float scale = std::ldexp(1.0f, static_cast<int>(g) - 3);
    want_scales[g] = static_cast<uint8_t>(127 + g - 3);
    for (int64_t i = 0; i < 64; ++i) {
      int E = 1 + static_cast<int>((i + g) % 15), m = static_cast<int>((i * 5 + g) % 8);
      if (E == 15 && m == 7) m = 6;  // 0x7f is NaN
      if (i == 0) E = 15, m = 6;      // 448: the group's amax
      if (i == 5) E = 0, m = 3;       // subnormal
      const bool neg = i % 3 == 1;
      float v = E == 0 ? m / 8.0f * std::ldexp(1.0f, -6) : (1.0f + m / 8.0f) * std::ldexp(1.0f, E - 7);
      uint8_t code = static_cast<uint8_t>((E << 3) | m);
      if (i == 7) v = 0.0f, code = 0;
      x[g * 64 + i] = (neg && v != 0.0f ? -v : v) * scale;
      want_codes[g * 64 + i] = static_cast<uint8_t>(code | (neg && v != 0.0f ? 0x80 : 0));
    }
  }
  for (int64_t k = 0; k < 64; ++k) {
    const int mant = static_cast<int>(k % 4), e = static_cast<int>(k % 10) - 5;
    const bool neg = k % 2 == 1;
    x[448 + k] = (neg ? -1.0f : 1.0f) * (1.0f + mant / 4.0f) * std::ldexp(1.0f, e);
    const uint16_t bits = static_cast<uint16_t>((neg ? 0x8000 : 0) | ((e + 127) << 7) | (mant << 5));
    want_rope[2 * k] = static_cast<uint8_t>(bits & 0xff);
    want_rope[2 * k + 1] = static_cast<uint8_t>(bits >> 8);
  }
  std::vector<uint8_t> cache(n_blocks * l.block_bytes(), 0xab);
  const int32_t s = static_cast<int32_t>(slot);
  kv_store_ref(l, x.data(), 1, 512, &s, cache.data(), n_blocks);

  std::vector<uint8_t> want(cache.size(), 0xab);
  const int64_t base = 2 * l.block_bytes();
  std::copy(want_codes.begin(), want_codes.end(), want.begin() + base + 1 * 576);
  std::copy(want_rope.begin(), want_rope.end(), want.begin() + base + 1 * 576 + 448);
  std::copy(want_scales.begin(), want_scales.end(), want.begin() + base + 4 * 576 + 1 * 8);
  for (size_t b = 0; b < cache.size(); ++b) {
    ASSERT_EQ(cache[b], want[b]) << "byte " << b << " (block " << b / l.block_bytes() << ", offset "
                                 << b % l.block_bytes() << ")";
  }
  std::vector<float> y(512);
  kv_load_ref(l, cache.data(), n_blocks, &s, 1, y.data());
  EXPECT_EQ(y, x);  // every value was on its grid
}

TEST(KvCache, Fp8RoundTripEqualsTheQatRoundTrip) {
  std::mt19937 gen(7);
  for (const auto& [head_dim, rope] : {std::pair<int64_t, int64_t>{512, 64}, {128, 64}, {256, 0}}) {
    const KvCacheLayout l{KvCacheDtype::kFp8, head_dim, rope, 5};
    const int64_t n = 23, stride = head_dim + 3, n_blocks = 7;
    std::vector<float> x(n * stride);
    for (int64_t i = 0; i < n; ++i) {
      const float stddev = std::pow(10.0f, static_cast<float>(i % 9) - 5.0f);  // 1e-5 .. 1e3
      const auto row = randn(gen, head_dim, stddev);
      std::copy(row.begin(), row.end(), x.begin() + i * stride);
    }
    std::fill(x.begin() + 2 * stride, x.begin() + 2 * stride + 64, 0.0f);  // an all-zero group
    x[3 * stride + 10] = 1e6f;                                             // one outlier
    std::vector<int32_t> slots(n);
    std::vector<int32_t> all(n_blocks * 5);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), gen);
    std::copy(all.begin(), all.begin() + n, slots.begin());
    std::vector<uint8_t> cache(n_blocks * l.block_bytes(), 0x5a);
    kv_store_ref(l, x.data(), n, stride, slots.data(), cache.data(), n_blocks);
    std::vector<float> y(n * head_dim);
    kv_load_ref(l, cache.data(), n_blocks, slots.data(), n, y.data());
    for (int64_t i = 0; i < n; ++i) {
      std::vector<float> want(x.begin() + i * stride, x.begin() + i * stride + head_dim);
      fp8_roundtrip(want.data(), head_dim - rope, 64);
      for (int64_t c = head_dim - rope; c < head_dim; ++c) want[c] = round_bf16(want[c]);
      for (int64_t c = 0; c < head_dim; ++c) {
        ASSERT_EQ(y[i * head_dim + c], want[c]) << "head_dim " << head_dim << " row " << i << " dim " << c;
      }
    }
  }
}

TEST(KvCache, Bf16LayoutAndRoundTrip) {
  std::mt19937 gen(11);
  const KvCacheLayout l = KvCacheLayout::v4(KvCacheDtype::kBf16, 2);
  const int64_t n_blocks = 4;
  const auto x = randn(gen, 3 * 512, 2.0f);
  const std::vector<int32_t> slots = {7, -1, 2};
  std::vector<uint8_t> cache(n_blocks * l.block_bytes(), 0xcd);
  kv_store_ref(l, x.data(), 3, 512, slots.data(), cache.data(), n_blocks);
  for (int64_t c = 0; c < 512; ++c) {
    const uint16_t bits = f32_to_bf16(x[c]);
    const int64_t at = 3 * l.block_bytes() + 1 * 1024 + 2 * c;  // slot 7: block 3, offset 1
    ASSERT_EQ(cache[at], bits & 0xff);
    ASSERT_EQ(cache[at + 1], bits >> 8);
  }
  // Slot 2 is block 1 offset 0; the skipped row wrote nothing: blocks 0 and 2 are intact.
  for (int64_t b : {0, 2}) {
    for (int64_t i = 0; i < l.block_bytes(); ++i) ASSERT_EQ(cache[b * l.block_bytes() + i], 0xcd);
  }
  std::vector<float> y(3 * 512, 1.0f);
  kv_load_ref(l, cache.data(), n_blocks, slots.data(), 3, y.data());
  for (int64_t c = 0; c < 512; ++c) {
    EXPECT_EQ(y[c], round_bf16(x[c]));
    EXPECT_EQ(y[512 + c], 0.0f);
    EXPECT_EQ(y[1024 + c], round_bf16(x[1024 + c]));
  }
  const int32_t bad = 8;
  EXPECT_THROW(kv_store_ref(l, x.data(), 1, 512, &bad, cache.data(), n_blocks), Error);
  EXPECT_THROW(kv_load_ref(l, cache.data(), n_blocks, &bad, 1, y.data()), Error);
}

// Two pools with shuffled block tables, -1 holes and per-row counts; keys are bf16-exact so
// the bf16 cache holds them exactly and the result must equal plain sparse attention.
TEST(KvCache, PagedAttentionMatchesSparseAttentionOnThePlainKeys) {
  std::mt19937 gen(13);
  const int64_t H = 3, d = 128, rows = 4, bs0 = 4, bs1 = 3, nb0 = 6, nb1 = 5;
  const KvCacheLayout l0{KvCacheDtype::kBf16, d, 64, bs0};
  const KvCacheLayout l1{KvCacheDtype::kBf16, d, 64, bs1};
  auto keys0 = randn(gen, nb0 * bs0 * d, 1.0f), keys1 = randn(gen, nb1 * bs1 * d, 1.0f);
  for (auto& v : keys0) v = round_bf16(v);
  for (auto& v : keys1) v = round_bf16(v);
  std::vector<int32_t> slots0(nb0 * bs0), slots1(nb1 * bs1);
  std::iota(slots0.begin(), slots0.end(), 0);
  std::iota(slots1.begin(), slots1.end(), 0);
  std::shuffle(slots0.begin(), slots0.end(), gen);  // key k lives in slot slots0[k]
  std::shuffle(slots1.begin(), slots1.end(), gen);
  std::vector<uint8_t> c0(nb0 * l0.block_bytes()), c1(nb1 * l1.block_bytes());
  kv_store_ref(l0, keys0.data(), nb0 * bs0, d, slots0.data(), c0.data(), nb0);
  kv_store_ref(l1, keys1.data(), nb1 * bs1, d, slots1.data(), c1.data(), nb1);

  const int64_t m0 = 9, m1 = 7;
  std::vector<int32_t> idx0(rows * m0, -1), idx1(rows * m1, -1), n1(rows);
  std::vector<std::vector<const float*>> plain(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < m0; ++j) {
      if ((j + r) % 4 == 3) continue;  // a hole
      const int64_t k = (r * 5 + j * 2) % (nb0 * bs0);
      idx0[r * m0 + j] = slots0[k];
      plain[r].push_back(&keys0[k * d]);
    }
    n1[r] = static_cast<int32_t>(r == 2 ? 0 : m1 - r);
    for (int64_t j = 0; j < m1; ++j) {
      const int64_t k = (r * 3 + j) % (nb1 * bs1);
      idx1[r * m1 + j] = slots1[k];
      if (j < n1[r]) plain[r].push_back(&keys1[k * d]);
    }
  }
  const auto q = randn(gen, rows * H * d, 1.0f), sinks = randn(gen, H, 1.0f);
  std::vector<float> out(rows * H * d), want(rows * H * d);
  PagedAttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.sinks = sinks.data();
  p.n_rows = rows;
  p.n_heads = H;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.sources[0] = {c0.data(), l0, nb0, idx0.data(), nullptr, m0};
  p.sources[1] = {c1.data(), l1, nb1, idx1.data(), n1.data(), m1};
  paged_attention_ref(p);
  for (int64_t r = 0; r < rows; ++r) {
    sparse_attention_row_ref(&q[r * H * d], H, d, plain[r].data(),
                             static_cast<int64_t>(plain[r].size()), sinks.data(), p.scale,
                             &want[r * H * d]);
  }
  EXPECT_EQ(out, want);
}

// Indexer keys (index_cache.h): 132 B per 128-dim key, codes first then fp32 scales.
TEST(IndexCache, LayoutAndHandBuiltKey) {
  IndexCacheLayout l;
  EXPECT_EQ(l.entry_bytes(), 132);
  EXPECT_EQ(l.block_bytes(), 8448);
  l.block_size = 3;
  const int64_t n_blocks = 2;
  std::vector<float> k(128);
  std::vector<uint8_t> want_codes(128);
  const float scale = 0.25f;  // amax 112 = 448 * 2^-2
  for (int64_t i = 0; i < 128; ++i) {
    int E = 1 + static_cast<int>(i % 15), m = static_cast<int>((i * 3) % 8);
    if (E == 15 && m == 7) m = 6;
    if (i == 0) E = 15, m = 6;
    const bool neg = i % 4 == 2;
    const float v = (1.0f + m / 8.0f) * std::ldexp(1.0f, E - 7);
    k[i] = (neg ? -v : v) * scale;
    want_codes[i] = static_cast<uint8_t>((neg ? 0x80 : 0) | (E << 3) | m);
  }
  std::vector<uint8_t> cache(n_blocks * l.block_bytes(), 0x11);
  const int32_t slot = 5;  // block 1, offset 2
  index_store_ref(l, k.data(), 1, 128, &slot, cache.data(), n_blocks);
  std::vector<uint8_t> want(cache.size(), 0x11);
  const int64_t base = 1 * l.block_bytes();
  std::copy(want_codes.begin(), want_codes.end(), want.begin() + base + 2 * 128);
  std::memcpy(want.data() + base + 3 * 128 + 2 * 4, &scale, 4);
  EXPECT_EQ(cache, want);
  std::vector<float> y(128);
  index_load_ref(l, cache.data(), n_blocks, &slot, 1, y.data());
  EXPECT_EQ(y, k);
  const int32_t bad = 6;
  EXPECT_THROW(index_store_ref(l, k.data(), 1, 128, &bad, cache.data(), n_blocks), Error);
}

// load(store(k)) is the fp8 round trip with one block over the key; keys that went through
// the official Hadamard + FP4 round trip come back exactly.
TEST(IndexCache, RoundTripIsTheFp8RoundTripAndKeepsFp4Keys) {
  std::mt19937 gen(17);
  IndexCacheLayout l;
  l.block_size = 4;
  const int64_t n = 20, stride = 131, n_blocks = 6;
  std::vector<float> raw(n * stride), fp4(n * stride);
  for (int64_t i = 0; i < n; ++i) {
    const auto row = randn(gen, 128, std::pow(10.0f, static_cast<float>(i % 7) - 4.0f));
    std::copy(row.begin(), row.end(), raw.begin() + i * stride);
    std::copy(row.begin(), row.end(), fp4.begin() + i * stride);
    hadamard_transform(&fp4[i * stride], 128);
    fp4_roundtrip(&fp4[i * stride], 128, 32);
  }
  std::vector<int32_t> slots(n);
  std::vector<int32_t> all(n_blocks * 4);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), gen);
  std::copy(all.begin(), all.begin() + n, slots.begin());
  for (const auto* keys : {&raw, &fp4}) {
    std::vector<uint8_t> cache(n_blocks * l.block_bytes());
    index_store_ref(l, keys->data(), n, stride, slots.data(), cache.data(), n_blocks);
    std::vector<float> y(n * 128);
    index_load_ref(l, cache.data(), n_blocks, slots.data(), n, y.data());
    for (int64_t i = 0; i < n; ++i) {
      std::vector<float> want(keys->begin() + i * stride, keys->begin() + i * stride + 128);
      if (keys == &raw) fp8_roundtrip(want.data(), 128, 128);
      for (int64_t c = 0; c < 128; ++c) ASSERT_EQ(y[i * 128 + c], want[c]) << "key " << i << " dim " << c;
    }
  }
}

// DeepSeek-V4.1's formats: 528-B window entries (e4m3, UE8M0 per 32), 288-B compressed
// entries (e2m1, e4m3 per 16), 68-B index keys (e2m1, UE8M0 per 32), and their bytes.
TEST(KvCacheV41, LayoutSizes) {
  const KvCacheLayout win = KvCacheLayout::v41_window(KvCacheDtype::kFp8, 64);
  EXPECT_EQ(win.data_bytes(), 512);
  EXPECT_EQ(win.n_scales(), 16);
  EXPECT_EQ(win.entry_bytes(), 528);
  EXPECT_EQ(win.block_bytes(), 64 * 528);
  EXPECT_EQ(win.scale_offset(2 * 64 + 3), 2 * 64 * 528 + 64 * 512 + 3 * 16);
  const KvCacheLayout cmp = KvCacheLayout::v41_compressed(KvCacheDtype::kFp8, 64);
  EXPECT_EQ(cmp.data_bytes(), 256);
  EXPECT_EQ(cmp.n_scales(), 32);
  EXPECT_EQ(cmp.entry_bytes(), 288);
  EXPECT_EQ(cmp.block_bytes(), 64 * 288);
  EXPECT_EQ(cmp.data_offset(64 + 5), 64 * 288 + 5 * 256);
  EXPECT_EQ(KvCacheLayout::v41_window(KvCacheDtype::kBf16, 64).entry_bytes(), 1024);
  IndexCacheLayout idx;
  idx.format = IndexKeyFormat::kE2m1Ue8m0Block32;
  EXPECT_EQ(idx.entry_bytes(), 68);
  EXPECT_EQ(idx.block_bytes(), 64 * 68);
  EXPECT_EQ(idx.scale_offset(64 + 2), 64 * 68 + 64 * 64 + 2 * 4);
  KvCacheLayout bad = win;
  bad.rope_dim = 64;
  EXPECT_THROW(bad.validate(), Error);
}

// Rows spanning 1e-5 .. 1e3 per block, zero blocks, an outlier, a saturating block.
std::vector<float> v41_rows(std::mt19937& gen, int64_t n, int64_t stride, int64_t d, int64_t block) {
  std::vector<float> x(n * stride, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t b = 0; b < d / block; ++b) {
      const float stddev = std::pow(10.0f, static_cast<float>((i + 3 * b) % 9) - 5.0f);
      const auto v = randn(gen, block, stddev);
      std::copy(v.begin(), v.end(), x.begin() + i * stride + b * block);
    }
  }
  std::fill(x.begin() + stride, x.begin() + stride + block, 0.0f);
  x[2 * stride + 7] = 1e6f;
  x[3 * stride + 1] = -5e4f;
  return x;
}

// load(store(x)) of each V4.1 format is the CPU official round trip, bit for bit.
TEST(KvCacheV41, RoundTripsEqualTheOfficialRoundTrips) {
  std::mt19937 gen(23);
  const int64_t n = 29, d = 512, stride = 515, bs = 5, n_blocks = 7;
  std::vector<int32_t> all(n_blocks * bs);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), gen);
  std::vector<int32_t> slots(all.begin(), all.begin() + n);
  slots[4] = -1;
  for (const KvCacheLayout& l : {KvCacheLayout::v41_window(KvCacheDtype::kFp8, bs),
                                 KvCacheLayout::v41_compressed(KvCacheDtype::kFp8, bs)}) {
    const bool fp4 = l.format == KvEntryFormat::kE2m1E4m3Block16;
    const auto x = v41_rows(gen, n, stride, d, fp4 ? 16 : 32);
    std::vector<uint8_t> cache(n_blocks * l.block_bytes(), 0x77);
    kv_store_ref(l, x.data(), n, stride, slots.data(), cache.data(), n_blocks);
    std::vector<float> y(n * d, 1.0f);
    kv_load_ref(l, cache.data(), n_blocks, slots.data(), n, y.data());
    for (int64_t i = 0; i < n; ++i) {
      std::vector<float> want(x.begin() + i * stride, x.begin() + i * stride + d);
      if (slots[i] < 0) {
        std::fill(want.begin(), want.end(), 0.0f);
      } else if (fp4) {
        fp4_roundtrip_e4m3_scale(want.data(), d, 16);
      } else {
        fp8_roundtrip(want.data(), d, 32);
      }
      ASSERT_EQ(0, std::memcmp(&y[i * d], want.data(), d * 4))
          << kv_entry_format_name(l.format) << " row " << i;
    }
  }
}

// The nibble order and scale bytes of hand-built entries: dims 0, 1 = 6 s, -1 s.
TEST(KvCacheV41, Fp4BytesOfHandBuiltEntries) {
  const KvCacheLayout l = KvCacheLayout::v41_compressed(KvCacheDtype::kFp8, 2);
  std::vector<float> x(512, 0.0f);
  x[0] = 6.0f * 0.5f;  // block 0: amax 3 -> scale e4m3(0.5) = 0x30
  x[1] = -0.5f;        // -1 * 0.5: code 0x8 | 2
  x[16 + 3] = 0.75f;   // block 1: scale e4m3(0.125) = 0x20, 6 -> code 7 in the high nibble of byte 9
  std::vector<uint8_t> cache(l.block_bytes(), 0xee);
  const int32_t slot = 1;
  kv_store_ref(l, x.data(), 1, 512, &slot, cache.data(), 1);
  EXPECT_EQ(cache[256 + 0], 0xa7);
  EXPECT_EQ(cache[256 + 9], 0x70);
  EXPECT_EQ(cache[256 + 1], 0x00);
  EXPECT_EQ(cache[2 * 256 + 32 + 0], 0x30);
  EXPECT_EQ(cache[2 * 256 + 32 + 1], 0x20);
  EXPECT_EQ(cache[2 * 256 + 32 + 2], 0x01);  // zero block: scale at the floor 2^-9 (code 1)
  EXPECT_EQ(cache[0], 0xee);                  // slot 0 untouched

  IndexCacheLayout il;
  il.format = IndexKeyFormat::kE2m1Ue8m0Block32;
  il.block_size = 2;
  std::vector<float> k(128, 0.0f);
  k[0] = 6.0f;
  k[1] = -1.0f;
  k[32] = 0.25f;  // block 1: scale 2^ceil(log2(0.25 / 6)) = 2^-4 -> 4 = 6 * ... -> code 6
  std::vector<uint8_t> ic(il.block_bytes(), 0xee);
  index_store_ref(il, k.data(), 1, 128, &slot, ic.data(), 1);
  EXPECT_EQ(ic[64 + 0], 0xa7);
  EXPECT_EQ(ic[64 + 16], 0x06);
  EXPECT_EQ(ic[128 + 4 + 0], 127);
  EXPECT_EQ(ic[128 + 4 + 1], 127 - 4);
  EXPECT_EQ(ic[128 + 4 + 2], 1);  // zero block: 2^-126
}

TEST(IndexCacheV41, Fp4RoundTripIsTheOfficialFp4RoundTrip) {
  std::mt19937 gen(29);
  IndexCacheLayout l;
  l.format = IndexKeyFormat::kE2m1Ue8m0Block32;
  l.block_size = 3;
  const int64_t n = 17, stride = 130, n_blocks = 7;
  const auto k = v41_rows(gen, n, stride, 128, 32);
  std::vector<int32_t> all(n_blocks * 3);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), gen);
  std::vector<int32_t> slots(all.begin(), all.begin() + n);
  std::vector<uint8_t> cache(n_blocks * l.block_bytes());
  index_store_ref(l, k.data(), n, stride, slots.data(), cache.data(), n_blocks);
  std::vector<float> y(n * 128);
  index_load_ref(l, cache.data(), n_blocks, slots.data(), n, y.data());
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> want(k.begin() + i * stride, k.begin() + i * stride + 128);
    fp4_roundtrip(want.data(), 128, 32);
    ASSERT_EQ(0, std::memcmp(&y[i * 128], want.data(), 128 * 4)) << "key " << i;
  }
}

// Paged attention over a 528-B window pool and a 288-B compressed pool equals plain sparse
// attention over the round-tripped keys.
TEST(KvCacheV41, PagedAttentionOverMixedFormats) {
  std::mt19937 gen(31);
  const int64_t H = 4, d = 512, rows = 3, bs0 = 4, bs1 = 3, nb0 = 5, nb1 = 4;
  const KvCacheLayout l0 = KvCacheLayout::v41_window(KvCacheDtype::kFp8, bs0);
  const KvCacheLayout l1 = KvCacheLayout::v41_compressed(KvCacheDtype::kFp8, bs1);
  auto keys0 = randn(gen, nb0 * bs0 * d, 1.0f), keys1 = randn(gen, nb1 * bs1 * d, 1.0f);
  std::vector<int32_t> slots0(nb0 * bs0), slots1(nb1 * bs1);
  std::iota(slots0.begin(), slots0.end(), 0);
  std::iota(slots1.begin(), slots1.end(), 0);
  std::shuffle(slots0.begin(), slots0.end(), gen);
  std::shuffle(slots1.begin(), slots1.end(), gen);
  std::vector<uint8_t> c0(nb0 * l0.block_bytes()), c1(nb1 * l1.block_bytes());
  kv_store_ref(l0, keys0.data(), nb0 * bs0, d, slots0.data(), c0.data(), nb0);
  kv_store_ref(l1, keys1.data(), nb1 * bs1, d, slots1.data(), c1.data(), nb1);
  for (int64_t k = 0; k < nb0 * bs0; ++k) fp8_roundtrip(&keys0[k * d], d, 32);
  for (int64_t k = 0; k < nb1 * bs1; ++k) fp4_roundtrip_e4m3_scale(&keys1[k * d], d, 16);
  const int64_t m0 = 6, m1 = 5;
  std::vector<int32_t> idx0(rows * m0, -1), idx1(rows * m1, -1);
  std::vector<std::vector<const float*>> plain(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < m0; ++j) {
      if ((j + r) % 3 == 2) continue;
      const int64_t k = (r * 7 + j * 3) % (nb0 * bs0);
      idx0[r * m0 + j] = slots0[k];
      plain[r].push_back(&keys0[k * d]);
    }
    for (int64_t j = 0; j < m1; ++j) {
      const int64_t k = (r * 2 + j * 5) % (nb1 * bs1);
      idx1[r * m1 + j] = slots1[k];
      plain[r].push_back(&keys1[k * d]);
    }
  }
  const auto q = randn(gen, rows * H * d, 1.0f), sinks = randn(gen, H, 1.0f);
  std::vector<float> out(rows * H * d), want(rows * H * d);
  PagedAttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.sinks = sinks.data();
  p.n_rows = rows;
  p.n_heads = H;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.sources[0] = {c0.data(), l0, nb0, idx0.data(), nullptr, m0};
  p.sources[1] = {c1.data(), l1, nb1, idx1.data(), nullptr, m1};
  paged_attention_ref(p);
  for (int64_t r = 0; r < rows; ++r) {
    sparse_attention_row_ref(&q[r * H * d], H, d, plain[r].data(),
                             static_cast<int64_t>(plain[r].size()), sinks.data(), p.scale,
                             &want[r * H * d]);
  }
  EXPECT_EQ(out, want);
}

// Slot lists from positions and block tables, worked out by hand.
TEST(PagedIndices, WindowAndCompressedSlots) {
  const std::vector<int32_t> pos = {4, 1}, seq = {0, 1};
  const std::vector<int32_t> wtable = {5, 1, 3, 0, 2, -1};  // 2 sequences x 3 blocks of 2
  const std::vector<int32_t> ctable = {4, 0, 1, -1};        // 2 sequences x 2 blocks of 3
  const std::vector<int32_t> selected = {4, -1, 0, 0, 7, 7}, n_selected = {2, 1};
  std::vector<int32_t> win(2 * 4, 99), cmp(2 * 3, 99), n_cmp(2, 99);
  PagedIndexParams p;
  p.n_rows = 2;
  p.positions = pos.data();
  p.seq = seq.data();
  p.window_table = wtable.data();
  p.window_max_blocks = 3;
  p.window_block_size = 2;
  p.window = 4;
  p.window_indices = win.data();
  p.cmp_table = ctable.data();
  p.cmp_max_blocks = 2;
  p.cmp_block_size = 3;
  p.ratio = 2;
  p.selected = selected.data();
  p.n_selected = n_selected.data();
  p.max_selected = 3;
  p.cmp_indices = cmp.data();
  p.n_cmp = n_cmp.data();
  p.max_cmp = 3;
  paged_indices_ref(p);
  EXPECT_EQ(win, (std::vector<int32_t>{11, 2, 3, 6, -1, -1, 0, 1}));
  EXPECT_EQ(cmp, (std::vector<int32_t>{1, -1, -1, 3, -1, -1}));
  EXPECT_EQ(n_cmp, (std::vector<int32_t>{2, 1}));
  p.selected = nullptr;  // all visible entries: (pos + 1) / 2 of them
  p.window_indices = nullptr;
  paged_indices_ref(p);
  EXPECT_EQ(cmp, (std::vector<int32_t>{12, 13, -1, 3, -1, -1}));
  EXPECT_EQ(n_cmp, (std::vector<int32_t>{2, 1}));
}

}  // namespace
}  // namespace deepinfer
