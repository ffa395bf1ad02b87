// Building blocks of the JSON Schema front end: JSON string encoding of code-point languages,
// formats, and decimal ranges. Internal to src/grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "grammar/dfa.h"
#include "grammar/expr.h"

namespace deepinfer::grammar {

// Maps a code-point expression (kClass / kSeq / kAlt / kRepeat / kEpsilon / kNothing) to the
// language of its JSON string-body encodings (see json_schema.h for the escapes allowed).
ExprPtr json_encode(const ExprPtr& e);
// One JSON-encoded code point (any).
ExprPtr json_char();
// The canonical JSON string literal of `s` (quotes included), as the key/literal serialiser.
std::string json_quote(const std::string& utf8);
// Code-point regex (full match) for a supported `format`, or nullptr if unsupported.
ExprPtr format_expr(const std::string& format);

}  // namespace deepinfer::grammar
