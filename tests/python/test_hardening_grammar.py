"""Issue 12, items 1 and 6, against `deepinfer serve` on the built-in tiny model: while innocent
streaming chats run, every structured-output constraint whose language is empty and every
min_tokens > max_tokens request is refused with 400 (streaming or not: before any stream
starts), with a message that names no source path; every innocent stream still finishes
normally with a finish_reason and no error event.

The server is started the way tests/python/test_server.py starts it (--port 0, port read from
its log).
"""

import http.client
import json
import re
import threading
import time

import pytest

from test_server import Server

EMPTY_SCHEMAS = [
    {"enum": []},
    False,
    {"type": []},
    {"type": "string", "minLength": 5, "maxLength": 2},
    {"type": "integer", "minimum": 5, "maximum": 2},
    {"type": "array", "minItems": 5, "maxItems": 2},
    {"allOf": [{"type": "string"}, {"type": "integer"}]},
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"],
     "additionalProperties": False},
    {"$ref": "#"},
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"type": "string", "pattern": "^[^\\s\\S]$"},
]


def hostile_bodies():
    """(name, body) of requests that must each get 400."""
    base = {"messages": [{"role": "user", "content": "Answer."}], "max_tokens": 20}
    out = []
    for i, schema in enumerate(EMPTY_SCHEMAS):
        out.append((f"schema{i}", {**base, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}))
    out.append(("regex", {**base, "response_format": {"type": "regex", "regex": "[^\\s\\S]"}}))
    out.append(("regex-empty-class", {**base, "response_format": {"type": "regex", "regex": "a[]"}}))
    out.append(("guided_regex", {**base, "guided_regex": "[^\\s\\S]+"}))
    out.append(("ebnf-cycle", {**base, "response_format": {"type": "ebnf", "ebnf": "root ::= a\na ::= root"}}))
    out.append(("ebnf-empty-class", {**base, "response_format": {"type": "ebnf", "ebnf": "root ::= \"x\" []"}}))
    out.append(("min_tokens", {**base, "min_tokens": 30}))
    out.append(("min_tokens-default", {"messages": base["messages"], "min_tokens": 4000}))
    return out


SOURCE_PATH = re.compile(r"\.(cc|h|hpp|cpp|cu|cuh)\b|/src/|/work/")


class Stream(threading.Thread):
    """One streaming chat read to the end: its events, whether it errored, its finish_reason."""

    def __init__(self, port, i):
        super().__init__(daemon=True)
        self.port, self.i = port, i
        self.started = threading.Event()
        self.status = None
        self.finish_reason = None
        self.errors = []
        self.n_chunks = 0
        self.done_at = None
        self.raw_tail = ""

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        body = {"messages": [{"role": "user", "content": f"Tell a long story number {self.i}."}],
                "max_tokens": 600, "ignore_eos": True, "temperature": 0.8, "seed": self.i,
                "stream": True}
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        self.status = resp.status
        buf = ""
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.decode()
            if line.startswith("data: "):
                payload = line[6:].strip()
                self.raw_tail = payload
                if payload == "[DONE]":
                    break
                obj = json.loads(payload)
                if "error" in obj:
                    self.errors.append(obj["error"])
                    continue
                self.n_chunks += 1
                self.started.set()
                for c in obj.get("choices", []):
                    if c.get("finish_reason"):
                        self.finish_reason = c["finish_reason"]
        self.started.set()
        self.done_at = time.monotonic()
        conn.close()


@pytest.fixture(scope="module")
def server():
    s = Server("--max-live-requests", "64", "--max-model-len", "2048")
    yield s
    s.stop()


def test_hostile_constraints_refused_while_innocent_streams_run(server):
    streams = [Stream(server.port, i) for i in range(5)]
    for s in streams:
        s.start()
    for s in streams:
        assert s.started.wait(300), "an innocent stream produced nothing"
    refused = []
    for name, body in hostile_bodies():
        for stream in (False, True):
            resp, data = server.request("POST", "/v1/chat/completions", {**body, "stream": stream})
            text = data.decode()
            assert resp.status == 400, (name, stream, resp.status, text[:500])
            err = json.loads(text)["error"]
            assert err["type"] == "invalid_request_error", (name, err)
            assert not SOURCE_PATH.search(err["message"]), (name, err["message"])
            refused.append((name, err["message"]))
    hostile_done = time.monotonic()
    names = {n for n, _ in refused}
    assert len(names) == len(hostile_bodies())
    # The constraint messages say why (the language is empty), not just "bad request".
    for name, msg in refused:
        if name.startswith("min_tokens"):
            assert "min_tokens" in msg, msg
        else:
            assert "matches no string" in msg, (name, msg)
    for s in streams:
        s.join(600)
        assert not s.is_alive(), f"stream {s.i} did not finish"
        assert s.status == 200
        assert not s.errors, (s.i, s.errors)
        assert s.finish_reason in ("stop", "length"), (s.i, s.finish_reason, s.raw_tail)
        assert s.raw_tail == "[DONE]"
    # The hostile requests were answered while the innocent streams were still generating.
    assert any(s.done_at > hostile_done for s in streams)
    assert "engine step failed" not in server.log_text()


def test_satisfiable_constraint_still_served(server):
    """The refusal is about empty languages, not about constraints: a near miss generates."""
    body = {"prompt": "Pick.", "max_tokens": 30, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
                "type": "string", "minLength": 2, "maxLength": 2}}}}
    resp, data = server.request("POST", "/v1/completions", body)
    assert resp.status == 200, data[:300]
    choice = json.loads(data)["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    value = json.loads(choice["text"])
    assert isinstance(value, str) and len(value) == 2, choice["text"]


def test_python_api_refuses_empty_constraints():
    """The Python API raises a clear error for the same constraints, and a batch that holds one
    is refused before anything runs; the engine then serves the next batch normally."""
    deepinfer = pytest.importorskip("deepinfer")
    llm = deepinfer.LLM()
    cases = [{"json_schema": s} for s in EMPTY_SCHEMAS] + [
        {"regex": "[^\\s\\S]"}, {"grammar": "root ::= a\na ::= root"}]
    for c in cases:
        with pytest.raises(ValueError, match="matches no string") as e:
            llm.generate(["Answer:", "Answer:"],
                         [deepinfer.SamplingParams(max_tokens=8, seed=1),
                          deepinfer.SamplingParams(max_tokens=8, **c)])
        assert not SOURCE_PATH.search(str(e.value)), str(e.value)
    out = llm.generate(["Answer:"], deepinfer.SamplingParams(max_tokens=8, seed=1, ignore_eos=True))
    assert out[0].finish_reason == "length" and out[0].error is None
