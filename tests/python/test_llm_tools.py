"""Python LLM.chat enforces tool_choice "required" with the DSML tool-call grammar (as the
server does, issue 12 deliverable 4): on the tiny random model the output is always a call of a
declared tool whose arguments satisfy its schema; parallel_tool_calls false gives one call."""
import json

import pytest

deepinfer = pytest.importorskip("deepinfer")
jsonschema = pytest.importorskip("jsonschema")

TOOLS = [{"type": "function", "function": {
    "name": "set_mode", "description": "Set the mode",
    "parameters": {"type": "object", "properties": {"mode": {"type": "string", "enum": ["fast", "slow"]}},
                   "required": ["mode"], "additionalProperties": False}}}]


@pytest.fixture(scope="module")
def llm():
    return deepinfer.LLM()


@pytest.mark.parametrize("seed", [1, 2])
def test_required_tool_choice_yields_a_valid_call(llm, seed):
    out = llm.chat([{"role": "user", "content": "Go fast."}],
                   deepinfer.SamplingParams(temperature=1.0, seed=seed, max_tokens=200),
                   tools=TOOLS, tool_choice="required", parallel_tool_calls=False)[0]
    assert out.finish_reason == "stop", out.finish_reason
    assert len(out.tool_calls) == 1, (out.content, out.tool_calls)
    call = out.tool_calls[0]
    assert call["name"] == "set_mode"
    jsonschema.validate(json.loads(call["arguments"]), TOOLS[0]["function"]["parameters"])


def test_required_with_another_constraint_is_refused(llm):
    with pytest.raises(ValueError):
        llm.chat([{"role": "user", "content": "x"}], deepinfer.SamplingParams(max_tokens=5, regex="a+"),
                 tools=TOOLS, tool_choice="required")
