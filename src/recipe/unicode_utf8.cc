#include "recipe/unicode_utf8.h"

namespace deepinfer::recipe {
namespace {

// Valid range of the second byte for a lead byte (Unicode Table 3-7), and the total
// sequence length. Returns length 0 for bytes that cannot start a sequence.
struct LeadInfo {
  int length;
  uint8_t lo, hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Length of the valid (possibly incomplete) prefix of the sequence starting at s[i]:
// returns {consumed, complete}. consumed >= 1 when s[i] is a lead byte.
struct SeqScan {
  size_t consumed;
  bool complete;
};

SeqScan scan_sequence(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  const LeadInfo info = lead_info(b0);
  if (info.length == 0) return {0, false};
  if (info.length == 1) return {1, true};
  size_t k = 1;
  for (; k < static_cast<size_t>(info.length); ++k) {
    if (i + k >= s.size()) return {k, false};
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t lo = k == 1 ? info.lo : 0x80;
    const uint8_t hi = k == 1 ? info.hi : 0xBF;
    if (b < lo || b > hi) return {k, false};
  }
  return {k, true};
}

}  // namespace

size_t utf8_valid_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const SeqScan scan = scan_sequence(s, i);
    if (!scan.complete) return i;
    i += scan.consumed;
  }
  return i;
}

uint32_t utf8_next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  uint32_t cp = b0 & (0x7F >> n);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void append_utf8_lossy(std::string& out, std::string_view bytes) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  size_t i = 0;
  size_t run_begin = 0;  // start of the pending run of valid bytes
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const SeqScan scan = scan_sequence(bytes, i);
    if (scan.complete) {
      i += scan.consumed;
      continue;
    }
    out.append(bytes.data() + run_begin, i - run_begin);
    out.append(kReplacement, 3);
    i += scan.consumed == 0 ? 1 : scan.consumed;
    run_begin = i;
  }
  out.append(bytes.data() + run_begin, bytes.size() - run_begin);
}

size_t utf8_incomplete_tail(std::string_view bytes) {
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const auto b = static_cast<uint8_t>(bytes[i]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const SeqScan scan = scan_sequence(bytes, i);
    return (!scan.complete && scan.consumed == back) ? back : 0;
  }
  return 0;
}

bool is_unicode_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace deepinfer::recipe
