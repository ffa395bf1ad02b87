#include "grammar/compile.h"

#include "base/error.h"
#include "grammar/ebnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/regex_parser.h"

namespace deepinfer::grammar {

Grammar build_grammar(const GrammarSpec& spec) {
  JsonSchemaOptions jopt;
  jopt.max_whitespace = spec.max_whitespace;
  if (spec.kind == "json_schema") return json_schema_grammar(spec.text, jopt);
  // OpenAI's JSON mode promises a JSON object (llguidance and vLLM's backends read it the same
  // way), not any JSON value.
  if (spec.kind == "json_object") return json_schema_grammar(R"({"type": "object"})", jopt);
  if (spec.kind == "regex") return regex_grammar(spec.text);
  if (spec.kind == "ebnf") return ebnf_grammar(spec.text);
  THROW(kInvalidInput) << "unknown grammar kind '" << spec.kind << "'";
}

std::shared_ptr<const CompiledGrammar> compile_grammar(const GrammarSpec& spec,
                                                       std::shared_ptr<const Vocabulary> vocab) {
  return std::make_shared<const CompiledGrammar>(build_grammar(spec), std::move(vocab));
}

}  // namespace deepinfer::grammar
