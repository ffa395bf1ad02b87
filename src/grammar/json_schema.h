// JSON Schema (draft 2020-12, plus the draft-04/07 spellings JSONSchemaBench uses) -> Grammar.
//
// Supported keywords: type (incl. unions), properties, required, additionalProperties,
// patternProperties, unevaluatedProperties (only where it equals additionalProperties: no
// composition siblings), items / prefixItems (and draft-04 array `items` + additionalItems),
// minItems / maxItems, minProperties / maxProperties, enum, const, anyOf, oneOf (only when the
// branches are provably disjoint: distinct types, distinct literals, a distinct const
// discriminator property, or a property one branch requires and the other forbids), allOf (merged), $ref / $defs / definitions (local JSON pointers,
// recursion allowed), minLength / maxLength, pattern, format (date, time, date-time, email,
// uuid, uri, ipv4, ipv6, hostname), minimum / maximum / exclusiveMinimum / exclusiveMaximum,
// multipleOf (integer divisors up to 10000; multiples are written as integers).
// Annotations (title, description, default, examples, $comment, $schema, $id, ...) and unknown
// non-standard keywords are ignored (they do not constrain instances).
// Anything else that constrains instances (not, if/then/else, contains, uniqueItems: true,
// non-integer multipleOf, propertyNames, dependentRequired, dependentSchemas, remote $ref, $dynamicRef, ...)
// throws kUnsupported naming the keyword and where it is: never silently loosened.
//
// Output policy (the language is a subset of the valid instances' serialisations):
// - Whitespace: none (compact, like json.dumps(separators=(",", ":"))), or with
//   `max_whitespace` > 0, up to that many of [ \t\n] around every structural token.
// - Object members come in schema `properties` order, then additional members; each declared
//   property at most once; additional keys never equal a declared name.
// - Strings: raw UTF-8 except `"`, `\` and U+0000-U+001F; escapes \" \\ \/ \b \f \n \r \t and
//   \u00XX for control characters only. minLength/maxLength/pattern count decoded code points.
// - Numbers: integers without fraction or exponent; numbers as JSON numbers (no exponent when
//   bounds apply). Bounds and multipleOf are the exact decimal values the schema's text spells
//   (json_numbers.h), of any magnitude: 9223372036854775808.5 is not rounded to a double.
//   Counts (minLength, maxItems, ...) must be non-negative integers (2.5 is refused).
// - enum / const literals are written compactly with their exact values, integral ones as
//   integers (1.0 -> 1, 1e20 -> 100000000000000000000).
// - Formats are matched by fixed regular expressions that accept a subset of each format
//   (e.g. date excludes Feb 29; hostname has at most 3 labels). Format names that no draft or
//   validator defines (e.g. "topic", "int32") are annotations and ignored; defined ones we do
//   not implement (duration, idn-*, iri*, uri-reference, uri-template, json-pointer, regex, ...)
//   throw kUnsupported.
// - maxLength above 512 is narrowed to 512 (counting automata grow with the bound);
//   minLength above 512 throws kUnsupported.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

struct JsonSchemaOptions {
  int32_t max_whitespace = 0;  // 0: compact
};

// Throws kInvalidInput for malformed JSON / schemas, kUnsupported for unsupported features.
Grammar json_schema_grammar(std::string_view schema_json, const JsonSchemaOptions& options = {});

// Any JSON value.
Grammar json_value_grammar(const JsonSchemaOptions& options = {});

}  // namespace deepinfer::grammar
