"""POST /v1/responses (the OpenAI Responses API) driven by the official `openai` client's
`responses.create`, on the built-in tiny model (random weights, real V4 tokenizer).

References nobody here wrote: the openai package's pydantic types (openai/types/responses),
which every response body and stream event is validated against strictly (required fields,
literal types); the openai client's SSE parsing; deepseek-recipe's V4 encoder for the prompt
length; jsonschema for function-call arguments. The chat completions endpoint is the second
path: the same request through /v1/chat/completions must give the same text, reasoning, calls
and token counts (both run greedy on the same prompt).
"""

import json

import pytest

from test_server import API_KEY, MODEL, TOKENIZER, Server, assert_error_body

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
from openai.types.responses import Response, ResponseStreamEvent  # noqa: E402

STREAM_EVENT = pydantic.TypeAdapter(ResponseStreamEvent)

WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "Weather of a city.",
                "parameters": {"type": "object",
                               "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                               "required": ["city"], "additionalProperties": False}}
CHAT_WEATHER_TOOL = {"type": "function", "function": {k: v for k, v in WEATHER_TOOL.items() if k != "type"}}


@pytest.fixture(scope="module")
def server():
    s = Server("--api-key", API_KEY, "--max-model-len", "2048")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.openai_client()


def validated(resp):
    """The response as a dict, after strict validation against the openai package's Response."""
    data = resp.model_dump(mode="json", exclude_unset=True, by_alias=True)
    Response.model_validate(data)
    return data


def collect(stream):
    events = []
    for e in stream:
        data = e.model_dump(mode="json", exclude_unset=True, by_alias=True)
        STREAM_EVENT.validate_python(data)
        events.append(data)
    return events


def strip_ids(items):
    out = []
    for item in items:
        item = dict(item)
        item.pop("id", None)
        item.pop("call_id", None)
        out.append(item)
    return out


def check_event_order(events):
    """The event grammar of the Responses API: created, in_progress, then per item added ->
    (content_part.added -> deltas -> done -> content_part.done | argument deltas -> done) ->
    output_item.done, and one final event; sequence numbers 0, 1, 2, ..."""
    types = [e["type"] for e in events]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] in ("response.completed", "response.incomplete")
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    items, i = [], 2
    while i < len(events) - 1:
        added = events[i]
        assert added["type"] == "response.output_item.added", types[i:]
        item = added["item"]
        assert added["output_index"] == len(items) and item["status"] == "in_progress"
        i += 1
        text = ""
        if item["type"] in ("message", "reasoning"):
            kind = "output_text" if item["type"] == "message" else "reasoning_text"
            assert events[i]["type"] == "response.content_part.added"
            assert events[i]["part"]["type"] == kind and events[i]["part"]["text"] == ""
            i += 1
            while events[i]["type"] == f"response.{kind}.delta":
                assert events[i]["item_id"] == item["id"] and events[i]["output_index"] == len(items)
                text += events[i]["delta"]
                i += 1
            assert events[i]["type"] == f"response.{kind}.done" and events[i]["text"] == text
            assert events[i + 1]["type"] == "response.content_part.done"
            assert events[i + 1]["part"]["text"] == text
            i += 2
        else:
            assert item["type"] == "function_call"
            while events[i]["type"] == "response.function_call_arguments.delta":
                assert events[i]["item_id"] == item["id"]
                text += events[i]["delta"]
                i += 1
            assert events[i]["type"] == "response.function_call_arguments.done"
            assert events[i]["arguments"] == text
            i += 1
        done = events[i]
        assert done["type"] == "response.output_item.done" and done["output_index"] == len(items)
        assert done["item"]["id"] == item["id"] and done["item"]["status"] in ("completed", "incomplete")
        items.append(done["item"])
        i += 1
    final = events[-1]["response"]
    assert final["output"] == items
    return final


def chat(client, **kw):
    return client.chat.completions.create(model=MODEL, temperature=0, **kw)


# ------------------------------------------------------------------------- text


def test_text_non_stream_matches_chat_completions(server, client):
    dr = pytest.importorskip("deepseek_recipe")
    r = client.responses.create(model=MODEL, instructions="You are terse.", input="Tell me a story.",
                                max_output_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    data = validated(r)
    c = chat(client, messages=[{"role": "system", "content": "You are terse."},
                               {"role": "user", "content": "Tell me a story."}],
             max_tokens=8, extra_body={"ignore_eos": True})
    assert r.object == "response" and r.model == MODEL and r.id.startswith("resp_")
    assert r.output_text == c.choices[0].message.content
    assert r.usage.input_tokens == c.usage.prompt_tokens
    enc = dr.DeepseekV4Encoding().with_tokenizer(dr.Tokenizer.from_file(TOKENIZER))
    conv = dr.Conversation([dr.SystemMessage("You are terse."), dr.UserMessage("Tell me a story.")],
                           thinking_mode=False)
    assert r.usage.input_tokens == len(enc.encode(conv))
    assert r.usage.output_tokens == c.usage.completion_tokens == 8
    assert r.usage.total_tokens == r.usage.input_tokens + 8
    # Cut by max_output_tokens: incomplete, as OpenAI reports it.
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert data["instructions"] == "You are terse." and data["max_output_tokens"] == 8
    if r.output_text:
        assert [i["type"] for i in data["output"]] == ["message"]
        assert data["output"][0]["content"][0]["type"] == "output_text"


def test_text_stream_equals_non_stream(server, client):
    kw = dict(model=MODEL, input=[{"role": "user", "content": "Write a poem."}], max_output_tokens=10,
              temperature=0, extra_body={"ignore_eos": True})
    full = validated(client.responses.create(**kw))
    events = collect(client.responses.create(**kw, stream=True))
    final = check_event_order(events)
    assert events[-1]["type"] == "response.incomplete"
    assert strip_ids(final["output"]) == strip_ids(full["output"])
    assert final["usage"] == full["usage"]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "".join(p["text"] for i in full["output"] if i["type"] == "message" for p in i["content"])


def test_sse_framing_event_lines_and_no_done(server):
    """Raw bytes: each event is `event: TYPE\\ndata: JSON\\n\\n` with TYPE the JSON's type; no [DONE]."""
    resp, data = server.request("POST", "/v1/responses", {"model": MODEL, "input": "hi", "max_output_tokens": 3,
                                                          "stream": True})
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    body = data.decode()
    assert body.endswith("\n\n") and "[DONE]" not in body
    blocks = body[:-2].split("\n\n")
    for block in blocks:
        lines = block.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        assert json.loads(lines[1][6:])["type"] == lines[0][7:]
    assert json.loads(blocks[-1].split("\n")[1][6:])["type"] in ("response.completed", "response.incomplete")


# -------------------------------------------------------------------- reasoning


def test_reasoning_item_matches_chat_reasoning_content(server, client):
    kw = dict(input="Why is the sky blue?", max_output_tokens=12, temperature=0, reasoning={"effort": "high"},
              extra_body={"ignore_eos": True})
    full = validated(client.responses.create(model=MODEL, **kw))
    c = chat(client, messages=[{"role": "user", "content": "Why is the sky blue?"}], max_tokens=12,
             reasoning_effort="high", extra_body={"ignore_eos": True, "chat_template_kwargs": {"thinking": True}})
    msg = c.choices[0].message
    reasoning = [i for i in full["output"] if i["type"] == "reasoning"]
    text = [p["text"] for i in full["output"] if i["type"] == "message" for p in i["content"]]
    assert "".join(p["text"] for i in reasoning for p in i["content"]) == (msg.reasoning_content or "")
    assert "".join(text) == (msg.content or "")
    assert full["usage"]["input_tokens"] == c.usage.prompt_tokens
    assert full["usage"]["output_tokens_details"]["reasoning_tokens"] == \
        c.usage.completion_tokens_details.reasoning_tokens
    assert full["reasoning"]["effort"] == "high"
    if msg.reasoning_content:
        assert full["output"][0]["type"] == "reasoning" and full["output"][0]["summary"] == []
    events = collect(client.responses.create(model=MODEL, stream=True, **kw))
    final = check_event_order(events)
    assert strip_ids(final["output"]) == strip_ids(full["output"])
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert deltas == (msg.reasoning_content or "")


def test_reasoning_effort_none_is_chat_mode(server, client):
    a = client.responses.create(model=MODEL, input="Hello", max_output_tokens=2, reasoning={"effort": "none"})
    b = client.responses.create(model=MODEL, input="Hello", max_output_tokens=2)
    assert a.usage.input_tokens == b.usage.input_tokens
    assert a.usage.output_tokens_details.reasoning_tokens == 0 and a.reasoning.effort == "none"
    c = client.responses.create(model=MODEL, input="Hello", max_output_tokens=2, reasoning={"effort": "low"},
                                extra_body={"ignore_eos": True})
    # Thinking mode: the output starts in the reasoning.
    assert c.usage.output_tokens_details.reasoning_tokens == 2 and c.output[0].type == "reasoning"


# ------------------------------------------------------------------------ tools


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "name": "get_weather"}])
def test_function_call_item(server, client, tool_choice):
    jsonschema = pytest.importorskip("jsonschema")
    kw = dict(input="What is the weather in Paris?", tools=[WEATHER_TOOL], tool_choice=tool_choice,
              parallel_tool_calls=False, max_output_tokens=400, temperature=0)
    full = validated(client.responses.create(model=MODEL, **kw))
    calls = [i for i in full["output"] if i["type"] == "function_call"]
    assert len(calls) == 1 and full["status"] == "completed", full
    for call in calls:
        assert call["name"] == "get_weather" and call["status"] == "completed"
        assert call["call_id"].startswith("call_")
        jsonschema.validate(json.loads(call["arguments"]), WEATHER_TOOL["parameters"])
    chat_choice = "required" if tool_choice == "required" else \
        {"type": "function", "function": {"name": "get_weather"}}
    c = chat(client, messages=[{"role": "user", "content": kw["input"]}], tools=[CHAT_WEATHER_TOOL],
             tool_choice=chat_choice, parallel_tool_calls=False, max_tokens=400)
    assert [(t.function.name, json.loads(t.function.arguments)) for t in c.choices[0].message.tool_calls] == \
        [(call["name"], json.loads(call["arguments"])) for call in calls]
    assert full["usage"]["input_tokens"] == c.usage.prompt_tokens
    assert full["tools"][0]["name"] == "get_weather" and full["tool_choice"] == tool_choice
    if tool_choice != "required":
        return  # one streamed call is enough (the grammar-constrained tiny model is slow here)
    events = collect(client.responses.create(model=MODEL, stream=True, **kw))
    final = check_event_order(events)
    assert events[-1]["type"] == "response.completed"
    assert strip_ids(final["output"]) == strip_ids(full["output"])


def test_conversation_items_encode_as_chat_messages(server, client):
    """Function calls, their outputs and earlier turns as input items: the prompt equals the chat
    path's for the same conversation."""
    items = [{"role": "developer", "content": "Use tools."},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Rome?"}]},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather",
              "arguments": "{\"city\": \"Rome\"}"},
             {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 24 C"},
             {"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}]},
             {"role": "user", "content": "And Paris?"}]
    r = client.responses.create(model=MODEL, input=items, tools=[WEATHER_TOOL], max_output_tokens=1)
    messages = [{"role": "system", "content": "Use tools."},
                {"role": "user", "content": "Weather in Rome?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24 C"},
                {"role": "assistant", "content": "Sunny."},
                {"role": "user", "content": "And Paris?"}]
    c = chat(client, messages=messages, tools=[CHAT_WEATHER_TOOL], max_tokens=1)
    assert r.usage.input_tokens == c.usage.prompt_tokens


def test_json_schema_text_format(server, client):
    jsonschema = pytest.importorskip("jsonschema")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    r = client.responses.create(model=MODEL, input="Reply in JSON.", max_output_tokens=32, temperature=0,
                                text={"format": {"type": "json_schema", "name": "answer", "schema": schema}})
    validated(r)
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), schema)


# ----------------------------------------------------------------- bad requests


@pytest.mark.parametrize("body, param", [
    ({"input": "hi", "frobnicate": 1}, "frobnicate"),
    ({}, "input"),
    ({"input": []}, "input"),
    ({"input": [{"type": "mystery"}]}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools"),
    ({"input": "hi", "tool_choice": "required"}, "tool_choice"),
    ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id"),
    ({"input": "hi", "background": True}, "background"),
    ({"input": "hi", "reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({"input": "hi", "max_output_tokens": 100000}, "max_output_tokens"),
    ({"input": "hi", "temperature": 7}, "temperature"),
    ({"input": "hi", "text": {"format": {"type": "xml"}}}, "text.format"),
])
def test_bad_request_400_names_field(server, client, body, param):
    resp, data = server.request("POST", "/v1/responses", {"model": MODEL, **body})
    assert resp.status == 400, data
    err = assert_error_body(data, "invalid_request_error")
    assert err["param"] == param, err
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, extra_body=body)


def test_malformed_json_400_then_serves(server, client):
    resp, data = server.request("POST", "/v1/responses", "{not json", {"Content-Type": "application/json"})
    assert resp.status == 400
    assert_error_body(data, "invalid_request_error")
    assert client.responses.create(model=MODEL, input="still there?", max_output_tokens=2).status in \
        ("completed", "incomplete")


def test_unknown_model_404_and_auth_401(server, client):
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="other", input="hi")
    resp, _ = server.request("POST", "/v1/responses", {"input": "hi"}, {"Authorization": "Bearer wrong"})
    assert resp.status == 401
