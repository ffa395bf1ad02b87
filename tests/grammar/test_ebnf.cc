// EBNF (GBNF dialect) front end: JSON, arithmetic and a C-like language accept/reject.
#include <gtest/gtest.h>

#include "base/error.h"
#include "grammar/ebnf_parser.h"
#include "grammar/parse_stack.h"

namespace deepinfer::grammar {
namespace {

const char* kJson = R"G(
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n]*   # whitespace
)G";

const char* kArith = R"G(
root ::= expr
expr ::= term ( ("+" | "-") term )*
term ::= factor ( ("*" | "/") factor )*
factor ::= num | "(" expr ")" | "-" factor
num ::= [0-9]+
)G";

const char* kCLike = R"G(
root    ::= func+
func    ::= type " " ident "(" params? ")" ws block ws
type    ::= "int" | "void" | "float"
params  ::= type " " ident ( ", " type " " ident )*
block   ::= "{" ws stmt* "}"
stmt    ::= ( decl | assign | ret | if | block ) ws
decl    ::= type " " ident ( " = " expr )? ";"
assign  ::= ident " = " expr ";"
ret     ::= "return" ( " " expr )? ";"
if      ::= "if (" expr ") " block ( " else " block )?
expr    ::= atom ( " " op " " atom )*
atom    ::= ident | [0-9]+ | ident "(" ( expr ( ", " expr )* )? ")" | "(" expr ")"
op      ::= "+" | "-" | "*" | "/" | "<" | ">" | "=="
ident   ::= [a-zA-Z_] [a-zA-Z0-9_]*
ws      ::= [ \n]*
)G";

TEST(Ebnf, Json) {
  Grammar g = ebnf_grammar(kJson);
  for (const char* s : {"{}", "[]", "0", "-1.5e+3", "\"a\\u00e9\\n\"", "{\"a\": [1, 2, {\"b\": null}]}",
                        "[true,false,null]", "\"中文\""})
    EXPECT_TRUE(grammar_matches(g, s)) << s;
  for (const char* s : {"{", "[1,]", "01", "\"\\x\"", "{\"a\"}", "tru", "1.", "[1 2]"})
    EXPECT_FALSE(grammar_matches(g, s)) << s;
}

TEST(Ebnf, Arithmetic) {
  Grammar g = ebnf_grammar(kArith);
  for (const char* s : {"1", "1+2*3", "(1+2)*3", "-(4/2)", "--1", "((((7))))"})
    EXPECT_TRUE(grammar_matches(g, s)) << s;
  for (const char* s : {"", "1+", "(1", "1)", "*2", "1 + 2"})
    EXPECT_FALSE(grammar_matches(g, s)) << s;
}

TEST(Ebnf, CLike) {
  Grammar g = ebnf_grammar(kCLike);
  EXPECT_TRUE(grammar_matches(g, "int main() {\nint x = 1;\nif (x < 2) {\nreturn f(x, 3);\n} else {\nreturn 0;\n}\n}\n"));
  EXPECT_TRUE(grammar_matches(g, "void f(int a, float b) {}"));
  EXPECT_FALSE(grammar_matches(g, "int main() { x = ; }"));
  EXPECT_FALSE(grammar_matches(g, "int 1x() {}"));
  EXPECT_FALSE(grammar_matches(g, "int main() {"));
}

TEST(Ebnf, SyntaxFeatures) {
  Grammar g = ebnf_grammar("root ::= 'a'{2,3} [^x-z] . \"\\u00e9\" b\nb ::= (\"p\" |\n \"q\")+");
  EXPECT_TRUE(grammar_matches(g, "aaw!épq"));
  EXPECT_FALSE(grammar_matches(g, "aaay!ép"));
  EXPECT_FALSE(grammar_matches(g, "aw!ép"));
}

TEST(Ebnf, Errors) {
  EXPECT_THROW(ebnf_grammar("root ::= foo"), Error);          // undefined rule
  EXPECT_THROW(ebnf_grammar("root ::= \"a"), Error);          // unterminated
  EXPECT_THROW(ebnf_grammar("start ::= \"a\""), Error);       // no root
  EXPECT_THROW(ebnf_grammar("root ::= (\"a\""), Error);       // missing )
  try {
    ebnf_grammar("root ::= root \"a\" | \"b\"");
    ADD_FAILURE() << "left recursion accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("left recursion"), std::string::npos);
  }
  // Right recursion and nullable tail recursion are fine.
  EXPECT_TRUE(grammar_matches(ebnf_grammar("root ::= \"a\" root | \"\""), "aaa"));
  EXPECT_TRUE(grammar_matches(ebnf_grammar("root ::= x* \"b\"\nx ::= \"a\"?"), "aab"));
}

}  // namespace
}  // namespace deepinfer::grammar
