// Nesting bounds of the grammar front ends (found by probing fuzz/fuzz_grammar_*): deeply
// nested regexes, EBNF grammars and JSON schemas overflowed the stack of the compiling thread
// (the parser and the recursive passes over its Expr tree recurse once per level), which took
// the whole server down: a regex or a guided_json schema string is not depth-limited by the
// request's JSON parser. They are now refused with kResourceExhausted before any deep
// recursion; nesting within the bounds still compiles.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "grammar/compile.h"

namespace deepinfer::grammar {
namespace {

std::string repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * n);
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// The kind of the Error build_grammar throws, or kInternal when it compiles.
ErrorKind outcome(const std::string& kind, const std::string& text) {
  GrammarSpec spec;
  spec.kind = kind;
  spec.text = text;
  try {
    build_grammar(spec);
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::kInternal;
}

TEST(NestingLimits, DeepRegexGroupsAreRefused) {
  EXPECT_EQ(outcome("regex", repeat("(", 200000) + "a" + repeat(")", 200000)), ErrorKind::kResourceExhausted);
  EXPECT_EQ(outcome("regex", repeat("(?:", 300) + "a" + repeat(")", 300)), ErrorKind::kResourceExhausted);
  EXPECT_EQ(outcome("regex", repeat("(", 256) + "a" + repeat(")", 256)), ErrorKind::kInternal);
}

TEST(NestingLimits, StackedRegexQuantifiersAreRefused) {
  EXPECT_EQ(outcome("regex", "a" + repeat("*", 300000)), ErrorKind::kResourceExhausted);
  EXPECT_EQ(outcome("regex", "a" + repeat("*", 9)), ErrorKind::kResourceExhausted);
  EXPECT_EQ(outcome("regex", "a" + repeat("{2}", 9)), ErrorKind::kResourceExhausted);
  EXPECT_EQ(outcome("regex", "a" + repeat("?", 9)), ErrorKind::kInternal);  // a?? ?? ?? ?? ?: five, lazy
  EXPECT_EQ(outcome("regex", "a*?b+?c??d{2}?"), ErrorKind::kInternal);  // lazy suffixes are not stacking
  // The deepest tree the bounds allow is compiled (or refused by a budget) without exhausting
  // the stack.
  const ErrorKind deepest = outcome("regex", repeat("(", 256) + "a" + repeat(")********", 256));
  EXPECT_TRUE(deepest == ErrorKind::kInternal || deepest == ErrorKind::kResourceExhausted);
}

TEST(NestingLimits, DeepEbnfIsRefused) {
  EXPECT_EQ(outcome("ebnf", "root ::= " + repeat("(", 200000) + "\"a\"" + repeat(")", 200000) + "\n"),
            ErrorKind::kResourceExhausted);
  EXPECT_EQ(outcome("ebnf", "root ::= \"a\"" + repeat("*", 300000) + "\n"), ErrorKind::kResourceExhausted);
  EXPECT_EQ(outcome("ebnf", "root ::= " + repeat("(", 256) + "\"a\"" + repeat(")", 256) + "\n"), ErrorKind::kInternal);
  EXPECT_EQ(outcome("ebnf", "root ::= \"a\"*? \"b\"{1,2}+\n"), ErrorKind::kInternal);
}

TEST(NestingLimits, DeepJsonSchemaIsRefused) {
  EXPECT_EQ(outcome("json_schema", repeat("{\"items\":", 20000) + "{}" + repeat("}", 20000)),
            ErrorKind::kResourceExhausted);
  EXPECT_EQ(outcome("json_schema", repeat("{\"anyOf\":[", 20000) + "{}" + repeat("]}", 20000)),
            ErrorKind::kResourceExhausted);
  EXPECT_EQ(outcome("json_schema", repeat("{\"type\":\"array\",\"items\":", 60) + "{}" + repeat("}", 60)),
            ErrorKind::kInternal);
}

}  // namespace
}  // namespace deepinfer::grammar
