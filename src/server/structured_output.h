// The structured-output constraint of a request (both endpoints), from any of its spellings:
//   - OpenAI's response_format {"type": "json_object"} / {"type": "json_schema", "json_schema":
//     {"schema"}}, and our extensions {"type": "regex", "regex"} / {"type": "ebnf", "ebnf"};
//   - vLLM's guided_json (schema object or its text), guided_regex, guided_grammar (EBNF),
//     guided_choice (a list of strings: the output is exactly one of them);
//   - vLLM's newer structured_outputs {"json" | "regex" | "grammar" | "choice" |
//     "json_object": true}.
// At most one of them per request (else 400 naming the second). parse_structured_output only
// reads the fields; check_constraint compiles the constraint under the request's budgets
// (grammar/budget.h): a malformed, unsupported, empty-language or over-budget constraint is a
// 400 naming the field it came from (and the budget). The server runs check_constraint on its
// own grammar pool, never on the preparation pool that requests without constraints use.
// Thread-safety: pure functions.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "grammar/budget.h"
#include "grammar/compiled_grammar.h"
#include "server/request_fields.h"

namespace deepinfer::server {

struct Constraint {
  std::string kind;   // EngineRequest::constraint_kind: "json_object", "json_schema", "regex", "ebnf"
  std::string text;   // schema JSON, pattern or grammar
  std::string param;  // the request field it came from ("response_format", "guided_choice", ...)
  Json for_encoder;   // response_format in deepseek-recipe's form (only from response_format)
};

// The request's constraint, or kind "" for none (not compiled: see check_constraint).
Constraint parse_structured_output(const Json& request);

// Compiles (kind, text) within `limits`; throws ApiError 400 naming `param` when it cannot be
// used. Takes at most about limits.timeout_ms. With `compile` (the engine's
// compile_constraint), the constraint is compiled for the engine's vocabulary and returned, so
// the engine thread does not compile it again; without one (or when it returns null) it is
// only checked and null is returned.
using ConstraintCompiler = std::function<std::shared_ptr<const grammar::CompiledGrammar>(
    const std::string& kind, const std::string& text)>;
std::shared_ptr<const grammar::CompiledGrammar> check_constraint(
    const std::string& kind, const std::string& text, const std::string& param,
    const grammar::CompileLimits& limits, const ConstraintCompiler& compile = {});

// A regex whose language is exactly the given strings (each matched literally).
std::string choice_regex(const std::vector<std::string>& choices);

}  // namespace deepinfer::server
