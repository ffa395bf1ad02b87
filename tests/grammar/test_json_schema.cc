// JSON Schema front end: accept/reject of serialised instances, and compile-time rejection of
// unsupported keywords naming the keyword.
#include <gtest/gtest.h>

#include "base/error.h"
#include "grammar/dfa.h"
#include "grammar/json_schema.h"
#include "grammar/parse_stack.h"

namespace deepinfer::grammar {
namespace {

struct Case {
  const char* schema;
  std::vector<std::string> yes, no;
};

TEST(JsonSchema, AcceptReject) {
  const std::vector<Case> cases = {
      {R"({"type":"integer","minimum":-5,"exclusiveMaximum":120})",
       {"-5", "0", "119", "42"}, {"-6", "120", "1.5", "007", "-0", "1e2"}},
      {R"({"type":"number","minimum":1.25,"maximum":3})",
       {"1.25", "1.3", "2", "3", "3.0", "2.999"}, {"1.2", "1.249", "3.01", "4", "-2"}},
      {R"({"type":"number","exclusiveMinimum":-1.5})", {"-1.4", "-1", "0", "7.25"}, {"-1.5", "-2", "-1.50"}},
      {R"({"type":"string","minLength":2,"maxLength":3})", {"\"ab\"", "\"中文字\"", "\"a\\n\""}, {"\"a\"", "\"abcd\""}},
      {R"({"type":"string","pattern":"^[a-z]+-\\d+$"})", {"\"ab-12\""}, {"\"ab-\"", "\"Ab-1\""}},
      {R"({"type":"string","pattern":"foo"})", {"\"xfooy\"", "\"foo\""}, {"\"fo\""}},
      {R"({"type":"string","format":"date"})", {"\"2024-02-28\"", "\"1999-12-31\""}, {"\"2024-02-30\"", "\"2024-13-01\""}},
      {R"({"type":"string","format":"ipv4"})", {"\"192.168.0.1\""}, {"\"256.1.1.1\"", "\"01.1.1.1\""}},
      {R"({"type":"string","format":"uuid"})", {"\"123e4567-e89b-12d3-a456-426614174000\""}, {"\"123e4567\""}},
      {R"({"type":["string","null"]})", {"null", "\"x\""}, {"1", "true"}},
      {R"({"type":"integer","multipleOf":7,"minimum":-20,"maximum":50})", {"0", "-14", "49", "21"}, {"50", "-21", "8", "56", "1.0", "-0"}},
      {R"({"multipleOf":3})", {"\"s\"", "9", "-3", "null"}, {"10", "1.5"}},
      {R"({"enum":["a",1,null,{"k":[1.0]}]})", {"\"a\"", "1", "null", "{\"k\":[1]}"}, {"\"b\"", "2", "{\"k\":[2]}"}},
      {R"({"const":"x","type":"string"})", {"\"x\""}, {"\"y\""}},
      {R"({"type":"string","enum":["a",1]})", {"\"a\""}, {"1"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"}},"required":["b"],"additionalProperties":false})",
       {"{\"b\":true}", "{\"a\":1,\"b\":false}"}, {"{}", "{\"a\":1}", "{\"b\":true,\"c\":1}", "{\"b\":1}"}},
      // Python's `$` matches before a final newline: the key "a\n" matches ^.+$ for Python's
      // jsonschema (its value must be an integer) but not for ECMA (any value). The engine
      // narrows to what both accept: such a key is neither a pattern key nor an additional one
      // (issue 17: Github_medium/o36591 through the engine had {"...\n": <number>}).
      {R"({"type":"object","patternProperties":{"^.+$":{"type":"integer"}}})",
       {"{\"ab\":1}", "{\"\":\"s\"}"}, {"{\"ab\":\"s\"}", "{\"a\\n\":\"s\"}", "{\"a\\n\":2}"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"}}})",
       {"{}", "{\"a\":1}", "{\"a\":1,\"zz\":[null]}", "{\"q\":{}}"}, {"{\"a\":\"s\"}", "{\"a\":1,\"a\":2}"}},
      {R"({"type":"object","patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":{"type":"string"}})",
       {"{\"x-a\":1,\"b\":\"s\"}", "{}"}, {"{\"x-a\":\"s\"}", "{\"b\":1}"}},
      {R"({"type":"object","minProperties":1,"maxProperties":2})", {"{\"a\":1}", "{\"a\":1,\"b\":2}"}, {"{}", "{\"a\":1,\"b\":2,\"c\":3}"}},
      {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})", {"[1]", "[1,2,3]"}, {"[]", "[1,2,3,4]", "[\"a\"]"}},
      {R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
       {"[]", "[\"a\"]", "[\"a\",1]"}, {"[1]", "[\"a\",1,2]"}},
      {R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})", {"1", "\"a\""}, {"\"ab\"", "null"}},
      {R"({"oneOf":[{"type":"integer"},{"type":"string"}]})", {"1", "\"a\""}, {"null"}},
      {R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]}]})",
       {"{\"a\":1,\"b\":\"x\"}"}, {"{\"a\":1}", "{\"b\":\"x\"}"}},
      {R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/node"}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
       {"{\"v\":1}", "{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3}}}"}, {"{\"v\":1,\"next\":{}}", "{}"}},
      {R"(false)", {}, {"1", "{}"}},
      {R"(true)", {"1", "{\"a\":[]}", "\"s\""}, {"{a}"}},
  };
  for (const auto& c : cases) {
    Grammar g = json_schema_grammar(c.schema);
    for (const auto& s : c.yes) EXPECT_TRUE(grammar_matches(g, s)) << c.schema << " should accept " << s;
    for (const auto& s : c.no) EXPECT_FALSE(grammar_matches(g, s)) << c.schema << " should reject " << s;
  }
}

TEST(JsonSchema, WhitespacePolicy) {
  const char* schema = R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}})";
  Grammar compact = json_schema_grammar(schema);
  EXPECT_FALSE(grammar_matches(compact, "{ \"a\": [1, 2] }"));
  Grammar loose = json_schema_grammar(schema, JsonSchemaOptions{.max_whitespace = 2});
  EXPECT_TRUE(grammar_matches(loose, "{ \"a\": [1, 2] }"));
  EXPECT_TRUE(grammar_matches(loose, "{\"a\":[1,2]}"));
  EXPECT_FALSE(grammar_matches(loose, "{\"a\":[1,   2]}"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"not":{"type":"string"}})", "'not'"},
      {R"({"type":"array","contains":{"type":"integer"}})", "'contains'"},
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems'"},
      {R"({"type":"number","multipleOf":0.5})", "'multipleOf'"},
      {R"({"if":{"type":"string"},"then":{"minLength":1}})", "'if'"},
      {R"({"properties":{"a":{"dependentRequired":{"x":["y"]}}}})", "'dependentRequired'"},
      {R"({"$ref":"http://example.com/s.json"})", "$ref"},
      {R"({"type":"string","format":"idn-email"})", "format 'idn-email'"},
      {R"J({"type":"string","pattern":"(?=a)"})J", "lookahead"},
      {R"({"oneOf":[{"type":"integer"},{"minimum":3}]})", "oneOf"},
  };
  for (const auto& [schema, feature] : cases) {
    try {
      json_schema_grammar(schema);
      ADD_FAILURE() << schema << " should be rejected";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << schema << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(feature), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(json_schema_grammar("{not json"), Error);
  // Annotations and unknown keywords do not constrain and are accepted.
  EXPECT_TRUE(grammar_matches(json_schema_grammar(R"({"type":"integer","title":"t","x-custom":1})"), "5"));
}

TEST(JsonSchema, AnyValue) {
  Grammar g = json_value_grammar();
  for (const char* s : {"{}", "[1,{\"a\":\"b\"},null]", "-0.5e7", "\"\\u001f\\n\""}) EXPECT_TRUE(grammar_matches(g, s)) << s;
  // \u escapes other than control characters are outside our string policy (json_schema.h).
  for (const char* s : {"", "{", "[1,]", "nul", "\"\\u0041\""}) EXPECT_FALSE(grammar_matches(g, s)) << s;
}

}  // namespace
}  // namespace deepinfer::grammar

namespace deepinfer::grammar {
namespace {

// Every automaton state of a compiled grammar must still reach acceptance, or a matcher could
// allow a byte after which nothing is allowed (seen once: counted strings at their maximum).
TEST(JsonSchema, AutomataAreTrimmed) {
  for (const char* schema : {R"({"type":"string","maxLength":3})", R"({"type":"string","minLength":2,"maxLength":2,"pattern":"^[a-z\u00e9]+$"})",
                             R"({"type":"object","properties":{"k":{"type":"string","maxLength":1}},"additionalProperties":false})",
                             R"({"type":"number","minimum":-2.5,"exclusiveMaximum":7})"}) {
    Grammar g = json_schema_grammar(schema);
    for (const Dfa& d : g.dfas) {
      std::vector<uint8_t> good(d.n_states(), 0);
      for (bool changed = true; changed;) {
        changed = false;
        for (int32_t s = 0; s < d.n_states(); ++s) {
          if (good[s]) continue;
          bool ok = d.accept[s];
          for (int b = 0; b < 256 && !ok; ++b) {
            int32_t t = d.at(s, static_cast<uint8_t>(b));
            ok = t != kDead && good[t];
          }
          if (ok) { good[s] = 1; changed = true; }
        }
      }
      for (int32_t s = 0; s < d.n_states(); ++s) EXPECT_TRUE(good[s]) << schema << " state " << s;
    }
  }
}

}  // namespace
}  // namespace deepinfer::grammar
