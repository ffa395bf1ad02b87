// The CUDA pieces DeepSeek-V4.1's forward adds (MODEL_SPEC §C.5, §C.7, §C.9) against their
// CPU references, at awkward sizes and at V4.1-Flash widths (latent 512 with 64 rope dims,
// index keys 128):
//  * compressor emission without ape: ratio 2 (gated softmax over the pair) and ratio 1 (no
//    gate: z = 0, one latent per token), the pre-RoPE latent output, and the FP4 x e4m3-per-16
//    rounding of official numerics (compress_pool_ref, rms_norm_ref, RopeTable::apply,
//    fp4_roundtrip_e4m3_scale);
//  * index-key finishing: RoPE at ratio * entry, FP4 in 32-blocks, written by (slot, entry);
//    rows past the device emit count untouched (RopeTable::apply, fp4_roundtrip);
//  * candidate blocks, the consumer restriction and the unscored-pick drop
//    (candidate_blocks_ref, topk_indices), with tied scores and rows of 0..200 visible entries;
//  * FP4 round trip rows without Hadamard (fp4_roundtrip), bit-exact;
//  * routing with a gate temperature, the 1e-20 epsilon and without normalisation (route_ref).
#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/compressor/compress_pool.h"
#include "ops/compressor/compress_pool_cuda.h"
#include "ops/indexer/candidates.h"
#include "ops/indexer/candidates_cuda.h"
#include "ops/indexer/index_keys_cuda.h"
#include "ops/indexer/indexer.h"
#include "ops/indexer/indexer_cuda.h"
#include "ops/moe/moe.h"
#include "ops/moe/moe_cuda.h"
#include "ops/quant/fp4_rows_cuda.h"
#include "ops/quant/qat.h"
#include "ops/rms_norm/rms_norm.h"
#include "ops/rope/rope.h"

namespace deepinfer {
namespace {

RopeTable compress_rope(int64_t rope_dim) {
  RopeParams rp;
  rp.rope_dim = rope_dim;
  rp.theta = 160000.0;
  rp.yarn = true;
  rp.yarn_factor = 16.0;
  rp.yarn_original_max_position = 1024;
  return RopeTable(rp);
}

std::vector<int32_t> download_i32(const Tensor& t) {
  std::vector<int32_t> v(t.numel());
  cuda::copy_d2h(v.data(), t.raw(), t.nbytes());
  return v;
}

// One batch of chunks (start, len) of distinct sequences through a V4.1 compressor of ratio m
// (m == 1: no gate), older positions of each window from the ring.
void compressor_case(std::mt19937_64& rng, int64_t width, int64_t rope_dim, int64_t m,
                     const std::vector<std::pair<int64_t, int64_t>>& chunks, bool fp4) {
  SCOPED_TRACE(testing::Message() << "width " << width << " ratio " << m << (fp4 ? " fp4" : ""));
  const int64_t S = static_cast<int64_t>(chunks.size()), L = 2 * m;
  const RopeTable rope = compress_rope(rope_dim);
  std::vector<float> nw = test::randn(rng, width, 0.1f);
  for (float& v : nw) v += 1.0f;
  int64_t max_end = 0;
  for (auto [start, len] : chunks) max_end = std::max(max_end, start + len);
  const int64_t max_entries = max_end / m + 1;
  std::vector<std::vector<float>> ha(S), hz(S);
  std::vector<float> ring_a(S * L * width, NAN), ring_z(S * L * width, NAN), ca, cz;
  std::vector<int32_t> pos, slot, cstart, crow0, emit;
  for (int64_t s = 0; s < S; ++s) {
    const auto [start, len] = chunks[s];
    ha[s] = test::randn(rng, (start + len) * width, 1.0f);
    hz[s] = m == 1 ? std::vector<float>((start + len) * width, 0.0f)
                   : test::randn(rng, (start + len) * width, 1.5f);
    for (int64_t p = std::max<int64_t>(0, start - L); p < start; ++p) {
      for (int64_t i = 0; i < width; ++i) {
        ring_a[(s * L + p % L) * width + i] = ha[s][p * width + i];
        ring_z[(s * L + p % L) * width + i] = hz[s][p * width + i];
      }
    }
    const int64_t row0 = static_cast<int64_t>(pos.size());
    for (int64_t p = start; p < start + len; ++p) {
      if ((p + 1) % m == 0) emit.push_back(static_cast<int32_t>(pos.size()));
      pos.push_back(static_cast<int32_t>(p));
      slot.push_back(static_cast<int32_t>(s));
      cstart.push_back(static_cast<int32_t>(start));
      crow0.push_back(static_cast<int32_t>(row0));
      ca.insert(ca.end(), &ha[s][p * width], &ha[s][(p + 1) * width]);
      cz.insert(cz.end(), &hz[s][p * width], &hz[s][(p + 1) * width]);
    }
  }
  const int64_t N = static_cast<int64_t>(pos.size());
  std::vector<float> ref(S * max_entries * width, NAN), ref_latent(N * width, NAN);
  for (int32_t r : emit) {
    const int64_t s = slot[r], e = pos[r] / m;
    std::vector<const float*> pa, pz;
    for (int64_t k = 0; k < m; ++k) {
      pa.push_back(&ha[s][(e * m + k) * width]);
      pz.push_back(&hz[s][(e * m + k) * width]);
    }
    float* out = &ref[(s * max_entries + e) * width];
    compress_pool_ref(pa.data(), pz.data(), m, width, out);
    rms_norm_ref(out, nw.data(), 1, width, width, 1e-20f, out);
    std::copy(out, out + width, &ref_latent[r * width]);
    rope.apply(out + width - rope_dim, m * e);
    if (fp4) fp4_roundtrip_e4m3_scale(out, width, 16);
  }
  Tensor cad = test::upload_f32(ca), czd = test::upload_f32(cz);
  Tensor rad = test::upload_f32(ring_a), rzd = test::upload_f32(ring_z), nwd = test::upload_f32(nw);
  Tensor ifd = test::upload_f32(rope.inv_freq());
  Tensor pd = test::upload_i32(pos), sd = test::upload_i32(slot), csd = test::upload_i32(cstart);
  Tensor crd = test::upload_i32(crow0);
  Tensor ed = test::upload_i32(emit.empty() ? std::vector<int32_t>{0} : emit);
  Tensor entries = test::poisoned_f32(S * max_entries * width), latent = test::poisoned_f32(N * width);
  CompressorEmitParams p;
  p.a = cad.data<float>();
  p.z = czd.data<float>();
  p.ring_a = rad.data<float>();
  p.ring_z = rzd.data<float>();
  p.entries = entries.data<float>();
  p.max_entries = max_entries;
  p.ratio = m;
  p.width = width;
  p.emit_rows = ed.data<int32_t>();
  p.n_emit = static_cast<int64_t>(emit.size());
  p.positions = pd.data<int32_t>();
  p.slot = sd.data<int32_t>();
  p.chunk_start = csd.data<int32_t>();
  p.chunk_row0 = crd.data<int32_t>();
  p.norm_w = nwd.data<float>();
  p.eps = 1e-20f;
  p.rope_dim = rope_dim;
  p.inv_freq = ifd.data<float>();
  p.qat = fp4 ? CompressorQat::kFp4E4m3 : CompressorQat::kNone;
  p.latent_by_row = latent.data<float>();
  compressor_emit_cuda(nullptr, p);
  for (int pass = 0; pass < 2; ++pass) {
    const auto got = test::download_f32(pass == 0 ? entries : latent);
    const std::vector<float>& want = pass == 0 ? ref : ref_latent;
    std::vector<float> a, b;
    int64_t nan_mismatch = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(want[i]) != std::isnan(got[i])) ++nan_mismatch;
      if (!std::isnan(want[i])) {
        a.push_back(got[i]);
        b.push_back(want[i]);
      }
    }
    EXPECT_EQ(nan_mismatch, 0) << (pass == 0 ? "entries" : "latents") << " written where none is emitted, or missing";
    ASSERT_FALSE(b.empty());
    const double err = test::nmse(a.data(), b.data(), static_cast<int64_t>(a.size()));
    std::printf("V4.1 compressor width %lld ratio %lld%s %s: %zu rows, nmse %.3g\n",
                static_cast<long long>(width), static_cast<long long>(m), fp4 ? " fp4" : "",
                pass == 0 ? "entries" : "latents", emit.size(), err);
    // FP4 rounding: a value within fp32 noise of a rounding boundary may go the other way.
    EXPECT_LT(err, fp4 && pass == 0 ? 1e-3 : 1e-11);
  }
}

TEST(V41OpsCuda, CompressorRatio2And1) {
  auto rng = test::fresh_rng();
  for (bool fp4 : {false, true}) {
    compressor_case(rng, 96, 32, 2, {{0, 13}, {5, 9}, {11, 1}, {4, 1}}, fp4);
    compressor_case(rng, 96, 32, 1, {{0, 13}, {5, 9}, {11, 1}}, fp4);
    compressor_case(rng, 512, 64, 2, {{0, 64}, {1001, 33}, {4095, 1}}, fp4);  // V4.1-Flash
    compressor_case(rng, 512, 64, 1, {{0, 40}, {1000, 3}}, fp4);
  }
}

void index_keys_case(std::mt19937_64& rng, int64_t width, int64_t rope_dim, int64_t ratio,
                     const std::vector<int32_t>& pos, const std::vector<int32_t>& slot, bool fp4) {
  SCOPED_TRACE(testing::Message() << "width " << width << " ratio " << ratio);
  const RopeTable rope = compress_rope(rope_dim);
  const int64_t N = static_cast<int64_t>(pos.size());
  int64_t max_pos = 0, n_slots = 0;
  for (int64_t r = 0; r < N; ++r) {
    max_pos = std::max<int64_t>(max_pos, pos[r]);
    n_slots = std::max<int64_t>(n_slots, slot[r] + 1);
  }
  const int64_t max_entries = max_pos / ratio + 2;
  const auto in = test::randn(rng, N * width, 1.0f);
  std::vector<int32_t> emit;
  for (int64_t r = 0; r < N; ++r) {
    if ((pos[r] + 1) % ratio == 0) emit.push_back(static_cast<int32_t>(r));
  }
  ASSERT_GE(emit.size(), 2u);
  // The device count stops one row short of the list: that row's key must stay unwritten.
  const int32_t n_dev = static_cast<int32_t>(emit.size()) - 1;
  std::vector<float> ref(n_slots * max_entries * width, NAN);
  for (int32_t j = 0; j < n_dev; ++j) {
    const int64_t r = emit[j], e = pos[r] / ratio;
    float* out = &ref[(slot[r] * max_entries + e) * width];
    std::copy(&in[r * width], &in[(r + 1) * width], out);
    rope.apply(out + width - rope_dim, ratio * e);
    if (fp4) fp4_roundtrip(out, width, 32);
  }
  Tensor ind = test::upload_f32(in), ifd = test::upload_f32(rope.inv_freq());
  Tensor pd = test::upload_i32(pos), sd = test::upload_i32(slot), ed = test::upload_i32(emit);
  Tensor nd = test::upload_i32({n_dev});
  Tensor keys = test::poisoned_f32(n_slots * max_entries * width);
  IndexKeysFinishParams p;
  p.keys_in = ind.data<float>();
  p.keys = keys.data<float>();
  p.max_entries = max_entries;
  p.width = width;
  p.rope_dim = rope_dim;
  p.ratio = ratio;
  p.inv_freq = ifd.data<float>();
  p.fp4 = fp4;
  p.emit_rows = ed.data<int32_t>();
  p.n_emit = static_cast<int64_t>(emit.size());
  p.n_emit_device = nd.data<int32_t>();
  p.positions = pd.data<int32_t>();
  p.slot = sd.data<int32_t>();
  index_keys_finish_cuda(nullptr, p);
  const auto got = test::download_f32(keys);
  std::vector<float> a, b;
  int64_t nan_mismatch = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ref[i]) != std::isnan(got[i])) ++nan_mismatch;
    if (!std::isnan(ref[i])) {
      a.push_back(got[i]);
      b.push_back(ref[i]);
    }
  }
  EXPECT_EQ(nan_mismatch, 0);
  ASSERT_FALSE(b.empty());
  const double err = test::nmse(a.data(), b.data(), static_cast<int64_t>(a.size()));
  EXPECT_LT(err, fp4 ? 1e-4 : 1e-11) << "nmse " << err;
}

TEST(V41OpsCuda, IndexKeysFinish) {
  auto rng = test::fresh_rng();
  for (bool fp4 : {false, true}) {
    index_keys_case(rng, 64, 32, 2, {1, 2, 3, 4, 5, 9, 0, 1}, {0, 0, 0, 0, 0, 1, 2, 2}, fp4);
    index_keys_case(rng, 96, 32, 1, {0, 1, 2, 7, 8}, {0, 0, 0, 1, 1}, fp4);
    index_keys_case(rng, 128, 64, 1, {4095, 1000, 1001, 0}, {0, 1, 1, 2}, fp4);  // V4.1-Flash
  }
}

// Rows with n(r) = (pos + 1) / ratio visible scores (levels > 0: ties from few values).
void candidates_case(std::mt19937_64& rng, const std::vector<int32_t>& pos, int64_t ratio,
                     int64_t block, int64_t n_pick, int64_t topk, int levels) {
  SCOPED_TRACE(testing::Message() << "block " << block << " pick " << n_pick << " topk " << topk
                                  << " levels " << levels);
  const int64_t N = static_cast<int64_t>(pos.size());
  int64_t stride = 1;
  for (int32_t p : pos) stride = std::max<int64_t>(stride, (p + 1) / ratio);
  const int64_t max_blocks = (stride + block - 1) / block + 1;
  std::vector<float> scores(N * stride, NAN);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_int_distribution<int> lvl(0, std::max(levels - 1, 0));
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t s = 0; s < (pos[r] + 1) / ratio; ++s) {
      scores[r * stride + s] = levels > 0 ? 0.5f * static_cast<float>(lvl(rng)) : nd(rng);
    }
  }
  Tensor sc = test::upload_f32(scores), pd = test::upload_i32(pos);
  Tensor bm = test::poisoned_f32(N * max_blocks), nb = test::upload_i32(std::vector<int32_t>(N, -1));
  Tensor pk = test::upload_i32(std::vector<int32_t>(N * n_pick, -1));
  Tensor npk = test::upload_i32(std::vector<int32_t>(N, -1));
  Tensor mask = cuda::device_filled(DType::U8, {N * max_blocks}, 0x7);
  CandidateBlocksParams p;
  p.scores = sc.data<float>();
  p.score_stride = stride;
  p.n_rows = N;
  p.positions = pd.data<int32_t>();
  p.ratio = ratio;
  p.block = block;
  p.n_pick = n_pick;
  p.max_blocks = max_blocks;
  p.block_max = bm.data<float>();
  p.n_blocks = nb.data<int32_t>();
  p.picked = pk.data<int32_t>();
  p.n_picked = npk.data<int32_t>();
  p.mask = static_cast<uint8_t*>(mask.raw());
  candidate_blocks_cuda(nullptr, p);
  // A consumer with the source's scores restricted, then its top-k without unscored picks.
  candidate_restrict_cuda(nullptr, sc.data<float>(), stride, N, pd.data<int32_t>(), ratio,
                          static_cast<const uint8_t*>(mask.raw()), max_blocks, block);
  Tensor sel = test::upload_i32(std::vector<int32_t>(N * topk, -1));
  Tensor nsel = test::upload_i32(std::vector<int32_t>(N, -1));
  topk_rows_cuda(nullptr, sc.data<float>(), N, stride, pd.data<int32_t>(), ratio, nullptr, topk,
                 sel.data<int32_t>(), nsel.data<int32_t>());
  drop_unscored_picks_cuda(nullptr, sc.data<float>(), stride, N, sel.data<int32_t>(),
                           nsel.data<int32_t>(), topk);
  std::vector<uint8_t> got_mask(N * max_blocks);
  cuda::copy_d2h(got_mask.data(), mask.raw(), got_mask.size());
  const auto got_sel = download_i32(sel), got_n = download_i32(nsel);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t n = (pos[r] + 1) / ratio;
    const std::vector<uint8_t> want = candidate_blocks_ref(&scores[r * stride], n, block, n_pick);
    for (int64_t b = 0; b < max_blocks; ++b) {
      const uint8_t w = b < static_cast<int64_t>(want.size()) ? want[b] : 0;
      ASSERT_EQ(got_mask[r * max_blocks + b], w) << "row " << r << " block " << b;
    }
    std::vector<float> restricted(&scores[r * stride], &scores[r * stride] + n);
    for (int64_t s = 0; s < n; ++s) {
      if (!want[s / block]) restricted[s] = -INFINITY;
    }
    std::vector<int32_t> picks;
    for (int64_t e : topk_indices(restricted.data(), n, topk)) {
      if (restricted[e] != -INFINITY) picks.push_back(static_cast<int32_t>(e));
    }
    std::sort(picks.begin(), picks.end());
    ASSERT_EQ(got_n[r], static_cast<int32_t>(picks.size())) << "row " << r;
    for (size_t j = 0; j < picks.size(); ++j) {
      ASSERT_EQ(got_sel[r * topk + j], picks[j]) << "row " << r << " pick " << j;
    }
  }
}

TEST(V41OpsCuda, CandidateBlocksRestrictionAndPicks) {
  auto rng = test::fresh_rng();
  std::vector<int32_t> pos;
  for (int32_t p = 0; p < 200; p += 7) pos.push_back(p);
  pos.push_back(3);
  pos.push_back(199);
  for (int levels : {0, 3}) {
    candidates_case(rng, pos, 1, 4, 2, 5, levels);   // the goldens' shape
    candidates_case(rng, pos, 2, 4, 2, 5, levels);
    candidates_case(rng, pos, 1, 8, 5, 17, levels);
    candidates_case(rng, pos, 1, 3, 40, 64, levels);  // more blocks picked than exist
  }
  // V4.1-Flash: blocks of 8, 2048 of them, top-512, over 32K entries.
  candidates_case(rng, {32767, 20000, 16383, 5}, 1, 8, 2048, 512, 0);
}

TEST(V41OpsCuda, Fp4RowsWithoutHadamard) {
  auto rng = test::fresh_rng();
  for (auto [n_vec, n] : {std::pair<int64_t, int64_t>{37, 64}, {5, 100}, {64, 128}}) {
    auto x = test::randn(rng, n_vec * n, 3.0f);
    for (int64_t i = 0; i < n; ++i) x[i] = 0.0f;  // one all-zero vector (the amax floor)
    Tensor xd = test::upload_f32(x);
    fp4_roundtrip_rows_cuda(nullptr, xd.data<float>(), n_vec, n, 32);
    for (int64_t v = 0; v < n_vec; ++v) fp4_roundtrip(&x[v * n], n, 32);
    EXPECT_EQ(test::download_f32(xd), x) << n_vec << " x " << n;
  }
}

TEST(V41OpsCuda, RoutingWithTemperatureEpsilonAndNoNormalisation) {
  auto rng = test::fresh_rng();
  for (auto [n_exp, k, inv_temp, normalize] :
       {std::tuple<int64_t, int64_t, float, bool>{8, 2, 0.5f, true}, {8, 1, 1.0f, false},
        {384, 6, 1.25f, true}, {37, 5, 2.0f, false}}) {
    SCOPED_TRACE(testing::Message() << n_exp << " experts top-" << k << " 1/T " << inv_temp);
    const int64_t n_rows = 45;
    const auto logits = test::randn(rng, n_rows * n_exp, 1.5f);
    const auto bias = test::randn(rng, n_exp, 0.2f);
    std::vector<float> eye(n_exp * n_exp, 0.0f);
    for (int64_t e = 0; e < n_exp; ++e) eye[e * n_exp + e] = 1.0f;
    RouterParams rp{n_exp, k, 1.5f, inv_temp, 1e-20f, normalize};
    std::vector<int32_t> ids_ref(n_rows * k), tokens(n_rows, 0);
    std::vector<float> w_ref(n_rows * k);
    route_ref(logits.data(), n_rows, n_exp, eye.data(), bias.data(), nullptr, tokens.data(), rp,
              ids_ref.data(), w_ref.data(), GemmMode::kFixedOrder);
    Tensor ld = test::upload_f32(logits), bd = test::upload_f32(bias), td = test::upload_i32(tokens);
    Tensor idd = test::upload_i32(std::vector<int32_t>(n_rows * k, -1));
    Tensor wd = test::poisoned_f32(n_rows * k);
    route_cuda(nullptr, ld.data<float>(), n_rows, bd.data<float>(), nullptr, td.data<int32_t>(), rp,
               idd.data<int32_t>(), wd.data<float>());
    EXPECT_EQ(download_i32(idd), ids_ref);
    const auto w = test::download_f32(wd);
    EXPECT_LT(test::nmse(w.data(), w_ref.data(), n_rows * k), 1e-12);
  }
}

}  // namespace
}  // namespace deepinfer
