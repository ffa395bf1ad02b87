#include "grammar/json_strings.h"

#include <string>

#include "base/error.h"
#include "grammar/regex_parser.h"

namespace deepinfer::grammar {

namespace {

const char* short_escape(uint32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: return nullptr;
  }
}

// The hex digits (either case) of the nibbles in `nibbles` (a 16-bit set).
ExprPtr hex_digits_expr(uint32_t nibbles) {
  const char* lo = "0123456789abcdef";
  const char* up = "0123456789ABCDEF";
  CodeRanges r;
  for (uint32_t v = 0; v < 16; ++v)
    if (nibbles >> v & 1) {
      r.push_back({static_cast<uint32_t>(lo[v]), static_cast<uint32_t>(lo[v])});
      r.push_back({static_cast<uint32_t>(up[v]), static_cast<uint32_t>(up[v])});
    }
  return cls(std::move(r));
}

// Factored after the backslash (one '\', one "u00", one class per last digit) instead of one
// 6-byte alternative per control character: the NFA of an encoded '.' is ~20 states instead of
// ~200, which is what subset construction of '.{14,}x' multiplies (2 s -> ms).
ExprPtr encode_class(const CodeRanges& ranges) {
  std::vector<ExprPtr> alts;
  CodeRanges raw = intersect_ranges(ranges, complement_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}));
  if (!raw.empty()) alts.push_back(cls(raw));
  CodeRanges after_backslash;  // single characters after '\'
  for (uint32_t c : {uint32_t{'"'}, uint32_t{'\\'}, uint32_t{'/'}})
    if (ranges_contain(ranges, c)) after_backslash.push_back({c, c});
  std::vector<ExprPtr> u_alts;
  for (uint32_t hi = 0; hi < 2; ++hi) {
    uint32_t nibbles = 0;
    for (uint32_t c = hi * 16; c < hi * 16 + 16; ++c) {
      if (!ranges_contain(ranges, c)) continue;
      nibbles |= 1u << (c & 15);
      if (const char* e = short_escape(c)) after_backslash.push_back({static_cast<uint32_t>(e[1]), static_cast<uint32_t>(e[1])});
    }
    if (nibbles) u_alts.push_back(seq({chr(hi == 0 ? '0' : '1'), hex_digits_expr(nibbles)}));
  }
  std::vector<ExprPtr> escapes;
  if (!after_backslash.empty()) escapes.push_back(cls(after_backslash));
  if (!u_alts.empty()) escapes.push_back(seq({lit("u00"), alt(std::move(u_alts))}));
  if (!escapes.empty()) alts.push_back(seq({chr('\\'), alt(std::move(escapes))}));
  return alt(std::move(alts));
}

}  // namespace

ExprPtr json_encode(const ExprPtr& e) {
  switch (e->kind) {
    case ExprKind::kEpsilon:
    case ExprKind::kNothing: return e;
    case ExprKind::kClass: return encode_class(e->ranges);
    case ExprKind::kSeq:
    case ExprKind::kAlt: {
      std::vector<ExprPtr> c;
      for (const auto& x : e->children) c.push_back(json_encode(x));
      return e->kind == ExprKind::kSeq ? seq(std::move(c)) : alt(std::move(c));
    }
    case ExprKind::kRepeat: return repeat(json_encode(e->children[0]), e->min, e->max);
    default: THROW(kInternal) << "json_encode: not a code-point expression";
  }
}

ExprPtr json_char() { return encode_class({{0, kMaxCodePoint}}); }

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (const char* e = short_escape(c)) {
      out += e;
    } else if (c < 0x20) {
      const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += "\"";
  return out;
}

ExprPtr format_expr(const std::string& f) {
  // Years 0001-9999: RFC 3339's grammar allows 0000, but validators that parse dates (Python's
  // jsonschema among them) reject year 0, so it is left out (a narrowing).
  const std::string date =
      "([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)";
  const std::string time =
      "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  const std::string h16 = "[0-9a-fA-F]{1,4}";
  const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  const std::string label = "[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?";
  std::string re;
  if (f == "date") re = date;
  else if (f == "time") re = time;
  else if (f == "date-time") re = date + "T" + time;
  else if (f == "email") re = "[a-zA-Z0-9_+-]+(\\.[a-zA-Z0-9_+-]+)*@" + label + "(\\." + label + "){1,2}";
  else if (f == "uuid")
    re = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  else if (f == "ipv4") re = octet + "(\\." + octet + "){3}";
  else if (f == "ipv6")
    re = "(" + h16 + ":){7}" + h16 + "|(" + h16 + ":){1,7}:|(" + h16 + ":){1,6}:" + h16 + "|(" +
         h16 + ":){1,5}(:" + h16 + "){1,2}|(" + h16 + ":){1,4}(:" + h16 + "){1,3}|(" + h16 +
         ":){1,3}(:" + h16 + "){1,4}|(" + h16 + ":){1,2}(:" + h16 + "){1,5}|" + h16 + ":(:" + h16 +
         "){1,6}|:((:" + h16 + "){1,7}|:)";
  else if (f == "hostname") re = label + "(\\." + label + "){0,2}";
  else if (f == "uri")
    re = "[a-zA-Z][a-zA-Z0-9+.-]*:([a-zA-Z0-9._~:/?#@!$&'()*+,;=-]|%[0-9a-fA-F]{2})*";
  else return nullptr;
  return parse_regex(re, RegexMode::kFullMatch);
}

}  // namespace deepinfer::grammar
