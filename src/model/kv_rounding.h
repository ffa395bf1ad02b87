// Official numerics: the values a K=V entry keeps once stored in the family's cache format
// (MODEL_SPEC §A.10, §C.4-C.5). The GPU's paged caches hold exactly these values.
//  * window entries: V4 rounds the NoPE dims to FP8 in 64-blocks (power-of-two scales) and
//    the rope dims to bf16; V4.1 rounds all dims to FP8 in 32-blocks;
//  * compressed entries: V4 as its window entries; V4.1 FP4 with e4m3 scales per 16.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "io/model_config.h"
#include "ops/quant/qat.h"

namespace deepinfer {

inline void round_window_entry(const ModelTraits& t, float* entry, int64_t d, int64_t rope_dim) {
  if (t.window_fp8_all_dims) {
    fp8_roundtrip(entry, d, t.window_fp8_block);
    return;
  }
  fp8_roundtrip(entry, d - rope_dim, t.window_fp8_block);
  for (int64_t i = d - rope_dim; i < d; ++i) entry[i] = round_bf16(entry[i]);
}

inline void round_compressed_entry(const ModelTraits& t, float* entry, int64_t d, int64_t rope_dim) {
  if (t.compressed_fp4) {
    fp4_roundtrip_e4m3_scale(entry, d, 16);
    return;
  }
  round_window_entry(t, entry, d, rope_dim);
}

}  // namespace deepinfer
