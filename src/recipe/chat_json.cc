#include "recipe/chat_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace deepinfer::recipe {
namespace {

bool has_non_finite(const OrderedJson& value) {
  switch (value.type()) {
    case OrderedJson::value_t::number_float:
      return !std::isfinite(value.get<double>());
    case OrderedJson::value_t::array:
    case OrderedJson::value_t::object:
      for (const auto& item : value) {
        if (has_non_finite(item)) return true;
      }
      return false;
    default:
      return false;
  }
}

}  // namespace

void append_json_escaped(std::string& out, std::string_view text) {
  for (char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (byte < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", byte);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
}

std::string format_float(double value, JsonFloatStyle style) {
  // Shortest round-trip digits in scientific form: d[.ddd]e[+-]x.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int min_fixed_exp = style == JsonFloatStyle::kPython ? -4 : -5;
  std::string out = sign;
  if (exponent >= min_fixed_exp && exponent < 16) {
    if (exponent < 0) {
      out += "0.";
      out.append(static_cast<size_t>(-exponent - 1), '0');
      out += digits;
    } else {
      const size_t n_int = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= n_int) {
        out += digits;
        out.append(n_int - digits.size(), '0');
        out += ".0";
      } else {
        out += digits.substr(0, n_int);
        out += '.';
        out += digits.substr(n_int);
      }
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  out += 'e';
  out += exponent < 0 ? '-' : '+';
  const int abs_exp = exponent < 0 ? -exponent : exponent;
  if (style == JsonFloatStyle::kPython && abs_exp < 10) out += '0';
  out += std::to_string(abs_exp);
  return out;
}

void append_json(std::string& out, const OrderedJson& value, JsonFloatStyle style) {
  switch (value.type()) {
    case OrderedJson::value_t::null:
    case OrderedJson::value_t::discarded:
      out += "null";
      break;
    case OrderedJson::value_t::boolean:
      out += value.get<bool>() ? "true" : "false";
      break;
    case OrderedJson::value_t::number_integer:
      out += std::to_string(value.get<int64_t>());
      break;
    case OrderedJson::value_t::number_unsigned:
      out += std::to_string(value.get<uint64_t>());
      break;
    case OrderedJson::value_t::number_float:
      out += format_float(value.get<double>(), style);
      break;
    case OrderedJson::value_t::string:
      out += '"';
      append_json_escaped(out, value.get_ref<const std::string&>());
      out += '"';
      break;
    case OrderedJson::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ", ";
        first = false;
        append_json(out, item, style);
      }
      out += ']';
      break;
    }
    case OrderedJson::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += '"';
        append_json_escaped(out, it.key());
        out += "\": ";
        append_json(out, it.value(), style);
      }
      out += '}';
      break;
    }
    case OrderedJson::value_t::binary:
      out += "null";
      break;
  }
}

std::string dump_json(const OrderedJson& value, JsonFloatStyle style) {
  std::string out;
  append_json(out, value, style);
  return out;
}

bool parse_json_object(std::string_view text, OrderedJson& out) {
  OrderedJson parsed = OrderedJson::parse(text.begin(), text.end(), nullptr,
                                          /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object() || has_non_finite(parsed)) return false;
  out = std::move(parsed);
  return true;
}

}  // namespace deepinfer::recipe
