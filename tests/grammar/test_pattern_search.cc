// JSON Schema `pattern` search semantics (unanchored = "contains") built without blow-up
// (issue 17, defect 2): top-level branches share one prefix / suffix loop per anchor kind, and
// escaped characters are factored after the backslash. The work is checked as a count of
// automaton states (CompileUsage, deterministic), the language against hand-picked strings.
// Before: int|float|vec2|vec3|vec4 and .{14,}(?:ghlint|plugin) ran past the 2 s budget.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "grammar/compile.h"
#include "grammar/parse_stack.h"

namespace deepinfer::grammar {
namespace {

struct Case {
  const char* pattern;
  std::vector<const char*> accepted, rejected;  // JSON string bodies
};

TEST(PatternSearch, UnanchoredAlternationsStayCheap) {
  const std::vector<Case> cases = {
      {"int|float|vec2|vec3|vec4|texture|sampler", {"int", "xvec3y", "a sampler"}, {"vec", "flat", ""}},
      {".{14,}(?:ghlint|plugin)", {"eslint-config-plugin", "0123456789abcdghlint!"}, {"short-plugin", "0123456789abcdefghlin"}},
      {"^ab|cd$|ef", {"abx", "xcd", "xefx"}, {"xab", "cdx", ""}},
      {"^(?:a|b)$|c", {"a", "b", "xcx"}, {"ab", "x"}},
      // An unanchored URI regex: contains "scheme:" is what decides (its long tail is optional).
      {R"(([A-Za-z][A-Za-z0-9+\\-.]*):(?:(//)(?:((?:[A-Za-z0-9\\-._~!$&'()*+,;=:]|%[0-9A-Fa-f]{2})*)@)?((?:\\[(?:[0-9A-Fa-f]{1,4}:){6}\\]|(?:[A-Za-z0-9\\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})*))(?::([0-9]*))?((?:/(?:[A-Za-z0-9\\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})*)*)|)(?:\\?((?:[A-Za-z0-9\\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*))?)",
       {"see http://x.org/a?b", "a:", " z9+:"}, {"no scheme here", "9:", ":"}},
      {"QTABLE_INT_TYPE|QTABLE_DOUBLE_TYPE|QTABLE_INT64_TYPE|QTABLE_CACHED_STRING_TYPE|QTABLE_TIME_TYPE",
       {"QTABLE_TIME_TYPE", "xQTABLE_INT64_TYPEy"}, {"QTABLE_INT_TYP"}},
  };
  for (const auto& c : cases) {
    const std::string schema = std::string(R"({"type":"string","pattern":")") + c.pattern + "\"}";
    CompileUsage usage;
    GrammarSpec spec{"json_schema", schema};
    spec.limits = CompileLimits{.max_states = 200000, .max_memory_bytes = 0, .timeout_ms = 0};
    Grammar g = build_grammar(spec, &usage);
    EXPECT_LT(usage.states, 200000) << c.pattern;
    std::printf("%.40s...: %lld states, %.1f ms\n", c.pattern, static_cast<long long>(usage.states), usage.elapsed_ms);
    for (const char* s : c.accepted) EXPECT_TRUE(grammar_matches(g, "\"" + std::string(s) + "\"")) << c.pattern << " / " << s;
    for (const char* s : c.rejected) EXPECT_FALSE(grammar_matches(g, "\"" + std::string(s) + "\"")) << c.pattern << " / " << s;
  }
}

// Escaped characters are still accepted in every spelling the policy allows (json_schema.h).
TEST(PatternSearch, EscapesOfDotStillMatch) {
  Grammar g = build_grammar(GrammarSpec{"json_schema", R"({"type":"string","pattern":"^.{3}$"})"});
  for (const char* s : {R"("\u001f\u001Fa")", R"("\t\u0009\/")", R"("\"\\x")", R"("\b\f\u0000")"})
    EXPECT_TRUE(grammar_matches(g, s)) << s;
  for (const char* s : {R"("\n\na")", R"("\u000a\u000d\u0020")", R"("\x")", R"("ab")"})
    EXPECT_FALSE(grammar_matches(g, s)) << s;
}

}  // namespace
}  // namespace deepinfer::grammar
