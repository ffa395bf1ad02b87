// mHC CUDA ops vs the references at V4-Flash width (n_hc 4, D 4096) and an awkward D.
// Mix outputs are O(1) values after sigmoid / Sinkhorn: max abs difference < 2e-5 (fp32
// reductions in another order feed 20 Sinkhorn steps). N up to 257 (a prefill chunk). Collapse / expand: NMSE < 1e-12.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/device_context.h"
#include "cuda_test_util.h"
#include "op_test_util.h"
#include "ops/mhc/mhc.h"
#include "ops/mhc/mhc_cuda.h"

namespace deepinfer {
namespace {

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    d = std::max(d, std::fabs(a[i] - b[i]));
  }
  return d;
}

TEST(MhcCuda, MixMatchesReference) {
  auto rng = test::fresh_rng();
  for (int64_t dim : {4096, 333})
    for (int64_t n : {1, 3, 17, 257}) {
      SCOPED_TRACE(testing::Message() << "N " << n << " D " << dim);
      HcMixParams p;
      p.dim = dim;
      const int64_t hc = 4, n_mix = 24, width = hc * dim;
      const auto x = test::randn(rng, n * width);
      const auto fn = test::randn(rng, n_mix * width, 1.0f / std::sqrt(float(width)));
      const auto base = test::randn(rng, n_mix, 0.5f);
      const auto scale = test::randn(rng, 3, 1.0f);
      std::vector<float> pre(n * hc), post(n * hc), comb(n * hc * hc);
      hc_mix_ref(x.data(), n, fn.data(), base.data(), scale.data(), p, pre.data(), post.data(),
                 comb.data());
      const Tensor xd = test::upload_f32(x), fd = test::upload_f32(fn), bd = test::upload_f32(base),
                   sd = test::upload_f32(scale);
      cuda::DeviceContext ctx;
      Tensor mix = test::poisoned_f32(hc_mix_scratch_floats(n, p));
      for (HcMixImpl impl : {HcMixImpl::kSplitK, HcMixImpl::kGemm}) {
        SCOPED_TRACE(impl == HcMixImpl::kSplitK ? "split-K" : "GEMM");
        Tensor pr = test::poisoned_f32(n * hc), po = test::poisoned_f32(n * hc),
               co = test::poisoned_f32(n * hc * hc);
        hc_mix_cuda(ctx, xd.data<float>(), n, fd.data<float>(), bd.data<float>(),
                    sd.data<float>(), p, mix.data<float>(), pr.data<float>(), po.data<float>(),
                    co.data<float>(), impl);
        ctx.synchronize();
        EXPECT_LT(max_abs_diff(test::download_f32(pr), pre), 2e-5);
        EXPECT_LT(max_abs_diff(test::download_f32(po), post), 2e-5);
        EXPECT_LT(max_abs_diff(test::download_f32(co), comb), 2e-5);
      }

      // Head: n_hc projections, then the collapse.
      const auto hfn = test::randn(rng, hc * width, 1.0f / std::sqrt(float(width)));
      const auto hbase = test::randn(rng, hc, 0.5f);
      const std::vector<float> hscale = {0.7f};
      std::vector<float> h(n * dim);
      hc_head_ref(x.data(), n, hfn.data(), hbase.data(), hscale.data(), p, h.data());
      const Tensor hf = test::upload_f32(hfn), hb = test::upload_f32(hbase),
                   hs = test::upload_f32(hscale);
      for (HcMixImpl impl : {HcMixImpl::kSplitK, HcMixImpl::kGemm}) {
        SCOPED_TRACE(impl == HcMixImpl::kSplitK ? "head split-K" : "head GEMM");
        Tensor scratch = test::poisoned_f32(n * hc), hd = test::poisoned_f32(n * dim);
        hc_head_cuda(ctx, xd.data<float>(), n, hf.data<float>(), hb.data<float>(),
                     hs.data<float>(), p, mix.data<float>(), scratch.data<float>(),
                     hd.data<float>(), impl);
        ctx.synchronize();
        const auto hout = test::download_f32(hd);
        EXPECT_LT(test::nmse(hout.data(), h.data(), n * dim), 1e-10);
      }
    }
}

TEST(MhcCuda, CollapseAndExpandMatchReference) {
  auto rng = test::fresh_rng();
  for (int64_t dim : {4096, 333})
    for (int64_t n : {1, 17}) {
      SCOPED_TRACE(testing::Message() << "N " << n << " D " << dim);
      const int64_t hc = 4;
      const auto x = test::randn(rng, n * hc * dim);
      const auto pre = test::randn(rng, n * hc);
      const auto y = test::randn(rng, n * dim);
      const auto post = test::randn(rng, n * hc);
      const auto comb = test::randn(rng, n * hc * hc);
      std::vector<float> u(n * dim), x_out(n * hc * dim);
      hc_collapse_ref(x.data(), pre.data(), n, hc, dim, u.data());
      hc_expand_ref(x.data(), y.data(), post.data(), comb.data(), n, hc, dim, x_out.data());
      const Tensor xd = test::upload_f32(x), prd = test::upload_f32(pre), yd = test::upload_f32(y),
                   pod = test::upload_f32(post), cd = test::upload_f32(comb);
      Tensor ud = test::poisoned_f32(n * dim), xo = test::poisoned_f32(n * hc * dim);
      hc_collapse_cuda(nullptr, xd.data<float>(), prd.data<float>(), n, hc, dim, ud.data<float>());
      hc_expand_cuda(nullptr, xd.data<float>(), yd.data<float>(), pod.data<float>(),
                     cd.data<float>(), n, hc, dim, xo.data<float>());
      const auto uo = test::download_f32(ud), xe = test::download_f32(xo);
      EXPECT_LT(test::nmse(uo.data(), u.data(), n * dim), 1e-12);
      EXPECT_LT(test::nmse(xe.data(), x_out.data(), n * hc * dim), 1e-12);
    }
}

}  // namespace
}  // namespace deepinfer
