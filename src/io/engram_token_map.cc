#include "io/engram_token_map.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "base/error.h"

namespace deepinfer {
namespace {

constexpr char kMagic[8] = {'D', 'I', 'E', 'N', 'G', 'M', 'P', '1'};
constexpr size_t kHeaderBytes = 8 + 3 * 4 + 32;

uint32_t read_u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

EngramTokenMap load_engram_token_map(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CHECK_KIND(kNotFound, in.good()) << "cannot open Engram token map " << path;
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* b = reinterpret_cast<const unsigned char*>(data.data());
  CHECK(data.size() >= kHeaderBytes && std::memcmp(b, kMagic, 8) == 0)
      << path << " is not an Engram token map (magic DIENGMP1)";
  const uint32_t n_tokens = read_u32(b + 8), c = read_u32(b + 12), n_rep = read_u32(b + 16);
  CHECK(n_tokens > 0 && c > 0 && c <= n_tokens && static_cast<uint64_t>(n_rep) + c == n_tokens)
      << path << ": " << n_tokens << " tokens, compressed size " << c << " and " << n_rep
      << " repeats are inconsistent";
  CHECK(data.size() == kHeaderBytes + 8ull * n_rep)
      << path << ": " << data.size() << " bytes, the header announces " << kHeaderBytes + 8ull * n_rep;

  EngramTokenMap m;
  static const char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) {
    m.vocabulary_sha256 += kHex[b[20 + i] >> 4];
    m.vocabulary_sha256 += kHex[b[20 + i] & 15];
  }
  m.ids.resize(n_tokens);
  uint32_t next_new = 0, rep = 0;
  for (uint32_t t = 0; t < n_tokens; ++t) {
    const unsigned char* pair = b + kHeaderBytes + 8ull * rep;
    if (rep < n_rep && read_u32(pair) == t) {
      const uint32_t v = read_u32(pair + 4);
      CHECK(v < next_new) << path << ": token " << t << " repeats compressed id " << v
                          << ", which no earlier token introduced";
      m.ids[t] = static_cast<int32_t>(v);
      ++rep;
    } else {
      m.ids[t] = static_cast<int32_t>(next_new++);
    }
  }
  // A pair out of ascending order (or beyond n_tokens) is never reached.
  CHECK(rep == n_rep && next_new == c)
      << path << ": " << n_rep - rep << " repeat pairs name tokens out of order or out of range";
  m.compressed_vocab_size = c;
  return m;
}

}  // namespace deepinfer
