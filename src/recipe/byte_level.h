// The GPT-2 byte-level alphabet used by ByteLevel pre-tokenizers and decoders: each of
// the 256 byte values maps to one printable code point (printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order). Thread-safe, no state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::recipe {

// Code point that stands for byte `b`.
uint32_t byte_level_char(uint8_t b);

// Byte that code point `cp` stands for, or -1 when cp is not in the alphabet.
int byte_level_byte(uint32_t cp);

// Maps raw bytes to the UTF-8 text of their byte-level characters ("a b" -> "aĠb").
std::string byte_level_encode(std::string_view bytes);

// Maps byte-level token text back to raw bytes and appends them to `out`. Returns false
// (and appends nothing) when some character is not in the alphabet; `token` must be valid UTF-8.
bool byte_level_decode(std::string_view token, std::string& out);

}  // namespace deepinfer::recipe
