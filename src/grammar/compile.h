// Front door of the structured-output engine: text grammar -> CompiledGrammar for a vocabulary.
//
//   auto vocab = std::make_shared<const Vocabulary>(token_bytes, stop_ids);   // once per model
//   auto g = compile_grammar({"json_schema", schema_text}, vocab);           // once per schema
//   GrammarMatcher m(g);                                                      // once per request
// Kinds: "json_schema" (json_schema.h), "json_object" (any JSON object; text ignored), "regex"
// (regex_parser.h, whole-string match), "ebnf" (ebnf_parser.h, GBNF dialect, root rule "root"),
// "tool_calls" (tool_calls.h: tool calls whose arguments follow each tool's JSON schema).
// Errors: kInvalidInput (malformed; or unsatisfiable: a constraint whose language is empty, or
// one no token of the vocabulary can begin, is refused here, see language.h), kUnsupported
// (feature named in the message), kResourceExhausted (a budget of GrammarSpec::limits was hit
// while building; the message names it, budget.h).
// Compiled grammars are immutable apart from their internally synchronised mask cache: cache
// them by (kind, text) and share them across requests and threads.
#pragma once

#include <memory>
#include <string>

#include "grammar/budget.h"
#include "grammar/compiled_grammar.h"
#include "grammar/grammar.h"
#include "grammar/grammar_matcher.h"
#include "grammar/vocabulary.h"

namespace deepinfer::grammar {

struct GrammarSpec {
  std::string kind;  // "json_schema", "json_object", "regex", "ebnf", "tool_calls"
  std::string text;
  int32_t max_whitespace = 0;  // JSON kinds: whitespace policy (json_schema.h)
  // Keep grammars whose language is empty (conformance tools that check the language itself);
  // constraints for generation leave it false.
  bool allow_empty_language = false;
  // Budgets of this compilation (budget.h): enforced while the automata are built, and for
  // compile_grammar while the first token mask is computed.
  CompileLimits limits;
};

// `usage`, when given, receives what the compilation used (also when it throws).
Grammar build_grammar(const GrammarSpec& spec, CompileUsage* usage = nullptr);
std::shared_ptr<const CompiledGrammar> compile_grammar(const GrammarSpec& spec,
                                                       std::shared_ptr<const Vocabulary> vocab,
                                                       CompileUsage* usage = nullptr);

}  // namespace deepinfer::grammar
