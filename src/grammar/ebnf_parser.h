// EBNF in the GBNF dialect (llama.cpp grammars), parsed into a Grammar.
//
//   # comment to end of line
//   root   ::= object                       rules: name ::= alternatives; names [A-Za-z0-9_-]+
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}" ws
//   pair   ::= string ":" ws value
//   ws     ::= [ \t\n]*
// Terms: "literal" (escapes \n \r \t \\ \" \' \[ \] \xHH \uHHHH \UHHHHHHHH), [class] / [^class]
// with ranges and the same escapes, `.` (any code point), rule names, ( group ), alternation |,
// postfix * + ? {m} {m,} {m,n}. A rule's body runs until the next `name ::=` or the end, so
// rules may span lines. Literals and classes are Unicode code points, matched as UTF-8.
// The start rule is `root` unless named otherwise.
// Errors: kInvalidInput with line:column for syntax errors and undefined rules; kUnsupported
// for left recursion through a non-tail position (rewrite with repetition).
#pragma once

#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

Grammar ebnf_grammar(std::string_view text, const std::string& root = "root");

}  // namespace deepinfer::grammar
