// Tool calls written one parameter per tagged element (DeepSeek's DSML, recipe/dsml.h), each
// call's arguments following its tool's JSON schema: the "tool_calls" constraint kind.
//
// The spec (JSON text; recipe/tool_call_constraint.h writes it for DSML):
//   {"syntax": {"call_open", "call_name_end", "param_open", "param_string", "param_json",
//               "param_close", "empty_params", "call_close", "end", "value_forbidden"},
//    "tools": [{"name": "f", "parameters": {JSON schema of the arguments object} | null}],
//    "parallel": true | false, "max_whitespace": N (optional; JSON values, json_schema.h)}
// Language (every piece a literal of `syntax` unless named):
//   call+ end                       (parallel; exactly one call when "parallel" is false)
//   call  := call_open NAME call_name_end (param+ | empty_params) call_close   (one tool's NAME)
//   param := param_open KEY param_string RAW param_close      (string-typed properties)
//          | param_open KEY param_json JSON param_close       (every other property)
// KEY is the property name as a JSON string literal with spaces written \u0020 (a DSML reader
// copies the name, quotes included, up to the next space, as the JSON key); RAW is the string
// value unescaped; JSON is compact JSON text (json_schema.h policies). Neither RAW nor JSON
// contains `value_forbidden` (a reader ends the value there). The properties come in schema
// order, each at most once, required ones always; `empty_params` only when none is written.
// Parameters schemas: an object schema with properties / required (additionalProperties is
// honoured by never writing undeclared names; a required name that is not a declared property
// takes the additionalProperties schema) and $defs / definitions; other keywords that constrain
// the arguments object at its top (patternProperties, min/maxProperties, anyOf, allOf, $ref, not,
// ...) throw kUnsupported naming the keyword. A property is string-typed when its schema is
// {"type": "string"} with only minLength / maxLength / pattern / format and annotations, or an
// enum / const of strings alone. Tool names must not contain '"'.
// Throws kInvalidInput for a malformed spec, kUnsupported as above and as json_schema.h does.
#pragma once

#include <string_view>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace deepinfer::grammar {

Grammar tool_calls_grammar(std::string_view spec_json, const JsonSchemaOptions& options = {});

}  // namespace deepinfer::grammar
