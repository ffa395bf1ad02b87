// MoE decode bandwidth bench (issues 14 and 22), standalone: built with nvcc on the device
// together with the few MoE sources it needs (build.sh), no CMake, no gtest.
//   bench_moe_decode [check] [nocopy] [ts=1,4,16,64,256] [shapes=v4,v41] [paths=plain,fast,fp8] [reps=N]
//                    [split=UP,DOWN] [pass=0|8|16]
// Prints, in one process: the copy bandwidth (cudaMemcpy d2d, 1 GiB, read + written) and the
// read probe (w4a8_read_probe_cuda, 1 GiB), then per shape and T the time and the expert-byte
// bandwidth of the W4A8 plain path, the W4A8 fast path and the FP8 grouped path, each the
// median of 5 launches of a graph of `reps` calls. `check`: the fast path against the plain
// path (every T, bitwise-equal count and max relative difference) and both against the CPU
// recipe (moe_experts_w4a8_ref) at V4 / V4.1 shapes for small T; exits 1 on a failure.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ops/gemm/gemm.h"
#include "ops/moe/moe_grouped_cuda.h"
#include "ops/moe/moe_w4a8.h"
#include "ops/moe/moe_w4a8_cuda.h"

namespace {

using namespace deepinfer;

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                   \
    }                                                                                 \
  } while (0)

template <typename T>
T* dev(size_t n) {
  void* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(n, 16) * sizeof(T)));
  return static_cast<T*>(p);
}
template <typename T>
T* upload(const std::vector<T>& h) {
  T* p = dev<T>(h.size());
  CK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}
template <typename T>
std::vector<T> download(const T* p, size_t n) {
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// Mean ms of fn replayed from a graph of `reps` calls (median of 5 launches).
template <typename Fn>
double graph_ms(cudaStream_t s, int reps, Fn&& fn) {
  fn();
  CK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; ++i) fn();
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s));
  std::vector<double> ms;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int it = 0; it < 5; ++it) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float m = 0;
    CK(cudaEventElapsedTime(&m, a, b));
    ms.push_back(m / reps);
  }
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> w;
};
// As the test's make_routing(sorted): distinct experts per token, even tokens from a hot set.
Routing routing(std::mt19937_64& rng, int64_t E, int64_t k, int64_t T) {
  Routing r{std::vector<int32_t>(T * k), std::vector<float>(T * k)};
  std::vector<int32_t> all(E), hot(std::min<int64_t>(E, 3 * k));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::copy(all.begin(), all.begin() + static_cast<int64_t>(hot.size()), hot.begin());
  std::uniform_real_distribution<float> wd(0.05f, 1.0f);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t>& from = t % 2 == 0 ? hot : all;
    std::shuffle(from.begin(), from.end(), rng);
    std::vector<int32_t> pick(from.begin(), from.begin() + k);
    std::sort(pick.begin(), pick.end());
    for (int64_t j = 0; j < k; ++j) {
      r.ids[t * k + j] = pick[j];
      r.w[t * k + j] = wd(rng);
    }
  }
  return r;
}

std::vector<float> randn(std::mt19937_64& rng, int64_t n) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = nd(rng);
  return v;
}

// Checkpoint-format FP4 matrix [n, k] (codes random, scales so that W x is about unit size).
struct Fp4 {
  std::vector<uint8_t> codes, scales;
};
Fp4 random_fp4(std::mt19937_64& rng, int64_t n, int64_t k) {
  Fp4 m;
  m.codes.resize(n * k / 2);
  for (auto& c : m.codes) c = static_cast<uint8_t>(rng());
  const int base = static_cast<int>(std::lround(-1.55 - 0.5 * std::log2(static_cast<double>(k))));
  m.scales.resize(n * k / 32);
  for (auto& s : m.scales) s = static_cast<uint8_t>(127 + base + static_cast<int>(rng() % 3) - 1);
  return m;
}

struct ShapeDef {
  const char* name;
  int64_t E, D, I, k, ab;
};

// Device stacks of E experts; expert e = host expert e % distinct (copied on the device).
struct Stacks {
  int64_t E, D, I;
  std::vector<Fp4> h1, h3, h2;
  uint8_t *w1, *s1, *w3, *s3, *w2, *s2;
  Stacks(std::mt19937_64& rng, const ShapeDef& sh, int64_t distinct) : E(sh.E), D(sh.D), I(sh.I) {
    for (int64_t x = 0; x < distinct; ++x) {
      h1.push_back(random_fp4(rng, I, D));
      h3.push_back(random_fp4(rng, I, D));
      h2.push_back(random_fp4(rng, D, I));
    }
    make(h1, I, D, &w1, &s1);
    make(h3, I, D, &w3, &s3);
    make(h2, D, I, &w2, &s2);
  }
  void make(const std::vector<Fp4>& h, int64_t n, int64_t k, uint8_t** c, uint8_t** s) {
    const int64_t cb = w4a8_code_bytes(n, k), sb = w4a8_scale_bytes(n, k);
    *c = dev<uint8_t>(E * cb);
    *s = dev<uint8_t>(E * sb);
    std::vector<uint8_t> pc(cb), ps(sb);
    const int64_t distinct = static_cast<int64_t>(h.size());
    for (int64_t e = 0; e < distinct; ++e) {
      w4a8_pack(h[e].codes.data(), h[e].scales.data(), n, k, pc.data(), ps.data());
      CK(cudaMemcpy(*c + e * cb, pc.data(), cb, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(*s + e * sb, ps.data(), sb, cudaMemcpyHostToDevice));
    }
    for (int64_t e = distinct; e < E; ++e) {
      CK(cudaMemcpy(*c + e * cb, *c + (e % distinct) * cb, cb, cudaMemcpyDeviceToDevice));
      CK(cudaMemcpy(*s + e * sb, *s + (e % distinct) * sb, sb, cudaMemcpyDeviceToDevice));
    }
  }
  MoeW4a8Weights weights() const { return {w1, s1, w3, s3, w2, s2}; }
  double expert_bytes() const {
    return 2.0 * (w4a8_code_bytes(I, D) + w4a8_scale_bytes(I, D)) + w4a8_code_bytes(D, I) +
           w4a8_scale_bytes(D, I);
  }
  void release() {
    for (uint8_t* p : {w1, s1, w3, s3, w2, s2}) CK(cudaFree(p));
  }
};

struct Args {
  bool check = false, nocopy = false;
  std::vector<int64_t> ts{1, 4, 16, 64, 256};
  std::vector<std::string> shapes{"v4", "v41"}, paths{"plain", "fast", "fp8"};
  int reps = 10;
};
std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    const size_t b = std::min(s.find(',', a), s.size());
    if (b > a) out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}
bool has(const std::vector<std::string>& v, const char* x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

const float limit = 10.0f;

std::vector<float> run_w4a8(cudaStream_t st, const Stacks& S, const ShapeDef& sh, MoeW4a8Kernel kern,
                            const std::vector<float>& x, const Routing& r, int64_t T) {
  const MoeExpertsShape s{T, sh.k, sh.E, sh.D, sh.I, limit};
  const size_t wsb = moe_experts_w4a8_workspace_bytes(s, sh.ab);
  uint8_t* ws = dev<uint8_t>(wsb);
  CK(cudaMemset(ws, 0xff, wsb));
  float *xd = upload(x), *rw = upload(r.w), *out = dev<float>(T * sh.D);
  int32_t* ids = upload(r.ids);
  CK(cudaMemset(out, 0xff, T * sh.D * sizeof(float)));
  moe_experts_w4a8_cuda(st, s, sh.ab, xd, ids, rw, S.weights(), nullptr, ws, out, kern);
  CK(cudaStreamSynchronize(st));
  auto h = download(out, T * sh.D);
  for (void* p : std::initializer_list<void*>{ws, xd, rw, out, ids}) CK(cudaFree(p));
  return h;
}

// Compare got with want: count of bitwise-equal elements, NMSE, non-finite count.
struct Cmp {
  int64_t n = 0, equal = 0, nonfinite = 0;
  double nmse = 0;
};
Cmp compare(const std::vector<float>& got, const std::vector<float>& want) {
  Cmp c;
  c.n = static_cast<int64_t>(got.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) ++c.nonfinite;
    if (std::memcmp(&got[i], &want[i], 4) == 0) ++c.equal;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  c.nmse = den > 0 ? num / den : num;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "check") a.check = true;
    else if (s == "nocopy") a.nocopy = true;
    else if (s.rfind("ts=", 0) == 0) {
      a.ts.clear();
      for (auto& t : split(s.substr(3))) a.ts.push_back(std::stoll(t));
    } else if (s.rfind("shapes=", 0) == 0) a.shapes = split(s.substr(7));
    else if (s.rfind("paths=", 0) == 0) a.paths = split(s.substr(6));
    else if (s.rfind("reps=", 0) == 0) a.reps = std::stoi(s.substr(5));
    else if (s.rfind("pass=", 0) == 0) {
      moe_w4a8_set_pass_max(std::stoi(s.substr(5)));
      std::printf("plain path: %s tokens per pass\n", s.substr(5).c_str());
    } else if (s.rfind("split=", 0) == 0) {
      const auto v = split(s.substr(6));
      moe_w4a8_set_fast_split(std::stoi(v.at(0)), std::stoi(v.at(1)));
      std::printf("fast path K splits: up %s, down %s\n", v[0].c_str(), v[1].c_str());
    }
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("GPU: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::mt19937_64 rng(1234);
  int failures = 0;
  const ShapeDef v4{"V4-Flash", 256, 4096, 2048, 6, 128}, v41{"V4.1-Flash", 384, 5120, 2304, 6, 32};

  if (a.check) {
    // Fast vs plain (every T) and both vs the CPU recipe (small T), distinct experts.
    for (const ShapeDef& sh : {v4, v41}) {
      const int64_t distinct = 6;
      Stacks S(rng, sh, distinct);
      std::vector<W4a8ExpertRef> ex(sh.E);
      for (int64_t e = 0; e < sh.E; ++e) {
        const int64_t d = e % distinct;
        ex[e] = {S.h1[d].codes.data(), S.h1[d].scales.data(), S.h3[d].codes.data(),
                 S.h3[d].scales.data(), S.h2[d].codes.data(), S.h2[d].scales.data()};
      }
      for (const int64_t T : {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{256}}) {
        const auto x = randn(rng, T * sh.D);
        const Routing r = routing(rng, sh.E, sh.k, T);
        const auto plain = run_w4a8(st, S, sh, MoeW4a8Kernel::kPlain, x, r, T);
        const auto fast = run_w4a8(st, S, sh, MoeW4a8Kernel::kFast, x, r, T);
        const Cmp fp = compare(fast, plain);
        // Same products, another fp32 summation order: differences of a few ulp, except where
        // an h value sits on an e4m3 rounding boundary and flips by one code (rare).
        bool ok = fp.nonfinite == 0 && fp.nmse < 1e-6;
        std::printf("check %s T %ld: fast vs plain: %ld/%ld bitwise equal, NMSE %.3g, non-finite %ld",
                    sh.name, long(T), long(fp.equal), long(fp.n), fp.nmse, long(fp.nonfinite));
        if (T <= 3) {
          std::vector<float> ref(T * sh.D, 0.0f);
          moe_experts_w4a8_ref(x.data(), T, sh.k, sh.D, sh.I, limit, sh.ab, r.ids.data(), r.w.data(),
                               ex, nullptr, ref.data());
          const Cmp cf = compare(fast, ref), cp = compare(plain, ref);
          std::printf("; vs CPU recipe: fast NMSE %.3g, plain NMSE %.3g (bound 1e-4)", cf.nmse, cp.nmse);
          ok = ok && cf.nmse < 1e-4 && cp.nmse < 1e-4 && cf.nonfinite == 0;
        }
        // Batch invariance of the fast path: the last token alone.
        if (T > 1) {
          const std::vector<float> x1(x.end() - sh.D, x.end());
          const Routing r1{std::vector<int32_t>(r.ids.end() - sh.k, r.ids.end()),
                           std::vector<float>(r.w.end() - sh.k, r.w.end())};
          const auto one = run_w4a8(st, S, sh, MoeW4a8Kernel::kFast, x1, r1, 1);
          const bool same = std::memcmp(one.data(), fast.data() + (T - 1) * sh.D, 4 * sh.D) == 0;
          std::printf("; last token alone bitwise %s", same ? "equal" : "DIFFERENT");
          ok = ok && same;
        }
        std::printf(" -> %s\n", ok ? "ok" : "FAIL");
        failures += ok ? 0 : 1;
      }
      S.release();
    }
  }

  const int64_t gib = int64_t{1} << 30;
  double copy_gbs = 0, read_gbs = 0;
  if (!a.nocopy) {
    uint8_t *x = dev<uint8_t>(gib), *y = dev<uint8_t>(gib);
    uint32_t* sink = dev<uint32_t>(4);
    CK(cudaMemset(x, 0x5a, gib));
    const double cms = graph_ms(st, 4, [&] { CK(cudaMemcpyAsync(y, x, gib, cudaMemcpyDeviceToDevice, st)); });
    const double rms = graph_ms(st, 4, [&] { w4a8_read_probe_cuda(st, x, gib, sink); });
    copy_gbs = 2.0 * gib / (cms * 1e6);
    read_gbs = 1.0 * gib / (rms * 1e6);
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(sink));
  }
  std::printf("copy d2d (cudaMemcpy, 1 GiB, read + written): %.0f GB/s; read probe (1 GiB): %.0f GB/s\n",
              copy_gbs, read_gbs);
  for (const ShapeDef* shp : {&v4, &v41}) {
    const ShapeDef& sh = *shp;
    if (!has(a.shapes, shp == &v4 ? "v4" : "v41")) continue;
    Stacks S(rng, sh, 2);
    // FP8 stacks of the same shape (random codes without NaN, tiny constant scales).
    const int64_t up_q = sh.E * sh.I * sh.D, up_s = sh.E * ceil_div64(sh.I, 128) * fp8_weight_scale_ld(sh.D);
    const int64_t dn_q = sh.E * sh.D * sh.I, dn_s = sh.E * ceil_div64(sh.D, 128) * fp8_weight_scale_ld(sh.I);
    const bool fp8 = has(a.paths, "fp8");
    uint8_t *f1 = nullptr, *f3 = nullptr, *f2 = nullptr;
    float *g1 = nullptr, *g3 = nullptr, *g2 = nullptr;
    if (fp8) {
      f1 = dev<uint8_t>(up_q), f3 = dev<uint8_t>(up_q), f2 = dev<uint8_t>(dn_q);
      g1 = dev<float>(up_s), g3 = dev<float>(up_s), g2 = dev<float>(dn_s);
      CK(cudaMemset(f1, 0x33, up_q));
      CK(cudaMemset(f3, 0x34, up_q));
      CK(cudaMemset(f2, 0x35, dn_q));
      for (float* g : {g1, g3}) CK(cudaMemset(g, 0x30, 4 * up_s));
      CK(cudaMemset(g2, 0x30, 4 * dn_s));
    }
    const MoeExpertsFp8Weights fw{f1, g1, f3, g3, f2, g2};
    const double w4_expert = S.expert_bytes();
    const double f8_expert = 3.0 * sh.I * sh.D + 4.0 * (2 * up_s + dn_s) / sh.E;
    std::printf("%s (E %ld, D %ld, I %ld, top-%ld, act block %ld): W4A8 %.2f MB per expert, FP8 %.2f MB\n",
                sh.name, long(sh.E), long(sh.D), long(sh.I), long(sh.k), long(sh.ab), w4_expert / 1e6,
                f8_expert / 1e6);
    std::printf("| T | experts | plain us | plain GB/s | of copy | fast us | fast GB/s | of copy | of read | FP8 us | FP8 GB/s | FP8 of copy |\n");
    for (const int64_t T : a.ts) {
      const Routing r = routing(rng, sh.E, sh.k, T);
      std::vector<bool> used(sh.E, false);
      for (int32_t e : r.ids) used[e] = true;
      const int64_t n_used = std::count(used.begin(), used.end(), true);
      const MoeExpertsShape s{T, sh.k, sh.E, sh.D, sh.I, limit};
      uint8_t* ws4 = dev<uint8_t>(moe_experts_w4a8_workspace_bytes(s, sh.ab));
      uint8_t* ws8 = fp8 ? dev<uint8_t>(moe_experts_fp8_workspace_bytes(s)) : nullptr;
      float *xd = upload(randn(rng, T * sh.D)), *rw = upload(r.w), *out = dev<float>(T * sh.D);
      int32_t* ids = upload(r.ids);
      double ms[3] = {0, 0, 0};
      const MoeW4a8Kernel kinds[2] = {MoeW4a8Kernel::kPlain, MoeW4a8Kernel::kFast};
      for (int p = 0; p < 2; ++p) {
        if (!has(a.paths, p == 0 ? "plain" : "fast")) continue;
        ms[p] = graph_ms(st, a.reps, [&] {
          moe_experts_w4a8_cuda(st, s, sh.ab, xd, ids, rw, S.weights(), nullptr, ws4, out, kinds[p]);
        });
      }
      if (fp8) {
        ms[2] = graph_ms(st, a.reps, [&] {
          moe_experts_fp8_cuda(st, s, xd, ids, rw, fw, nullptr, ws8, out);
        });
      }
      auto gbs = [&](double m, double per) { return m > 0 ? n_used * per / (m * 1e6) : 0.0; };
      const double b0 = gbs(ms[0], w4_expert), b1 = gbs(ms[1], w4_expert), b2 = gbs(ms[2], f8_expert);
      std::printf("| %ld | %ld | %.1f | %.0f | %.0f%% | %.1f | %.0f | %.0f%% | %.0f%% | %.1f | %.0f | %.0f%% |\n",
                  long(T), long(n_used), 1e3 * ms[0], b0, 100 * b0 / copy_gbs, 1e3 * ms[1], b1,
                  100 * b1 / copy_gbs, 100 * b1 / read_gbs, 1e3 * ms[2], b2, 100 * b2 / copy_gbs);
      for (void* p : std::initializer_list<void*>{ws4, ws8, xd, rw, out, ids}) {
        if (p) CK(cudaFree(p));
      }
    }
    S.release();
    if (fp8) {
      for (void* p : std::initializer_list<void*>{f1, f3, f2, g1, g3, g2}) CK(cudaFree(p));
    }
  }
  CK(cudaGetLastError());
  if (a.check) std::printf("check: %d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
