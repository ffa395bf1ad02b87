"""Never silently loosened (issue 17): every JSON Schema keyword family that constrains instances
is either handled exactly or refused with an error naming it.

Handled: for each keyword, a schema, instances the grammar must accept and instances it must
reject; PyPI `jsonschema` (Decimal numbers) confirms each accepted one is valid and each rejected
one is invalid, so a keyword the compiler dropped fails here (its rejected instance would pass).
Refused: compile fails with kUnsupported and the message names the keyword.
"""
import json
import warnings
from decimal import Decimal

import pytest
from test_grammar_util import Driver

jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def driver():
    d = Driver()
    yield d
    d.close()


def valid(schema, text):
    s = json.loads(schema, parse_float=Decimal)
    cls = jsonschema.validators.validator_for(s, default=jsonschema.Draft202012Validator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(s, format_checker=cls.FORMAT_CHECKER).is_valid(json.loads(text, parse_float=Decimal))


HANDLED = {
    # family: [(schema, accepted, rejected)]
    "type": [('{"type":["integer","null"]}', ["3", "null"], ["3.5", '"a"', "true"])],
    "enum/const": [('{"enum":[1,"a",[true]]}', ["1", '"a"', "[true]"], ["2", '"b"', "[false]"]),
                   ('{"const":{"a":12345678901234567890123}}', ['{"a":12345678901234567890123}'],
                    ['{"a":12345678901234567000000}'])],
    "minimum/maximum": [('{"type":"number","minimum":-2.5,"maximum":1e25}', ["-2.5", "10000000000000000000000000"],
                         ["-2.51", "10000000000000000000000000.1"])],
    "exclusiveMinimum/Maximum": [('{"type":"integer","exclusiveMinimum":-3,"exclusiveMaximum":18446744073709551617}',
                                  ["-2", "18446744073709551616"], ["-3", "18446744073709551617"]),
                                 ('{"$schema":"http://json-schema.org/draft-04/schema#","type":"integer",'
                                  '"minimum":0,"exclusiveMinimum":true}', ["1"], ["0"])],
    "multipleOf": [('{"type":"integer","multipleOf":7,"minimum":100000000000000000000}',
                    ["100000000000000000005", "100000000000000000012"], ["100000000000000000000", "100000000000000000007"])],
    "minLength/maxLength": [('{"type":"string","minLength":2,"maxLength":3}', ['"ab"', '"abc"'], ['"a"', '"abcd"'])],
    "pattern": [('{"type":"string","pattern":"ab|cd"}', ['"xaby"', '"cd"'], ['"xyz"', '"acbd"']),
                ('{"type":"string","pattern":"^a[0-9]+$"}', ['"a12"'], ['"a12b"', '"ba1"'])],
    "format": [('{"type":"string","format":"date"}', ['"2024-02-28"', '"0001-01-01"'], ['"2024-13-01"', '"x"', '"0000-01-01"'])],
    "items/prefixItems": [('{"prefixItems":[{"type":"integer"}],"items":{"type":"string"}}',
                           ['[1,"a"]', "[]"], ['["a"]', "[1,2]"])],
    "items/additionalItems (draft-07)": [('{"$schema":"http://json-schema.org/draft-07/schema#",'
                                          '"items":[{"type":"integer"}],"additionalItems":false}', ["[1]"], ["[1,2]"])],
    "minItems/maxItems": [('{"type":"array","minItems":1,"maxItems":2}', ["[1]", "[1,2]"], ["[]", "[1,2,3]"])],
    "properties/required": [('{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}',
                             ['{"a":1}'], ["{}", '{"a":"x"}'])],
    "additionalProperties": [('{"type":"object","properties":{"a":{}},"additionalProperties":false}',
                              ['{"a":1}', "{}"], ['{"b":1}'])],
    "patternProperties": [('{"type":"object","patternProperties":{"^x":{"type":"integer"}},"additionalProperties":false}',
                           ['{"x1":1}'], ['{"x1":"s"}', '{"y":1}'])],
    "minProperties/maxProperties": [('{"type":"object","minProperties":1,"maxProperties":1}',
                                     ['{"a":1}'], ["{}", '{"a":1,"b":2}'])],
    "unevaluatedProperties": [('{"type":"object","properties":{"a":{}},"unevaluatedProperties":false}',
                               ['{"a":1}'], ['{"b":1}'])],
    "allOf": [('{"allOf":[{"type":"integer","minimum":9007199254740993},{"maximum":9007199254740994}]}',
               ["9007199254740993", "9007199254740994"], ["9007199254740992", "9007199254740995"])],
    "anyOf": [('{"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]}', ["1", '"a"'], ['"ab"', "null"])],
    "oneOf": [('{"oneOf":[{"type":"integer"},{"type":"string"}]}', ["1", '"a"'], ["null"])],
    "$ref/$defs": [('{"$defs":{"n":{"type":"integer","maximum":99999999999999999999}},"$ref":"#/$defs/n"}',
                    ["99999999999999999999"], ["100000000000000000000"])],
    "uniqueItems false": [('{"type":"array","items":{"type":"integer"},"uniqueItems":false}', ["[1,1]"], ['["a"]'])],
}

REFUSED = {
    "not": '{"not":{"type":"integer"}}',
    "if": '{"if":{"type":"integer"},"then":{"minimum":1}}',
    "contains": '{"type":"array","contains":{"type":"integer"}}',
    "minContains": '{"type":"array","minContains":2}',
    "maxContains": '{"type":"array","maxContains":2}',
    "uniqueItems": '{"type":"array","uniqueItems":true}',
    "unevaluatedItems": '{"type":"array","unevaluatedItems":false}',
    "propertyNames": '{"type":"object","propertyNames":{"maxLength":3}}',
    "dependentRequired": '{"type":"object","dependentRequired":{"a":["b"]}}',
    "dependentSchemas": '{"type":"object","dependentSchemas":{"a":{"required":["b"]}}}',
    "dependencies": '{"type":"object","dependencies":{"a":["b"]}}',
    "$dynamicRef": '{"$dynamicRef":"#x"}',
    "$recursiveRef": '{"$recursiveRef":"#"}',
    "multipleOf": '{"type":"number","multipleOf":0.5}',
    "oneOf": '{"oneOf":[{"type":"integer"},{"minimum":2}]}',
    "minLength": '{"type":"string","minLength":100000}',
    "format": '{"type":"string","format":"duration"}',
    "$ref": '{"$ref":"https://example.com/schema.json"}',
    "unevaluatedProperties": '{"allOf":[{"properties":{"a":{}}}],"unevaluatedProperties":false}',
}


@pytest.mark.parametrize("family", sorted(HANDLED))
def test_handled_exactly(driver, family):
    for schema, accepted, rejected in HANDLED[family]:
        for s in accepted:
            assert valid(schema, s), (schema, s)
        for s in rejected:
            assert not valid(schema, s), (schema, s)
        r = driver.compile("json_schema", schema)
        assert r["ok"], (schema, r)
        got = driver.match(r["id"], accepted + rejected)
        assert got == [True] * len(accepted) + [False] * len(rejected), (schema, got)
        driver.free(r["id"])


@pytest.mark.parametrize("keyword", sorted(REFUSED))
def test_refused_naming_the_keyword(driver, keyword):
    r = driver.compile("json_schema", REFUSED[keyword])
    assert not r["ok"], (keyword, r)
    assert r["error_kind"] in ("unsupported", "invalid input"), r
    assert keyword.lstrip("$") in r["error"] or keyword in r["error"], r["error"]
