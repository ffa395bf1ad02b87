// Store and load of the paged K=V cache (every KvEntryFormat): one warp per entry. The fp8 store rounds with the
// QAT device rounding (qat_device.cuh, bit-identical to the CPU's) and then encodes the
// exactly representable result, so its bytes equal kv_store_ref's.
#include "base/error.h"
#include "cuda/cuda_check.h"
#include "ops/kv_cache/kv_cache_cuda.h"
#include "ops/kv_cache/kv_cache_device.cuh"
#include "ops/quant/qat_device.cuh"

namespace deepinfer {
namespace {

using kv_device::Geometry;

constexpr int kWarps = 8;

__global__ void __launch_bounds__(kWarps * 32)
    kv_store_kernel(Geometry g, const float* entries, int64_t n, int64_t row_stride,
                    const int32_t* slots, uint8_t* cache) {
  int64_t i, slot;
  if (!kv_device::store_entry(kWarps, slots, n, i, slot)) return;
  const int lane = threadIdx.x % 32;
  const float* x = entries + i * row_stride;
  uint8_t* data = cache + kv_device::data_offset(g, slot);
  // bf16 dims: [nope, head_dim) for fp8 (at byte nope + 2 (c - nope)), all dims for bf16.
  const int64_t bf16_begin = g.fp8 ? g.nope : 0;
  uint8_t* bf16_base = data + (g.fp8 ? g.nope : 0);
  for (int64_t c = bf16_begin + 2 * lane; c < g.head_dim; c += 64) {
    const uint32_t pair = kv_device::bf16_bits(x[c]) | (kv_device::bf16_bits(x[c + 1]) << 16);
    *reinterpret_cast<uint32_t*>(bf16_base + 2 * (c - bf16_begin)) = pair;
  }
  if (!g.fp8) return;
  uint8_t* scales = cache + kv_device::scale_offset(g, slot);
  if (g.format == KvEntryFormat::kE4m3Block32) {  // one dim per lane, one group per pass
    for (int64_t grp = 0; grp < g.n_scales; ++grp) {
      const int64_t c = grp * 32 + lane;
      const float v = x[c];
      const float amax = fmaxf(1e-4f, kv_device::warp_max(fabsf(v)));
      const float s = qat_device::pow2_scale(amax, qat_device::kE4M3MaxF);
      const float q = fminf(qat_device::kE4M3MaxF, fmaxf(-qat_device::kE4M3MaxF, v / s));
      data[c] = static_cast<uint8_t>(kv_device::e4m3_code(qat_device::round_e4m3(q)));
      if (lane == 0) scales[grp] = static_cast<uint8_t>((__float_as_uint(s) >> 23) & 0xffu);
    }
  } else if (g.format == KvEntryFormat::kE2m1E4m3Block16) {  // two 16-dim groups per pass
    for (int64_t c0 = 0; c0 < g.head_dim; c0 += 32) {
      const int64_t c = c0 + lane;
      const float v = x[c];
      float amax = fabsf(v);
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      amax = fmaxf(6.0f * 0x1p-9f, amax);
      const float s = qat_device::round_e4m3(fminf(amax / qat_device::kE2M1MaxF, qat_device::kE4M3MaxF));
      const float q = fminf(qat_device::kE2M1MaxF, fmaxf(-qat_device::kE2M1MaxF, v / s));
      const uint32_t code = kv_device::e2m1_code_of(qat_device::round_e2m1(q), q);
      const uint32_t high = __shfl_down_sync(0xffffffffu, code, 1);
      if (lane % 2 == 0) data[c / 2] = static_cast<uint8_t>(code | (high << 4));
      if (lane % 16 == 0) scales[c / 16] = static_cast<uint8_t>(kv_device::e4m3_code(s));
    }
  }
  for (int64_t grp = 0; g.format == KvEntryFormat::kModel1 && grp < g.n_scales; ++grp) {
    const int64_t c = grp * KvCacheLayout::kScaleGroup + 2 * lane;
    const float v0 = x[c], v1 = x[c + 1];
    const float amax = fmaxf(1e-4f, kv_device::warp_max(fmaxf(fabsf(v0), fabsf(v1))));
    const float s = qat_device::pow2_scale(amax, qat_device::kE4M3MaxF);
    const float q0 = fminf(qat_device::kE4M3MaxF, fmaxf(-qat_device::kE4M3MaxF, v0 / s));
    const float q1 = fminf(qat_device::kE4M3MaxF, fmaxf(-qat_device::kE4M3MaxF, v1 / s));
    const uint32_t codes = kv_device::e4m3_code(qat_device::round_e4m3(q0)) |
                           (kv_device::e4m3_code(qat_device::round_e4m3(q1)) << 8);
    *reinterpret_cast<uint16_t*>(data + c) = static_cast<uint16_t>(codes);
    if (lane == 0) scales[grp] = static_cast<uint8_t>((__float_as_uint(s) >> 23) & 0xffu);
  }
  for (int64_t b = g.n_scales + lane; b < g.scale_bytes; b += 32) scales[b] = 0;
}

__global__ void __launch_bounds__(kWarps * 32)
    kv_load_kernel(Geometry g, const uint8_t* cache, const int32_t* slots, int64_t n, float* out) {
  int64_t slot;
  float* y;
  if (!kv_device::load_entry(kWarps, slots, n, g.head_dim, out, slot, y)) return;
  const int lane = threadIdx.x % 32;
  const uint8_t* data = cache + kv_device::data_offset(g, slot);
  const int64_t bf16_begin = g.fp8 ? g.nope : 0;
  const uint8_t* bf16_base = data + (g.fp8 ? g.nope : 0);
  for (int64_t c = bf16_begin + 2 * lane; c < g.head_dim; c += 64) {
    const uint32_t pair = *reinterpret_cast<const uint32_t*>(bf16_base + 2 * (c - bf16_begin));
    y[c] = kv_device::bf16_value(pair & 0xffffu);
    y[c + 1] = kv_device::bf16_value(pair >> 16);
  }
  if (!g.fp8) return;
  const uint8_t* scales = cache + kv_device::scale_offset(g, slot);
  if (g.format == KvEntryFormat::kE2m1E4m3Block16) {
    for (int64_t c = 2 * lane; c < g.head_dim; c += 64) {
      const float s = kv_device::e4m3_value(scales[c / 16]);
      const uint32_t b = data[c / 2];
      y[c] = kv_device::e2m1_value(b & 0xfu) * s;
      y[c + 1] = kv_device::e2m1_value(b >> 4) * s;
    }
    return;
  }
  for (int64_t c = 2 * lane; c < g.nope; c += 64) {  // kModel1 (per 64) / kE4m3Block32 (per 32)
    const float s = kv_device::e8m0_value(scales[c / g.group]);
    const float2 v = kv_device::e4m3x2_values(*reinterpret_cast<const uint16_t*>(data + c));
    y[c] = v.x * s;
    y[c + 1] = v.y * s;
  }
}

unsigned grid_for(int64_t n) { return kv_device::warp_grid(n, kWarps, "kv cache", "entries"); }

}  // namespace

void kv_store_cuda(cudaStream_t stream, const KvCacheLayout& layout, const float* entries,
                   int64_t n, int64_t row_stride, const int32_t* slots, uint8_t* cache) {
  layout.validate();
  CHECK(row_stride >= layout.head_dim) << "kv store: row stride " << row_stride << " < head_dim "
                                       << layout.head_dim;
  if (n == 0) return;
  kv_store_kernel<<<grid_for(n), kWarps * 32, 0, stream>>>(kv_device::geometry(layout), entries, n,
                                                           row_stride, slots, cache);
  CUDA_CHECK_LAUNCH();
}

void kv_load_cuda(cudaStream_t stream, const KvCacheLayout& layout, const uint8_t* cache,
                  const int32_t* slots, int64_t n, float* out) {
  layout.validate();
  if (n == 0) return;
  kv_load_kernel<<<grid_for(n), kWarps * 32, 0, stream>>>(kv_device::geometry(layout), cache, slots,
                                                          n, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer
