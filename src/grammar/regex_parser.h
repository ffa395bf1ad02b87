// Regular expressions in the syntax JSON Schema `pattern` uses (ECMA-262, no flags), parsed into a
// code-point Expr.
//
// Supported: literals, `.`, classes `[...]`/`[^...]` with ranges, escapes \d \D \w \W \s \S
// \t \n \r \f \v \0 \xHH \uHHHH \u{H..} \cX and escaped punctuation, groups `(...)`, `(?:...)`,
// `(?<name>...)`, alternation `|`, quantifiers `* + ? {n} {n,} {n,m}` (lazy `?` suffix accepted: it
// does not change the language), and the anchors `^` / `$` at the start / end of a top-level
// alternative.
// Rejected with kUnsupported naming the feature: lookaround, backreferences, \b \B, anchors
// anywhere else, Unicode property escapes \p{..}.
// Semantics: `.` is any code point except \n \r U+2028 U+2029; \s is the ECMA white-space set.
#pragma once

#include <string_view>

#include "grammar/expr.h"

namespace deepinfer::grammar {

enum class RegexMode {
  kFullMatch,  // the whole string must match; ^ and $ are allowed and redundant
  kSearch,     // JSON Schema `pattern`: matches if some substring matches, unless anchored
};

// Which meaning the class escapes \d \w \s (and their negations) and `.` get.
// JSON Schema validators differ (ECMA-262 ASCII classes vs Python's Unicode-aware `re`), so the
// JSON Schema front end generates from kNarrow (strings matching under both meanings) and
// excludes with kWide (strings matching under either), never producing an instance that one
// of them rejects.
enum class RegexFlavor { kEcma, kNarrow, kWide };

ExprPtr parse_regex(std::string_view pattern, RegexMode mode, RegexFlavor flavor = RegexFlavor::kEcma);

// A search pattern's top-level branches by anchors, each group an alternation or null: a string
// matches iff it is in `full` (^..$), starts with `starts` (^..), ends with `ends` (..$) or
// contains `contains`. For constructions that treat the kinds apart (json_schema.cc).
struct SearchParts {
  ExprPtr full, starts, ends, contains;
};
SearchParts parse_search_regex(std::string_view pattern, RegexFlavor flavor);

// The classes behind \d, \w, \s and `.` (exposed for the JSON Schema formats and tests).
CodeRanges digit_ranges();
CodeRanges word_ranges();
CodeRanges space_ranges();
CodeRanges dot_ranges();

}  // namespace deepinfer::grammar

#include "grammar/grammar.h"
namespace deepinfer::grammar {
// A grammar whose language is the full matches of `pattern`.
Grammar regex_grammar(std::string_view pattern);
}  // namespace deepinfer::grammar
