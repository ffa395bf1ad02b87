// CUDA entry of apply_token_bitmask (contract in token_bitmask.h: logits [n_rows, vocab] fp32,
// mask [n_rows, token_bitmask_words(vocab)] uint32, bit clear -> logit = -inf, optional row
// indices). Device pointers; runs on `stream`; never allocates or synchronises; graph
// capturable. One thread per logit: it reads its mask word (shared by 32 neighbours) and
// writes only where the token is disallowed, so allowed logits are never rewritten.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer {

void apply_token_bitmask_cuda(cudaStream_t stream, float* logits, const uint32_t* mask,
                              const int32_t* rows, int64_t n_rows, int64_t vocab);

}  // namespace deepinfer
