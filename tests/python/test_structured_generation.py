"""Structured output through the engine: the built-in tiny model (random weights, so its
own preferences are adversarial) generates under a regex, a JSON schema, json_object and an
EBNF grammar; a reference validator (Python `re`, PyPI `jsonschema`, `json`) checks the text."""
import json
import re

import pytest

deepinfer = pytest.importorskip("deepinfer")
jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def llm():
    return deepinfer.LLM()


def gen(llm, n=4, max_tokens=96, **constraint):
    params = [deepinfer.SamplingParams(temperature=1.0, seed=s, max_tokens=max_tokens, **constraint)
              for s in range(n)]
    return llm.generate(["Answer:"] * n, params)


def test_regex_outputs_match(llm):
    pattern = r"[a-z]{3,8}@[a-z]{2,5}\.(com|org)"
    for out in gen(llm, regex=pattern):
        assert out.finish_reason == "stop", out.text
        assert re.fullmatch(pattern, out.text), out.text


def test_json_schema_outputs_validate(llm):
    schema = {"type": "object",
              "properties": {"name": {"type": "string", "maxLength": 8},
                             "age": {"type": "integer", "minimum": 0, "maximum": 120},
                             "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
              "required": ["name", "age"], "additionalProperties": False}
    for out in gen(llm, json_schema=schema, max_tokens=128):
        if out.finish_reason == "length":
            continue  # cut by max_tokens: a prefix, not a complete document
        jsonschema.validate(json.loads(out.text), schema)


def test_json_object_outputs_parse(llm):
    done = 0
    for out in gen(llm, json_object=True, max_tokens=128):
        if out.finish_reason == "stop":
            assert isinstance(json.loads(out.text), dict), out.text  # JSON mode: an object
            done += 1
    assert done >= 1, "no constrained output finished within max_tokens"


def test_ebnf_outputs_parse(llm):
    grammar = 'root ::= expr\nexpr ::= term ([+*-] term)*\nterm ::= [1-9] [0-9]{0,2} | "(" expr ")"\n'
    for out in gen(llm, grammar=grammar, max_tokens=48):
        if out.finish_reason == "stop":
            eval(compile(out.text, "<expr>", "eval"), {"__builtins__": {}})  # parses as Python


def test_unsupported_schema_is_rejected_with_the_feature_named(llm):
    with pytest.raises(Exception, match="not"):
        gen(llm, n=1, json_schema={"not": {"type": "string"}})


def test_two_constraints_are_refused():
    with pytest.raises(ValueError):
        deepinfer.SamplingParams(regex="a", json_object=True)
