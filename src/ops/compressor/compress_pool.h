// Gated pooling of the KV compressor (MODEL_SPEC §A.5): per channel ch,
//   out[ch] = sum_s softmax_s(z_s[ch]) * a_s[ch]
// over n_slots slots. A slot whose z is -inf has weight 0 (the empty previous window of
// the overlapping ratio-4 compressor). fp32, max-subtracted softmax.
#pragma once

#include <cstdint>

namespace deepinfer {

// a, z: n_slots pointers to `width` floats each (z already includes the position bias).
void compress_pool_ref(const float* const* a, const float* const* z, int64_t n_slots,
                       int64_t width, float* out);

}  // namespace deepinfer
