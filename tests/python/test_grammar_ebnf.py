"""EBNF grammars: constrained random generation checked by Python reference parsers.

JSON outputs must parse with `json.loads`; arithmetic outputs must parse with `ast` as Python
expressions (the grammar is a subset of Python's expression syntax).
"""
import ast
import json

import pytest

from test_grammar_util import Driver

JSON_EBNF = r'''
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n]{0,2}
'''

ARITH_EBNF = r'''
root ::= expr
expr ::= term ( ("+" | "-") term )*
term ::= factor ( ("*" | "/") factor )*
factor ::= num | "(" expr ")" | "-" factor
num ::= "0" | [1-9] [0-9]*
'''


@pytest.fixture(scope="module")
def driver():
    d = Driver()
    yield d
    d.close()


@pytest.mark.parametrize("name,grammar,check", [
    ("json", JSON_EBNF, json.loads),
    ("arith", ARITH_EBNF, lambda s: ast.parse(s, mode="eval")),
])
def test_ebnf_generation(driver, name, grammar, check):
    r = driver.compile("ebnf", grammar)
    assert r["ok"], r
    gen = driver.generate(r["id"], seed=3, n=20, random_tokens=20, max_tokens=300)
    done = [o["text"] for o in gen["outputs"] if o["terminated"]]
    assert len(done) >= 10, [o["text"][:80] for o in gen["outputs"]]
    for text in done:
        check(text)
    assert not any(o["stuck"] for o in gen["outputs"])
