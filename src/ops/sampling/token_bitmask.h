// apply_token_bitmask: the grammar constraint applied to logits (structured output).
//   logits [n_rows, vocab] fp32, rows contiguous; mask [n_rows, n_words] uint32 with
//   n_words = token_bitmask_words(vocab): token t of a row is allowed <=> bit (t % 32) of word
//   t / 32 is set (GrammarMatcher::fill_next_token_bitmask's layout). Allowed logits are left
//   untouched (bit for bit); disallowed ones become -inf. Bits past `vocab` in the last word are
//   ignored. `rows`: null, or n_rows indices into logits (mask row r applies to logits row
//   rows[r]; the other logits rows are left untouched), so a batch where only some requests
//   are constrained sends only their masks.
// apply_token_bitmask_ref is the CPU path (the engine's sampler uses it) and the CUDA oracle.
#pragma once

#include <cstdint>

namespace deepinfer {

constexpr int64_t token_bitmask_words(int64_t vocab) { return (vocab + 31) / 32; }

void apply_token_bitmask_ref(float* logits, const uint32_t* mask, const int32_t* rows,
                             int64_t n_rows, int64_t vocab);

}  // namespace deepinfer
