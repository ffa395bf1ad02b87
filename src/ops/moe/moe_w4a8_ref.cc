// W4A8 experts on the CPU (contract in moe_w4a8.h): the device packing, the exact FP4
// dequantisation and the recipe reference the CUDA kernel is tested against.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/dtype.h"
#include "base/error.h"
#include "ops/moe/moe_w4a8.h"
#include "ops/quant/act_quant.h"

namespace deepinfer {

void w4a8_pack(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k,
               uint8_t* dev_codes, uint8_t* dev_scales) {
  CHECK_KIND(kUnsupported, n >= 1 && k >= 32 && k % 32 == 0)
      << "w4a8_pack: [" << n << ", " << k << "] (FP4 experts need K a positive multiple of 32)";
  const int64_t kp = w4a8_padded_k(k), rb = k / 2, sb = k / 32;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* src = codes + i * rb;
    for (int64_t c = 0; c < kp / kW4a8Group; ++c) {
      uint8_t* dst = dev_codes + w4a8_code_offset(n, kp, i, c);
      for (int t = 0; t < 4; ++t) {
        for (int j = 0; j < 4; ++j) {
          for (int b = 0; b < 4; ++b) {
            const int64_t from = 64 * c + 16 * j + 4 * t + b;
            dst[16 * t + 4 * j + b] = from < rb ? src[from] : 0;
          }
        }
      }
      uint8_t* ds = dev_scales + w4a8_scale_offset(n, kp, i, c);
      for (int j = 0; j < 4; ++j) {
        const int64_t from = 4 * c + j;
        ds[j] = from < sb ? scales[i * sb + from] : uint8_t{127};
      }
    }
  }
}

void w4a8_dequant_ref(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k,
                      float* out) {
  CHECK(k % 32 == 0) << "w4a8_dequant_ref: K=" << k << " is not a multiple of 32";
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const uint8_t s = scales[i * (k / 32) + j / 32];
      CHECK(s != 255) << "w4a8_dequant_ref: scale [" << i << ", " << j / 32 << "] is NaN (255)";
      const uint8_t byte = codes[i * (k / 2) + j / 2];
      const uint8_t c = (j % 2 == 0) ? (byte & 0xf) : (byte >> 4);
      out[i * k + j] = std::ldexp(e2m1_to_f32(c), static_cast<int>(s) - 127);
    }
  }
}

namespace {

// y [rows, n] = (q * s) [rows, k] . W^T in double, W [n, k] fp32 (exact values).
void gemm_q(const std::vector<float>& xd, int64_t rows, int64_t k, const std::vector<float>& w,
            int64_t n, std::vector<float>* y) {
  y->assign(rows * n, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < n; ++o) {
      double acc = 0.0;
      for (int64_t j = 0; j < k; ++j) acc += static_cast<double>(xd[r * k + j]) * w[o * k + j];
      (*y)[r * n + o] = static_cast<float>(acc);
    }
  }
}

// act_quant_ref round trip of rows [rows, k]: the values q * s.
std::vector<float> quant_round_trip(const float* x, int64_t rows, int64_t k, int64_t block) {
  const int64_t nb = (k + block - 1) / block;
  std::vector<uint8_t> q(rows * k);
  std::vector<float> s(rows * nb), out(rows * k);
  act_quant_ref(x, rows, k, block, q.data(), s.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) out[r * k + j] = e4m3_to_f32(q[r * k + j]) * s[r * nb + j / block];
  return out;
}

}  // namespace

void moe_experts_w4a8_ref(const float* x, int64_t T, int64_t top_k, int64_t D, int64_t I,
                          float limit, int64_t act_block, const int32_t* ids, const float* weights,
                          const std::vector<W4a8ExpertRef>& experts, const float* y_shared,
                          float* out) {
  const int64_t E = static_cast<int64_t>(experts.size());
  const std::vector<float> xd = quant_round_trip(x, T, D, act_block);
  std::vector<float> y_slot(T * top_k * D, 0.0f);
  std::vector<float> w1(I * D), w3(I * D), w2(D * I);
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> slots;
    for (int64_t s = 0; s < T * top_k; ++s)
      if (ids[s] == e) slots.push_back(s);
    if (slots.empty()) continue;
    const W4a8ExpertRef& w = experts[e];
    w4a8_dequant_ref(w.w1, w.s1, I, D, w1.data());
    w4a8_dequant_ref(w.w3, w.s3, I, D, w3.data());
    w4a8_dequant_ref(w.w2, w.s2, D, I, w2.data());
    const int64_t m = static_cast<int64_t>(slots.size());
    std::vector<float> xe(m * D);
    for (int64_t i = 0; i < m; ++i)
      std::copy(xd.begin() + slots[i] / top_k * D, xd.begin() + (slots[i] / top_k + 1) * D,
                xe.begin() + i * D);
    std::vector<float> g, u, y;
    gemm_q(xe, m, D, w1, I, &g);
    gemm_q(xe, m, D, w3, I, &u);
    std::vector<float> h(m * I);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < I; ++j) {
        float gate = g[i * I + j], up = u[i * I + j];
        if (limit > 0) {
          gate = std::min(gate, limit);
          up = std::min(limit, std::max(-limit, up));
        }
        h[i * I + j] = gate / (1.0f + std::exp(-gate)) * up * weights[slots[i]];
      }
    }
    const std::vector<float> hd = quant_round_trip(h.data(), m, I, act_block);
    gemm_q(hd, m, I, w2, D, &y);
    for (int64_t i = 0; i < m; ++i)
      std::copy(y.begin() + i * D, y.begin() + (i + 1) * D, y_slot.begin() + slots[i] * D);
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < top_k; ++j) {
        const int32_t e = ids[t * top_k + j];
        if (e >= 0 && e < E) acc += y_slot[(t * top_k + j) * D + d];
      }
      if (y_shared != nullptr) acc += y_shared[t * D + d];
      out[t * D + d] = acc;
    }
  }
}

}  // namespace deepinfer
