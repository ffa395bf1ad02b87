"""`deepinfer serve` against hostile or sloppy HTTP and request bodies (GitHub issue 12, items 3, 5
and 8), on the built-in tiny model, with raw sockets and the official `openai` client.

- HTTP/1.1 pipelining: requests sent back-to-back on one socket behind a running stream are all
  answered, in order; idle and half-sent connections are closed after the (short, test-set)
  timeouts.
- Every accepted parameter is honoured (guided_* / structured_outputs constraints,
  skip_special_tokens, echo, continuous_usage_stats, continue_final_message) or refused with
  400 naming it.
- Validation gaps: token ids that would wrap, n over the live limit, field types, tools,
  content-less user messages, Content-Type, Allow, WWW-Authenticate, the bearer scheme's case,
  --host names, a port in use reported before the model load, shutdown finish_reason and a
  second SIGTERM.

References nobody here wrote: the openai client's parsing; deepseek-recipe's V4 encoder for the
continued-message prompt; Python's json / re for the constrained outputs.
"""

import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

from test_server import API_KEY, MODEL, TOKENIZER, Server, binary

openai = pytest.importorskip("openai")

MAX_LIVE = 4
IDLE = 1.0
READ = 1.5


@pytest.fixture(scope="module")
def server():
    s = Server("--api-key", API_KEY, "--max-live-requests", str(MAX_LIVE), "--max-model-len", "2048",
               "--http-idle-timeout", str(IDLE), "--http-read-timeout", str(READ))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.openai_client()


# ------------------------------------------------------------------ raw HTTP


def post(path, body, extra=b""):
    data = json.dumps(body).encode()
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
            b"%sContent-Length: %d\r\n\r\n%s" % (path.encode(), API_KEY.encode(), extra, len(data), data))


def read_response(f):
    """One HTTP/1.1 response from a socket file: (status, headers (lower-case names), body)."""
    line = f.readline()
    assert line.startswith(b"HTTP/1.1 "), line
    status = int(line.split()[1])
    headers = {}
    while True:
        line = f.readline()
        assert line, "connection closed inside the header"
        if line == b"\r\n":
            break
        name, value = line.decode().split(":", 1)
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            size = int(f.readline().strip(), 16)
            chunk = f.read(size + 2)
            assert chunk.endswith(b"\r\n")
            if size == 0:
                break
            body += chunk[:-2]
    else:
        body = f.read(int(headers.get("content-length", "0")))
    return status, headers, body


def test_pipelined_requests_behind_a_running_stream(server):
    """A long stream runs; 16 requests are then sent back-to-back on its socket. Each is answered,
    in order, after the stream ends (completions of k tokens tell the order)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=120) as sock:
        f = sock.makefile("rb")
        sock.sendall(post("/v1/completions", {"model": MODEL, "prompt": "Go", "max_tokens": 120,
                                              "ignore_eos": True, "stream": True}))
        assert f.readline().startswith(b"HTTP/1.1 200")
        pipelined, expect = b"", []
        for k in range(1, 17):
            if k % 4 == 0:
                pipelined += b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                expect.append("health")
            else:
                pipelined += post("/v1/completions", {"model": MODEL, "prompt": f"p{k}", "max_tokens": k,
                                                      "ignore_eos": True, "temperature": 0},
                                  b"Connection: close\r\n" if k == 16 else b"")
                expect.append(k)
        if expect[-1] == "health":  # the last one closes the connection
            pipelined = pipelined[:-2] + b"Connection: close\r\n\r\n"
        sock.sendall(pipelined)
        while f.readline() != b"\r\n":  # rest of the stream's header
            pass
        stream = b""
        while True:
            size = int(f.readline().strip(), 16)
            stream += f.read(size + 2)[:-2]
            if size == 0:
                break
        assert stream.endswith(b"data: [DONE]\n\n")
        assert stream.count(b'"finish_reason":"length"') == 1
        for i, want in enumerate(expect):
            status, headers, body = read_response(f)
            assert status == 200, (i, body)
            if want == "health":
                assert json.loads(body) == {"status": "ok"}
            else:
                assert json.loads(body)["usage"]["completion_tokens"] == want, i
        assert f.read(1) == b""  # closed after the last (Connection: close)


def test_idle_connection_closed_after_timeout(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        t0 = time.time()
        assert sock.recv(1) == b""
        assert IDLE * 0.8 <= time.time() - t0 < IDLE + 5


def test_idle_after_a_response_closed_after_timeout(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        f = sock.makefile("rb")
        sock.sendall(post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 2, "stream": True}))
        status, headers, _ = read_response(f)
        assert status == 200 and headers["connection"] == "keep-alive"
        t0 = time.time()
        assert f.read(1) == b""
        assert IDLE * 0.8 <= time.time() - t0 < IDLE + 5


@pytest.mark.parametrize("trickle", [False, True])
def test_half_sent_request_closed_after_timeout(server, trickle):
    """A request that stops half-way, or trickles header lines forever (slowloris), is cut off
    once the read timeout has passed since it began."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        t0 = time.time()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        closed = False
        if trickle:
            for i in range(int(READ * 20)):
                try:
                    sock.sendall(b"X-%d: y\r\n" % i)
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
                time.sleep(0.1)
        if not closed:
            try:
                assert sock.recv(1) == b""
            except ConnectionResetError:
                pass
        assert READ * 0.8 <= time.time() - t0 < READ + 5
    assert server.request("GET", "/health")[0].status == 200


# ------------------------------------------------------------- validation


def chat(**kw):
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **kw}


def completion(**kw):
    return {"model": MODEL, "prompt": "hi", "max_tokens": 2, **kw}


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}

REFUSED = [
    ("chat", chat(stop_token_ids=[4294967297]), "stop_token_ids"),
    ("completions", completion(stop_token_ids=[-1]), "stop_token_ids"),
    ("completions", completion(stop_token_ids=[129280]), "stop_token_ids"),
    ("completions", completion(n=MAX_LIVE + 1), "n"),
    ("completions", completion(prompt=["a", "b", "c"], n=2), "n"),
    ("chat", chat(user=5), "user"),
    ("chat", chat(tools=[TOOL], parallel_tool_calls="yes"), "parallel_tool_calls"),
    ("chat", chat(tools=[{"type": "retrieval"}]), "tools"),
    ("chat", chat(tools=[{"function": {"name": "f"}}]), "tools"),
    ("chat", chat(tools=["f"]), "tools"),
    ("chat", chat(messages=[{"role": "user"}]), "messages"),
    ("chat", chat(messages=[{"role": "system", "content": "s"}, {"role": "user", "content": None}]), "messages"),
    ("chat", chat(prompt_logprobs=1), "prompt_logprobs"),
    ("completions", completion(prompt_logprobs=0), "prompt_logprobs"),
    ("completions", completion(use_beam_search=True), "use_beam_search"),
    ("completions", completion(include_stop_str_in_output=True), "include_stop_str_in_output"),
    ("chat", chat(chat_template="{{ x }}"), "chat_template"),
    ("chat", chat(echo=True), "echo"),
    ("completions", completion(echo=True, logprobs=1), "echo"),
    ("chat", chat(stream=True, stream_options={"bogus": True}), "stream_options.bogus"),
    ("chat", chat(stream=True, stream_options={"continuous_usage_stats": 1}), "stream_options.continuous_usage_stats"),
    ("chat", chat(skip_special_tokens="no"), "skip_special_tokens"),
    ("chat", chat(continue_final_message=True), "continue_final_message"),
    ("chat", chat(messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
                  continue_final_message=True, add_generation_prompt=True), "add_generation_prompt"),
    ("chat", chat(add_generation_prompt=False), "add_generation_prompt"),
    ("chat", chat(guided_choice=[]), "guided_choice"),
    ("chat", chat(guided_choice=["a", 1]), "guided_choice"),
    ("chat", chat(guided_regex="[a-"), "guided_regex"),
    ("completions", completion(guided_grammar="root ::= ("), "guided_grammar"),
    ("completions", completion(guided_json=5), "guided_json"),
    ("completions", completion(guided_regex="a+", guided_choice=["a"]), "guided_choice"),
    ("chat", chat(structured_outputs={"choice": ["a"], "regex": "b"}), "structured_outputs.regex"),
    ("chat", chat(structured_outputs={"whitespace_pattern": " "}), "structured_outputs.whitespace_pattern"),
    ("chat", chat(structured_outputs=["a"]), "structured_outputs"),
    ("chat", chat(response_format={"type": "regex", "regex": "a"}, structured_outputs={"regex": "b"}),
     "structured_outputs.regex"),
    ("chat", chat(guided_choice=["a"], thinking={"type": "enabled"}), "guided_choice"),
]


@pytest.mark.parametrize("endpoint,body,param", REFUSED, ids=[f"{i}-{c[2]}" for i, c in enumerate(REFUSED)])
def test_refused_with_400_naming_the_parameter(server, endpoint, body, param):
    resp, data = server.request("POST", f"/v1/{'chat/completions' if endpoint == 'chat' else 'completions'}", body)
    assert resp.status == 400, data
    err = json.loads(data)["error"]
    assert err["param"] == param, err
    assert err["type"] == "invalid_request_error"
    assert param.split(".")[-1] in err["message"] or param == "messages", err


def test_refusals_through_the_openai_client(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2,
                                       extra_body={"stop_token_ids": [4294967297]})
    assert e.value.body["param"] == "stop_token_ids" and "4294967297" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:  # not 429: retrying cannot help
        client.completions.create(model=MODEL, prompt="x", max_tokens=1, n=MAX_LIVE + 1)
    assert e.value.status_code == 400 and e.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2,
                                       user=["me"])
    assert e.value.body["param"] == "user"


def test_content_type_405_401_headers(server):
    resp, data = server.request("POST", "/v1/completions", json.dumps(completion()),
                                headers={"Content-Type": "text/plain"})
    assert resp.status == 415
    assert json.loads(data)["error"]["param"] == "Content-Type"
    resp, _ = server.request("POST", "/v1/completions", json.dumps(completion()),
                             headers={"Content-Type": "application/json; charset=utf-8"})
    assert resp.status == 200
    resp, _ = server.request("DELETE", "/v1/chat/completions")
    assert resp.status == 405 and resp.getheader("Allow") == "POST"
    resp, _ = server.request("POST", "/v1/models", "{}")
    assert resp.status == 405 and resp.getheader("Allow") == "GET"
    resp, _ = server.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
    assert resp.status == 401 and resp.getheader("WWW-Authenticate") == "Bearer"
    resp, _ = server.request("GET", "/v1/models", headers={"Authorization": f"bearer {API_KEY}"})
    assert resp.status == 200
    resp, _ = server.request("GET", "/v1/models", headers={"Authorization": f"Basic {API_KEY}"})
    assert resp.status == 401


# ------------------------------------------------------------- honoured


def test_guided_choice_and_structured_outputs_choice(client):
    choices = ["yes", "no", "maybe (later)"]
    for seed in range(4):
        r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Pick"}],
                                           max_tokens=20, seed=seed, extra_body={"guided_choice": choices})
        assert r.choices[0].message.content in choices
        assert r.choices[0].finish_reason == "stop"
        r = client.completions.create(model=MODEL, prompt="Pick", max_tokens=20, seed=seed,
                                      extra_body={"structured_outputs": {"choice": choices}})
        assert r.choices[0].text in choices


def test_guided_and_structured_regex_json_grammar(client):
    r = client.completions.create(model=MODEL, prompt="n", max_tokens=10, seed=1,
                                  extra_body={"guided_regex": "[0-9]{3}-[a-c]{2}"})
    assert re.fullmatch(r"[0-9]{3}-[a-c]{2}", r.choices[0].text)
    r = client.completions.create(model=MODEL, prompt="n", max_tokens=10, seed=2,
                                  extra_body={"structured_outputs": {"regex": "(ab|cd)+!"}})
    assert re.fullmatch(r"(ab|cd)+!", r.choices[0].text) or r.choices[0].finish_reason == "length"
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}},
              "required": ["a", "b"], "additionalProperties": False}
    for extra in ({"guided_json": schema}, {"guided_json": json.dumps(schema)},
                  {"structured_outputs": {"json": schema}}):
        r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Give JSON"}],
                                           max_tokens=60, seed=3, extra_body=extra)
        if r.choices[0].finish_reason == "stop":
            obj = json.loads(r.choices[0].message.content)
            assert set(obj) == {"a", "b"} and isinstance(obj["a"], int) and obj["b"] in ("x", "y")
    for extra in ({"guided_grammar": 'root ::= "up" | "down"'},
                  {"structured_outputs": {"grammar": 'root ::= "up" | "down"'}}):
        r = client.completions.create(model=MODEL, prompt="d", max_tokens=6, seed=4, extra_body=extra)
        assert r.choices[0].text in ("up", "down")
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Some JSON please"}],
                                       max_tokens=40, seed=5, extra_body={"structured_outputs": {"json_object": True}})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)


PAD = 2  # <｜▁pad▁｜>, a special token


def test_skip_special_tokens(client):
    """A special token forced by logit_bias makes no text by default (chat and completions), and
    appears when skip_special_tokens is false."""
    kw = dict(max_tokens=3, temperature=0, logit_bias={str(PAD): 100})
    msgs = [{"role": "user", "content": "hi"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, **kw)
    assert r.usage.completion_tokens == 3 and r.choices[0].message.content == ""
    r = client.chat.completions.create(model=MODEL, messages=msgs, **kw, extra_body={"skip_special_tokens": False})
    assert r.choices[0].message.content == "<｜▁pad▁｜>" * 3
    chunks = list(client.chat.completions.create(model=MODEL, messages=msgs, **kw, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    r = client.completions.create(model=MODEL, prompt="hi", **kw)
    assert r.choices[0].text == ""
    r = client.completions.create(model=MODEL, prompt="hi", **kw, extra_body={"skip_special_tokens": False})
    assert r.choices[0].text == "<｜▁pad▁｜>" * 3


def test_echo(client):
    kw = dict(model=MODEL, max_tokens=5, temperature=0)
    plain = client.completions.create(prompt="Hello there", **kw).choices[0].text
    echoed = client.completions.create(prompt="Hello there", echo=True, **kw).choices[0].text
    assert echoed == "Hello there" + plain
    stream = client.completions.create(prompt="Hello there", echo=True, stream=True, **kw)
    assert "".join(c.choices[0].text for c in stream) == echoed
    two = client.completions.create(prompt=["A", "B"], echo=True, **kw)
    assert [c.text[:1] for c in sorted(two.choices, key=lambda c: c.index)] == ["A", "B"]


def test_continuous_usage_stats(client):
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "count"}], max_tokens=6, temperature=0,
        extra_body={"ignore_eos": True}, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True}))
    usages = [c.usage for c in chunks]
    assert all(u is not None for u in usages)
    counts = [u.completion_tokens for u in usages]
    assert counts == sorted(counts) and counts[-1] == 6
    assert len({u.prompt_tokens for u in usages}) == 1
    assert all(u.total_tokens == u.prompt_tokens + u.completion_tokens for u in usages)


def test_continue_final_message(client):
    """The trailing assistant message is continued: the prompt is deepseek-recipe's encoding of
    a prefix message, and greedy tokens equal a completion of exactly that prompt."""
    dr = pytest.importorskip("deepseek_recipe")
    messages = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "The answer is"}]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0, logprobs=True,
                                       extra_body={"continue_final_message": True, "add_generation_prompt": False,
                                                   "ignore_eos": True})
    enc = dr.DeepseekV4Encoding().with_tokenizer(dr.Tokenizer.from_file(TOKENIZER))
    conv = dr.Conversation([dr.UserMessage(messages[0]["content"]),
                            dr.AssistantMessage(messages[1]["content"], prefix=True)], thinking_mode=False)
    ids = list(enc.encode(conv))
    assert r.usage.prompt_tokens == len(ids)
    ref = client.completions.create(model=MODEL, prompt=ids, max_tokens=4, temperature=0, logprobs=0,
                                    extra_body={"ignore_eos": True, "skip_special_tokens": False})
    assert [t.token for t in r.choices[0].logprobs.content] == ref.choices[0].logprobs.tokens
    closed = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1, temperature=0)
    assert closed.usage.prompt_tokens != r.usage.prompt_tokens


# ------------------------------------------------------------ process level


def test_host_localhost_is_resolved():
    proc = subprocess.Popen([binary(), "serve", "--host", "localhost", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, text = time.time() + 300, b""
        while time.time() < deadline and b"serving " not in text:
            line = proc.stdout.readline()
            assert line, text.decode()
            text += line
        port = int(re.search(rb"serving \S+ on http://localhost:(\d+)", text).group(1))
        with socket.create_connection(("localhost", port), timeout=30) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert sock.makefile("rb").readline().startswith(b"HTTP/1.1 200")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_port_in_use_reported_before_model_load():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        t0 = time.time()
        out = subprocess.run([binary(), "serve", "--port", str(port)], capture_output=True, timeout=120)
        assert out.returncode != 0
        err = (out.stdout + out.stderr).decode()
        assert f"cannot listen on 127.0.0.1:{port}" in err and "in use" in err, err
        assert "serving" not in err
        assert time.time() - t0 < 30


def test_shutdown_finish_reason_and_second_sigterm():
    """SIGTERM drains: a stream cut when the drain ends finishes with "length" (not "abort"); a
    second SIGTERM ends a long drain at once."""
    s = Server("--drain-seconds", "300")
    try:
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=120)
        f = sock.makefile("rb")
        sock.sendall(post("/v1/completions", {"model": MODEL, "prompt": "Drain", "max_tokens": 20000,
                                              "ignore_eos": True, "stream": True}))
        assert f.readline().startswith(b"HTTP/1.1 200")
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert s.proc.poll() is None  # draining
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        rest = f.read()
        assert s.proc.wait(timeout=60) == 0
        assert time.time() - t0 < 30
        assert rest.rstrip().endswith(b"0") and b"data: [DONE]" in rest
        reasons = re.findall(rb'"finish_reason":"(\w+)"', rest)
        assert reasons == [b"length"], reasons
        assert b'"abort"' not in rest
        sock.close()
    finally:
        s.stop()
