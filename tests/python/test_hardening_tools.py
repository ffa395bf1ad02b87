"""Issue 12, item 4, against `deepinfer serve` on the built-in tiny model (random weights):
tool_choice "required" and a named function are enforced by the tool-call grammar
(src/grammar/tool_calls.h over the DSML syntax, recipe/tool_call_constraint.h).

Before: in a 150-token test all output was dropped (content "", tool_calls null). Now every
sampled completion, over several seeds, is a tool call that the official openai client reads as
`tool_calls` with finish_reason "tool_calls", whose arguments `jsonschema` (PyPI) accepts; a named
function forces the name; parallel_tool_calls false gives exactly one call; "auto" is unchanged;
combinations that cannot work are 400s naming tool_choice.
"""

import json

import pytest

from test_server import API_KEY, MODEL, Server

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

# Bounded schemas so that a random model's calls end well inside max_tokens.
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["city", "days"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 10},
        "filters": {"type": "object", "properties": {
            "lang": {"enum": ["en", "fr"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2}},
            "required": ["lang"], "additionalProperties": False},
        "exact": {"type": "boolean"}},
        "required": ["query", "filters"]}}}
NOW = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, SEARCH, NOW]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
SEEDS = range(4)


@pytest.fixture(scope="module")
def server():
    s = Server("--api-key", API_KEY, "--max-model-len", "4096")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.openai_client()


def ask(client, **kw):
    args = dict(model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=TOOLS,
                max_tokens=2000, temperature=1.0)
    args.update(kw)
    return client.chat.completions.create(**args)


def check_calls(choice, names=None):
    assert choice.finish_reason == "tool_calls", choice
    msg = choice.message
    assert not msg.content
    assert msg.tool_calls, choice
    for call in msg.tool_calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in (names or SCHEMAS)
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return msg.tool_calls


def test_required_gives_schema_valid_calls_every_seed(client):
    seen, n_calls = set(), []
    for seed in SEEDS:
        r = ask(client, tool_choice="required", seed=seed)
        calls = check_calls(r.choices[0])
        seen.update(c.function.name for c in calls)
        n_calls.append(len(calls))
    assert len(seen) >= 2, seen  # the grammar offers every tool
    assert max(n_calls) >= 2, n_calls  # parallel calls allowed by default: the grammar repeats calls


def test_required_n_choices(client):
    r = ask(client, tool_choice="required", seed=11, n=3)
    assert len(r.choices) == 3
    for c in r.choices:
        check_calls(c)


def test_named_function_forces_the_name(client):
    for seed in SEEDS:
        r = ask(client, tool_choice={"type": "function", "function": {"name": "search"}}, seed=seed)
        calls = check_calls(r.choices[0], names={"search"})
        assert all(c.function.name == "search" for c in calls)


def test_parallel_tool_calls_false_gives_one_call(client):
    for seed in SEEDS:
        r = ask(client, tool_choice="required", parallel_tool_calls=False, seed=seed)
        assert len(check_calls(r.choices[0])) == 1


def test_required_stream_matches_non_stream(client):
    # One call (parallel_tool_calls false): the grammar then ends the calls after it. With
    # parallel calls allowed the random model's greedy path is a matter of rounding: on an AMD
    # EPYC machine it repeated calls to `now` until max_tokens (finish "length", 2026-12-03).
    kw = dict(tool_choice="required", temperature=0, parallel_tool_calls=False)
    whole = check_calls(ask(client, **kw).choices[0])
    tools, finish = {}, None
    for ch in ask(client, stream=True, **kw):
        for c in ch.choices:
            assert not c.delta.content
            for t in c.delta.tool_calls or []:
                entry = tools.setdefault(t.index, ["", ""])
                if t.function and t.function.name:
                    entry[0] += t.function.name
                if t.function and t.function.arguments:
                    entry[1] += t.function.arguments
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert [tools[k][0] for k in sorted(tools)] == [c.function.name for c in whole]
    assert [json.loads(tools[k][1]) for k in sorted(tools)] == [json.loads(c.function.arguments) for c in whole]


def test_auto_unchanged(client):
    """auto gets no constraint: the same greedy text as a request that does not say, and as the
    same conversation with tool_choice "none" offering no grammar either (free text)."""
    kw = dict(temperature=0, max_tokens=24)
    a = ask(client, tool_choice="auto", **kw).choices[0]
    b = ask(client, **kw).choices[0]
    assert a.message.content == b.message.content
    assert a.finish_reason == b.finish_reason
    assert a.finish_reason in ("stop", "length", "tool_calls")


@pytest.mark.parametrize("extra,field", [
    (dict(tool_choice="required", tools=[]), "tool_choice"),
    (dict(tool_choice={"type": "function", "function": {"name": "missing"}}), "tool_choice"),
    (dict(tool_choice="required", response_format={"type": "json_object"}), "tool_choice"),
    (dict(tool_choice="required", guided_regex="a+"), "tool_choice"),
    (dict(tool_choice="required", thinking={"type": "enabled"}), "tool_choice"),
    (dict(tool_choice="required", parallel_tool_calls="no"), "parallel_tool_calls"),
    (dict(tool_choice="required", tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "anyOf": [{"required": ["a"]}]}}}]), "tool_choice"),
    (dict(tool_choice="required", tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string", "minLength": 3,
                                                                          "maxLength": 1}},
                                    "required": ["a"]}}}]), "tool_choice"),
])
def test_refusals(server, extra, field):
    body = dict(model=MODEL, messages=[{"role": "user", "content": "json please"}], tools=TOOLS, max_tokens=4)
    body.update(extra)
    resp, data = server.request("POST", "/v1/chat/completions", body)
    assert resp.status == 400, data
    err = json.loads(data)["error"]
    assert err["param"] == field, err
    assert "src/" not in err["message"]
