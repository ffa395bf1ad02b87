// UTF-8 helpers for the tokenizer: validation, code point decoding, and the lossy
// conversion of arbitrary bytes to UTF-8 that HF tokenizers uses when decoding
// (Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD).
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::recipe {

// Length in bytes of the longest valid UTF-8 prefix of `s` (== s.size() if all valid).
size_t utf8_valid_prefix(std::string_view s);

// Decodes the code point starting at s[i] (s must be valid UTF-8) and advances i.
uint32_t utf8_next(std::string_view s, size_t& i);

// Appends the UTF-8 encoding of code point `cp` (must be a scalar value).
void append_utf8(std::string& out, uint32_t cp);

// Appends `bytes` to `out`, replacing every maximal invalid subpart with U+FFFD.
void append_utf8_lossy(std::string& out, std::string_view bytes);

// Number of trailing bytes of `bytes` that form an incomplete sequence that could
// still become valid with more bytes (0..3). Everything before them can be decoded
// now with append_utf8_lossy and gives the same text as decoding all bytes at once.
size_t utf8_incomplete_tail(std::string_view bytes);

// Unicode White_Space property (what Rust's char::is_whitespace tests).
bool is_unicode_whitespace(uint32_t cp);

}  // namespace deepinfer::recipe
