// Standalone benchmark of sm90_paged_decode_cuda (FP8 MODEL1 cache, 64 heads x 512) at the
// FlashMLA anchor's V4-Flash decode problem (window 128 + top-512 compressed, 4K context,
// ../shared/anchors/anchor_flashmla.py), optionally against a previous build of the kernel
// (-DDEEPINFER_OLD_DECODE: the same source of an older commit with its entry points renamed
// old_sm90_paged_decode_*). First a correctness pass at awkward sizes against an fp64 CPU
// reference (bounds of test_paged_decode_cuda: call nmse < 6.1e-5, every (row, head) nmse <
// 2.4e-4), then median us per call (L2 flushed between calls) and KV bytes/s.
// Built with nvcc from a few sources (build.sh), independent of the CMake build.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "ops/kv_cache/kv_cache.h"
#include "ops/kv_cache/kv_cache_cuda.h"

namespace deepinfer {
#ifdef DEEPINFER_OLD_DECODE
void old_sm90_paged_decode_cuda(cudaStream_t stream, const PagedAttentionParams& p);
int64_t old_sm90_paged_decode_workspace_bytes(int64_t, int64_t, int64_t, int64_t);
#endif
}  // namespace deepinfer

using namespace deepinfer;

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

namespace {

constexpr int64_t kD = 512;

uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float bf16_val(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float e4m3_val(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  const float v = e == 0 ? std::ldexp(m / 8.0f, -6) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return s ? -v : v;
}

// A random fp8 MODEL1 pool of O(1) values (as kv_store of unit normals would give): codes of
// magnitude 2^-9 .. 3.75 (exponent field 0 .. 8, no NaN), scales 2^-2 .. 2^0, bf16 RoPE ~ N(0, 1).
struct Pool {
  KvCacheLayout l;
  int64_t n_blocks = 0;
  std::vector<uint8_t> bytes;
  const uint8_t* data(int64_t slot) const {
    return bytes.data() + slot / l.block_size * l.block_bytes() + slot % l.block_size * l.data_bytes();
  }
  const uint8_t* scales(int64_t slot) const {
    return bytes.data() + slot / l.block_size * l.block_bytes() + l.block_size * l.data_bytes() +
           slot % l.block_size * l.scale_bytes();
  }
  float value(int64_t slot, int64_t d) const {
    if (d < 448) return e4m3_val(data(slot)[d]) * std::ldexp(1.0f, scales(slot)[d / 64] - 127);
    uint16_t b;
    std::memcpy(&b, data(slot) + 448 + 2 * (d - 448), 2);
    return bf16_val(b);
  }
};

Pool make_pool(std::mt19937_64& rng, int64_t block_size, int64_t n_blocks) {
  Pool p;
  p.l = KvCacheLayout::v4(KvCacheDtype::kFp8, block_size);
  p.n_blocks = n_blocks;
  p.bytes.assign(n_blocks * p.l.block_bytes(), 0);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255), ex(0, 8), sc(125, 127);
  for (int64_t s = 0; s < n_blocks * block_size; ++s) {
    uint8_t* d = const_cast<uint8_t*>(p.data(s));
    for (int i = 0; i < 448; ++i) {
      const int c = (byte(rng) & 0x87) | (ex(rng) << 3);
      d[i] = static_cast<uint8_t>(c);
    }
    for (int i = 0; i < 64; ++i) {
      const uint16_t b = bf16_bits(nd(rng));
      std::memcpy(d + 448 + 2 * i, &b, 2);
    }
    uint8_t* g = const_cast<uint8_t*>(p.scales(s));
    for (int i = 0; i < 7; ++i) g[i] = static_cast<uint8_t>(sc(rng));
  }
  return p;
}

template <class T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  CK(cudaMalloc(&d, std::max<size_t>(v.size(), 1) * sizeof(T)));
  if (!v.empty()) CK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// One problem: B rows, H heads; source 0 = window pool (W slots per row), source 1 =
// compressed pool (n_cmp[r] of max_cmp slots per row); host copies for the reference.
struct Problem {
  int64_t B = 0, H = 0, W = 0, max_cmp = 0;
  Pool win, cmp;
  std::vector<int32_t> win_idx, cmp_idx, n_cmp;
  std::vector<float> q, sinks;
  PagedAttentionParams dev;  // device pointers, out / workspace unset
};

void to_device(Problem& pr) {
  PagedAttentionParams& p = pr.dev;
  p.q = upload(pr.q);
  p.sinks = upload(pr.sinks);
  p.n_rows = pr.B;
  p.n_heads = pr.H;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kD));
  p.sources[0] = {upload(pr.win.bytes), pr.win.l, pr.win.n_blocks, upload(pr.win_idx), nullptr, pr.W};
  p.sources[1] = {upload(pr.cmp.bytes), pr.cmp.l, pr.cmp.n_blocks, upload(pr.cmp_idx), upload(pr.n_cmp), pr.max_cmp};
}

// fp64 reference of one (row, head).
void reference(const Problem& pr, int64_t r, int64_t h, double* out) {
  std::vector<std::pair<const Pool*, int64_t>> keys;
  for (int64_t j = 0; j < pr.W; ++j)
    if (pr.win_idx[r * pr.W + j] >= 0) keys.push_back({&pr.win, pr.win_idx[r * pr.W + j]});
  for (int64_t j = 0; j < pr.n_cmp[r]; ++j)
    if (pr.cmp_idx[r * pr.max_cmp + j] >= 0) keys.push_back({&pr.cmp, pr.cmp_idx[r * pr.max_cmp + j]});
  const float* q = pr.q.data() + (r * pr.H + h) * kD;
  std::vector<double> lg(keys.size());
  double mx = pr.sinks[h];
  for (size_t k = 0; k < keys.size(); ++k) {
    double s = 0;
    for (int64_t d = 0; d < kD; ++d) s += static_cast<double>(q[d]) * keys[k].first->value(keys[k].second, d);
    lg[k] = s / std::sqrt(static_cast<double>(kD));
    mx = std::max(mx, lg[k]);
  }
  double den = std::exp(pr.sinks[h] - mx);
  std::fill(out, out + kD, 0.0);
  for (size_t k = 0; k < keys.size(); ++k) {
    const double w = std::exp(lg[k] - mx);
    den += w;
    for (int64_t d = 0; d < kD; ++d) out[d] += w * keys[k].first->value(keys[k].second, d);
  }
  for (int64_t d = 0; d < kD; ++d) out[d] /= den;
}

// Rows with the given key counts (window part first, up to W = 128; a -1 hole in longer
// compressed lists), random slots.
Problem make_problem(std::mt19937_64& rng, int64_t H, const std::vector<int64_t>& keys) {
  Problem pr;
  pr.B = static_cast<int64_t>(keys.size());
  pr.H = H;
  pr.W = 128;
  int64_t most = 1;
  for (int64_t k : keys) most = std::max(most, k);
  pr.max_cmp = most + 1;
  pr.win = make_pool(rng, 64, 2 * pr.B + 2);
  pr.cmp = make_pool(rng, 61, (most + 200) / 61 + 2);  // another block size
  pr.win_idx.assign(pr.B * pr.W, -1);
  pr.cmp_idx.assign(pr.B * pr.max_cmp, -1);
  pr.n_cmp.assign(pr.B, 0);
  for (int64_t r = 0; r < pr.B; ++r) {
    const int64_t n_w = std::min<int64_t>(keys[r], pr.W), n_c = keys[r] - n_w;
    std::vector<int32_t> ws(pr.win.n_blocks * 64), cs(pr.cmp.n_blocks * 61);
    std::iota(ws.begin(), ws.end(), 0);
    std::iota(cs.begin(), cs.end(), 0);
    std::shuffle(ws.begin(), ws.end(), rng);
    std::shuffle(cs.begin(), cs.end(), rng);
    std::vector<int64_t> pos(pr.W);
    std::iota(pos.begin(), pos.end(), 0);
    std::shuffle(pos.begin(), pos.end(), rng);
    for (int64_t j = 0; j < n_w; ++j) pr.win_idx[r * pr.W + pos[j]] = ws[j];
    int64_t at = 0;
    for (int64_t j = 0; j < n_c; ++j) {
      if (n_c > 4 && j == n_c / 2) pr.cmp_idx[r * pr.max_cmp + at++] = -1;
      pr.cmp_idx[r * pr.max_cmp + at++] = cs[j];
    }
    pr.n_cmp[r] = static_cast<int32_t>(at);
  }
  std::normal_distribution<float> nd(0.0f, 1.0f);
  pr.q.resize(pr.B * H * kD);
  for (float& x : pr.q) x = nd(rng);
  pr.sinks.resize(H);
  for (float& x : pr.sinks) x = nd(rng);
  to_device(pr);
  return pr;
}

using Kernel = void (*)(cudaStream_t, const PagedAttentionParams&);
using WsBytes = int64_t (*)(int64_t, int64_t, int64_t, int64_t);

std::vector<float> run(const Problem& pr, Kernel k, WsBytes wsb, bool split) {
  PagedAttentionParams p = pr.dev;
  const int64_t n = pr.B * pr.H * kD;
  float* out = nullptr;
  CK(cudaMalloc(&out, n * 4));
  CK(cudaMemset(out, 0xff, n * 4));  // NaN poison
  void* ws = nullptr;
  const int64_t wsn = split ? wsb(pr.B, pr.H, kD, pr.W + pr.max_cmp) : 0;
  if (wsn > 0) {
    CK(cudaMalloc(&ws, wsn));
    CK(cudaMemset(ws, 0xff, wsn));
  }
  p.out = out;
  p.workspace = ws;
  p.workspace_bytes = wsn;
  k(nullptr, p);
  CK(cudaDeviceSynchronize());
  std::vector<float> h(n);
  CK(cudaMemcpy(h.data(), out, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaFree(out));
  if (ws) CK(cudaFree(ws));
  return h;
}

// Returns false when a bound fails.
bool check(const char* what, const Problem& pr, const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0, den = 0, worst = 0;
  for (int64_t rh = 0; rh < pr.B * pr.H; ++rh) {
    double hn = 0, hd = 0;
    for (int64_t d = 0; d < kD; ++d) {
      const double e = out[rh * kD + d] - ref[rh * kD + d];
      hn += e * e;
      hd += ref[rh * kD + d] * ref[rh * kD + d];
    }
    if (!std::isfinite(hn)) hn = 1e30;
    num += hn;
    den += hd;
    worst = std::max(worst, hn / std::max(hd, 1e-30));
  }
  const double call = num / std::max(den, 1e-30);
  const double u = 1.0 / 512;
  const bool ok = call < 16 * u * u && worst < 64 * u * u;
  std::printf("  %-28s nmse %.3g (bound %.2g) worst head %.3g (bound %.2g) %s\n", what, call, 16 * u * u, worst,
              64 * u * u, ok ? "ok" : "FAIL");
  return ok;
}

bool correctness(std::mt19937_64& rng) {
  struct Case {
    int64_t H;
    std::vector<int64_t> keys;
  };
  const std::vector<Case> cases = {{64, {1, 7, 33, 640, 2100}}, {128, {65, 129}}, {16, {0, 200, 64}}, {64, {640}}};
  bool ok = true;
  for (const Case& c : cases) {
    Problem pr = make_problem(rng, c.H, c.keys);
    std::vector<double> ref(pr.B * pr.H * kD);
    for (int64_t r = 0; r < pr.B; ++r)
      for (int64_t h = 0; h < pr.H; ++h) reference(pr, r, h, ref.data() + (r * pr.H + h) * kD);
    std::printf("H %lld rows %lld (keys", static_cast<long long>(c.H), static_cast<long long>(pr.B));
    for (int64_t k : c.keys) std::printf(" %lld", static_cast<long long>(k));
    std::printf("):\n");
    const auto a = run(pr, sm90_paged_decode_cuda, sm90_paged_decode_workspace_bytes, false);
    const auto b = run(pr, sm90_paged_decode_cuda, sm90_paged_decode_workspace_bytes, true);
    const auto b2 = run(pr, sm90_paged_decode_cuda, sm90_paged_decode_workspace_bytes, true);
    ok &= check("new unsplit", pr, a, ref);
    ok &= check("new split-K", pr, b, ref);
    const bool det = std::memcmp(b.data(), b2.data(), b.size() * 4) == 0;
    std::printf("  new split-K deterministic: %s\n", det ? "yes" : "NO");
    ok &= det;
#ifdef DEEPINFER_OLD_DECODE
    check("old unsplit (report only)", pr, run(pr, old_sm90_paged_decode_cuda, old_sm90_paged_decode_workspace_bytes, false), ref);
#endif
  }
  return ok;
}

double median_us(const std::function<void()>& f, void* flush, size_t flush_bytes) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<double> ts;
  for (int it = 0; it < 33; ++it) {
    CK(cudaMemsetAsync(flush, it, flush_bytes));
    CK(cudaEventRecord(e0));
    f();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (it >= 3) ts.push_back(ms * 1e3);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

// The anchor's problem: per row 128 window slots (random pages) + 512 of the row's 1024
// compressed entries, page 64, 64 heads.
void timing(std::mt19937_64& rng) {
  const int64_t H = 64, W = 128, topk = 512, page = 64, n_c = 1024;
  const size_t flush_bytes = size_t{256} << 20;
  void* flush = nullptr;
  CK(cudaMalloc(&flush, flush_bytes));
  std::printf("\n| B | keys | old us | new us | new TB/s KV | new TFLOP/s | splits | new vs old nmse |\n"
              "|---|---|---|---|---|---|---|---|\n");
  for (int64_t B : {1, 16, 64, 256}) {
    Problem pr;
    pr.B = B;
    pr.H = H;
    pr.W = W;
    pr.max_cmp = topk;
    const int64_t cpp = n_c / page, wpp = W / page;
    pr.win = make_pool(rng, page, std::min<int64_t>(B * wpp, 64));  // pages repeat: fill cost only
    pr.cmp = make_pool(rng, page, std::min<int64_t>(B * cpp, 64));
    // Distinct physical pages per row: pools of B * pages blocks on the device, the host
    // pool's 64 blocks repeated.
    const int64_t wblocks = B * wpp, cblocks = B * cpp, bb = pr.win.l.block_bytes();
    std::vector<uint8_t> wbytes(wblocks * bb), cbytes(cblocks * bb);
    for (int64_t b = 0; b < wblocks; ++b) std::memcpy(wbytes.data() + b * bb, pr.win.bytes.data() + (b % pr.win.n_blocks) * bb, bb);
    for (int64_t b = 0; b < cblocks; ++b) std::memcpy(cbytes.data() + b * bb, pr.cmp.bytes.data() + (b % pr.cmp.n_blocks) * bb, bb);
    pr.win.bytes = wbytes;
    pr.win.n_blocks = wblocks;
    pr.cmp.bytes = cbytes;
    pr.cmp.n_blocks = cblocks;
    std::vector<int32_t> wperm(wblocks), cperm(cblocks);
    std::iota(wperm.begin(), wperm.end(), 0);
    std::iota(cperm.begin(), cperm.end(), 0);
    std::shuffle(wperm.begin(), wperm.end(), rng);
    std::shuffle(cperm.begin(), cperm.end(), rng);
    pr.win_idx.resize(B * W);
    pr.cmp_idx.resize(B * topk);
    pr.n_cmp.assign(B, static_cast<int32_t>(topk));
    std::vector<int64_t> ent(n_c);
    for (int64_t r = 0; r < B; ++r) {
      for (int64_t s = 0; s < W; ++s) pr.win_idx[r * W + s] = static_cast<int32_t>(wperm[r * wpp + s / page] * page + s % page);
      std::iota(ent.begin(), ent.end(), 0);
      for (int64_t j = 0; j < topk; ++j) {
        std::uniform_int_distribution<int64_t> pick(j, n_c - 1);
        std::swap(ent[j], ent[pick(rng)]);
        pr.cmp_idx[r * topk + j] = static_cast<int32_t>(cperm[r * cpp + ent[j] / page] * page + ent[j] % page);
      }
    }
    std::normal_distribution<float> nd(0.0f, 1.0f);
    pr.q.resize(B * H * kD);
    for (float& x : pr.q) x = nd(rng);
    pr.sinks.resize(H);
    for (float& x : pr.sinks) x = nd(rng);
    to_device(pr);

    auto timed = [&](Kernel k, WsBytes wsb, std::vector<float>* result) {
      PagedAttentionParams p = pr.dev;
      const int64_t n = B * H * kD, wsn = wsb(B, H, kD, W + topk);
      float* out = nullptr;
      void* ws = nullptr;
      CK(cudaMalloc(&out, n * 4));
      if (wsn > 0) CK(cudaMalloc(&ws, wsn));
      p.out = out;
      p.workspace = ws;
      p.workspace_bytes = wsn;
      const double t = median_us([&] { k(nullptr, p); }, flush, flush_bytes);
      result->resize(n);
      CK(cudaMemcpy(result->data(), out, n * 4, cudaMemcpyDeviceToHost));
      CK(cudaFree(out));
      if (ws) CK(cudaFree(ws));
      return t;
    };
    std::vector<float> o_new, o_old;
    const double t_new = timed(sm90_paged_decode_cuda, sm90_paged_decode_workspace_bytes, &o_new);
    double t_old = 0, err = 0;
#ifdef DEEPINFER_OLD_DECODE
    t_old = timed(old_sm90_paged_decode_cuda, old_sm90_paged_decode_workspace_bytes, &o_old);
    double num = 0, den = 0;
    for (size_t i = 0; i < o_new.size(); ++i) {
      num += (o_new[i] - o_old[i]) * static_cast<double>(o_new[i] - o_old[i]);
      den += static_cast<double>(o_old[i]) * o_old[i];
    }
    err = num / den;
#endif
    const double k = W + topk;
    std::printf("| %lld | %g | %.1f | %.1f | %.2f | %.0f | %lld | %.2g |\n", static_cast<long long>(B), k, t_old, t_new,
                B * k * pr.win.l.entry_bytes() / (t_new * 1e-6) / 1e12, 2.0 * B * H * (kD + kD) * k / (t_new * 1e-6) / 1e12,
                static_cast<long long>(sm90_paged_decode_splits(B, H, W + topk)), err);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::mt19937_64 rng(52);
  const bool only_time = argc > 1 && std::strcmp(argv[1], "--time") == 0;
  bool ok = true;
  if (!only_time) ok = correctness(rng);
  timing(rng);
  std::printf("%s\n", ok ? "ALL OK" : "SOME CHECK FAILED");
  return ok ? 0 : 1;
}
