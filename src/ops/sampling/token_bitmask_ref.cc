#include "ops/sampling/token_bitmask.h"

#include <cmath>

namespace deepinfer {

void apply_token_bitmask_ref(float* logits, const uint32_t* mask, const int32_t* rows,
                             int64_t n_rows, int64_t vocab) {
  const int64_t n_words = token_bitmask_words(vocab);
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = logits + (rows != nullptr ? int64_t(rows[r]) : r) * vocab;
    const uint32_t* m = mask + r * n_words;
    for (int64_t w = 0; w < n_words; ++w) {
      const uint32_t bits = m[w];
      if (bits == ~0u) continue;  // the common case inside free text: nothing to do
      const int64_t end = w * 32 + 32 < vocab ? w * 32 + 32 : vocab;
      for (int64_t t = w * 32; t < end; ++t) {
        if (!((bits >> (t & 31)) & 1u)) row[t] = -INFINITY;
      }
    }
  }
}

}  // namespace deepinfer
