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

ExprPtr hex_digit_expr(uint32_t v) {
  const char* lo = "0123456789abcdef";
  const char* up = "0123456789ABCDEF";
  return cls({{static_cast<uint32_t>(lo[v]), static_cast<uint32_t>(lo[v])},
              {static_cast<uint32_t>(up[v]), static_cast<uint32_t>(up[v])}});
}

ExprPtr encode_class(const CodeRanges& ranges) {
  std::vector<ExprPtr> alts;
  CodeRanges raw = intersect_ranges(ranges, complement_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}));
  if (!raw.empty()) alts.push_back(cls(raw));
  if (ranges_contain(ranges, '"')) alts.push_back(lit("\\\""));
  if (ranges_contain(ranges, '\\')) alts.push_back(lit("\\\\"));
  if (ranges_contain(ranges, '/')) alts.push_back(lit("\\/"));
  for (uint32_t c = 0; c < 0x20; ++c) {
    if (!ranges_contain(ranges, c)) continue;
    if (const char* e = short_escape(c)) alts.push_back(lit(e));
    alts.push_back(seq({lit("\\u00"), hex_digit_expr(c >> 4), hex_digit_expr(c & 15)}));
  }
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
  const std::string date =
      "[0-9]{4}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)";
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
