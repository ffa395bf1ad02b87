// Language emptiness (language.h): unsatisfiable constraints are refused at compile time with
// kInvalidInput, satisfiable look-alikes are not; the analysis reads the IR, not the builder's
// pruning; a vocabulary that cannot begin the language is refused too.
#include <gtest/gtest.h>

#include "base/error.h"
#include "grammar/compile.h"
#include "grammar/language.h"
#include "hf_vocab.h"

namespace deepinfer::grammar {
namespace {

std::shared_ptr<const Vocabulary> vocab() {
  static auto v = testing::load_hf_vocab(testing::kDeepSeekTokenizer, testing::kDeepSeekVocabSize);
  return v;
}

struct Case {
  const char* kind;
  const char* text;
};

// Each is unsatisfiable; issue 12 lists them.
const Case kEmpty[] = {
    {"json_schema", R"({"enum": []})"},
    {"json_schema", "false"},
    {"json_schema", R"({"type": []})"},
    {"json_schema", R"({"type": "string", "minLength": 5, "maxLength": 2})"},
    {"json_schema", R"({"type": "integer", "minimum": 5, "maximum": 2})"},
    {"json_schema", R"({"type": "number", "minimum": 5, "maximum": 2})"},
    {"json_schema", R"({"type": "array", "minItems": 5, "maxItems": 2})"},
    {"json_schema", R"({"allOf": [{"type": "string"}, {"type": "integer"}]})"},
    {"json_schema", R"({"allOf": [{"type": "integer", "minimum": 3}, {"type": "integer", "maximum": 1}]})"},
    {"json_schema", R"({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"],
                        "additionalProperties": false})"},
    {"json_schema", R"({"$ref": "#"})"},
    {"json_schema", R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})"},
    {"json_schema", R"({"$defs": {"n": {"type": "object", "properties": {"x": {"$ref": "#/$defs/n"}},
                        "required": ["x"]}}, "$ref": "#/$defs/n"})"},
    {"json_schema", R"({"type": "array", "items": {"$ref": "#"}, "minItems": 1})"},
    {"json_schema", R"({"type": "string", "pattern": "^[^\\s\\S]$"})"},
    {"regex", R"([^\s\S])"},
    {"regex", R"(a[^\s\S]b|c[^\s\S])"},
    {"regex", "[]"},
    {"ebnf", "root ::= a\na ::= root"},
    {"ebnf", "root ::= \"x\" []"},
    {"ebnf", "root ::= [^\\x00-\\U0010FFFF]"},
};

// Near misses that must compile.
const Case kNonEmpty[] = {
    {"json_schema", R"({"enum": [1]})"},
    {"json_schema", "true"},
    {"json_schema", R"({"type": "string", "minLength": 2, "maxLength": 2})"},
    {"json_schema", R"({"type": "integer", "minimum": 2, "maximum": 2})"},
    {"json_schema", R"({"type": "array", "minItems": 2, "maxItems": 2})"},
    {"json_schema", R"({"allOf": [{"type": "integer"}, {"minimum": 1}]})"},
    {"json_schema", R"({"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"],
                        "additionalProperties": false})"},
    {"json_schema", R"({"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#"}}]})"},
    {"json_schema", R"({"$defs": {"n": {"type": "object", "properties": {"x": {"$ref": "#/$defs/n"}}}},
                        "$ref": "#/$defs/n"})"},
    {"regex", R"([\s\S])"},
    {"regex", R"(a[^\s\S]b|c)"},
    {"ebnf", "root ::= a\na ::= root | \"z\""},
    {"ebnf", "root ::= \"x\" [] | \"y\""},
};

TEST(Language, EmptyConstraintsAreRefused) {
  for (const Case& c : kEmpty) {
    try {
      compile_grammar({c.kind, c.text}, vocab());
      ADD_FAILURE() << c.kind << " " << c.text << " compiled";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput) << c.text << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("matches no string"), std::string::npos) << c.text << ": " << e.what();
    }
    EXPECT_THROW(build_grammar({c.kind, c.text}), Error) << c.text;  // the server's pre-check
    GrammarSpec keep{c.kind, c.text};
    keep.allow_empty_language = true;
    EXPECT_TRUE(language_is_empty(build_grammar(keep))) << c.text;
  }
}

TEST(Language, SatisfiableNearMissesCompile) {
  for (const Case& c : kNonEmpty) {
    std::shared_ptr<const CompiledGrammar> g;
    EXPECT_NO_THROW(g = compile_grammar({c.kind, c.text}, vocab())) << c.text;
    if (!g) continue;
    EXPECT_FALSE(language_is_empty(g->grammar())) << c.text;
    GrammarMatcher m(g);
    bool any = false;
    for (uint32_t w : m.next_token_bitmask()) any = any || w != 0;
    EXPECT_TRUE(any) << c.text;
  }
}

// The analysis reads the automata and rules as they are: a rule over an automaton that reaches
// no accepting state, or a cycle without a base case, is empty even though nothing was pruned.
TEST(Language, AnalysisReadsTheIr) {
  Grammar g;
  Dfa d;  // two states, 0 -a-> 1, 1 -a-> 0, none accepting
  d.next.assign(2 * 256, kDead);
  d.accept = {0, 0};
  d.has_out = {1, 1};
  d.at(0, 'a') = 1;
  d.at(1, 'a') = 0;
  g.dfas.push_back(d);
  g.elements = {{ElementKind::kDfa, 0}, {ElementKind::kEnd, 0}};
  g.rule_alts = {{0}};
  g.rule_names = {"root"};
  EXPECT_TRUE(language_is_empty(g));
  g.dfas[0].accept[1] = 1;
  EXPECT_FALSE(language_is_empty(g));
  // root ::= x ; x ::= root  (no base case), then x ::= root | dfa0.
  Grammar c;
  c.dfas.push_back(g.dfas[0]);
  c.elements = {{ElementKind::kRef, 1}, {ElementKind::kEnd, 0}, {ElementKind::kRef, 0}, {ElementKind::kEnd, 0},
                {ElementKind::kDfa, 0}, {ElementKind::kEnd, 0}};
  c.rule_alts = {{0}, {2}};
  c.rule_names = {"root", "x"};
  EXPECT_TRUE(language_is_empty(c));
  c.rule_alts[1].push_back(4);
  EXPECT_FALSE(language_is_empty(c));
  EXPECT_THROW(check_language_nonempty(Grammar{}, "nothing"), Error);
}

TEST(Language, GrammarBytes) {
  const auto used = grammar_bytes(build_grammar({"regex", "a[0-2]"}));
  int n = 0;
  for (bool u : used) n += u;
  EXPECT_EQ(n, 4);
  EXPECT_TRUE(used['a'] && used['0'] && used['1'] && used['2']);
}

// A vocabulary without a token for "c": a language that must begin with "c" is refused; one
// that can begin with a token compiles (and a matcher that later gets stuck is the engine's
// second line of defence, tests/engine).
TEST(Language, VocabularyThatCannotBeginIsRefused) {
  auto v = std::make_shared<const Vocabulary>(std::vector<std::string>{"", "a", "b", "ab"}, std::vector<int32_t>{0});
  try {
    compile_grammar({"regex", "c+"}, v);
    ADD_FAILURE() << "compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("no token"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(compile_grammar({"regex", "a(c|b)"}, v));
  EXPECT_NO_THROW(compile_grammar({"regex", "(a|b)+"}, v));
}

}  // namespace
}  // namespace deepinfer::grammar
