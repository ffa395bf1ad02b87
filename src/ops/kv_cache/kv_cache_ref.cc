#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "ops/attention/sparse_attention.h"
#include "ops/kv_cache/cache_ref_loops.h"
#include "ops/kv_cache/kv_cache.h"
#include "ops/quant/qat.h"

namespace deepinfer {

const char* kv_cache_dtype_name(KvCacheDtype dtype) {
  return dtype == KvCacheDtype::kFp8 ? "fp8" : "bf16";
}

KvCacheDtype kv_cache_dtype_from_string(const std::string& name) {
  if (name == "fp8") return KvCacheDtype::kFp8;
  if (name == "bf16") return KvCacheDtype::kBf16;
  THROW(kInvalidInput) << "kv cache dtype '" << name << "': expected bf16 or fp8";
}

void KvCacheLayout::validate() const {
  CHECK(head_dim > 0 && head_dim % 32 == 0 && head_dim <= 512)
      << "kv cache: head_dim " << head_dim << " must be a positive multiple of 32, at most 512";
  CHECK(block_size > 0) << "kv cache: block_size " << block_size << " must be positive";
  if (dtype == KvCacheDtype::kFp8 && format != KvEntryFormat::kModel1) {
    CHECK(rope_dim == 0) << "kv cache: the " << kv_entry_format_name(format)
                         << " format keeps no bf16 dims (rope_dim " << rope_dim << ", expected 0)";
    return;
  }
  if (dtype == KvCacheDtype::kFp8) {
    CHECK(rope_dim >= 0 && rope_dim < head_dim && rope_dim % 4 == 0)
        << "kv cache: rope_dim " << rope_dim << " must be a multiple of 4 below head_dim " << head_dim;
    CHECK(nope_dim() % kScaleGroup == 0)
        << "kv cache: fp8 needs head_dim - rope_dim (" << nope_dim() << ") a multiple of 64";
  }
}

KvCacheLayout KvCacheLayout::v4(KvCacheDtype dtype, int64_t block_size) {
  KvCacheLayout l;
  l.dtype = dtype;
  l.head_dim = 512;
  l.rope_dim = 64;
  l.block_size = block_size;
  return l;
}

KvCacheLayout KvCacheLayout::v41_window(KvCacheDtype dtype, int64_t block_size) {
  KvCacheLayout l = v4(dtype, block_size);
  if (dtype == KvCacheDtype::kFp8) {
    l.rope_dim = 0;
    l.format = KvEntryFormat::kE4m3Block32;
  }
  return l;
}

KvCacheLayout KvCacheLayout::v41_compressed(KvCacheDtype dtype, int64_t block_size) {
  KvCacheLayout l = v4(dtype, block_size);
  if (dtype == KvCacheDtype::kFp8) {
    l.rope_dim = 0;
    l.format = KvEntryFormat::kE2m1E4m3Block16;
  }
  return l;
}

const char* kv_entry_format_name(KvEntryFormat f) {
  switch (f) {
    case KvEntryFormat::kE4m3Block32: return "e4m3x32";
    case KvEntryFormat::kE2m1E4m3Block16: return "e2m1-e4m3x16";
    default: return "model1";
  }
}

namespace {

// V4.1 compressed entry (kE2m1E4m3Block16): fp4_roundtrip_e4m3_scale's per-16 quantiser,
// keeping the codes: scale e4m3(max(amax, 6 * 2^-9) / 6), codes e2m1(clamp(x / s, +-6)).
void store_e2m1_e4m3(const float* x, int64_t d, uint8_t* data, uint8_t* scales) {
  for (int64_t g = 0; g < d / 16; ++g) {
    const float* xg = x + g * 16;
    float amax = 6.0f * std::ldexp(1.0f, -9);
    for (int64_t c = 0; c < 16; ++c) amax = std::max(amax, std::fabs(xg[c]));
    const uint8_t s_code = f32_to_e4m3(amax / kE2M1Max);
    const float s = e4m3_to_f32(s_code);
    scales[g] = s_code;
    for (int64_t c = 0; c < 16; c += 2) {
      const float q0 = std::min(kE2M1Max, std::max(-kE2M1Max, xg[c] / s));
      const float q1 = std::min(kE2M1Max, std::max(-kE2M1Max, xg[c + 1] / s));
      data[(g * 16 + c) / 2] = static_cast<uint8_t>(f32_to_e2m1(q0) | (f32_to_e2m1(q1) << 4));
    }
  }
}

void put_bf16(uint8_t* dst, float v) {
  const uint16_t bits = f32_to_bf16(v);
  std::memcpy(dst, &bits, 2);  // little-endian, as the device stores it
}

float get_bf16(const uint8_t* src) {
  uint16_t bits;
  std::memcpy(&bits, src, 2);
  return bf16_to_f32(bits);
}

}  // namespace

void kv_store_ref(const KvCacheLayout& layout, const float* entries, int64_t n,
                  int64_t row_stride, const int32_t* slots, uint8_t* cache, int64_t n_blocks) {
  layout.validate();
  const int64_t d = layout.head_dim;
  cache_ref::for_each_store("kv cache", layout, slots, n, cache, n_blocks,
                            [&](int64_t i, uint8_t* data) {
    const float* x = entries + i * row_stride;
    if (layout.dtype == KvCacheDtype::kBf16) {
      for (int64_t c = 0; c < d; ++c) put_bf16(data + 2 * c, x[c]);
      return;
    }
    const int64_t nope = layout.nope_dim();
    uint8_t* scales = cache + layout.scale_offset(slots[i]);
    std::memset(scales, 0, layout.scale_bytes());
    if (layout.format == KvEntryFormat::kE2m1E4m3Block16) {
      store_e2m1_e4m3(x, d, data, scales);
      return;
    }
    // e4m3 codes, UE8M0 scales per group (kModel1: 64 NoPE dims; kE4m3Block32: 32 dims).
    const int64_t group = layout.scale_group();
    for (int64_t g = 0; g < layout.n_scales(); ++g) {
      const float* xg = x + g * group;
      float amax = 1e-4f;
      for (int64_t c = 0; c < group; ++c) amax = std::max(amax, std::fabs(xg[c]));
      const float s = pow2_scale(amax, kE4M3Max);
      uint32_t bits;
      std::memcpy(&bits, &s, 4);
      scales[g] = static_cast<uint8_t>((bits >> 23) & 0xff);  // 2^(e) -> biased exponent e + 127
      for (int64_t c = 0; c < group; ++c) {
        const float q = std::min(kE4M3Max, std::max(-kE4M3Max, xg[c] / s));
        data[g * group + c] = f32_to_e4m3(q);
      }
    }
    for (int64_t c = nope; c < d; ++c) put_bf16(data + nope + 2 * (c - nope), x[c]);
  });
}

void kv_load_ref(const KvCacheLayout& layout, const uint8_t* cache, int64_t n_blocks,
                 const int32_t* slots, int64_t n, float* out) {
  layout.validate();
  const int64_t d = layout.head_dim;
  cache_ref::for_each_load("kv cache", layout, cache, n_blocks, slots, n, out,
                           [&](float* y, int32_t slot, const uint8_t* data) {
    if (layout.dtype == KvCacheDtype::kBf16) {
      for (int64_t c = 0; c < d; ++c) y[c] = get_bf16(data + 2 * c);
      return;
    }
    const int64_t nope = layout.nope_dim();
    const uint8_t* scales = cache + layout.scale_offset(slot);
    const int64_t group = layout.scale_group();
    if (layout.format == KvEntryFormat::kE2m1E4m3Block16) {
      for (int64_t c = 0; c < d; ++c) {
        const uint8_t code = (data[c / 2] >> (c % 2 * 4)) & 0xf;
        y[c] = e2m1_to_f32(code) * e4m3_to_f32(scales[c / group]);
      }
      return;
    }
    for (int64_t c = 0; c < nope; ++c) y[c] = e4m3_to_f32(data[c]) * e8m0_to_f32(scales[c / group]);
    for (int64_t c = nope; c < d; ++c) y[c] = get_bf16(data + nope + 2 * (c - nope));
  });
}

void paged_attention_ref(const PagedAttentionParams& p) {
  // The layout every non-empty source must share: the first non-empty one (an empty source's
  // layout is whatever its caller left there, e.g. a compressed-only call's default window).
  const KvCacheLayout& l0 =
      (p.sources[0].max_indices == 0 && p.sources[1].max_indices > 0 ? p.sources[1] : p.sources[0]).layout;
  const int64_t d = l0.head_dim;
  for (const KvSource& s : p.sources) {
    if (s.max_indices == 0) continue;
    CHECK(s.cache != nullptr && s.indices != nullptr) << "paged attention: source without cache/indices";
    CHECK(s.layout.dtype == l0.dtype && s.layout.head_dim == d && s.layout.rope_dim == l0.rope_dim)
        << "paged attention: sources differ in dtype/head_dim/rope_dim";
  }
  std::vector<float> keys;
  std::vector<const float*> ptrs;
  for (int64_t r = 0; r < p.n_rows; ++r) {
    keys.clear();
    for (const KvSource& s : p.sources) {
      if (s.max_indices == 0) continue;
      const int64_t n = s.n_indices != nullptr ? s.n_indices[r] : s.max_indices;
      CHECK(n >= 0 && n <= s.max_indices) << "paged attention: row " << r << " lists " << n
                                          << " indices, stride " << s.max_indices;
      for (int64_t j = 0; j < n; ++j) {
        const int32_t slot = s.indices[r * s.max_indices + j];
        if (slot < 0) continue;
        keys.resize(keys.size() + d);
        kv_load_ref(s.layout, s.cache, s.n_blocks, &slot, 1, keys.data() + keys.size() - d);
      }
    }
    const int64_t n_kv = static_cast<int64_t>(keys.size()) / d;
    ptrs.resize(n_kv);
    for (int64_t j = 0; j < n_kv; ++j) ptrs[j] = keys.data() + j * d;
    sparse_attention_row_ref(p.q + r * p.n_heads * d, p.n_heads, d, ptrs.data(), n_kv, p.sinks,
                             p.scale, p.out + r * p.n_heads * d);
  }
}

}  // namespace deepinfer
