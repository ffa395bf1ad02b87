"""Python LLM.chat with tools: tool_choice "required" is enforced with the DSML tool-call
grammar (as the server does, issue 12 deliverable 4): on the tiny random model the output is
always a call of a declared tool whose arguments satisfy its schema; parallel_tool_calls false
gives one call. Tools, a tool-call history, thinking and reasoning efforts render
deepseek-recipe's prompt (issue 21, deliverable 4)."""
import json
import os

import pytest

deepinfer = pytest.importorskip("deepinfer")
jsonschema = pytest.importorskip("jsonschema")

TOKENIZER = os.path.join(os.path.dirname(__file__), "..", "..", "models", "tiny", "tokenizer.json")

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


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                   "required": ["city"]}}}
HISTORY = [
    {"role": "system", "content": "You answer with tools."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "reasoning_content": "I should call the tool.",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "user", "content": "And in Rome?"},
]


@pytest.mark.parametrize("thinking,effort", [(False, None), (True, None), (True, "high"), (True, "max")])
def test_chat_with_tools_and_reasoning_renders_deepseek_recipes_prompt(llm, thinking, effort):
    """The prompt LLM.chat builds for tools, a tool-call history, thinking and a reasoning effort
    is deepseek-recipe's Chat Completions conversion of the same OpenAI request."""
    dr = pytest.importorskip("deepseek_recipe")
    out = llm.chat(HISTORY, deepinfer.SamplingParams(temperature=0, max_tokens=4), tools=[WEATHER],
                   thinking=thinking, reasoning_effort=effort)[0]
    body = {"model": "DeepSeek-V4-Pro", "messages": HISTORY, "tools": [WEATHER],
            "thinking": {"type": "enabled" if thinking else "disabled"}}
    if effort:
        body["reasoning_effort"] = effort
    conv = dr.ChatCompletionRequest(json.loads(json.dumps(body))).convert(dr.ConversionOptions()).conversation
    tokenizer = dr.Tokenizer.from_file(str(TOKENIZER))
    assert out.prompt_token_ids == list(dr.DeepseekV4Encoding().with_tokenizer(tokenizer).encode(conv))
    assert isinstance(out.reasoning_content, str) and isinstance(out.content, str)
    assert isinstance(out.tool_calls, list)
    if not thinking:
        assert out.reasoning_content == ""


def test_chat_template_kwargs_thinking_is_thinking(llm):
    params = deepinfer.SamplingParams(temperature=0, max_tokens=2)
    a = llm.chat(HISTORY, params, tools=[WEATHER], thinking=True, reasoning_effort="high")[0]
    b = llm.chat(HISTORY, params, tools=[WEATHER],
                 chat_template_kwargs={"thinking": True, "reasoning_effort": "high"})[0]
    c = llm.chat(HISTORY, params, tools=[WEATHER], chat_template_kwargs={"enable_thinking": True})[0]
    off = llm.chat(HISTORY, params, tools=[WEATHER])[0]
    assert a.prompt_token_ids == b.prompt_token_ids
    assert c.prompt_token_ids != off.prompt_token_ids
    with pytest.raises(ValueError, match="chat_template_kwargs"):
        llm.chat(HISTORY, params, chat_template_kwargs={"bogus": 1})
    with pytest.raises(ValueError):
        llm.chat(HISTORY, params, reasoning_effort="enormous")


def test_chat_parses_a_forced_tool_call(llm):
    """tool_choice required through the keyword: the output is parsed into tool_calls (name and
    JSON arguments), with no DSML markup left in content."""
    out = llm.chat([{"role": "user", "content": "Weather in Rome?"}],
                   deepinfer.SamplingParams(temperature=1.0, seed=3, max_tokens=200),
                   tools=[WEATHER], tool_choice="required", parallel_tool_calls=False)[0]
    assert out.finish_reason == "stop", (out.finish_reason, out.text)
    assert [c["name"] for c in out.tool_calls] == ["get_weather"], (out.content, out.tool_calls)
    jsonschema.validate(json.loads(out.tool_calls[0]["arguments"]), WEATHER["function"]["parameters"])
    assert "DSML" not in out.content
