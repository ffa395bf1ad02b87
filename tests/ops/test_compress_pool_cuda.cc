// Compressor on the GPU (ape bias, gated pooling, RMSNorm, RoPE at m * entry, entry write)
// vs the CPU pieces Model::compressor_step uses (compress_pool_ref, rms_norm_ref,
// RopeTable::apply): a batch of chunks of several sequences whose older positions come from
// the per-sequence ring; overlapping ratio 4 (first entry with the empty previous window)
// and plain ratios, at awkward widths and V4-Flash's (512 main, 128 indexer; ratio 4 and
// 128). Entries nobody emitted must stay untouched (NaN-poisoned).
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/compressor/compress_pool.h"
#include "ops/compressor/compress_pool_cuda.h"
#include "ops/quant/qat.h"
#include "ops/rms_norm/rms_norm.h"
#include "ops/rope/rope.h"

namespace deepinfer {
namespace {

void run_case(std::mt19937_64& rng, int64_t width, int64_t rope_dim, int64_t m, bool overlap,
              const std::vector<std::pair<int64_t, int64_t>>& chunks,
              CompressorQat qat = CompressorQat::kNone, int64_t ring_len = 0) {
  SCOPED_TRACE(testing::Message() << "width " << width << " ratio " << m
                                  << (overlap ? " overlap" : "") << " ring " << ring_len);
  const int64_t L = ring_len > 0 ? ring_len : 2 * m;  // ring positions per sequence
  const int64_t S = static_cast<int64_t>(chunks.size()), cw = (overlap ? 2 : 1) * width;
  RopeParams rp;
  rp.rope_dim = rope_dim;
  rp.theta = 160000.0;
  rp.yarn = true;
  rp.yarn_factor = 16.0;
  rp.yarn_original_max_position = 1024;
  const RopeTable rope(rp);
  const auto ape = test::randn(rng, m * cw, 1.0f);
  const auto norm_w = test::randn(rng, width, 0.1f);
  std::vector<float> nw(width);
  for (int64_t i = 0; i < width; ++i) nw[i] = 1.0f + norm_w[i];
  int64_t max_end = 0;
  for (auto [start, len] : chunks) max_end = std::max(max_end, start + len);
  const int64_t max_entries = max_end / m + 1;
  // History of every sequence: a [end, cw], z_raw [end, cw].
  std::vector<std::vector<float>> ha(S), hz(S);
  std::vector<float> ring_a(S * L * cw, NAN), ring_z(S * L * cw, NAN);
  std::vector<float> ca, cz;
  std::vector<int32_t> pos, slot, cstart, crow0, emit;
  for (int64_t s = 0; s < S; ++s) {
    const auto [start, len] = chunks[s];
    ha[s] = test::randn(rng, (start + len) * cw, 1.0f);
    hz[s] = test::randn(rng, (start + len) * cw, 1.5f);
    for (int64_t p = std::max<int64_t>(0, start - 2 * m); p < start; ++p) {
      for (int64_t i = 0; i < cw; ++i) {
        ring_a[(s * L + p % L) * cw + i] = ha[s][p * cw + i];
        ring_z[(s * L + p % L) * cw + i] = hz[s][p * cw + i] + ape[(p % m) * cw + i];
      }
    }
    const int64_t row0 = static_cast<int64_t>(pos.size());
    for (int64_t p = start; p < start + len; ++p) {
      if ((p + 1) % m == 0) emit.push_back(static_cast<int32_t>(pos.size()));
      pos.push_back(static_cast<int32_t>(p));
      slot.push_back(static_cast<int32_t>(s));
      cstart.push_back(static_cast<int32_t>(start));
      crow0.push_back(static_cast<int32_t>(row0));
      ca.insert(ca.end(), &ha[s][p * cw], &ha[s][(p + 1) * cw]);
      cz.insert(cz.end(), &hz[s][p * cw], &hz[s][(p + 1) * cw]);
    }
  }
  const int64_t N = static_cast<int64_t>(pos.size());
  // Reference entries, NaN where nothing is emitted.
  std::vector<float> ref(S * max_entries * width, NAN);
  const std::vector<float> zeros(width, 0.0f), neg_inf(width, -INFINITY);
  for (int32_t r : emit) {
    const int64_t s = slot[r], e = pos[r] / m;
    std::vector<std::vector<float>> za;  // z + ape copies
    std::vector<const float*> pa, pz;
    auto z_at = [&](int64_t p, int64_t off) {
      std::vector<float> v(width);
      for (int64_t i = 0; i < width; ++i) v[i] = hz[s][p * cw + off + i] + ape[(p % m) * cw + off + i];
      za.push_back(std::move(v));
      return za.back().data();
    };
    za.reserve(2 * m);
    if (overlap) {
      for (int64_t k = 0; k < m; ++k) {
        pa.push_back(e == 0 ? zeros.data() : &ha[s][((e - 1) * m + k) * cw]);
        pz.push_back(e == 0 ? neg_inf.data() : z_at((e - 1) * m + k, 0));
      }
      for (int64_t k = 0; k < m; ++k) {
        pa.push_back(&ha[s][(e * m + k) * cw + width]);
        pz.push_back(z_at(e * m + k, width));
      }
    } else {
      for (int64_t k = 0; k < m; ++k) {
        pa.push_back(&ha[s][(e * m + k) * cw]);
        pz.push_back(z_at(e * m + k, 0));
      }
    }
    float* out = &ref[(s * max_entries + e) * width];
    compress_pool_ref(pa.data(), pz.data(), static_cast<int64_t>(pa.size()), width, out);
    rms_norm_ref(out, nw.data(), 1, width, width, 1e-6f, out);
    rope.apply(out + width - rope_dim, m * e);
    if (qat == CompressorQat::kFp8Nope) fp8_roundtrip(out, width - rope_dim, 64);
    if (qat == CompressorQat::kHadamardFp4) {
      hadamard_transform(out, width);
      fp4_roundtrip(out, width, 32);
    }
  }
  Tensor cad = test::upload_f32(ca), czd = test::upload_f32(cz), apd = test::upload_f32(ape);
  Tensor rad = test::upload_f32(ring_a), rzd = test::upload_f32(ring_z), nwd = test::upload_f32(nw);
  Tensor ifd = test::upload_f32(rope.inv_freq());
  Tensor pd = test::upload_i32(pos), sd = test::upload_i32(slot), csd = test::upload_i32(cstart);
  Tensor crd = test::upload_i32(crow0);
  Tensor ed = test::upload_i32(emit.empty() ? std::vector<int32_t>{0} : emit);
  Tensor entries = test::poisoned_f32(S * max_entries * width);
  compressor_add_ape_cuda(nullptr, czd.data<float>(), apd.data<float>(), pd.data<int32_t>(), N, m, cw);
  CompressorEmitParams p;
  p.a = cad.data<float>();
  p.z = czd.data<float>();
  p.ring_a = rad.data<float>();
  p.ring_z = rzd.data<float>();
  p.ring_len = ring_len;
  p.entries = entries.data<float>();
  p.max_entries = max_entries;
  p.ratio = m;
  p.width = width;
  p.overlap = overlap;
  p.emit_rows = ed.data<int32_t>();
  p.n_emit = static_cast<int64_t>(emit.size());
  p.positions = pd.data<int32_t>();
  p.slot = sd.data<int32_t>();
  p.chunk_start = csd.data<int32_t>();
  p.chunk_row0 = crd.data<int32_t>();
  p.norm_w = nwd.data<float>();
  p.eps = 1e-6f;
  p.rope_dim = rope_dim;
  p.inv_freq = ifd.data<float>();
  p.qat = qat;
  compressor_emit_cuda(nullptr, p);
  const auto got = test::download_f32(entries);
  // z + ape of the chunk rows too.
  const auto zgot = test::download_f32(czd);
  std::vector<float> zref(cz.size());
  for (int64_t r = 0; r < N; ++r)
    for (int64_t i = 0; i < cw; ++i) zref[r * cw + i] = cz[r * cw + i] + ape[(pos[r] % m) * cw + i];
  EXPECT_EQ(zgot, zref);
  int64_t n_nan_mismatch = 0;
  std::vector<float> a, b;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ref[i]) != std::isnan(got[i])) ++n_nan_mismatch;
    if (!std::isnan(ref[i])) {
      a.push_back(got[i]);
      b.push_back(ref[i]);
    }
  }
  EXPECT_EQ(n_nan_mismatch, 0) << "entries written where none is emitted, or missing";
  ASSERT_FALSE(b.empty());
  const double err = test::nmse(a.data(), b.data(), static_cast<int64_t>(a.size()));
  std::printf("compressor width %lld ratio %lld%s qat %d: %zu entries, nmse %.3g\n",
              static_cast<long long>(width), static_cast<long long>(m), overlap ? " overlap" : "",
              static_cast<int>(qat), emit.size(), err);
  // With QAT, a value within ~1e-7 of a rounding boundary may round the other way (the
  // pooled values differ from the CPU's in the last bits); each such flip costs a few
  // 1e-6 of NMSE at these sizes.
  EXPECT_LT(err, qat == CompressorQat::kNone ? 1e-11 : 1e-4);
}

TEST(CompressorCuda, AwkwardSizes) {
  auto rng = test::fresh_rng();
  run_case(rng, 96, 32, 4, true, {{0, 13}, {6, 9}, {11, 1}, {3, 1}});
  run_case(rng, 100, 10, 5, false, {{0, 23}, {12, 8}, {29, 1}});
  run_case(rng, 64, 64, 3, false, {{0, 2}, {2, 1}});
}

// Rings longer than 2m (GpuModelOptions::max_rollback: 2m + the rollback depth): only the
// 2m positions before each chunk hold values, at p % ring_len; the other slots stay NaN, so
// an entry read at p % 2m shows up as NaN or as a mismatch.
TEST(CompressorCuda, LongerRings) {
  auto rng = test::fresh_rng();
  run_case(rng, 96, 32, 4, true, {{0, 13}, {6, 9}, {11, 1}, {3, 1}, {21, 3}}, CompressorQat::kNone, 13);
  run_case(rng, 100, 10, 5, false, {{0, 23}, {12, 8}, {29, 1}, {17, 4}}, CompressorQat::kNone, 14);
  run_case(rng, 64, 64, 128, false, {{0, 300}, {600, 40}, {131, 2}}, CompressorQat::kNone, 261);
}

TEST(CompressorCuda, OfficialQat) {
  auto rng = test::fresh_rng();
  run_case(rng, 96, 32, 4, true, {{0, 13}, {6, 9}, {3, 1}}, CompressorQat::kFp8Nope);
  run_case(rng, 128, 64, 4, true, {{0, 64}, {1000, 33}, {4095, 1}}, CompressorQat::kHadamardFp4);
  run_case(rng, 512, 64, 4, true, {{0, 64}, {1000, 33}}, CompressorQat::kFp8Nope);
  run_case(rng, 512, 64, 128, false, {{0, 300}, {600, 40}}, CompressorQat::kFp8Nope);
}

TEST(CompressorCuda, V4FlashShapes) {
  auto rng = test::fresh_rng();
  run_case(rng, 512, 64, 4, true, {{0, 64}, {1000, 33}, {4095, 1}, {2002, 2}});
  run_case(rng, 128, 64, 4, true, {{0, 64}, {1000, 33}, {4095, 1}});  // indexer
  run_case(rng, 512, 64, 128, false, {{0, 300}, {8064, 128}, {1023, 1}, {600, 40}});
}

}  // namespace
}  // namespace deepinfer
