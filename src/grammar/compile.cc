#include "grammar/compile.h"

#include <array>

#include "base/error.h"
#include "grammar/ebnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/language.h"
#include "grammar/regex_parser.h"
#include "grammar/tool_calls.h"

namespace deepinfer::grammar {
namespace {

std::string describe(const GrammarSpec& spec) {
  if (spec.kind == "json_schema") return "the JSON schema";
  if (spec.kind == "regex") return "the regex";
  if (spec.kind == "ebnf") return "the EBNF grammar";
  if (spec.kind == "tool_calls") return "the tool-call grammar";
  return "the " + spec.kind + " constraint";
}

Grammar build_front_end(const GrammarSpec& spec) {
  JsonSchemaOptions jopt;
  jopt.max_whitespace = spec.max_whitespace;
  if (spec.kind == "json_schema") return json_schema_grammar(spec.text, jopt);
  // OpenAI's JSON mode promises a JSON object (llguidance and vLLM's backends read it the same
  // way), not any JSON value.
  if (spec.kind == "json_object") return json_schema_grammar(R"({"type": "object"})", jopt);
  if (spec.kind == "regex") return regex_grammar(spec.text);
  if (spec.kind == "ebnf") return ebnf_grammar(spec.text);
  if (spec.kind == "tool_calls") return tool_calls_grammar(spec.text, jopt);
  THROW(kInvalidInput) << "unknown grammar kind '" << spec.kind << "'";
}

// Every byte the grammar reads is a single-byte token (then no token-level dead end exists,
// language.h).
bool vocab_spells_every_byte(const Grammar& g, const Vocabulary& vocab) {
  std::array<bool, 256> single{};
  const auto& trie = vocab.trie();
  for (int32_t c = 1; c < trie[0].end; c = trie[c].end) single[trie[c].byte] = trie[c].n_tokens > 0;
  const std::array<bool, 256> used = grammar_bytes(g);
  for (int b = 0; b < 256; ++b) {
    if (used[b] && !single[b]) return false;
  }
  return true;
}

// Reports the budget's usage when the scope ends, normally or by an exception.
struct UsageReport {
  BudgetScope& scope;
  CompileUsage* out;
  ~UsageReport() {
    if (out) *out = scope.budget().usage();
  }
};

Grammar build_unscoped(const GrammarSpec& spec) {
  Grammar g = build_front_end(spec);
  if (!spec.allow_empty_language) check_language_nonempty(g, describe(spec));
  return g;
}

}  // namespace

Grammar build_grammar(const GrammarSpec& spec, CompileUsage* usage) {
  BudgetScope scope(spec.limits, describe(spec));
  UsageReport report{scope, usage};
  return build_unscoped(spec);
}

std::shared_ptr<const CompiledGrammar> compile_grammar(const GrammarSpec& spec,
                                                       std::shared_ptr<const Vocabulary> vocab,
                                                       CompileUsage* usage) {
  BudgetScope scope(spec.limits, describe(spec));
  UsageReport report{scope, usage};
  auto compiled = std::make_shared<const CompiledGrammar>(build_unscoped(spec), std::move(vocab));
  if (!spec.allow_empty_language && !vocab_spells_every_byte(compiled->grammar(), compiled->vocab())) {
    // Some byte has no token of its own: the language may still be out of the vocabulary's
    // reach at its very start (the engine ends a request whose matcher later gets stuck).
    GrammarMatcher m(compiled);
    const std::vector<uint32_t> mask = m.next_token_bitmask();
    bool any = false;
    for (uint32_t w : mask) any = any || w != 0;
    CHECK(any) << describe(spec) << ": no token of the model's vocabulary can begin an output of it";
  }
  return compiled;
}

}  // namespace deepinfer::grammar
