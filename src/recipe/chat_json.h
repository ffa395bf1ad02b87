// JSON text exactly as deepseek-recipe renders it into prompts: Python `json.dumps` layout
// (", " and ": " separators, no ASCII escaping) with one of two float spellings.
//
//   kPython (V4.1): Python repr: fixed notation for 1e-4 <= |x| < 1e16, else "1e-05", "1e+16".
//   kV4     (V4):   fixed notation for 1e-5 <= |x| < 1e16, else "1e-7", "1e+16".
// Integers print exactly (int64/uint64); floats use the shortest round-trip digits and keep
// ".0" when integral. Strings escape '"', '\\', control characters (\b \f \n \r \t, others
// \u00xx lowercase) and nothing else. Object keys keep insertion order.
#pragma once

#include <string>
#include <string_view>

#include "recipe/messages.h"

namespace deepinfer::recipe {

enum class JsonFloatStyle { kPython, kV4 };

std::string dump_json(const OrderedJson& value, JsonFloatStyle style);
void append_json(std::string& out, const OrderedJson& value, JsonFloatStyle style);
std::string format_float(double value, JsonFloatStyle style);
// Appends `text` escaped as the inside of a JSON string (no surrounding quotes).
void append_json_escaped(std::string& out, std::string_view text);

// Parses `text` the way deepseek-recipe parses tool-call arguments: the whole text must be
// one JSON object (surrounding whitespace allowed); numbers out of double range fail.
// Returns false (never throws) when it is not.
bool parse_json_object(std::string_view text, OrderedJson& out);

}  // namespace deepinfer::recipe
