#include "recipe/byte_level.h"

#include <array>

#include "recipe/unicode_utf8.h"

namespace deepinfer::recipe {
namespace {

struct Tables {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // code points in the alphabet are < 0x144

  Tables() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_char[b] = printable ? static_cast<uint32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t byte_level_char(uint8_t b) { return tables().to_char[b]; }

int byte_level_byte(uint32_t cp) {
  return cp < tables().to_byte.size() ? tables().to_byte[cp] : -1;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, byte_level_char(static_cast<uint8_t>(c)));
  return out;
}

bool byte_level_decode(std::string_view token, std::string& out) {
  const size_t old_size = out.size();
  size_t i = 0;
  while (i < token.size()) {
    const int b = byte_level_byte(utf8_next(token, i));
    if (b < 0) {
      out.resize(old_size);
      return false;
    }
    out.push_back(static_cast<char>(b));
  }
  return true;
}

}  // namespace deepinfer::recipe
