"""vLLM's server surface next to the OpenAI endpoints: /tokenize, /detokenize, /version, CORS
(`--allowed-origins`) and the Prometheus metrics under vLLM's names, on the built-in tiny model.

References nobody here wrote: HF `tokenizers` for token ids, token strings and decoding;
deepseek-recipe's V4 encoder for the chat prompt; prometheus_client's parser for the
exposition format; pyproject.toml for the version.
"""

import json
import os
import re

import pytest

from test_server import API_KEY, MODEL, TOKENIZER, Server, assert_error_body

openai = pytest.importorskip("openai")

ORIGIN = "http://app.example"
PYPROJECT = os.path.join(os.path.dirname(__file__), "..", "..", "pyproject.toml")


@pytest.fixture(scope="module")
def server():
    s = Server("--api-key", API_KEY, "--max-model-len", "2048")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.openai_client()


@pytest.fixture(scope="module")
def hf():
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_file(TOKENIZER)


def post(server, path, body, headers=None):
    resp, data = server.request("POST", path, body, headers)
    return resp, json.loads(data)


# -------------------------------------------------------- tokenize / detokenize

TEXTS = ["Hello, world!", "  leading spaces and\ttabs\n", "数学 ∑ émoji 🙂", "<｜User｜> special spelling"]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("add_special", [True, False])
def test_tokenize_matches_hf_and_round_trips(server, hf, text, add_special):
    resp, body = post(server, "/tokenize", {"model": MODEL, "prompt": text, "add_special_tokens": add_special,
                                           "return_token_strs": True})
    assert resp.status == 200, body
    enc = hf.encode(text, add_special_tokens=add_special)
    assert body["tokens"] == enc.ids
    assert body["count"] == len(enc.ids) and body["max_model_len"] == 2048
    assert body["token_strs"] == [hf.id_to_token(i) for i in enc.ids]
    resp, back = post(server, "/detokenize", {"model": MODEL, "tokens": body["tokens"]})
    assert resp.status == 200, back
    assert back["prompt"] == hf.decode(enc.ids, skip_special_tokens=False)
    if not add_special:
        assert back["prompt"] == text


def test_tokenize_without_token_strs(server):
    resp, body = post(server, "/tokenize", {"prompt": "abc"})
    assert resp.status == 200 and body["token_strs"] is None


def test_tokenize_messages_is_the_chat_prompt(server, client):
    dr = pytest.importorskip("deepseek_recipe")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count to three."}]
    resp, body = post(server, "/tokenize", {"model": MODEL, "messages": messages})
    assert resp.status == 200, body
    enc = dr.DeepseekV4Encoding().with_tokenizer(dr.Tokenizer.from_file(TOKENIZER))
    conv = dr.Conversation([dr.SystemMessage("Be brief."), dr.UserMessage("Count to three.")], thinking_mode=False)
    assert body["tokens"] == list(enc.encode(conv))
    c = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)
    assert body["count"] == c.usage.prompt_tokens
    # Thinking on changes the prompt as it does for chat requests.
    _, thinking = post(server, "/tokenize", {"messages": messages, "chat_template_kwargs": {"thinking": True}})
    assert thinking["tokens"] != body["tokens"]


@pytest.mark.parametrize("path, body, param", [
    ("/tokenize", {}, "prompt"),
    ("/tokenize", {"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, "prompt"),
    ("/tokenize", {"prompt": 5}, "prompt"),
    ("/tokenize", {"prompt": "a", "add_special_tokens": "yes"}, "add_special_tokens"),
    ("/tokenize", {"prompt": "a", "unknown_field": 1}, "unknown_field"),
    ("/tokenize", {"messages": []}, "messages"),
    ("/tokenize", {"messages": [{"role": "user", "content": "b"}], "add_special_tokens": True},
     "add_special_tokens"),
    ("/detokenize", {}, "tokens"),
    ("/detokenize", {"tokens": "1 2"}, "tokens"),
    ("/detokenize", {"tokens": [1, -1]}, "tokens"),
    ("/detokenize", {"tokens": [1, 10 ** 9]}, "tokens"),
    ("/detokenize", {"tokens": [1.5]}, "tokens"),
])
def test_bad_tokenize_requests_400(server, path, body, param):
    resp, data = server.request("POST", path, body)
    assert resp.status == 400, data
    assert assert_error_body(data, "invalid_request_error")["param"] == param


def test_tokenize_errors_keep_serving(server):
    resp, data = server.request("POST", "/tokenize", "{oops", {"Content-Type": "application/json"})
    assert resp.status == 400
    resp, data = server.request("POST", "/detokenize", {"model": "other", "tokens": [1]})
    assert resp.status == 404
    resp, data = server.request("GET", "/tokenize")
    assert resp.status == 405 and resp.getheader("Allow") == "POST"
    resp, body = post(server, "/tokenize", {"prompt": "fine"})
    assert resp.status == 200 and body["count"] > 0


# ---------------------------------------------------------------------- version


def test_version_is_the_package_version(server):
    want = re.search(r'^version = "([^"]+)"', open(PYPROJECT).read(), re.M).group(1)
    resp, data = server.request("GET", "/version", headers={"Authorization": ""})
    assert resp.status == 200 and json.loads(data) == {"version": want}
    resp, _ = server.request("POST", "/version", {})
    assert resp.status == 405


# ------------------------------------------------------------------------- CORS


def test_no_cors_headers_by_default(server):
    resp, _ = server.request("GET", "/health", headers={"Origin": ORIGIN})
    assert resp.status == 200 and resp.getheader("Access-Control-Allow-Origin") is None
    resp, _ = server.request("OPTIONS", "/v1/chat/completions",
                             headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"})
    assert resp.status == 405 and resp.getheader("Access-Control-Allow-Origin") is None


@pytest.fixture(scope="module")
def cors_server():
    s = Server("--api-key", API_KEY, "--max-model-len", "512", "--allowed-origins",
               f'["{ORIGIN}", "https://other.example:8443"]')
    yield s
    s.stop()


def test_cors_allowed_origin(cors_server):
    for origin in (ORIGIN, "https://other.example:8443"):
        resp, _ = cors_server.request("GET", "/v1/models", headers={"Origin": origin})
        assert resp.status == 200
        assert resp.getheader("Access-Control-Allow-Origin") == origin and resp.getheader("Vary") == "Origin"
    # Errors and streams carry it too.
    resp, _ = cors_server.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1},
                                  {"Origin": ORIGIN, "Authorization": "Bearer wrong"})
    assert resp.status == 401 and resp.getheader("Access-Control-Allow-Origin") == ORIGIN
    resp, data = cors_server.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2, "stream": True},
                                     {"Origin": ORIGIN})
    assert resp.status == 200 and resp.getheader("Access-Control-Allow-Origin") == ORIGIN
    assert data.endswith(b"data: [DONE]\n\n")


def test_cors_other_origin_gets_no_headers(cors_server):
    resp, _ = cors_server.request("GET", "/v1/models", headers={"Origin": "http://evil.example"})
    assert resp.status == 200 and resp.getheader("Access-Control-Allow-Origin") is None
    resp, _ = cors_server.request("GET", "/v1/models")
    assert resp.getheader("Access-Control-Allow-Origin") is None


def test_cors_preflight(cors_server):
    # Browsers send no credentials on a preflight: it needs no API key.
    resp, data = cors_server.request("OPTIONS", "/v1/chat/completions", headers={
        "Authorization": "", "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert resp.status == 200, data
    assert resp.getheader("Access-Control-Allow-Origin") == ORIGIN
    assert set(resp.getheader("Access-Control-Allow-Methods").replace(" ", "").split(",")) >= {"GET", "POST"}
    assert resp.getheader("Access-Control-Allow-Headers") == "authorization, content-type"
    assert int(resp.getheader("Access-Control-Max-Age")) > 0
    resp, data = cors_server.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert resp.status == 400 and resp.getheader("Access-Control-Allow-Origin") is None
    assert_error_body(data, "invalid_request_error")
    resp, _ = cors_server.request("OPTIONS", "/v1/models", headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "DELETE"})
    assert resp.status == 400
    # Still serving.
    resp, _ = cors_server.request("GET", "/health", headers={"Origin": ORIGIN})
    assert resp.status == 200


def test_cors_any_origin():
    s = Server("--max-model-len", "256", "--allowed-origins", "*")
    try:
        resp, _ = s.request("GET", "/health", headers={"Origin": "http://anything.example"})
        assert resp.getheader("Access-Control-Allow-Origin") == "*"
        resp, _ = s.request("OPTIONS", "/tokenize", headers={"Origin": "http://x.example",
                                                            "Access-Control-Request-Method": "POST"})
        assert resp.status == 200 and resp.getheader("Access-Control-Allow-Origin") == "*"
    finally:
        s.stop()


@pytest.mark.parametrize("value", ["not-an-origin", '["http://a.example"', "http://a.example/path"])
def test_bad_allowed_origins_refused_at_startup(value):
    with pytest.raises(AssertionError, match="allowed-origins"):
        Server("--allowed-origins", value)


# ---------------------------------------------------------------------- metrics


def scrape(server):
    parser = pytest.importorskip("prometheus_client.parser")
    resp, data = server.request("GET", "/metrics")
    assert resp.status == 200
    samples = {}
    for family in parser.text_string_to_metric_families(data.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return data.decode(), samples


def value(samples, name, **labels):
    labels = {"model_name": MODEL, "engine": "0", **labels}
    return samples[(name, tuple(sorted(labels.items())))]


def test_vllm_metrics_present_and_move_under_load(server, client):
    text, before = scrape(server)
    for name, kind in [("vllm:num_requests_running", "gauge"), ("vllm:num_requests_waiting", "gauge"),
                       ("vllm:kv_cache_usage_perc", "gauge"), ("vllm:prompt_tokens_total", "counter"),
                       ("vllm:generation_tokens_total", "counter"), ("vllm:request_success_total", "counter"),
                       ("vllm:time_to_first_token_seconds", "histogram"),
                       ("vllm:time_per_output_token_seconds", "histogram"),
                       ("vllm:inter_token_latency_seconds", "histogram"),
                       ("vllm:e2e_request_latency_seconds", "histogram")]:
        assert f"# TYPE {name} {kind}\n" in text
    assert "# TYPE deepinfer_requests_total counter" in text  # ours stay next to them
    n_req, n_tokens = 3, 6
    usages = [client.completions.create(model=MODEL, prompt=f"request {k}", max_tokens=n_tokens,
                                        extra_body={"ignore_eos": True}).usage for k in range(n_req)]
    _, after = scrape(server)
    delta = lambda name, **kw: value(after, name, **kw) - value(before, name, **kw)  # noqa: E731
    assert delta("vllm:generation_tokens_total") == n_req * n_tokens
    assert delta("vllm:prompt_tokens_total") == sum(u.prompt_tokens for u in usages)
    assert delta("vllm:request_success_total", finished_reason="length") == n_req
    assert delta("vllm:time_to_first_token_seconds_count") == n_req
    assert delta("vllm:e2e_request_latency_seconds_count") == n_req
    # One inter-token gap per step after the first token (one token per step here).
    assert delta("vllm:inter_token_latency_seconds_count") == n_req * (n_tokens - 1)
    assert delta("vllm:time_per_output_token_seconds_count") == n_req * (n_tokens - 1)
    assert delta("vllm:request_generation_tokens_sum") == n_req * n_tokens
    assert value(after, "vllm:num_requests_running") == 0 and value(after, "vllm:num_requests_waiting") == 0
    assert 0 <= value(after, "vllm:kv_cache_usage_perc") <= 1
    # Histogram buckets are cumulative and end at the count.
    for name in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                 "vllm:e2e_request_latency_seconds", "vllm:request_prompt_tokens"):
        buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in after.items() if k[0] == name + "_bucket"))
        counts = [v for _, v in buckets]
        assert counts == sorted(counts) and buckets[-1][0] == float("inf")
        assert counts[-1] == value(after, name + "_count")


def test_request_success_stop_and_running_gauge(server, client):
    _, before = scrape(server)
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=40,
                                       stop=[" "], temperature=1.0, seed=1)
    _, after = scrape(server)
    reason = "length" if r.choices[0].finish_reason == "length" else "stop"
    got = value(after, "vllm:request_success_total", finished_reason=reason) - \
        value(before, "vllm:request_success_total", finished_reason=reason)
    assert got == 1
